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


class MultiQueryEinsumLM(nn.Module):
    """Multi-query attention as PaLM writes it (palm-rlhf-pytorch): every query head reads one shared key and value
    head, scores by ``einsum("b h i d, b j d -> b h i j")``, values by ``einsum("b h i j, b j d -> b h i d")``,
    heads merged back with a transpose. The broken variants below change one line each."""

    __tfcheck__ = {"kind": "decoder", "causal": True}

    def __init__(self, vocab_size=101, d_model=32, num_heads=4, max_len=64):
        super().__init__()
        self.h, self.d_head = num_heads, d_model // num_heads
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.q = nn.Linear(d_model, d_model, bias=False)
        self.kv = nn.Linear(d_model, 2 * self.d_head, bias=False)  # one key head and one value head
        self.out = nn.Linear(d_model, d_model, bias=False)
        self.head = nn.Linear(d_model, vocab_size)

    def scale(self) -> float:
        return self.d_head ** -0.5

    def attend(self, sim: torch.Tensor) -> torch.Tensor:
        return sim.softmax(dim=-1)

    def merge(self, context: torch.Tensor) -> torch.Tensor:  # (b, h, n, d_head) -> (b, n, h * d_head)
        b, h, n, d = context.shape
        return context.transpose(1, 2).reshape(b, n, h * d)

    def forward(self, x):  # (b, n) long
        b, n = x.shape
        h = self.embed(x) + self.pos(torch.arange(n, device=x.device))
        q = self.q(h).view(b, n, self.h, self.d_head).transpose(1, 2)  # (b, h, n, d_head)
        k, v = self.kv(h).chunk(2, dim=-1)  # (b, n, d_head) each
        sim = torch.einsum("b h i d, b j d -> b h i j", q, k) * self.scale()
        causal = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
        sim = sim.masked_fill(causal, -torch.finfo(sim.dtype).max)
        context = torch.einsum("b h i j, b j d -> b h i d", self.attend(sim), v)
        h = h + self.out(self.merge(context))
        return self.head(h)


class MultiQueryScaledByDModel(MultiQueryEinsumLM):
    """Multi-query attention scaled by 1/√d_model instead of 1/√d_head."""

    def scale(self) -> float:
        return (self.h * self.d_head) ** -0.5


class MultiQuerySoftmaxOverQueries(MultiQueryEinsumLM):
    """Multi-query attention normalised over the queries (dim=-2) instead of the keys."""

    def attend(self, sim: torch.Tensor) -> torch.Tensor:
        return sim.softmax(dim=-2)


class MultiQueryMergedWithoutTranspose(MultiQueryEinsumLM):
    """Multi-query attention whose heads are merged by a reshape of (b, h, n, d_head): positions and heads mix."""

    def merge(self, context: torch.Tensor) -> torch.Tensor:
        b, h, n, d = context.shape
        return context.reshape(b, n, h * d)


class MergedBeforeTheProjection(nn.Module):
    """Heads merged on a line of their own, two lines before the output projection, with a dropout between: the
    correct form (transpose, contiguous, view). The variant below drops the transpose on the merging line only."""

    __tfcheck__ = {"kind": "encoder"}

    def __init__(self, vocab_size=101, d_model=32, num_heads=4, max_len=64):
        super().__init__()
        self.h, self.d_k = num_heads, d_model // num_heads
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.drop = nn.Dropout(0.1)
        self.out = nn.Linear(d_model, d_model)

    def merge(self, context: torch.Tensor) -> torch.Tensor:  # (b, h, s, d_k) -> (b, s, h, d_k)
        return context.transpose(1, 2)

    def forward(self, x):  # (b, s) long
        b, s = x.shape
        h = self.embed(x) + self.pos(torch.arange(s, device=x.device))
        q, k, v = (t.view(b, s, self.h, self.d_k).transpose(1, 2) for t in self.qkv(h).chunk(3, -1))
        context = (q @ k.transpose(-2, -1) / math.sqrt(self.d_k)).softmax(-1) @ v  # (b, h, s, d_k)
        merged = self.merge(context).contiguous().view(b, s, -1)  # the merging line
        merged = self.before_projection(merged)
        return h + self.out(merged)

    def before_projection(self, merged: torch.Tensor) -> torch.Tensor:
        return self.drop(merged)


class ViewedBeforeTheProjection(MergedBeforeTheProjection):
    """The heads' output viewed as (b, s, d) in its own memory order: the merging line lacks the transpose."""

    def merge(self, context: torch.Tensor) -> torch.Tensor:
        return context


class ViewedThenGained(ViewedBeforeTheProjection):
    """The same merge without transpose, then a learned per-feature gain (initialised to one) before the projection:
    the op the projection reads is no re-layout, so no reshape is named with confidence."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.gain = nn.Parameter(torch.ones(self.h * self.d_k))

    def before_projection(self, merged: torch.Tensor) -> torch.Tensor:
        return merged * self.gain
