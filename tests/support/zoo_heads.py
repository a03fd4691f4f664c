"""Correct models in the shapes that attention.heads and decode.cache must read without a false alarm
(einsum layouts, heads after positions, a convolution before attention, a KV cache), and two odd ones
for their skips."""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from reference_model.broken.heads import CachePositionsRestartAtZero, _CachedRotaryLM


class CachedRotaryLM(_CachedRotaryLM):
    """The correct cached rotary LM the broken cache variants derive from."""


class UndeclaredCachedLM(CachePositionsRestartAtZero):
    """The restarting-positions cache bug on a model that declares nothing: kind and causality unknown."""

    __tfcheck__: dict = {}


class EinsumHeadsAfterPositions(nn.Module):
    """Attention written with einsum on (b, s, h, d_k) tensors (heads after positions), merged with a
    plain reshape, which is right for that layout; logits through the tied embedding, then a softmax
    (a product with a parameter followed by softmax is not attention)."""

    __tfcheck__ = {"kind": "encoder"}

    def __init__(self, vocab_size=101, d_model=32, num_heads=4, max_len=64):
        super().__init__()
        self.num_heads, self.d_k, self.max_len = num_heads, d_model // num_heads, max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x):  # (b, s) long
        b, s = x.shape
        h = self.embed(x) + self.pos(torch.arange(s, device=x.device))
        q, k, v = (t.view(b, s, self.num_heads, self.d_k) for t in self.qkv(h).chunk(3, -1))  # (b, s, h, d_k)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(self.d_k)
        context = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v)  # (b, s, h, d_k)
        h = h + self.out(context.reshape(b, s, -1))
        return (h @ self.embed.weight.t()).softmax(-1)  # (b, s, vocab) probabilities


class ConvBeforeAttention(nn.Module):
    """A depthwise convolution over the sequence before attention (Conformer-like): q, k, v legitimately
    change at neighbouring positions too."""

    __tfcheck__ = {"kind": "encoder"}

    def __init__(self, vocab_size=101, d_model=32, num_heads=4):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.conv = nn.Conv1d(d_model, d_model, kernel_size=3, padding=1, groups=d_model)
        self.attn = nn.MultiheadAttention(d_model, num_heads, batch_first=True)

    def forward(self, x):  # (b, s) long
        h = self.embed(x)
        h = h + self.conv(h.transpose(1, 2)).transpose(1, 2)
        out, _ = self.attn(h, h, h, need_weights=False)
        return h + out


class PerTokenWithCache(nn.Module):
    """No attention at all (each position's output depends on its own token), with a cache argument it
    passes through: the past never reaches the output, so neither check can conclude anything."""

    __tfcheck__ = {"kind": "decoder"}

    def __init__(self, vocab_size=101, d_model=32):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, input_ids, past_key_values=None, use_cache=False):
        logits = self.head(torch.tanh(self.embed(input_ids)))
        return (logits, past_key_values or ()) if use_cache else logits


class _Attention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.h, self.d_k = num_heads, d_model // num_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, x, memory):  # (b, n, d), (b, m, d)
        b, n, d = x.shape
        split = lambda t: t.view(b, -1, self.h, self.d_k).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q(x)), split(self.k(memory)), split(self.v(memory))
        weights = (q @ k.transpose(-2, -1) / math.sqrt(self.d_k)).softmax(-1)  # (b, h, n, m)
        return self.o((weights @ v).transpose(1, 2).reshape(b, n, d))


class LatentBottleneck(nn.Module):
    """Perceiver-style: 3 learned latents read the tokens, attend among themselves, and the tokens read
    them back. Scores of (3, s), (3, 3) and (s, 3) are right here, though 3 is no probe length."""

    __tfcheck__ = {"kind": "encoder"}

    def __init__(self, vocab_size=101, d_model=32, num_heads=4, max_len=64, latents=3):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.latents = nn.Parameter(torch.randn(latents, d_model))
        self.latent_in = nn.Linear(d_model, d_model)
        self.read, self.think, self.write = (_Attention(d_model, num_heads) for _ in range(3))

    def forward(self, x):  # (b, s) long
        h = self.embed(x) + self.pos(torch.arange(x.shape[1], device=x.device))
        z = self.latent_in(self.latents).expand(x.shape[0], -1, -1)  # (b, 3, d)
        z = z + self.read(z, h)
        z = z + self.think(z, z)
        return h + self.write(h, z)
