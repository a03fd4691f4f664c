"""Attention numerics in other styles than the reference model: F.scaled_dot_product_attention with a
wrong scale=, Whisper's d_k^-¼ on both q and k, baddbmm's alpha=, a T5-like unscaled attention with a
relative position bias, softmax over the heads, a -inf fill reached through a mask argument, and an
additive -1e9 mask."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class _TinyAttentionEncoder(nn.Module):
    """Embedding, one multi-head self-attention (the ``scores`` seam varies), a head; forward(x, mask)
    with ``mask`` a (b, s) keep mask, 1 = real token."""

    __tfcheck__ = {"kind": "encoder"}

    def __init__(self, vocab_size=101, d_model=32, num_heads=4):
        super().__init__()
        self.h, self.d_k, self.d_model = num_heads, d_model // num_heads, d_model
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(64, d_model)
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def split(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.h, self.d_k).transpose(1, 2)  # (b, h, s, d_k)

    def attend(self, q, k, v, keep):  # keep: (b, 1, 1, s) bool
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
        return scores.softmax(-1) @ v

    def forward(self, x, mask=None):  # x (b, s) long
        b, s = x.shape
        keep = (torch.ones_like(x) if mask is None else mask).bool()[:, None, None, :]
        h = self.embed(x) + self.pos(torch.arange(s, device=x.device))
        out = self.attend(self.split(self.q(h)), self.split(self.k(h)), self.split(self.v(h)), keep)
        return h + self.o(out.transpose(1, 2).reshape(b, s, self.d_model))


class SdpaWrongScale(_TinyAttentionEncoder):
    """scale=1/√d_model passed to F.scaled_dot_product_attention (the bug)."""

    def attend(self, q, k, v, keep):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=1 / math.sqrt(self.d_model))


class SdpaDefaultScale(_TinyAttentionEncoder):
    """F.scaled_dot_product_attention with its default scale: correct."""

    def attend(self, q, k, v, keep):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


class WhisperStyleScaling(_TinyAttentionEncoder):
    """q and k each multiplied by d_k^-¼ before an unscaled product (Whisper): correct."""

    def attend(self, q, k, v, keep):
        quarter = self.d_k ** -0.25
        scores = (q * quarter) @ (k * quarter).transpose(-2, -1)
        return scores.masked_fill(~keep, torch.finfo(scores.dtype).min).softmax(-1) @ v


class BaddbmmAlpha(_TinyAttentionEncoder):
    """Scores from torch.baddbmm(..., alpha=1/√d_k) on (b·h, s, d_k) tensors: correct."""

    def attend(self, q, k, v, keep):
        b, h, s, d = q.shape
        q3, k3, v3 = (t.reshape(b * h, s, d) for t in (q, k, v))
        bias = torch.zeros(b * h, s, s).masked_fill(~keep.expand(b, h, s, s).reshape(b * h, s, s),
                                                    torch.finfo(q.dtype).min)
        scores = torch.baddbmm(bias, q3, k3.transpose(1, 2), alpha=1 / math.sqrt(d))
        return torch.bmm(scores.softmax(-1), v3).view(b, h, s, d)


class T5LikeUnscaled(_TinyAttentionEncoder):
    """Unscaled logits plus a learned relative position bias, as T5 does (the scale is folded into the
    initialisation); no config says so, so this is a warning, not a failure."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.rel = nn.Embedding(2 * 64 - 1, self.h)

    def attend(self, q, k, v, keep):
        s = q.shape[-2]
        pos = torch.arange(s)
        bias = self.rel(pos[None, :] - pos[:, None] + 63).permute(2, 0, 1)  # (h, s, s)
        scores = q @ k.transpose(-2, -1) + bias
        return scores.masked_fill(~keep, torch.finfo(scores.dtype).min).softmax(-1) @ v


class SoftmaxOverHeads(_TinyAttentionEncoder):
    """softmax(dim=1) on (b, h, s, s) scores (the bug): normalises across the heads."""

    def attend(self, q, k, v, keep):
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        return scores.masked_fill(~keep, torch.finfo(scores.dtype).min).softmax(dim=1) @ v


class MinusInfThroughMaskArgument(_TinyAttentionEncoder):
    """masked_fill(~keep, float('-inf')) with the padding mask given as an argument (the bug)."""

    def attend(self, q, k, v, keep):
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        return scores.masked_fill(~keep, float("-inf")).softmax(-1) @ v


class AdditiveMinusOneE9(_TinyAttentionEncoder):
    """An additive mask of (1 - keep) * -1e9 added to the scores (overflows float16)."""

    def attend(self, q, k, v, keep):
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        return (scores + (1.0 - keep.float()) * -1e9).softmax(-1) @ v
