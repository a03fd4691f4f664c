"""attention.scale and shrinking (issue 29): a scale written as a number for the author's head size must not pass
for a design at tfcheck's small one. ``/ 8.0`` is 1/√d_k for d_k = 64; built at d_k = 8 it measures 1/8 = 1/d_k,
the muP scale. Proven both ways: the constant is named as hard-coded at its line (a warning, or a failure where
it is a named bug at the model's own sizes), while a scale computed from the head size passes and a computed
1/d_k is still the muP warning."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from helpers import result
from tfcheck import Status
from tfcheck.checks.numerics.scale_diagnosis import HARD_CODED_ROW

SCALE = "attention.scale"


class _LM(nn.Module):
    """A one-layer causal LM whose ``scores`` method is the variant; d_model 512 and 8 heads (d_k 64) are large
    defaults, so tfcheck shrinks them to 32 and 4 (d_k 8)."""

    def __init__(self, vocab_size=101, d_model=512, n_heads=8):
        super().__init__()
        self.n_heads, self.d_k = n_heads, d_model // n_heads
        self.embed = nn.Embedding(vocab_size, d_model)
        self.qkv, self.out = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, x):
        h = self.embed(x)
        b, s, d = h.shape
        q, k, v = (t.view(b, s, self.n_heads, self.d_k).transpose(1, 2) for t in self.qkv(h).chunk(3, dim=-1))
        att = self.scores(q, k)
        att = att.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf")).softmax(dim=-1)
        return self.head(h + self.out((att @ v).transpose(1, 2).reshape(b, s, d)))


class DividedByEight(_LM):
    def scores(self, q, k):
        return q @ k.transpose(-2, -1) / 8.0  # hard-coded: 1/√64


class TimesAnEighth(_LM):
    def scores(self, q, k):
        return q @ k.transpose(-2, -1) * 0.125  # hard-coded: 1/√64


class PassedToAHelper(_LM):
    def scores(self, q, k):
        return _scaled(q @ k.transpose(-2, -1), 1 / 8)  # hard-coded: chosen here


def _scaled(scores, scale):
    return scores * scale


class OverSqrtWidth(_LM):
    def scores(self, q, k):
        return q @ k.transpose(-2, -1) / 512 ** 0.5  # hard-coded: √d_model of the model's own width


class OverSqrtHeadSize(_LM):
    def scores(self, q, k):
        return q @ k.transpose(-2, -1) / math.sqrt(self.d_k)


class OverHeadSizeMuP(_LM):
    def scores(self, q, k):
        return q @ k.transpose(-2, -1) * (1 / self.d_k)


class SmallDividedByEight(_LM):
    """Built at its own sizes (d_model 32, 4 heads: nothing shrunk), where 8.0 is its own d_k."""

    def __init__(self, vocab_size=101, d_model=32, n_heads=4):
        super().__init__(vocab_size, d_model, n_heads)

    def scores(self, q, k):
        return q @ k.transpose(-2, -1) / 8.0  # hard-coded: its own d_k


def _line(cls, marker: str = "# hard-coded") -> int:
    """The line of ``marker`` in the class's source or, for a helper call, in its scores method."""
    text = Path(__file__).read_text().splitlines()
    start = next(i for i, line in enumerate(text) if line.startswith(f"class {cls.__name__}("))
    return next(i for i in range(start, len(text)) if marker in text[i]) + 1


@pytest.mark.parametrize("cls", [DividedByEight, TimesAnEighth, PassedToAHelper, SmallDividedByEight],
                         ids=lambda c: c.__name__)
def test_a_scale_written_as_a_number_is_named_hard_coded_at_its_line_never_mup(cls):
    res = result(cls, SCALE)
    [finding] = res.findings[:1]
    assert finding.status is Status.WARN and finding.row == HARD_CODED_ROW, str(res.findings)
    assert "muP" not in finding.message and "muP" not in str(finding.evidence), finding.message
    assert "scaled by the constant 1/8" in finding.message or "scaled by the constant 0.125 (= 1/8)" in \
        finding.message, finding.message
    assert "1/√d_k only for d_k = 64" in finding.message and "tfcheck built this model with d_k = 8" in finding.message
    assert f"line {_line(cls)}" in finding.message
    assert Path(finding.location.file).resolve() == Path(__file__).resolve() and finding.location.line == _line(cls)
    assert "math.sqrt(q.size(-1))" in finding.message
    hard = finding.evidence["hard_coded"]
    assert hard["line"] == _line(cls) and hard["factor"] == pytest.approx(1 / 8)
    assert "coincidence" in finding.evidence and "1/d_k" in finding.evidence["coincidence"]


def test_the_shrunk_model_says_its_own_head_size_and_that_the_constant_is_right_only_there():
    finding = result(DividedByEight, SCALE).findings[0]
    assert "the model's own head size is d_k = 64" in finding.message and "d_model 512→32" in finding.message
    assert "right at that size only" in finding.message
    assert finding.evidence["own_sizes"]["d_k"] == 64


def test_a_constant_that_is_a_named_bug_at_the_models_own_sizes_fails():
    """/ 512 ** 0.5 is √d_model of the model's own width: the bug, though at d_model 32 it is just 'another scale'."""
    res = result(OverSqrtWidth, SCALE)
    finding = res.findings[0]
    assert finding.status is Status.FAIL and finding.row == "attention-scale-wrong", str(res.findings)
    assert "scaled by the constant 1/22.63" in finding.message and "divided by √d_model = 22.6" in finding.message
    assert finding.location.line == _line(OverSqrtWidth)


def test_a_scale_computed_from_the_head_size_passes():
    res = result(OverSqrtHeadSize, SCALE)
    assert res.status is Status.PASS, str(res.findings)


def test_a_computed_one_over_d_k_is_still_the_mup_warning_measured_at_the_shrunk_size():
    res = result(OverHeadSizeMuP, SCALE)
    finding = res.findings[0]
    assert finding.status is Status.WARN and finding.row == "attention-scale-wrong", str(res.findings)
    assert "the muP scale 1/d_k" in finding.message and "hard_coded" not in finding.evidence
    assert "d_k = 8" in finding.evidence["built_sizes"] and "d_model 512→32" in finding.evidence["built_sizes"]


def test_accept_silences_the_hard_coded_warning():
    res = result(DividedByEight, SCALE, accept={SCALE: "tuned for d_k = 64"})
    assert res.findings[0].status is Status.ACCEPTED


def test_the_reference_model_passes():
    res = result("reference_model:TransformerLM", SCALE)
    assert res.status is Status.PASS, str(res.findings)


# ----- the forms a constant takes beyond the statement that applies it --------------------------------------

#: A module-level constant (the value of 1/√64).
SCALE_64 = 0.125  # hard-coded: module constant


class AttributeAnEighth(_LM):
    def __init__(self, vocab_size=101, d_model=512, n_heads=8):
        super().__init__(vocab_size, d_model, n_heads)
        self.scale = 0.125  # hard-coded: set once in __init__

    def scores(self, q, k):
        return q @ k.transpose(-2, -1) * self.scale


class AttributeOverRoot(_LM):
    def __init__(self, vocab_size=101, d_model=512, n_heads=8):
        super().__init__(vocab_size, d_model, n_heads)
        self.scale = 1 / math.sqrt(64)  # hard-coded: arithmetic of literals

    def scores(self, q, k):
        return q @ k.transpose(-2, -1) * self.scale


class _ScaledBase(_LM):
    def __init__(self, vocab_size=101, d_model=512, n_heads=8):
        super().__init__(vocab_size, d_model, n_heads)
        self.scale = 64 ** -0.5  # hard-coded: set in the base class


class AttributeFromBase(_ScaledBase):
    def scores(self, q, k):
        return q @ k.transpose(-2, -1) * self.scale


class ModuleConstant(_LM):
    def scores(self, q, k):
        return q @ k.transpose(-2, -1) * SCALE_64


class LocalConstant(_LM):
    def scores(self, q, k):
        scale = 0.125  # hard-coded: a local variable
        return q @ k.transpose(-2, -1) * scale


class AttributeComputed(_LM):
    def __init__(self, vocab_size=101, d_model=512, n_heads=8):
        super().__init__(vocab_size, d_model, n_heads)
        self.scale = self.d_k ** -0.5

    def scores(self, q, k):
        return q @ k.transpose(-2, -1) * self.scale


class QueryTimesAnEighth(_LM):
    def scores(self, q, k):
        q = q * 0.125  # hard-coded: q scaled before the product
        return q @ k.transpose(-2, -1)


class QueryOverEight(_LM):
    def scores(self, q, k):
        q = q / 8  # hard-coded: q divided before the product
        return q @ k.transpose(-2, -1)


class QueryAndKeyQuarterRoots(_LM):
    def scores(self, q, k):
        q = q * 64 ** -0.25  # hard-coded: Whisper's split, as a number
        k = k * 64 ** -0.25
        return q @ k.transpose(-2, -1)


class QueryComputed(_LM):
    def scores(self, q, k):
        q = q / math.sqrt(self.d_k)
        return q @ k.transpose(-2, -1)


class OverRootEight(_LM):
    """Hard-coded for d_k = 8 on a model whose own head size is 64: right only at the size tfcheck shrinks it to."""

    def scores(self, q, k):
        return q @ k.transpose(-2, -1) / math.sqrt(8)  # hard-coded: 1/√8


class AttributeRootEighth(_LM):
    def __init__(self, vocab_size=101, d_model=512, n_heads=8):
        super().__init__(vocab_size, d_model, n_heads)
        self.scale = 8 ** -0.5  # hard-coded: 1/√8 in __init__

    def scores(self, q, k):
        return q @ k.transpose(-2, -1) * self.scale


class SmallOverRootEight(_LM):
    """Built at its own sizes (d_k = 8), where the constant 1/√8 is right."""

    def __init__(self, vocab_size=101, d_model=32, n_heads=4):
        super().__init__(vocab_size, d_model, n_heads)

    def scores(self, q, k):
        return q @ k.transpose(-2, -1) / math.sqrt(8)  # hard-coded: the small model's own


def _marked(marker: str) -> int:
    """The line of this file that holds ``marker``."""
    text = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(text) if marker in line) + 1


@pytest.mark.parametrize(("cls", "marker", "shown"), [
    (AttributeAnEighth, "# hard-coded: set once", "`self.scale = 0.125`"),
    (AttributeOverRoot, "# hard-coded: arithmetic", "`self.scale = 1 / math.sqrt(64)`"),
    (AttributeFromBase, "# hard-coded: set in the base", "`self.scale = 64 ** -0.5`"),
    (ModuleConstant, "# hard-coded: module constant", "`SCALE_64 = 0.125`"),
    (LocalConstant, "# hard-coded: a local variable", "`scale = 0.125`"),
    (QueryTimesAnEighth, "# hard-coded: q scaled", "`0.125`"),
    (QueryOverEight, "# hard-coded: q divided", "`8`"),
    (QueryAndKeyQuarterRoots, "# hard-coded: Whisper", "`64 ** -0.25`"),
], ids=lambda v: v.__name__ if isinstance(v, type) else "")
def test_a_constant_behind_a_name_or_applied_to_q_is_named_hard_coded_at_the_line_that_writes_it(cls, marker, shown):
    res = result(cls, SCALE)
    [finding] = res.findings[:1]
    assert finding.status is Status.WARN and finding.row == HARD_CODED_ROW, str(res.findings)
    assert "muP" not in finding.message and "muP" not in str(finding.evidence), finding.message
    assert f"({shown}, line {_marked(marker)}" in finding.message, finding.message
    assert "1/√d_k only for d_k = 64" in finding.message and "tfcheck built this model with d_k = 8" in finding.message
    assert Path(finding.location.file).resolve() == Path(__file__).resolve()
    assert finding.location.line == _marked(marker)
    assert finding.evidence["hard_coded"]["factor"] == pytest.approx(1 / 8)
    # the line that applies the constant (or computes the scores) is related, where it is another
    assert all(r.line != finding.location.line for r in finding.related)


def test_both_operands_scaled_by_constants_name_both():
    finding = result(QueryAndKeyQuarterRoots, SCALE).findings[0]
    also = finding.evidence["hard_coded"]["also"]
    assert [a["line"] for a in also] == [_marked("# hard-coded: Whisper") + 1]


@pytest.mark.parametrize("cls", [AttributeComputed, QueryComputed], ids=lambda c: c.__name__)
def test_a_scale_computed_from_the_head_size_through_an_attribute_or_on_q_passes_and_is_not_hard_coded(cls):
    res = result(cls, SCALE)
    assert res.status is Status.PASS, str(res.findings)
    [finding] = res.findings
    assert "constant" not in finding.message, finding.message
    assert all("hard_coded" not in site for site in finding.evidence["sites"])


@pytest.mark.parametrize(("cls", "marker"), [(OverRootEight, "# hard-coded: 1/√8"),
                                             (AttributeRootEighth, "# hard-coded: 1/√8 in __init__")],
                         ids=lambda v: v.__name__ if isinstance(v, type) else "")
def test_a_constant_right_only_at_the_shrunk_head_size_does_not_pass(cls, marker):
    """1/√8 measures 1/√d_k at tfcheck's d_k = 8; the model's own head size is 64, where it is √8 too large."""
    res = result(cls, SCALE)
    [finding] = res.findings[:1]
    assert finding.status is Status.WARN and finding.row == HARD_CODED_ROW, str(res.findings)
    assert "1/√d_k only for d_k = 8" in finding.message and "the model's own head size is d_k = 64" in finding.message
    assert "right at the head size tfcheck built only" in finding.message, finding.message
    assert "at the model's own d_k = 64 1/√64 = 0.125 is expected" in finding.message, finding.message
    assert finding.location.line == _marked(marker)
    assert "1/√d_k" in finding.evidence["coincidence"]


def test_a_constant_right_at_the_models_own_sizes_passes_and_says_it_is_a_constant():
    res = result(SmallOverRootEight, SCALE)
    assert res.status is Status.PASS, str(res.findings)
    [finding] = res.findings
    assert "the scale is the constant `math.sqrt(8)`" in finding.message, finding.message
    assert f"line {_marked('# hard-coded: the small model')}" in finding.message
    assert "right as built" in finding.message
    assert all("hard_coded" in site for site in finding.evidence["sites"])
