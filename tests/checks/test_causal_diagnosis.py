"""mask.causal's diagnosis (issue 16): every pattern named by the model that shows it, with its troubleshooting row,
and every failure located at the first leaking layer and the line to change, which the model marks with
``# tfcheck: defect`` (in its class body) or ``# tfcheck: defect(ModelName)`` (in a helper it uses): the zoo of
tests/support/zoo_causal_patterns.py and the gallery's causal variants. Lines are read from the sources, never
written here as numbers."""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch

import zoo_causal_patterns as zoo
from helpers import result
from locations import defect_lines
from reference_model import attention, broken, models
from snapshot import REPO
from tfcheck import Status

CAUSAL = "mask.causal"


def marked(cls) -> set[tuple[str, int]]:
    """(resolved file, line) of every line marked as ``cls``'s defect."""
    return {(str(REPO / file), line) for file, line in defect_lines(cls)}


def line_of(module, text: str) -> tuple[str, int]:
    """(resolved file, line) of the one line of ``module``'s source that contains ``text``."""
    path = Path(inspect.getsourcefile(module)).resolve()
    (n,) = [i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line]
    return str(path), n


def where(place) -> tuple[str, int]:
    return str(Path(place.file).resolve()), place.line


def causal_finding(model):
    finding = result(model, CAUSAL).findings[0]
    assert finding.status is Status.FAIL, finding.message
    return finding


# name, pattern, row, the first leaking layer (or, for blocks in an nn.Sequential, the attention's module)
ZOO = [
    ("LookAheadOffByTwo", "diagonal off by 2", "causal-mask-misaligned", "blocks.0"),
    ("SequentialLookAheadOffByOne", "diagonal off by one", "causal-mask-misaligned", "blocks.0.attn"),
    ("LookAheadDiagonalMasked", "diagonal masked", "causal-mask-misaligned", "blocks.0"),
    ("LookAheadDiagonalMaskedNegInf", "diagonal masked", "causal-mask-misaligned", "blocks.0"),
    ("LookAheadInverted", "inverted", "causal-mask-misaligned", "blocks.0"),
    ("LookAheadOnQueries", "query-axis mask", "causal-mask-misaligned", "blocks.0"),
    ("LookAheadLastRowOnly", "wrong broadcast", "causal-mask-misaligned", "blocks.0"),
    ("LookAheadMissing", "no mask at all", "inference-worse-than-training", "blocks.0"),
    ("LookAheadAfterSoftmax", "normalisation leak", "causal-mask-ineffective", "blocks.0"),
    ("AdditiveLookAheadFloat01", "float 0/1 mask added", "causal-mask-ineffective", "blocks.0"),
    ("LookAheadShiftedAfterAttention", "leak outside the mask", "causal-leak", "blocks.0"),
]


@pytest.mark.parametrize("name,pattern,row,module", ZOO, ids=[z[0] for z in ZOO])
def test_each_pattern_is_named_by_its_model_and_points_at_the_marked_line(name, pattern, row, module):
    finding = causal_finding(f"zoo_causal_patterns:{name}")
    assert (finding.row, finding.evidence["pattern"]) == (row, pattern), finding.message
    assert f"({pattern})" in finding.message
    assert finding.location.module == module
    assert where(finding.location) in marked(getattr(zoo, name)), finding.message


GALLERY = [
    (broken.LMWithoutCausalMask, "no mask at all"),
    (broken.CausalMaskOffByOne, "diagonal off by one"),
    (broken.CausalMaskInverted, "inverted"),
    (broken.CausalMaskAfterSoftmax, "normalisation leak"),
    (broken.CausalMaskFloatAdded, "float 0/1 mask added"),
    (broken.CausalMaskFillTooSmall, "fill value too small"),
    (broken.LMNormalisesOverTheSequence, "statistics over the sequence"),
]


@pytest.mark.parametrize("variant,pattern", GALLERY, ids=[g[0].__name__ for g in GALLERY])
def test_the_gallery_s_causal_variants_point_at_their_defect_line(variant, pattern):
    finding = causal_finding(variant)
    assert (finding.row, finding.evidence["pattern"]) == (variant.__tfcheck_expect__["row"], pattern)
    assert finding.location.module == "layers.0" == finding.evidence["first_leaking_layer"]
    assert where(finding.location) in marked(variant), finding.message
    assert f"The line to change: {Path(finding.location.file).name}" in finding.message.replace(
        "reference_model/broken/", "")


def test_the_story_of_a_missing_look_ahead_mask_is_told_line_by_line():
    """The padding mask alone reaches the scores: built in the model's own build_mask (the line that calls the
    shared padding_mask helper, not the helper's inside), applied and scored in the shared attention."""
    finding = causal_finding(broken.LMWithoutCausalMask)
    related = {r.role: where(r) for r in finding.related}
    assert related["mask built"] == where(finding.location)
    assert related["mask built (inside the helper it calls)"] == line_of(models, "return (tokens != pad_id)")
    assert related["mask applied"] == line_of(attention, "scores = scores.masked_fill(~mask")
    assert related["scores computed"] == line_of(attention, "scores = q @ k.transpose(-2, -1)")
    assert related["leak first appears"] == line_of(attention, "return weights @ v, weights")
    modules = {r.role: r.module for r in finding.related}
    assert modules["mask applied"] == "layers.0.self_attn" and modules["mask built"] == ""


def test_a_wrongly_built_mask_points_at_its_triangle_and_names_the_line_that_combines_it():
    finding = causal_finding(broken.CausalMaskOffByOne)
    related = {r.role: where(r) for r in finding.related}
    # The mask joined from padding and the triangle is built where its (query, key) part is: the triangle's line.
    assert where(finding.location) == line_of(broken.masks, "causal = torch.tril(torch.ones(s, s, dtype=torch.bool,"
                                                            " device=tokens.device), diagonal=1)")
    assert related["mask built"] == where(finding.location)
    assert related["mask joined with another part"] == line_of(
        broken.masks, "return padding_mask(tokens, self.config.pad_id) & causal  # (b, 1, s, s)")
    n = finding.evidence["lengths"][-1]
    assert finding.evidence["mask_reaching_scores"] == {  # triu(diagonal=2): what a may-not-attend mask blocks
        "future_blocked": (n - 1) * (n - 2) // 2, "future_pairs": n * (n - 1) // 2, "past_blocked": 0,
        "past_pairs": n * (n - 1) // 2, "diagonal_blocked": 0, "length": n}


def test_no_mask_at_all_names_the_scores_and_says_why():
    finding = causal_finding("zoo_causal_patterns:LookAheadMissing")
    assert "no mask reaches the attention scores of 'blocks.0'" in finding.location.reason
    assert {r.role for r in finding.related} >= {"scores computed", "attention called in the layer"}
    mha = causal_finding("zoo_masks:MHAGPTWithoutMask")  # nn.MultiheadAttention given attn_mask=None
    assert mha.location.reason and mha.location.line and mha.evidence["pattern"] == "no mask at all"


def test_the_counts_are_those_of_the_map_the_pattern_is_read_from():
    """Masking the diagonal leaks one row in the first layer (position 0 attends uniformly) and every pair after
    two layers: the message says both, and the pattern is the first layer's."""
    finding = causal_finding("zoo_causal_patterns:LookAheadDiagonalMasked")
    n = finding.evidence["lengths"][-1]
    pairs = n * (n - 1) // 2
    assert f"{pairs} of {pairs} (query, later key) pairs measured leak at the output, {n - 1} of {pairs} in layer " \
           "'blocks.0', where it first appears" in finding.message


def test_a_nan_from_a_masked_diagonal_is_named_though_no_leak_can_be_measured():
    finding = causal_finding("zoo_causal_patterns:LookAheadDiagonalMaskedNegInf")
    assert finding.evidence["non_finite_positions"][0] == 0
    assert finding.evidence["mask_reaching_scores"]["diagonal_blocked"] == finding.evidence["lengths"][-1]


def test_a_leak_after_a_right_mask_points_where_it_first_appears():
    """The heads merged without a transpose: the mask is right, and the leak first appears at the merge, the line
    attention.heads blames (so the report can say mask.causal is explained by it)."""
    finding = causal_finding(broken.HeadsMergedWithoutTranspose)
    assert finding.evidence["pattern"] == "leak outside the mask" and finding.row == "causal-leak"
    assert where(finding.location) in marked(broken.HeadsMergedWithoutTranspose)
    assert {r.role for r in finding.related} >= {"mask built", "mask applied", "scores computed"}


@pytest.mark.parametrize("name", ["LookAheadLM", "AdditiveLookAheadLM"])
def test_the_correct_models_of_the_zoo_pass(name):
    res = result(f"zoo_causal_patterns:{name}", CAUSAL)
    assert res.status is Status.PASS, res.findings[0].message


class DiscardedFill(torch.nn.Module):
    """nanoGPT's masking with its result thrown away: masked_fill is out of place, so no mask reaches the softmax."""

    def __init__(self, discard: bool = True):
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(101, 32), torch.nn.Linear(32, 101)
        self.register_buffer("bias", torch.tril(torch.ones(64, 64)).view(1, 1, 64, 64))
        self.discard = discard

    def forward(self, idx):
        x = self.embed(idx)[:, None]
        t = idx.size(1)
        att = x @ x.transpose(-2, -1) / 32 ** 0.5
        if self.discard:
            att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))  # the copy is lost
        else:
            att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        return self.head((att.softmax(-1) @ x)[:, 0])


def test_a_masked_copy_of_the_scores_that_is_thrown_away_is_the_line_to_change():
    lost = result(DiscardedFill, "mask.causal")
    assert lost.status is Status.FAIL, lost
    finding = lost.findings[0]
    line = inspect.getsourcelines(DiscardedFill.forward)[1] + 5  # the discarded masked_fill
    assert finding.location.line == line and "never reached the softmax" in finding.message, finding
    assert result(lambda: DiscardedFill(discard=False), "mask.causal").status is Status.PASS
