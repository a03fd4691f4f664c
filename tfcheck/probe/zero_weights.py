"""Weights initialised at exactly zero, re-drawn for the information-flow probes and put back after.

A common modern recipe zero-initialises each block's output projections (modded-nanogpt's ``c_proj``, muP,
"ReZero"-like gates): at init every block returns its input, so perturbing a position changes no later output
and every flow probe is inconclusive, the positive control never moving; a removed causal mask goes unseen.
The flow checks therefore measure the model with those tensors re-drawn (normal, std 1/sqrt(fan_in), the scale
of torch's default init, from a private generator), which keeps the wiring the checks read and gives each
path a signal; the training checks keep the user's init. Only whole weight tensors of two or more dimensions
that are all zero count: a zero bias, a zero pad row or a scalar gate at zero is an init detail that no probe is
blinded by.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
import torch.nn as nn

SEED = 20250101


def zero_weights(model: nn.Module) -> list[str]:
    """The names of the model's parameters that are weight tensors (2-D or more) holding only zeros."""
    with torch.no_grad():
        return [name for name, p in model.named_parameters()
                if p.dim() >= 2 and p.numel() > 1 and not p.is_meta and not p.is_sparse and not bool(p.any())]


@contextlib.contextmanager
def redrawn(model: nn.Module, names: list[str]) -> Iterator[None]:
    """The named all-zero weights re-drawn in place for the block, and zeroed again after it (they were all zero,
    so nothing else is lost)."""
    params = dict(model.named_parameters())
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name in names:
            p = params[name]
            fan_in = math.prod(p.shape[1:])
            drawn = torch.randn(p.shape, generator=generator, dtype=torch.float32) / math.sqrt(fan_in)
            p.copy_(drawn.to(dtype=p.dtype, device=p.device))
    try:
        yield
    finally:
        with torch.no_grad():
            for name in names:
                params[name].zero_()
