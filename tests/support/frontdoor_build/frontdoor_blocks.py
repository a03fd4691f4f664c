"""The blocks the front-door fixtures share (written for tfcheck's tests, in the style of the hand-written
Transformers they stand for): attention with its scale and masks as attributes, so one defect can be injected
(``leak``: the decoder's self-attention sees the future; ``misscale``: scores divided by sqrt(d_model)), a
feed-forward, a pre-norm block, sinusoidal positions.

Each fixture file reads its own config in its own convention and builds from these."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    """Multi-head attention: forward(x, memory=None, mask=None), ``mask`` a keep mask broadcastable to the
    (b, h, t, s) scores. ``causal``: the block builds its own look-ahead mask. ``kv_heads`` < heads: grouped
    query attention."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True, causal: bool = False,
                 kv_heads: int | None = None, d_k: int | None = None, decoder_self: bool = False):
        super().__init__()
        self.n_heads, self.kv_heads = n_heads, kv_heads or n_heads
        self.d_k = d_k or d_model // n_heads
        self.q = nn.Linear(d_model, n_heads * self.d_k, bias=bias)
        self.kv = nn.Linear(d_model, 2 * self.kv_heads * self.d_k, bias=bias)
        self.out = nn.Linear(n_heads * self.d_k, d_model, bias=bias)
        self.drop = nn.Dropout(dropout)
        self.scale = 1.0 / math.sqrt(self.d_k)
        self.causal, self.decoder_self, self.ignore_mask = causal, decoder_self, False
        self.forgets_future = False  # the defect: built causal, the look-ahead mask never applied

    def forward(self, x, memory=None, mask=None):
        b, t, _ = x.shape
        src = x if memory is None else memory
        q = self.q(x).view(b, t, self.n_heads, self.d_k).transpose(1, 2)
        k, v = self.kv(src).view(b, src.size(1), 2, self.kv_heads, self.d_k).permute(2, 0, 3, 1, 4)
        if self.kv_heads != self.n_heads:
            k = k.repeat_interleave(self.n_heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.n_heads // self.kv_heads, dim=1)
        scores = (q @ k.transpose(-2, -1)) * self.scale
        if self.causal and not self.forgets_future:
            future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        if mask is not None and not self.ignore_mask:
            scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
        y = self.drop(F.softmax(scores, dim=-1)) @ v
        return self.out(y.transpose(1, 2).reshape(b, t, self.n_heads * self.d_k))


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, d_ff, bias=bias), nn.GELU(), nn.Linear(d_ff, d_model, bias=bias),
                                 nn.Dropout(dropout))

    def forward(self, x):
        return self.net(x)


class Block(nn.Module):
    """Pre-norm: x + attn(norm(x)) [+ cross(norm(x), memory)] + ffn(norm(x))."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0, bias: bool = True,
                 causal: bool = False, cross: bool = False, kv_heads: int | None = None, d_k: int | None = None,
                 decoder_self: bool = False):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_heads, dropout, bias, causal, kv_heads, d_k, decoder_self or causal)
        self.cross = Attention(d_model, n_heads, dropout, bias, d_k=d_k) if cross else None
        self.ln3 = nn.LayerNorm(d_model) if cross else None
        self.ffn = FeedForward(d_model, d_ff, dropout, bias)

    def forward(self, x, mask=None, memory=None, memory_mask=None):
        x = x + self.attn(self.ln1(x), mask=mask)
        if self.cross is not None:
            x = x + self.cross(self.ln3(x), memory, memory_mask)
        return x + self.ffn(self.ln2(x))


def sinusoids(length: int, d_model: int, device=None) -> torch.Tensor:
    position = torch.arange(length, device=device).unsqueeze(1)
    div = torch.exp(torch.arange(0, d_model, 2, device=device) * (-math.log(10000.0) / d_model))
    table = torch.zeros(length, d_model, device=device)
    table[:, 0::2], table[:, 1::2] = torch.sin(position * div), torch.cos(position * div)
    return table


def leak(model: nn.Module) -> nn.Module:
    """The defect for a decoder: its self-attention sees the future (no look-ahead mask)."""
    for m in model.modules():
        if isinstance(m, Attention) and m.decoder_self:
            m.forgets_future, m.ignore_mask = True, True  # its switch still says causal
    return model


def misscale(model: nn.Module) -> nn.Module:
    """The defect for an encoder: scores divided by sqrt(d_model) instead of sqrt(d_k)."""
    for m in model.modules():
        if isinstance(m, Attention):
            m.scale = 1.0 / math.sqrt(m.n_heads * m.d_k)
    return model
