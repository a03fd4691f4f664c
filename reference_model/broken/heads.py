"""Broken attention internals (caught by attention.heads) and broken KV caches (caught by decode.cache).

Every variant runs without an error and has the right output shape: the bug only shows in what the
positions see.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import MultiHeadAttention
from ..models import TransformerEncoder, TransformerLM

# ----- head split and merge ---------------------------------------------------------------------


class _MergeWithoutTranspose(MultiHeadAttention):
    def forward(self, query, key, value, mask=None):
        b, s_q, _ = query.shape
        q = self._split_heads(self.w_q(query))  # (b, h, s_q, d_k)
        k = self._split_heads(self.w_k(key))
        v = self._split_heads(self.w_v(value))
        out, _ = self.attend(q, k, v, mask)  # (b, h, s_q, d_k)
        # The bug: (b, h, s, d_k) read as (b, s, d_model) without moving the heads back next to d_k.
        return self.w_o(out.view(b, s_q, self.d_model))  # tfcheck: defect(HeadsMergedWithoutTranspose)


class HeadsMergedWithoutTranspose(TransformerLM):
    """The heads are merged with ``out.view(b, s, d_model)`` straight from (b, h, s, d_k). The shapes
    agree, so nothing raises; but merged position i now holds pieces of several positions (of one
    head), so a causal LM sees the future and every position gets a scrambled context.

    Fix: ``out.transpose(1, 2).contiguous().view(b, s, d_model)``.
    """

    __tfcheck_expect__ = {"check": "attention.heads", "row": "head-merge-mixes-positions"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        c = self.config
        for layer in self.layers:
            layer.self_attn = _MergeWithoutTranspose(c.d_model, c.num_heads, c.dropout)


class _SplitWithoutTranspose(MultiHeadAttention):
    def _split_heads(self, x):
        b, s, _ = x.shape
        # The bug: a direct view to (b, h, s, d_k) slices the positions, not the features, into heads.
        return x.view(b, self.num_heads, s, self.d_k)  # tfcheck: defect(HeadsSplitWithoutTranspose)


class HeadsSplitWithoutTranspose(TransformerEncoder):
    """The heads are split with ``x.view(b, h, s, d_k)`` (the merge is the usual transpose) instead of
    ``x.view(b, s, h, d_k).transpose(1, 2)``. Each "head" then holds a block of positions, and row i of a head
    is made of features of other positions: attention mixes positions before it has even computed a score.

    Fix: split with ``x.view(b, s, h, d_k).transpose(1, 2)``.
    """

    __tfcheck_expect__ = {"check": "attention.heads", "row": "head-split-mixes-positions"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        c = self.config
        for layer in self.layers:
            layer.self_attn = _SplitWithoutTranspose(c.d_model, c.num_heads, c.dropout)


class ScoresOverFeatures(nn.Module):
    """A minimal tutorial-style encoder (embedding, one attention, head) whose scores put the transpose
    on the wrong operand: ``q.transpose(-2, -1) @ k`` is (b, h, d_k, d_k), a feature-by-feature matrix,
    and ``v @ weights`` still returns (b, h, s, d_k). Nothing raises; attention normalises over features
    and never compares positions.

    Fix: ``scores = q @ k.transpose(-2, -1) / sqrt(d_k)`` (b, h, s, s), then ``weights @ v``.
    """

    __tfcheck__ = {"kind": "encoder"}
    __tfcheck_expect__ = {"check": "attention.heads", "row": "attention-scores-wrong-axes"}

    def __init__(self, vocab_size=101, d_model=32, num_heads=4, max_len=64):
        super().__init__()
        self.num_heads, self.d_k, self.max_len = num_heads, d_model // num_heads, max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x):  # (b, s) long
        b, s = x.shape
        h = self.embed(x) + self.pos(torch.arange(s, device=x.device))  # (b, s, d)
        q, k, v = (t.view(b, s, self.num_heads, self.d_k).transpose(1, 2) for t in self.qkv(h).chunk(3, -1))
        scores = q.transpose(-2, -1) @ k / math.sqrt(self.d_k)  # (b, h, d_k, d_k): the bug  # tfcheck: defect
        weights = scores.softmax(dim=-1)
        context = v @ weights  # (b, h, s, d_k)
        return h + self.out(context.transpose(1, 2).reshape(b, s, -1))  # (b, s, d)


# ----- KV cache -----------------------------------------------------------------------------------


def _rotate(x, cos, sin):  # x: (b, h, s, d_k); cos, sin: (s, d_k)
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class _CachedAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads, self.d_k = num_heads, d_model // num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def attend(self, q, k, v):
        """q: (b, h, s, d_k), k/v: (b, h, t, d_k) with the s queries at the LAST s of the t positions."""
        s, t = q.size(-2), k.size(-2)
        # Bottom-right aligned causal mask: query i sits at position t - s + i.
        allowed = torch.ones(s, t, dtype=torch.bool, device=q.device).tril(diagonal=t - s)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)

    def forward(self, x, cos, sin, past=None):  # x: (b, s, d)
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.num_heads, self.d_k).transpose(1, 2) for t in self.qkv(x).split(d, dim=-1))
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        if past is not None:
            k, v = torch.cat((past[0], k), dim=-2), torch.cat((past[1], v), dim=-2)  # (b, h, t, d_k)
        out = self.attend(q, k, v)  # (b, h, s, d_k)
        return self.proj(out.transpose(1, 2).reshape(b, s, d)), (k, v)


class _CachedBlock(nn.Module):
    def __init__(self, d_model, num_heads, attention_cls):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = attention_cls(d_model, num_heads)
        self.mlp = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model))

    def forward(self, x, cos, sin, past=None):
        a, present = self.attn(self.norm1(x), cos, sin, past)
        x = x + a
        return x + self.mlp(self.norm2(x)), present


class _CachedRotaryLM(nn.Module):
    """A correct Hugging Face-like causal LM with rotary positions and a KV cache:
    forward(input_ids, past_key_values=None, use_cache=False) -> logits, or (logits, cache) with
    use_cache, the cache a tuple of (k, v) per layer. The base of the cache variants below."""

    __tfcheck__ = {"kind": "decoder"}
    attention_cls = _CachedAttention

    def __init__(self, vocab_size=101, d_model=32, num_heads=4, num_layers=2, max_len=64):
        super().__init__()
        self.max_len = max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.layers = nn.ModuleList(_CachedBlock(d_model, num_heads, self.attention_cls) for _ in range(num_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
        d_k = d_model // num_heads
        inv_freq = 1.0 / (10000 ** (torch.arange(0, d_k, 2, dtype=torch.float32) / d_k))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def positions(self, past_length, length, device):
        """Absolute positions of the new tokens: they continue after the cached ones."""
        return torch.arange(past_length, past_length + length, device=device)

    def forward(self, input_ids, past_key_values=None, use_cache=False):  # (b, s) long
        past_length = past_key_values[0][0].size(-2) if past_key_values else 0
        angles = self.positions(past_length, input_ids.size(1), input_ids.device)[:, None] * self.inv_freq
        angles = torch.cat((angles, angles), dim=-1)  # (s, d_k)
        cos, sin = angles.cos(), angles.sin()
        x = self.embed(input_ids)  # (b, s, d)
        presents = []
        for i, layer in enumerate(self.layers):
            x, present = layer(x, cos, sin, past_key_values[i] if past_key_values else None)
            presents.append(present)
        logits = self.head(self.norm(x))  # (b, s, vocab)
        return (logits, tuple(presents)) if use_cache else logits


class CachePositionsRestartAtZero(_CachedRotaryLM):
    """With a cache, the rotary positions of each new token are computed as ``arange(length)``, so
    they restart at 0 at every decoding step instead of continuing after the cached tokens. The full
    forward (training, scoring) is right; generation rotates every new query as if it were the first
    token, and its outputs drift from the full forward's.

    Fix: positions ``arange(past_length, past_length + length)`` (Hugging Face: ``cache_position``).
    """

    __tfcheck_expect__ = {"check": "decode.cache", "row": "kv-cache-decode-mismatch"}

    def positions(self, past_length, length, device):
        return torch.arange(length, device=device)  # the bug: ignores past_length  # tfcheck: defect


class _TopLeftCausalAttention(_CachedAttention):
    def attend(self, q, k, v):
        # The bug: is_causal=True aligns the mask top-left, so with 1 query and t cached keys the query
        # sees key 0 only.
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)  # tfcheck: defect(CacheWithTopLeftIsCausal)


class CacheWithTopLeftIsCausal(_CachedRotaryLM):
    """Attention uses ``F.scaled_dot_product_attention(..., is_causal=True)`` also when keys come from
    the cache. ``is_causal`` builds a top-left aligned mask: right when queries and keys have the same
    length (the full forward), wrong with a cache, where the one new query then attends to the first
    key only.

    Fix: with a cache pass a bottom-right aligned mask, ``ones(s, t).tril(diagonal=t - s)`` as
    ``attn_mask`` (or ``is_causal=q_len > 1 and no cache``).
    """

    __tfcheck_expect__ = {"check": "decode.cache", "row": "kv-cache-decode-mismatch"}
    attention_cls = _TopLeftCausalAttention
