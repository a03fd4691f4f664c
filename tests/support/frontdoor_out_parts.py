"""The blocks the front-door output and capacity fixtures share (tests/support/frontdoor_out_*.py): a pre-norm
Transformer block with hand-written attention, as tutorials write it. What each fixture is about (its position
table, how it returns its logits, a head outside forward) is in the fixture itself; a defect is injected by a
subclass that changes one class attribute."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, D, HEADS = 101, 32, 4


class Attention(nn.Module):
    """Multi-head self- or cross-attention; ``scaled`` and ``looks_ahead`` are the defects a subclass injects."""

    scaled = True
    looks_ahead = False  # True: the look-ahead mask is dropped (a causal leak)

    def __init__(self, d: int = D, heads: int = HEADS):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        return x.view(b, t, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, x, memory=None, keep=None, future_blocked=False):
        """``keep``: (batch, key length) or (batch, 1|query, key length), True = may attend."""
        source = x if memory is None else memory
        q, k, v = self.split(self.q(x)), self.split(self.k(source)), self.split(self.v(source))
        scores = q @ k.transpose(-2, -1)
        if self.scaled:
            scores = scores / math.sqrt(q.size(-1))
        if future_blocked and not self.looks_ahead:
            t = x.size(1)
            scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        if keep is not None:
            keep = keep[:, None, None, :] if keep.dim() == 2 else keep.unsqueeze(1)
            scores = scores.masked_fill(keep == 0, torch.finfo(scores.dtype).min)
        out = F.softmax(scores, dim=-1) @ v
        b, _, t, _ = out.shape
        return self.o(out.transpose(1, 2).reshape(b, t, -1))


class Block(nn.Module):
    """Pre-norm block: self-attention (optionally causal), optional cross-attention, feed-forward."""

    attention = Attention

    def __init__(self, d: int = D, heads: int = HEADS, cross: bool = False):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = self.attention(d, heads)
        self.cross = self.attention(d, heads) if cross else None
        self.ln_cross = nn.LayerNorm(d) if cross else None
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x, keep=None, future_blocked=False, memory=None, memory_keep=None):
        x = x + self.attn(self.ln1(x), keep=keep, future_blocked=future_blocked)
        if self.cross is not None:
            x = x + self.cross(self.ln_cross(x), memory=memory, keep=memory_keep)
        return x + self.ff(self.ln2(x))


class Leaky(Attention):
    looks_ahead = True


class Unscaled(Attention):
    scaled = False


class LeakyBlock(Block):
    attention = Leaky


class UnscaledBlock(Block):
    attention = Unscaled
