"""Primitives shared by the information-flow checks: perturb some inputs in one batched pass, measure
what changed where, and judge it against float rounding and a positive control.

A measurement is only a verdict when its positive control moved: perturbing what the output must depend
on (the past, the real tokens) has to change it, otherwise the probe did not reach the output and the
result is inconclusive, never a pass.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

#: Relative size of float rounding that still counts as "unchanged", per dtype of the output.
ROUNDING = {torch.float32: 1e-5, torch.float64: 1e-10, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def tolerance(reference: torch.Tensor) -> float:
    """Absolute change below which an output counts as unchanged: rounding relative to the output's scale."""
    scale = float(reference.detach().abs().max()) if reference.numel() else 1.0
    return ROUNDING.get(reference.dtype, 1e-5) * max(scale, 1.0) * 10


def change_per_position(base: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """Largest absolute change at each (sample, position): reduces every axis after the second."""
    diff = (other.detach().double() - base.detach().double()).abs()
    diff = torch.nan_to_num(diff, nan=float("inf"))
    return diff.flatten(2).amax(-1) if diff.dim() > 2 else diff


def replace_tokens(subject, tokens: torch.Tensor, where: torch.Tensor, seed: int) -> torch.Tensor:
    """``tokens`` with the positions in ``where`` (bool, same shape) replaced by other real tokens:
    every replaced id differs from the original and is never the pad id."""
    gen = torch.Generator().manual_seed(seed)
    fresh = subject.random_tokens(*tokens.shape, gen)
    # the side is not said: drawn from the ids every side reads (tfcheck.model.inputs.token_vocab), shifted within them
    vocab = subject.facts.vocab_size
    if subject.kind == "seq2seq" and subject.facts.target_vocab_size is not None:
        vocab = min(vocab, subject.facts.target_vocab_size)
    same = fresh == tokens
    if bool(same.any()):  # shift collisions by one real id (skipping the pad id)
        shifted = (fresh + 1) % vocab
        pad = subject.facts.pad_id
        if pad is not None:
            shifted = torch.where(shifted == pad, (shifted + 1) % vocab, shifted)
        fresh = torch.where(same, shifted, fresh)
    return torch.where(where.to(tokens.device), fresh, tokens)


def pick_rows(sources: list[tuple[tuple, dict]], picks: list[tuple[int, int]], batch: int) -> tuple[tuple, dict]:
    """Forward arguments whose per-sample tensors (leading axis = ``batch``) are rows taken from several input
    sets laid out alike: ``picks`` lists (source, row) per new sample. Other arguments come from the first."""
    def pick(values):
        first = values[0]
        if isinstance(first, torch.Tensor) and first.dim() >= 1 and first.shape[0] == batch:
            return torch.stack([values[s][r] for s, r in picks])
        return first

    args = tuple(pick([src[0][i] for src in sources]) for i in range(len(sources[0][0])))
    kwargs = {k: pick([src[1][k] for src in sources]) for k in sources[0][1]}
    return args, kwargs


@dataclass
class Judgement:
    """A change measured against its tolerance and its positive control."""

    largest: float  # the largest change where none is allowed
    tolerance: float
    control: float  # the smallest change where one is required (the positive control)

    @property
    def conclusive(self) -> bool:
        return self.control > self.tolerance

    @property
    def leaked(self) -> bool:
        return self.largest > self.tolerance

    def evidence(self) -> dict:
        return {"largest_forbidden_change": self.largest, "tolerance": self.tolerance,
                "positive_control_change": self.control}
