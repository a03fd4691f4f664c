"""attention.softmax_axis: attention weights are normalised over the key axis.

One recorded forward (batch 2, query length ≠ key length where the model has cross-attention). At each
explicit attention site the softmax's axis is compared with the key axis of the score product, and the
probabilities are summed over the key axis: every row must sum to 1 (rows of a fully masked query may
sum to 0 under a safe softmax). ``F.scaled_dot_product_attention`` always normalises over keys.
"""
from __future__ import annotations

from typing import Any

from tfcheck.checks.numerics import value_origin
from tfcheck.engine.registry import check
from tfcheck.probe import recorded_probe
from tfcheck.probe.attention_sites import AttentionSite
from tfcheck.report.findings import Finding, Location, Related
from tfcheck.report.status import Status

ID = "attention.softmax_axis"
ROW = "softmax-wrong-axis"
#: How far a row of probabilities may sum from 1 (float32 rounding over a few dozen keys is ~1e-6).
SUM_TOLERANCE = 1e-3


@check(ID, "attention weights are normalised over the key axis", rows=(ROW,), order=63)
def softmax_axis(ctx) -> list[Finding]:
    """One recorded forward: the softmax of every explicit attention runs over the key axis and its rows
    sum to 1 over the keys."""
    recorded = recorded_probe.shared(ctx)
    sites, frames = recorded.attention_sites(), value_origin.captured_frames(recorded)
    if not sites:
        return [Finding(ID, Status.SKIP, "inconclusive: no attention found in the recorded ops (tfcheck recognises a "
                        "product of two activations followed by softmax and a product with the values, "
                        "F.scaled_dot_product_attention and nn.MultiheadAttention)")]
    checked: list[dict] = []
    findings: list[Finding] = []
    for site in sites:
        entry, finding = _judge(site, frames)
        checked.append(entry)
        if finding is not None and not any(f.location is not None and f.location.module == site.module
                                           for f in findings):
            findings.append(finding)
    evidence = {"sites": checked, "sum_tolerance": SUM_TOLERANCE}
    if findings:
        return [Finding(f.check, f.status, f.message, f.location, {**f.evidence, **evidence}, f.row, f.related)
                for f in findings[:3]]
    fused = sum(1 for c in checked if c["form"] == "sdpa")
    return [Finding(ID, Status.PASS, f"{len(checked)} attention sites normalise over the key axis"
                    + (f" ({fused} through scaled_dot_product_attention, which always does)" if fused else ""),
                    Location(module=""), evidence)]


def _axis_names(score_axes: tuple[int, int], ndim: int) -> dict[int, str]:
    q_axis, k_axis = (a % ndim for a in score_axes)
    names = {q_axis: "queries", k_axis: "keys"}
    for axis in range(ndim):
        names.setdefault(axis, "batch" if axis == 0 else "heads" if axis < q_axis else f"axis {axis}")
    return names


def _where(site: AttentionSite, frames: dict) -> tuple[Location, tuple[Related, ...]]:
    """The line that chose the softmax's axis (the call that passed ``dim`` into a shared helper, else the
    softmax's own line), with the softmax's line as related when they differ."""
    op = site.softmax_op or site.score_op
    here = Location(module=op.module, file=op.file, line=op.line)
    found = value_origin.located(op.module, frames.get(op.index), site.softmax_dim, "the softmax runs here")
    return found if found is not None else (here, ())


def _judge(site: AttentionSite, frames: dict) -> tuple[dict, Finding | None]:
    entry: dict[str, Any] = {"module": site.module, "line": site.line, "form": site.form}
    if site.form == "sdpa" or site.probabilities is None or site.scores is None or site.score_axes is None:
        return entry, None
    probs = site.probabilities
    if probs.dim() != site.scores.dim():  # the softmax ran on a re-viewed tensor: read axes from the end
        probs = probs.reshape(site.scores.shape)
    ndim = probs.dim()
    key_axis = site.score_axes[1] % ndim
    sums = probs.double().sum(key_axis)
    off = ((sums - 1).abs() > SUM_TOLERANCE) & (sums.abs() > SUM_TOLERANCE)  # a fully masked row may be all 0
    dim = site.softmax_dim % site.probabilities.dim() if site.softmax_dim is not None else None
    if dim is not None and site.probabilities.dim() != ndim:
        dim = dim - site.probabilities.dim() + ndim
    entry.update({"softmax_dim": site.softmax_dim, "key_axis": key_axis, "score_shape": tuple(site.scores.shape),
                  "largest_row_sum_error_over_keys": float((sums - 1).abs().max()),
                  "rows_not_summing_to_1": int(off.sum()), "rows": int(sums.numel())})
    wrong_dim = dim is not None and dim != key_axis
    if not wrong_dim and not bool(off.any()):
        return entry, None
    over = _axis_names(site.score_axes, ndim).get(dim, "an unknown axis") if dim is not None \
        else "an axis other than the keys"
    module = site.module or "<root>"
    location, related = _where(site, frames)
    return entry, Finding(
        ID, Status.FAIL,
        f"in '{module}' the attention softmax normalises over the {over} (dim={site.softmax_dim} of scores "
        f"{tuple(site.scores.shape)}), not over the keys (axis {key_axis}): {int(off.sum())} of {int(sums.numel())} "
        "rows of weights do not sum to 1 over the keys, so each query's weights are not a distribution over "
        "what it attends to. Use scores.softmax(dim=-1) with scores (b, h, s_q, s_k).",
        location, entry, row=ROW, related=related)
