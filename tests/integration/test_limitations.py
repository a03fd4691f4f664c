"""A limit of tfcheck is a skip that says so, never a failure of the model: code that breaks only under
tfcheck's modes, models compiled with torch.compile, a position table taken for a sublayer, a model with no
norm to place. A genuine model error stays a failure."""
from __future__ import annotations

import torch
import torch.nn as nn

import tfcheck
import zoo_limitations as zl
from reference_model import TransformerLM
from tfcheck import Status
from tfcheck.battery import all_checks
from tfcheck.engine.runner import Runner, load_subject


def assumptions(model) -> dict[str, str]:
    return {a.key if a.key not in ("not applicable",) else f"{a.key} {a.value}": str(a.source)
            for a in model.assumptions}


def test_an_error_raised_only_under_the_recorder_is_a_skip_naming_the_op():
    model = tfcheck.run_checks(zl.RefusesFunctionModes, kwargs=zl.SMALL).models[0]
    assert model.status is not Status.FAIL, str(model)
    assert model.result("forward.smoke").status is Status.PASS
    residual = model.result("shape.residual").findings[0]
    assert residual.status is Status.SKIP
    assert "raises only under tfcheck's instrumentation" in residual.message
    assert "zoo_limitations.py:" in residual.message and "fused kernel" in residual.message
    assert "limit of tfcheck" in assumptions(model)


def test_an_error_raised_with_and_without_instrumentation_stays_a_failure():
    smoke = tfcheck.run_checks(zl.RaisesEveryway, kwargs=zl.SMALL, only=["forward.smoke"]).models[0]
    finding = smoke.result("forward.smoke").findings[0]
    assert finding.status is Status.FAIL and finding.row == "forward-fails"
    assert "this model is broken" in finding.message


def test_a_model_compiled_by_its_factory_is_checked_uncompiled():
    model = tfcheck.run_checks(zl.compiled_lm, only=["forward.smoke", "shape.residual", "train.grad_flow"]).models[0]
    assert {r.status for r in model.results} == {Status.PASS}, str(model)
    assert assumptions(model)["compiled with torch.compile"] == "the uncompiled module is checked, dynamo disabled"


def test_a_compiled_instance_and_a_compiled_method_are_checked_uncompiled():
    for given in (torch.compile(TransformerLM(**zl.SMALL), backend="eager"), zl.CompiledMethod(**zl.SMALL)):
        model = tfcheck.run_checks(given, only=["forward.smoke", "mask.causal"]).models[0]
        assert {r.status for r in model.results} == {Status.PASS}, str(model)
        assert "compiled with torch.compile" in assumptions(model)


def test_a_model_that_is_not_compiled_says_nothing_of_compilation():
    model = tfcheck.run_checks(TransformerLM, kwargs=zl.SMALL, only=["forward.smoke"]).models[0]
    assert "compiled with torch.compile" not in assumptions(model)


def test_a_position_table_added_to_the_stream_is_no_sublayer():
    # Before: "adds (1, 7, 32) from 'pos' ... broadcasts silently" (performer-pytorch's x += self.pos_emb(x)).
    result = tfcheck.run_checks(zl.PositionTableAdded, only=["shape.residual"]).models[0].result("shape.residual")
    assert result.status is Status.PASS, str(result.findings)


def test_norm_placement_does_not_apply_to_a_model_without_norms():
    model = tfcheck.run_checks(zl.NoNorm, only=["forward.smoke", "norm.placement"]).models[0]
    assert [r.check for r in model.results] == ["forward.smoke"]
    assert model.status is Status.PASS
    assert "no LayerNorm or RMSNorm" in assumptions(model)["not applicable norm.placement"]


def test_the_plugin_item_of_a_check_found_not_applicable_is_skipped_with_the_reason():
    runner = Runner(load_subject(zl.NoNorm))
    result = runner.result(next(c for c in all_checks() if c.id == "norm.placement"))
    assert result.status is Status.SKIP
    assert result.findings[0].message.startswith("not applicable: no LayerNorm or RMSNorm")


class _TrainModeOnly(torch.autograd.Function):
    """Reformer's reversible layers: the backward refuses to run unless the module is training."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        raise AssertionError("make sure to use model.train() to put the model into training mode")


class BackwardOnlyInTraining(nn.Module):
    def __init__(self, vocab_size=30, d_model=8):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, ids):
        return self.head(_TrainModeOnly.apply(self.emb(ids)))


def test_a_model_that_raises_in_its_own_backward_is_inconclusive_never_a_bug_of_tfcheck():
    result = tfcheck.run_checks(BackwardOnlyInTraining, only=["train.grad_flow"], kind="decoder").models[0].result(
        "train.grad_flow")
    finding = result.findings[0]
    assert result.status is Status.SKIP and finding.message.startswith("inconclusive: the model raised AssertionError")
    assert "this is a bug in tfcheck" not in finding.message
    assert finding.location.file.endswith("test_limitations.py") and finding.location.line


def test_a_forward_that_returns_its_loss_is_inconclusive_and_says_where_to_point_the_spec():
    """One number comes back, not outputs per position: no check fails or errors on this correct model, and
    shape.contract says what came back and what to do."""
    model = tfcheck.run_checks(zl.ReturnsItsLoss).models[0]
    statuses = {r.check: r.status for r in model.results}
    assert Status.FAIL not in statuses.values() and Status.ERROR not in statuses.values(), str(model)
    contract = model.result("shape.contract").findings[0]
    assert contract.status is Status.SKIP and "single number" in contract.message, contract.message
    assert "logits" in contract.message and contract.evidence["output_shape"] == ()
    assert model.result("cross.dependence").status is Status.SKIP
