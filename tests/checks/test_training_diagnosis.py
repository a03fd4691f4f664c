"""The training checks name the line to change: each gallery variant's finding points at the line its source
marks ``# tfcheck: defect`` (real runs, compared with ``defect_lines``), zoo models here at the line marked
``# defect`` below; and embedding.padding fails an embedding whose padding_idx is not the pad id the user
stated, never one only inferred from that same padding_idx."""
from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import zoo_training as zt
from helpers import result
from locations import defect_lines
from reference_model import broken
from snapshot import REPO
from tfcheck import Status
from tfcheck.model.build.construction_sites import INSTANCE_REASON

TRAINING_VARIANTS = [v for v in broken.VARIANTS if v.__tfcheck_expect__["check"] in (
    "train.grad_flow", "train.overfit_batch", "train.loss_at_init", "train.target_leak", "norm.placement",
    "dropout.eval", "embedding.padding", "lr.warmup")]


def problem(model, check: str, **declared):
    """The first fail or warn of ``check`` on ``model`` (result() asserts every problem is located)."""
    r = result(model, check, **declared)
    found = [f for f in r.findings if f.status in (Status.FAIL, Status.WARN)]
    assert found, r.findings
    return found[0]


def marked_here(cls) -> tuple[str, int]:
    """(this file, the line marked ``# defect`` inside ``cls``)."""
    lines, start = inspect.getsourcelines(cls)
    hits = [start + i for i, text in enumerate(lines) if re.search(r"#\s*defect\b", text)]
    assert len(hits) == 1, f"{cls.__name__}: mark exactly one line '# defect'"
    return str(Path(__file__).resolve()), hits[0]


def pointed(finding) -> tuple[str, int]:
    return str(Path(finding.location.file).resolve()), finding.location.line


@pytest.mark.parametrize("variant", TRAINING_VARIANTS, ids=lambda v: v.__name__)
def test_the_gallery_finding_points_at_the_marked_line(variant):
    expect = variant.__tfcheck_expect__
    status = Status(expect.get("status", "fail"))
    r = result(variant, expect["check"])
    found = [f for f in r.findings if f.status is status and f.location and f.location.file]
    assert found, r.findings
    assert {(str(Path(f.location.file).resolve().relative_to(REPO)), f.location.line) for f in found} & \
        defect_lines(variant), \
        [str(f.location) for f in found]


# ----- zoo models: the defect on a construction line ------------------------------------------------------

class PerPosition(nn.Module):
    """Token embedding then a per-position projection: no position sees another, so pads never reach a real
    output and embedding.padding judges the table alone."""

    def __init__(self, vocab_size=40, d_model=16):
        super().__init__()
        self.vocab_size = vocab_size
        self.embed = self.table(vocab_size, d_model)
        self.out = nn.Linear(d_model, d_model)

    def table(self, vocab_size, d_model):
        return nn.Embedding(vocab_size, d_model, padding_idx=0)

    def forward(self, tokens):
        return self.out(self.embed(tokens))


class PadOneButPaddingIdxZero(PerPosition):
    """The pad token is 1 (a model attribute) but the table freezes token 0."""

    __tfcheck__ = {"kind": "encoder", "mask": "none"}

    def __init__(self, vocab_size=40, d_model=16):
        super().__init__(vocab_size, d_model)
        self.pad_id = 1
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=0)  # defect


class PadFromTheConstructorDefault(PerPosition):
    """The pad id is only a constructor argument's default (2), and the table freezes token 0."""

    __tfcheck__ = {"kind": "encoder", "mask": "none"}

    def __init__(self, vocab_size=40, d_model=16, pad_token_id=2):
        super().__init__(vocab_size, d_model)
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=0)  # defect


class PadStatedAndEqual(PerPosition):
    __tfcheck__ = {"kind": "encoder", "mask": "none"}

    def __init__(self, vocab_size=40, d_model=16):
        super().__init__(vocab_size, d_model)
        self.pad_id = 1
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=1)


class PadOnlyFromPaddingIdx(PerPosition):
    """No pad id anywhere but the tables' padding_idx: tfcheck infers pad_id 0 from the first, and the second
    table's padding_idx=3 is not compared with an id nobody stated."""

    __tfcheck__ = {"kind": "encoder", "mask": "none"}

    def __init__(self, vocab_size=40, d_model=16):
        super().__init__(vocab_size, d_model)
        self.second = nn.Embedding(vocab_size, d_model, padding_idx=3)

    def forward(self, tokens):
        return self.out(self.embed(tokens) + self.second(tokens))


class SourcePadZeroTargetPadOne(PerPosition):
    """A model naming a second pad id (a target side's): a table padded with it is not wrong."""

    __tfcheck__ = {"kind": "encoder", "mask": "none"}

    def __init__(self, vocab_size=40, d_model=16):
        super().__init__(vocab_size, d_model)
        self.pad_id, self.trg_pad_idx = 0, 1
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=1)


@pytest.mark.parametrize("model,pad", [(PadOneButPaddingIdxZero, 1), (PadFromTheConstructorDefault, 2)],
                         ids=lambda v: getattr(v, "__name__", None))
def test_a_padding_idx_other_than_the_stated_pad_id_fails_at_the_embedding(model, pad):
    f = problem(model, "embedding.padding")
    assert (f.status, f.row) == (Status.FAIL, "pad-embedding-not-ignored")
    assert f.evidence["padding_idx"] == 0 and f.evidence["pad_id"] == pad
    assert "padding_idx=0" in f.message and f"pad id is {pad}" in f.message
    assert (f.location.module, pointed(f)) == ("embed", marked_here(model))


@pytest.mark.parametrize("model", [PadStatedAndEqual, PadOnlyFromPaddingIdx, SourcePadZeroTargetPadOne],
                         ids=lambda v: v.__name__)
def test_a_padding_idx_equal_to_a_pad_id_or_only_inferred_passes(model):
    r = result(model, "embedding.padding")
    assert r.status is Status.PASS, r.findings


def test_the_stated_pad_id_is_checked_on_a_model_given_as_an_instance_with_the_reason_for_its_line():
    f = problem(PadOneButPaddingIdxZero(), "embedding.padding")
    assert f.status is Status.FAIL
    assert (f.location.module, f.location.file, f.location.reason) == ("embed", None, INSTANCE_REASON)


class UnusedLayer(nn.Module):
    """A layer built in __init__ and never called in forward."""

    __tfcheck__ = {"kind": "encoder", "mask": "none"}

    def __init__(self, vocab_size=40, d_model=16):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.used = nn.Linear(d_model, d_model)
        self.forgotten = nn.Linear(d_model, d_model)  # defect

    def forward(self, tokens):
        return self.used(self.embed(tokens))


def test_grad_flow_names_the_construction_line_of_a_layer_never_used():
    f = problem(UnusedLayer, "train.grad_flow")
    assert (f.location.module, pointed(f)) == ("forgotten", marked_here(UnusedLayer))


def test_overfit_batch_on_an_instance_frozen_by_the_user_says_why_no_line_is_known():
    model = broken.FrozenByMistake()
    f = problem(model, "train.overfit_batch")
    assert f.location.file is None and f.location.reason == INSTANCE_REASON


def _lambda_line(factory) -> int:
    lines, start = inspect.getsourcelines(factory)
    return next(start + i for i, text in enumerate(lines) if "lambda" in text)


@pytest.mark.parametrize("schedule,declared", [
    (zt.noam_divides_by_zero, {}),  # raises: the innermost user line of the traceback
    (zt.warmup_integer_division, {}),  # judged: the rate function
    (zt.multiplier_peak_too_high, {}),
], ids=lambda v: getattr(v, "__name__", None))
def test_lr_warmup_points_at_the_schedules_rate_function(schedule, declared):
    f = problem("reference_model:TransformerLM", "lr.warmup", schedule=schedule, **declared)
    assert pointed(f) == (str(Path(inspect.getsourcefile(schedule)).resolve()), _lambda_line(schedule))


def test_a_schedule_built_by_a_factory_names_the_factory_as_related():
    def wait_at_zero(optimizer):
        return torch.optim.lr_scheduler.LambdaLR(optimizer, zero_rate)

    f = problem("reference_model:TransformerLM", "lr.warmup", schedule=wait_at_zero)
    assert f.location.line == inspect.getsourcelines(zero_rate)[1]
    assert [(r.role, r.line) for r in f.related] == [("the schedule's function",
                                                      inspect.getsourcelines(wait_at_zero)[1])]


def zero_rate(step):
    return 0.0
