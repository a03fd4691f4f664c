"""An attention operand matched to the projection output it was made from, up to one scalar: by the sorted
per-head vector norms, which a head split, a transpose, a repeat of key heads and a rotary embedding all keep.
"""
from __future__ import annotations

import torch

from tfcheck.probe.attention_sites import CapturedOp


def head_norms(t: torch.Tensor, axis: int) -> torch.Tensor:
    """The sorted per-head vector norms, leaving out the vectors holding one value throughout: the padding a
    model adds to reach a block or window size (zeros, or a pad value such as -1), which no projection made."""
    v = t.movedim(axis, -1)
    vectors = v.reshape(-1, v.shape[-1]).double()
    if vectors.shape[-1] > 1:
        vectors = vectors[(vectors != vectors[:, :1]).any(dim=-1)]
    return vectors.norm(dim=-1).sort().values


def relative_to_projection(operand: torch.Tensor, axis: int, projections: list[CapturedOp]) -> float | None:
    """c with operand = c · (a rearranged, rotated or repeated slice of a projection output), found by its
    sorted per-head vector norms (padding left out); the nearest preceding projection that matches. None if
    none does."""
    d = int(operand.shape[axis])
    norms = head_norms(operand, axis)
    if norms.numel() == 0:
        return None
    n = norms.numel()
    for proj in reversed(projections[-12:]):
        out = proj.out
        if out is None or out.dim() < 2 or out.shape[-1] % d:  # None: filtered out by the caller
            continue
        chunks = out.double().reshape(-1, out.shape[-1] // d, d).norm(dim=-1)  # (tokens, chunks)
        tokens, groups = chunks.shape
        candidates = []
        if tokens * groups == n:
            candidates.append(chunks.flatten())
        elif (tokens * groups) % n == 0 and groups % ((tokens * groups) // n) == 0:  # fused q/k/v projection
            parts = (tokens * groups) // n
            width = groups // parts
            candidates += [chunks[:, i * width:(i + 1) * width].flatten() for i in range(parts)]
        elif n % (tokens * groups) == 0:  # key heads repeated for grouped-query attention
            repeat = n // (tokens * groups)
            candidates.append(chunks.flatten().repeat_interleave(repeat))
        for cand in candidates:
            c = scalar_between(norms, cand.sort().values)
            if c is not None:
                return c
    return None


def scalar_between(a: torch.Tensor, b: torch.Tensor) -> float | None:
    """c with a = c · b elementwise (both sorted), or None when no single scalar fits."""
    if a.numel() != b.numel():
        return None
    denominator = float((b * b).sum())
    if denominator <= 0:
        return None
    c = float((a * b).sum()) / denominator
    residual = float((a - c * b).abs().max())
    return c if residual <= 1e-4 * float(a.abs().max()) + 1e-12 else None
