"""attention.scale, attention.softmax_axis, numerics.nan_source, numerics.half and embedding.scale proven
both ways: every broken pattern caught with its row and the user's line; silent on the reference models,
torch.nn Transformers and Hugging Face models; T5-style unscaled attention explained, not failed."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import tfcheck
import zoo_masks
from helpers import result
from reference_model import broken
from tfcheck import Status
from tfcheck.probe import padded_probe, recorded_probe

SCALE, AXIS, NAN, HALF, EMBED = ("attention.scale", "attention.softmax_axis", "numerics.nan_source", "numerics.half",
                                 "embedding.scale")
CHECKS = [SCALE, AXIS, NAN, HALF, EMBED]


def results(spec, **declarations):
    model = tfcheck.run_checks(spec, only=CHECKS, **declarations).models[0]
    return {r.check: r for r in model.results}


def nn_transformer():
    return nn.Transformer(d_model=32, nhead=4, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=64,
                          batch_first=True)


def nn_encoder():
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=1)


def mha():
    return nn.MultiheadAttention(32, 4, batch_first=True)


CORRECT = ["reference_model:TransformerEncoder", "reference_model:TransformerLM", "reference_model:Seq2SeqTransformer",
           nn_transformer, nn_encoder, mha, "zoo_numerics:SdpaDefaultScale", "zoo_numerics:WhisperStyleScaling",
           "zoo_numerics:BaddbmmAlpha"]
HF = ["GPT2LMHeadModel", "BertModel", "LlamaForCausalLM"]


def _id(spec):
    return spec if isinstance(spec, str) else spec.__name__


@pytest.mark.parametrize("spec", CORRECT + [f"transformers:{c}" for c in HF], ids=_id)
def test_correct_models_pass_every_numerics_check(spec):
    if str(spec).startswith("transformers:"):
        pytest.importorskip("transformers")
    got = results(spec)
    assert got and {r.status for r in got.values()} == {Status.PASS}, {c: r.findings for c, r in got.items()}
    for site in got[SCALE].findings[0].evidence["sites"]:  # measured, not assumed
        assert abs(site["measured"] / site["expected"] - 1) <= 0.02


def test_t5_gets_a_warning_that_explains_its_unscaled_attention_and_passes_the_rest():
    pytest.importorskip("transformers")
    got = results("transformers:T5ForConditionalGeneration")
    finding = got.pop(SCALE).findings[0]
    assert finding.status is Status.WARN and "model_type = 't5'" in finding.message and "accept=" in finding.message
    assert all(abs(s["measured"] - 1.0) < 0.02 for s in finding.evidence["sites"])  # measured, not assumed
    assert {r.status for r in got.values()} == {Status.PASS}
    accepted = result("transformers:T5ForConditionalGeneration", SCALE, accept={SCALE: "T5 by design"})
    assert accepted.status is Status.ACCEPTED


@pytest.mark.parametrize("variant,diagnosis", [
    (broken.AttentionScaledByDModel, "divided by √d_model = 5.66 instead of √d_k = 2.83"),
    (broken.AttentionMultipliedBySqrtDk, "multiplied by √d_k = 2.83"),
    (broken.AttentionUnscaled, "not scaled"),
    ("zoo_numerics:SdpaWrongScale", "divided by √d_model = 5.66"),
], ids=_id)
def test_each_scale_bug_is_named_at_the_users_line(variant, diagnosis):
    res = result(variant, SCALE)
    assert res.status is Status.FAIL
    finding = res.findings[0]
    assert diagnosis in finding.message and finding.row == "attention-scale-wrong"
    # The location is the line that chose the scale (the scores op itself when the scale is given there); the
    # scores op is the location or one of the related lines.
    places = [(finding.location.file, finding.location.line)] + [(r.file, r.line) for r in finding.related]
    lines = [Path(file).read_text().splitlines()[line - 1] for file, line in places]
    assert any("@" in line or "scaled_dot_product_attention" in line for line in lines), places


def test_t5_like_unscaled_attention_without_a_config_warns_and_accept_silences_it():
    res = result("zoo_numerics:T5LikeUnscaled", SCALE)
    assert [f.status for f in res.findings] == [Status.WARN]
    assert "position bias" in res.findings[0].message and "accept" in res.findings[0].message
    accepted = result("zoo_numerics:T5LikeUnscaled", SCALE, accept={SCALE: "T5-style init"})
    assert accepted.findings[0].status is Status.ACCEPTED


@pytest.mark.parametrize("spec,over", [(broken.SoftmaxOverQueries, "queries"),
                                       ("zoo_numerics:SoftmaxOverHeads", "heads")], ids=_id)
def test_softmax_over_the_wrong_axis_is_caught(spec, over):
    finding = result(spec, AXIS).findings[0]
    assert finding.status is Status.FAIL and f"over the {over}" in finding.message
    assert finding.evidence["rows_not_summing_to_1"] > 0 and finding.row == "softmax-wrong-axis"


@pytest.mark.parametrize("spec", [broken.MaskFilledWithMinusInf, "zoo_numerics:MinusInfThroughMaskArgument"], ids=_id)
def test_minus_inf_fill_names_the_softmax_over_all_minus_inf_rows(spec):
    res = result(spec, NAN)
    finding = res.findings[0]
    assert finding.status is Status.FAIL and finding.evidence["parameters_with_non_finite_gradient"]
    producer = finding.evidence["first_nan_producer"]
    assert producer["op"] == "torch.Tensor.softmax" and producer["inputs"][0]["rows_all_minus_inf"] > 0
    assert res.cost.forward == 1 and res.cost.backward == 1


@pytest.mark.parametrize("spec", [broken.MaskFilledWithMinusOneE9, "zoo_numerics:AdditiveMinusOneE9"], ids=_id)
def test_minus_1e9_warns_and_fails_when_fp16_is_declared(spec):
    warned = result(spec, HALF).findings[0]
    assert warned.status is Status.WARN and "finfo" in warned.message and warned.location.line
    assert warned.evidence["constants"][0]["overflows"] == ["float16"]
    assert result(spec, HALF, precision="fp16").status is Status.FAIL


def test_autocast_run_is_opt_in_and_leaves_the_reference_model_passing():
    res = result("reference_model:TransformerLM", HALF, precision="bf16")
    assert res.status is Status.PASS and res.cost.forward == 2
    assert res.findings[0].evidence["autocast_output_finite"] is True


def test_embedding_that_drowns_the_positions_names_the_lever():
    finding = result(broken.EmbeddingDrownsPositions, EMBED).findings[0]
    assert finding.status is Status.WARN and finding.evidence["ratio"] > 3
    assert "√d_model" in finding.message and "std" in finding.message


def test_reference_embedding_ratio_is_measured_near_one():
    finding = result("reference_model:TransformerLM", EMBED).findings[0]
    assert 0.5 < finding.evidence["ratio"] < 2


class LoopTableEncoder(nn.Module):
    """A tutorial's table: built in a Python loop, kept as a plain attribute (no buffer), added to the tokens
    (std d_model**-0.5, scaled by √d_model: the paper's balance). ``exponent`` 2 is the standard 2i/d_model."""

    def __init__(self, exponent: int = 2, d: int = 32):
        super().__init__()
        self.embed, self.out = nn.Embedding(101, d), nn.Linear(d, d)
        nn.init.normal_(self.embed.weight, std=d ** -0.5)
        self.pe = torch.zeros(64, d)
        for pos in range(64):
            for i in range(0, d, 2):
                angle = pos / 10000 ** (exponent * (i // 2) / d)
                self.pe[pos, i], self.pe[pos, i + 1] = math.sin(angle), math.cos(angle)

    def forward(self, x):
        return self.out(self.embed(x) * math.sqrt(self.embed.embedding_dim) + self.pe[: x.size(1)])


def test_a_table_kept_as_a_plain_attribute_is_found_and_its_frequencies_compared():
    standard = result(LoopTableEncoder, EMBED)
    assert standard.status is Status.PASS and "within a factor" in standard.findings[0].message, standard
    wrong = result(lambda: LoopTableEncoder(exponent=1), EMBED)  # i/d_model for 2i/d_model
    finding = next(f for f in wrong.findings if f.row == "position-table-nonstandard")
    assert finding.status is Status.WARN and "from column 2" in finding.message, finding
    assert "base 100" in finding.message and finding.location.line is not None


def test_each_check_costs_one_pass_and_the_recording_checks_share_theirs():
    got = results("reference_model:TransformerLM")
    # the trial's recorded forward is the shared one: attention.scale, softmax_axis and embedding.scale read it;
    # numerics.half reads the mask constants of numerics.nan_source's padded forward
    assert {c: (r.cost.forward, r.cost.reused) for c, r in got.items()} == {
        SCALE: (0, 1), AXIS: (0, 1), EMBED: (0, 1), NAN: (1, 0), HALF: (0, 1)}
    assert got[HALF].findings[0].evidence["read_from"].startswith("numerics.nan_source's padded forward")


@pytest.mark.parametrize("spec", [broken.MaskFilledWithMinusOneE9, "zoo_numerics:AdditiveMinusOneE9",
                                  "reference_model:TransformerLM", "transformers:GPT2LMHeadModel"], ids=_id)
def test_half_reads_the_same_constants_in_nan_sources_forward_as_in_its_own(spec):
    """Shared (after numerics.nan_source, no pass of its own) and alone (its own padded forward): the same
    verdict, message, line and constants."""
    if isinstance(spec, str) and spec.startswith("transformers:"):
        pytest.importorskip("transformers")
    shared, alone = results(spec)[HALF], result(spec, HALF)
    assert (shared.cost.forward, alone.cost.forward) == (0, 1)
    assert shared.findings[0].evidence["read_from"] != alone.findings[0].evidence["read_from"]
    for a, b in zip(shared.findings, alone.findings, strict=True):
        assert (a.status, a.message, a.location, a.row) == (b.status, b.message, b.location, b.row)
        assert a.evidence["constants"] == b.evidence["constants"]


@pytest.mark.parametrize("registry,owner,others", [
    (recorded_probe._OBSERVERS, EMBED, (SCALE, AXIS)),  # the shared recorded forward
    (padded_probe._OBSERVERS, HALF, (NAN,)),  # numerics.half riding in numerics.nan_source's padded forward
], ids=["shared recorded forward", "padded forward"])
def test_an_observer_that_raises_fails_only_its_own_check(monkeypatch, registry, owner, others):
    def broken_observer(model):
        def on_op(event, args, kwargs, out):
            raise RuntimeError("observer bug")
        return on_op

    assert owner in registry
    monkeypatch.setitem(registry, owner, broken_observer)
    got = results("reference_model:TransformerLM")
    assert got[owner].status is Status.ERROR and "observer bug" in got[owner].findings[0].message
    assert all(got[other].status is Status.PASS for other in others)


# ----- a pooled output: the real positions are read off the states the model pools ------------------------------

class PooledFillsMinusInf(zoo_masks.PooledClassifier):
    """Bug: the [CLS] classifier's key mask filled with -inf: the fully padded sample's softmax rows are all -inf."""

    def extended(self, attention_mask, dtype):
        pad = attention_mask[:, None, None, :] == 0
        return torch.zeros(pad.shape, dtype=dtype, device=pad.device).masked_fill(pad, float("-inf"))


def test_a_pooled_output_is_judged_on_the_states_it_is_made_from_both_ways():
    passed = result("zoo_masks:PooledClassifier", NAN).findings[0]
    assert passed.status is Status.PASS and "Measured on the output of 'layer.1'" in passed.message, passed.message
    assert passed.evidence["pooled_output"]["pooled_at"]["file"].endswith("zoo_masks.py")
    failed = result(PooledFillsMinusInf, NAN).findings[0]
    assert failed.status is Status.FAIL and failed.evidence["parameters_with_non_finite_gradient"], failed.message
    assert failed.evidence["measured"] == "the output of 'layer.1' and the pooled output"
    assert failed.evidence["non_finite_output_per_sample"] == [False, False, True]
