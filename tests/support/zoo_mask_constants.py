"""Masks written with a small constant, as tutorials write them: masked_fill(mask == 0, -1e4), torch.where(keep,
scores, -1e4), an additive (0, -1e4) causal mask. -1e4 masks as well as -1e9 does (exp(-1e4) is 0 in float32 and
float16 alike) and is in range for float16, yet it is close enough to real logits to be taken for one. Correct
unless the name says otherwise."""
from __future__ import annotations

import math

import torch
import torch.nn as nn

VOCAB, D, HEADS, FF, MAX_LEN = 97, 32, 4, 64, 64
FILL = -1e4


class _Attention(nn.Module):
    """Multi-head attention; ``mask`` a keep mask broadcastable to the (b, h, s_q, s_k) scores."""

    def __init__(self, d_model: int = D, h: int = HEADS, by_d_model: bool = False):
        super().__init__()
        self.h, self.d_k = h, d_model // h
        self.divisor = math.sqrt(d_model if by_d_model else self.d_k)
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def masked(self, scores, keep):
        return scores.masked_fill(keep == 0, FILL)

    def forward(self, x, memory, keep):
        b = x.size(0)
        split = lambda t: t.view(b, -1, self.h, self.d_k).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q(x)), split(self.k(memory)), split(self.v(memory))
        scores = q @ k.transpose(-2, -1) / self.divisor
        weights = self.masked(scores, keep).softmax(dim=-1)
        return self.o((weights @ v).transpose(1, 2).reshape(b, -1, self.h * self.d_k))


class _Layer(nn.Module):
    """Pre-LN: self-attention, cross-attention where there is a memory, feed-forward."""

    def __init__(self, attention: type[_Attention], cross: bool, by_d_model: bool):
        super().__init__()
        self.self_attn = attention(by_d_model=by_d_model)
        self.src_attn = attention(by_d_model=by_d_model) if cross else None
        self.norms = nn.ModuleList(nn.LayerNorm(D) for _ in range(3 if cross else 2))
        self.ff = nn.Sequential(nn.Linear(D, FF), nn.ReLU(), nn.Linear(FF, D))

    def forward(self, x, keep, memory=None, memory_keep=None):
        h = self.norms[0](x)
        x = x + self.self_attn(h, h, keep)
        if self.src_attn is not None:
            x = x + self.src_attn(self.norms[2](x), memory, memory_keep)
        return x + self.ff(self.norms[1](x))


def _embed(vocab: int = VOCAB) -> tuple[nn.Embedding, nn.Embedding]:
    return nn.Embedding(vocab, D), nn.Embedding(MAX_LEN, D)


class TutorialEncoderDecoderFill1e4(nn.Module):
    """The Annotated Transformer's layout: forward(src, tgt, src_mask, tgt_mask), src_mask (b, 1, s) and
    tgt_mask (b, t, t) keep masks; the scores filled with -1e4 where the mask is 0, scaled by 1/√d_k."""

    by_d_model = False
    attention: type[_Attention] = _Attention

    def __init__(self, layers: int = 2):
        super().__init__()
        torch.manual_seed(0)
        self.src_embed, self.src_pos = _embed()
        self.tgt_embed, self.tgt_pos = _embed()
        self.encoder = nn.ModuleList(_Layer(self.attention, False, self.by_d_model) for _ in range(layers))
        self.decoder = nn.ModuleList(_Layer(self.attention, True, self.by_d_model) for _ in range(layers))
        self.enc_norm, self.dec_norm = nn.LayerNorm(D), nn.LayerNorm(D)
        self.generator = nn.Linear(D, VOCAB)

    def forward(self, src, tgt, src_mask, tgt_mask):
        src_keep, tgt_keep = src_mask.unsqueeze(1), tgt_mask.unsqueeze(1)  # the heads axis
        x = self.src_embed(src) + self.src_pos(torch.arange(src.size(1), device=src.device))
        for layer in self.encoder:
            x = layer(x, src_keep)
        memory = self.enc_norm(x)
        y = self.tgt_embed(tgt) + self.tgt_pos(torch.arange(tgt.size(1), device=tgt.device))
        for layer in self.decoder:
            y = layer(y, tgt_keep, memory, src_keep)
        return self.generator(self.dec_norm(y))


class TutorialEncoderDecoderFill1e4ByDModel(TutorialEncoderDecoderFill1e4):
    """The same, with the scores divided by √d_model instead of √d_k: the bug attention.scale reports."""

    by_d_model = True


class _WhereAttention(_Attention):
    def masked(self, scores, keep):
        return torch.where(keep.bool(), scores, FILL)


class _AdditiveAttention(_Attention):
    def masked(self, scores, keep):
        return scores + (1.0 - keep.float()) * FILL  # old BERT's additive mask, 0 or -1e4


class _DecoderLM(nn.Module):
    """A decoder-only LM, forward(input_ids): the causal keep mask built inside, applied by ``attention``."""

    attention: type[_Attention] = _Attention

    def __init__(self, layers: int = 2):
        super().__init__()
        torch.manual_seed(0)
        self.causal = True
        self.embed, self.pos = _embed()
        self.layers = nn.ModuleList(_Layer(self.attention, False, False) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(D), nn.Linear(D, VOCAB)

    def forward(self, input_ids):
        s = input_ids.size(1)
        keep = torch.tril(torch.ones(s, s, dtype=torch.bool, device=input_ids.device))
        x = self.embed(input_ids) + self.pos(torch.arange(s, device=input_ids.device))
        for layer in self.layers:
            x = layer(x, keep)
        return self.head(self.norm(x))


class DecoderWhere1e4(_DecoderLM):
    """torch.where(keep, scores, -1e4)."""

    attention = _WhereAttention


class DecoderAdditive1e4(_DecoderLM):
    """scores + (1 - keep) * -1e4."""

    attention = _AdditiveAttention
