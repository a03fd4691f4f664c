"""The training sanity checks, proven both ways: each broken schedule or model caught with its row, and no
warning or failure on correct models (the reference models with their own schedule, torch.nn, Hugging
Face models with schedules written here, a nanoGPT-style model)."""
from __future__ import annotations

import pytest
import torch

import tfcheck
import zoo_training as zt
from helpers import nn_encoder, nn_transformer, result
from reference_model import TransformerLM, noam_schedule
from reference_model.broken import PostLNWithoutWarmup, UnshiftedLabels
from tfcheck import Status
from tfcheck.probe.schedules import curve_svg, sparkline
from tfcheck.probe.training import DEFAULT_TRAIN_STEPS, TRAIN_BATCH, TRAIN_LENGTH

TRAINING_CHECKS = ["lr.warmup", "norm.placement", "train.loss_at_init", "train.overfit_batch", "train.grad_flow",
                   "train.target_leak", "dropout.eval", "embedding.padding"]


def verdict(model, check, **declared):
    r = result(model, check, **declared)
    return r.status, {f.row for f in r.findings if f.status is r.status}, r


# ----- lr.warmup -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("schedule,declared,status,row", [
    (zt.noam_divides_by_zero, {}, Status.FAIL, "lr-schedule-raises"),
    (zt.warmup_integer_division, {}, Status.FAIL, "lr-stuck-at-zero"),
    (zt.warmup_from_zero, {}, Status.WARN, "lr-zero-first-step"),
    (zt.warmup_never_stops, {"total_steps": 2000}, Status.FAIL, "lr-rises-after-warmup"),
    (zt.noam_min_max_swapped, {"warmup_steps": 4000}, Status.FAIL, "lr-warmup-not-rising"),
    (zt.linear_decay_past_its_end, {}, Status.FAIL, "lr-schedule-invalid"),
    (zt.multiplier_peak_too_high, {}, Status.WARN, "lr-peak-implausible"),
], ids=lambda v: getattr(v, "__name__", None))
def test_broken_schedules_are_caught_with_their_row(schedule, declared, status, row):
    got, rows, r = verdict("reference_model:TransformerLM", "lr.warmup", schedule=schedule, **declared)
    assert (got, rows) == (status, {row}), r.findings
    assert r.cost.forward == 0  # the scheduler is stepped alone: no model pass


def test_noam_at_step_zero_says_how_to_count_from_one():
    finding = result("reference_model:TransformerLM", "lr.warmup", schedule=zt.noam_divides_by_zero).findings[0]
    assert "ZeroDivisionError" in finding.message and "step + 1" in finding.message


def test_reference_noam_schedule_matches_the_paper_and_draws_its_curve():
    finding = result("reference_model:TransformerLM", "lr.warmup", schedule=noam_schedule).findings[0]
    assert finding.status is Status.PASS
    paper = finding.evidence["paper_schedule"]
    assert paper["matches"] and paper["warmup"] == 4000 and paper["n"] == "step + 1"
    assert finding.evidence["peak_step"] == 3999 and finding.evidence["base_lr"] == 1.0
    curve = finding.evidence["curve"]
    assert len(curve) == 48 and set(curve) <= set("▁▂▃▄▅▆▇█") and curve[0] == "▁" and "█" in curve
    assert "[▁" in finding.message


@pytest.mark.parametrize("schedule", [zt.linear_with_warmup, zt.constant_with_warmup], ids=lambda f: f.__name__)
@pytest.mark.parametrize("model", ["transformers:GPT2LMHeadModel", "transformers:BertModel"])
def test_hugging_face_models_with_usual_schedules_pass(model, schedule):
    pytest.importorskip("transformers")
    for check in ("lr.warmup", "norm.placement"):
        status, _, r = verdict(model, check, schedule=schedule, lr=5e-4, warmup_steps=100, total_steps=2000)
        assert status is Status.PASS, r.findings


def test_params_factory_and_configure_optimizers_are_stepped():
    assert result("reference_model:TransformerLM", "lr.warmup", schedule=zt.adamw_with_warmup).status is Status.PASS
    finding = result(zt.WithConfigureOptimizers, "lr.warmup").findings[0]
    assert finding.status is Status.PASS and "configure_optimizers" in finding.evidence["schedule"]


def not_applicable(model, check, **declared) -> str | None:
    """The reason the report gives for not running ``check`` on ``model`` (None when it ran)."""
    report = tfcheck.run_checks(model, only=[check], **declared)
    assert check not in {r.check for r in report.models[0].results}
    return next((a.source for a in report.models[0].assumptions if a.key == "not applicable" and a.value == check),
                None)


def test_without_a_schedule_lr_warmup_does_not_apply_and_says_what_to_declare():
    assert "schedule=mytrain:make_scheduler" in not_applicable("zoo:NeedsArguments", "lr.warmup")


# ----- norm.placement -----------------------------------------------------------------------------------

@pytest.mark.parametrize("model,placement", [
    ("reference_model:TransformerLM", "Post-LN"), (lambda: TransformerLM(norm_first=True), "Pre-LN"),
    (nn_encoder, "Post-LN"), ("transformers:GPT2LMHeadModel", "Pre-LN"), ("transformers:BertModel", "Post-LN"),
    ("transformers:LlamaForCausalLM", "Pre-LN"),
    # LayerNorm written by hand, as the Annotated Transformer and the books write it: no layer_norm op
    (lambda: zt.HandNormEncoder(pre_ln=True), "Pre-LN"), (lambda: zt.HandNormEncoder(pre_ln=False), "Post-LN"),
    # the residual kept in an exact copy of the block's input (Megatron-LM, litgpt: residual = x.clone())
    (lambda: zt.CopiedResidualLM("clone"), "Pre-LN"), (lambda: zt.CopiedResidualLM("times_one"), "Pre-LN"),
    (lambda: zt.CopiedResidualLM("clone", pre_ln=False), "Post-LN"),
])
def test_norm_placement_is_read_from_the_dataflow(model, placement):
    pytest.importorskip("transformers")
    finding = result(model, "norm.placement").findings[0]
    assert finding.status is Status.PASS and finding.evidence["placement"] == placement


def test_post_ln_without_warmup_is_warned_and_pre_ln_is_not():
    status, rows, r = verdict(nn_encoder, "norm.placement", schedule=zt.constant)
    assert (status, rows) == (Status.WARN, {"post-ln-without-warmup"}) and "warmup" in r.findings[0].message
    assert result(lambda: TransformerLM(norm_first=True), "norm.placement", schedule=zt.constant).status is Status.PASS
    assert result(PostLNWithoutWarmup, "norm.placement", schedule=noam_schedule).status is Status.PASS


def test_post_ln_behind_a_copied_residual_is_still_warned_and_a_copy_never_added_places_nothing():
    status, rows, r = verdict(lambda: zt.CopiedResidualLM("clone", pre_ln=False), "norm.placement",
                              schedule=zt.constant)
    assert (status, rows) == (Status.WARN, {"post-ln-without-warmup"}), r.findings
    assert r.findings[0].evidence["residual_adds"] == 4
    skipped = result(lambda: zt.CopiedResidualLM("clone", add_back=False), "norm.placement").findings[0]
    assert skipped.status is Status.SKIP and skipped.evidence["residual_adds"] == 0


# ----- training on copies -------------------------------------------------------------------------------

def test_training_checks_never_touch_the_model_and_count_their_cost():
    model = TransformerLM()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    report = tfcheck.run_checks(model, only=["train.overfit_batch", "train.grad_flow"])
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]) and p.grad is None, name
    overfit = report.models[0].result("train.overfit_batch")
    assert overfit.status is Status.PASS
    tokens, steps = TRAIN_BATCH * TRAIN_LENGTH, overfit.findings[0].evidence["steps"]
    # a healthy model settles the verdict (best loss <= half the first) in a few steps, and stops there
    assert steps < DEFAULT_TRAIN_STEPS and "stopped_early" in overfit.findings[0].evidence
    assert overfit.cost.to_dict() == {"forward": steps, "backward": steps - 1,
                                      "token_passes": (2 * steps - 1) * tokens, "reused": 0}
    grad = report.models[0].result("train.grad_flow").cost
    assert (grad.forward, grad.backward) == (1, 1)


def test_train_steps_declaration_sets_the_budget():
    r = result("reference_model:TransformerLM", "train.overfit_batch", train_steps=3)
    assert r.cost.backward == 3 and r.findings[0].evidence["steps_from"] == "train_steps declaration"


def test_a_loss_computed_from_detached_logits_cannot_overfit():
    status, rows, r = verdict(zt.LossFromDetachedLogits, "train.overfit_batch")
    assert (status, rows) == (Status.FAIL, {"cannot-overfit-one-batch"})
    assert "does not require grad" in r.findings[0].message


def test_frozen_by_mistake_says_how_to_accept_a_deliberate_freeze():
    finding = result("reference_model.broken:FrozenByMistake", "train.overfit_batch").findings[0]
    assert "requires_grad=False" in finding.message and "accept=train.overfit_batch" in finding.message


def test_grad_flow_names_the_modules_that_get_no_gradient():
    finding = result("reference_model.broken:AttentionOutputThrownAway", "train.grad_flow").findings[0]
    assert finding.location.module == "layers.0.self_attn"
    assert finding.evidence["modules"] == ["layers.0.self_attn", "layers.1.self_attn"]
    detached = result("reference_model.broken:DetachedFeedForward", "train.grad_flow").findings[0]
    assert detached.evidence["modules"] == ["layers.0.ffn", "layers.1.ffn"]


def test_nan_gradients_are_named_and_frozen_parameters_are_information():
    status, rows, r = verdict(zt.NaNGradientLM, "train.grad_flow")
    assert (status, rows) == (Status.FAIL, {"gradient-not-finite"}) and "'layers.1.ffn.w_1'" in r.findings[0].message
    frozen = result(zt.FrozenEmbeddingLM, "train.grad_flow").findings[0]
    assert frozen.status is Status.PASS and "1 frozen on purpose" in frozen.message


def test_checks_that_do_not_apply_say_why():
    pytest.importorskip("transformers")
    assert "causal=true" in not_applicable("transformers:BertForMaskedLM", "train.target_leak")
    assert "own loss" in not_applicable("reference_model:TransformerLM", "train.target_leak")
    assert "no language-model head" in not_applicable("zoo:NeedsArguments", "train.loss_at_init")
    assert "token ids" in not_applicable(nn_encoder, "embedding.padding")
    assert "pad_id=INT" in not_applicable("transformers:LlamaForCausalLM", "embedding.padding", pad_id=None)
    assert "frozen" in not_applicable("reference_model.broken:FrozenByMistake", "train.grad_flow")


# ----- dropout, padding ---------------------------------------------------------------------------------

def test_ungated_sdpa_dropout_fails_and_inert_dropout_warns():
    status, rows, r = verdict(zt.SDPADropoutUngated, "dropout.eval")
    assert (status, rows) == (Status.FAIL, {"dropout-in-eval"}) and r.findings[0].location.module.endswith("self_attn")
    status, rows, r = verdict(zt.DropoutNeverApplied, "dropout.eval")
    assert (status, rows) == (Status.WARN, {"dropout-inactive-in-train"})
    # the copies in one batch agreed, so two train-mode calls were compared too before warning
    assert r.cost.forward == 3 and r.findings[0].evidence["train_compared"].startswith("two train-mode forwards")


def test_active_dropout_shows_in_one_train_forward_and_a_batch_wide_mask_in_a_second():
    r = result("reference_model:TransformerLM", "dropout.eval")
    assert r.status is Status.PASS and r.cost.forward == 2, str(r.findings)  # the eval forward again, one train
    assert r.findings[0].evidence["train_compared"].startswith("each sample and its copy")
    r = result(zt.DropoutOnThePositionTable, "dropout.eval")  # one mask for the batch: copies agree, calls differ
    assert r.status is Status.PASS and r.cost.forward == 3, str(r.findings)
    assert r.findings[0].evidence["train_compared"].startswith("two train-mode forwards")


def test_padding_masked_everywhere_passes_with_a_nonzero_pad_row():
    pytest.importorskip("transformers")
    finding = result("transformers:T5ForConditionalGeneration", "embedding.padding").findings[0]
    assert finding.status is Status.PASS and "masked" in finding.message
    assert finding.evidence["positive_control_change"] > finding.evidence["tolerance"]


# ----- no false alarm on correct models ----------------------------------------------------------------

CORRECT = [
    ("reference_model:TransformerEncoder", {"schedule": noam_schedule}),
    ("reference_model:TransformerLM", {"schedule": noam_schedule}),
    ("reference_model:Seq2SeqTransformer", {"schedule": noam_schedule}),
    (nn_encoder, {"schedule": noam_schedule}),
    (nn_transformer, {"schedule": noam_schedule}),
    ("transformers:GPT2LMHeadModel", {"schedule": zt.linear_with_warmup, "lr": 5e-4}),
    ("transformers:BertForMaskedLM", {"schedule": zt.constant_with_warmup, "lr": 1e-4}),
    ("transformers:LlamaForCausalLM", {}),
    ("transformers:T5ForConditionalGeneration", {}),
    (zt.NanoGPTStyle, {"schedule": zt.adamw_with_warmup}),
    (zt.HFLikeLM, {}),
]


@pytest.mark.parametrize("model,declared", CORRECT, ids=lambda v: getattr(v, "__name__", None) or str(v)[:40])
def test_correct_models_get_no_warning_or_failure(model, declared):
    if isinstance(model, str) and model.startswith("transformers:"):
        pytest.importorskip("transformers")
    report = tfcheck.run_checks(model, only=TRAINING_CHECKS, **declared)
    statuses = {r.check: r.status for r in report.models[0].results}
    assert set(statuses.values()) == {Status.PASS}, str(report)
    if declared.get("schedule") is not None:
        assert statuses["lr.warmup"] is Status.PASS
    assert statuses["train.grad_flow"] is Status.PASS and statuses["dropout.eval"] is Status.PASS


def test_own_loss_models_pass_target_leak_in_both_conventions_in_one_forward_and_backward():
    for model in (zt.NanoGPTStyle, zt.HFLikeLM):
        r = result(model, "train.target_leak")
        finding = r.findings[0]
        assert finding.status is Status.PASS, finding
        assert finding.evidence["trained_on_the_next_token"] == finding.evidence["positions_compared"] > 20
        assert (r.cost.forward, r.cost.backward) == (1, 1)


def test_unshifted_labels_are_read_off_the_gradient_of_the_loss_and_the_model_is_left_as_it_was():
    model = UnshiftedLabels()
    report = tfcheck.run_checks(model, only=["train.target_leak"])
    r = report.models[0].result("train.target_leak")
    assert r.status is Status.FAIL and r.findings[0].row == "targets-not-shifted", str(r)
    assert r.findings[0].evidence["trained_on_the_token_fed"] == r.findings[0].evidence["positions_compared"]
    assert r.cost.backward == 1 and all(p.grad is None for p in model.parameters())


def test_a_loss_outside_the_logits_graph_is_judged_by_training_copies():
    r = result(zt.LossOutsideTheLogitsGraph, "train.target_leak")
    assert r.status is Status.PASS and r.cost.backward == DEFAULT_TRAIN_STEPS + 1, str(r)  # the readout tried
    assert "not in the loss's graph" in r.findings[0].evidence["readout"]["undecided"]
    status, rows, _ = verdict(zt.UnshiftedLossOutsideTheLogitsGraph, "train.target_leak")
    assert (status, rows) == (Status.FAIL, {"targets-not-shifted"})


# ----- showing a curve ----------------------------------------------------------------------------------

def test_sparkline_and_svg_show_the_curve(tmp_path):
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█"
    assert sparkline([0.0] * 3 + [float("nan")]) == "▁▁▁!"
    assert sparkline([1.0] * 100 + [0.0] * 100, width=4) == "██▁▁"
    svg = curve_svg([0, 2, 1], tmp_path / "lr.svg").read_text()
    assert svg.startswith("<svg") and "peak 2 at step 1, 3 steps" in svg


class _LMWithAnIdleLayer(TransformerLM):
    """An LM that also holds a layer its forward never calls."""

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self.global_proj = torch.nn.Linear(self.config.d_model, self.config.d_model)


class _LMWithAnOptionalBranch(_LMWithAnIdleLayer):
    """The idle layer runs only when an optional input is given (Longformer's global attention)."""

    def forward(self, tokens, global_mask=None):
        out = super().forward(tokens)
        return out if global_mask is None else out + self.global_proj.weight.sum()


class _LMWithALossBranch(_LMWithAnIdleLayer):
    """The idle layer trains only in the loss branch a switch turns on (simple-hierarchical-transformer's latent
    predictors run only with return_loss=True)."""

    def forward(self, tokens, return_loss=False):
        out = super().forward(tokens)
        return out if not return_loss else (out + self.global_proj.weight.sum()).mean()


def test_a_layer_defined_and_never_used_fails():
    result = tfcheck.run_checks(_LMWithAnIdleLayer, only=["train.grad_flow"]).models[0].result("train.grad_flow")
    assert result.status is Status.FAIL, str(result)
    finding = result.findings[0]
    assert finding.evidence["modules_never_called"] == ["global_proj"] and finding.row == "param-gets-no-gradient"
    assert "defined and never used" in finding.message


def test_a_layer_on_an_optional_path_is_a_warning_that_names_both_stories():
    result = tfcheck.run_checks(_LMWithAnOptionalBranch, only=["train.grad_flow"]).models[0].result("train.grad_flow")
    assert result.status is Status.WARN, str(result)
    finding = result.findings[0]
    assert finding.evidence["optional_inputs_left_out"] == ["global_mask"]
    assert "optional branch" in finding.message and "never used in forward" in finding.message


def test_a_layer_behind_a_switch_left_off_is_a_warning_that_names_the_switch():
    result = tfcheck.run_checks(_LMWithALossBranch, only=["train.grad_flow"]).models[0].result("train.grad_flow")
    assert result.status is Status.WARN, str(result)
    finding = result.findings[0]
    assert finding.evidence["optional_inputs_left_out"] == ["return_loss=False"]
    assert "return_loss=False" in finding.message and "never used in forward" in finding.message


def test_a_model_deepcopy_refuses_is_trained_as_a_rebuild_with_its_state_and_the_report_says_so():
    from tfcheck.engine.runner import load_subject, run_model

    subject = load_subject(zt.UnpicklableAttributeLM, {})
    before = {k: v.clone() for k, v in subject.model.state_dict().items()}
    report = run_model(subject, ["train.overfit_batch"])
    assert report.result("train.overfit_batch").status is Status.PASS, str(report)
    copy = next(a for a in report.assumptions if a.key == "training copy")
    assert "rebuilt by the constructor" in copy.value and "cannot pickle 'staticmethod' object" in copy.source
    assert all(torch.equal(v, before[k]) for k, v in subject.model.state_dict().items())  # the copy trained


def test_an_instance_deepcopy_refuses_has_no_constructor_to_rebuild_it_and_stays_inconclusive():
    instance = zt.UnpicklableAttributeLM()
    before = {k: v.clone() for k, v in instance.state_dict().items()}
    result = tfcheck.run_checks(instance, only=["train.overfit_batch"]).models[0].result("train.overfit_batch")
    assert result.status is Status.SKIP and "copy.deepcopy of the model raised TypeError" in result.findings[0].message
    assert all(torch.equal(v, before[k]) for k, v in instance.state_dict().items())


def test_a_configure_optimizers_taking_a_train_config_gets_one():
    """minGPT's configure_optimizers(train_config) reads .learning_rate, .betas and .weight_decay."""
    finding = result(zt.TrainConfigOptimizers, "lr.warmup").findings[0]
    assert finding.status is Status.PASS and "configure_optimizers()" in finding.message


def test_a_configure_optimizers_tfcheck_cannot_call_is_inconclusive_not_the_models_failure():
    finding = result(zt.OptimizersNeedATokenizer, "lr.warmup").findings[0]
    assert finding.status is Status.SKIP, finding
    assert "configure_optimizers needs tokenizer, which tfcheck cannot fill" in finding.message
    assert "schedule=mytrain:make_scheduler" in finding.message


# ----- stopping at the verdict ---------------------------------------------------------------------------

def test_overfit_stops_at_its_verdict_and_a_late_nan_is_still_caught():
    r = result(zt.OverflowingSoftmaxLM, "train.overfit_batch")
    assert r.status is Status.PASS and r.cost.forward < 10  # stopped before the NaN of step 10
    status, rows, r = verdict(zt.OverflowingSoftmaxLM, "numerics.exp_overflow")
    assert (status, rows) == (Status.FAIL, {"softmax-overflow"})
    assert r.findings[0].location.line is not None and r.findings[0].evidence["softmaxes"][0]["largest_exponent"] > 0
    assert result(zt.StableHandWrittenSoftmaxLM, "numerics.exp_overflow").status is Status.PASS
    plain = result("reference_model:TransformerLM", "numerics.exp_overflow").findings[0]
    assert plain.status is Status.PASS and "no softmax written by hand" in plain.message
