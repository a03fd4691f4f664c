"""Look-ahead mask bugs, one pattern of mask.causal each: a small GPT whose attention fills the scores where a
may-NOT-attend mask is True (``look_ahead``: True above the diagonal), and variants that change ONE thing of it.
Each variant marks the line mask.causal must point at with ``# tfcheck: defect`` (in its class body) or
``# tfcheck: defect(VariantName)`` (in a helper it uses); tests/checks/test_causal_diagnosis.py compares them."""
from __future__ import annotations

import math

import torch
import torch.nn as nn

VOCAB, D, HEADS, MAX_LEN = 61, 32, 4, 32


class _Attention(nn.Module):
    """Multi-head self-attention: ``blocked`` (True = may not attend) broadcasts to the (b, h, s, s) scores."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, D)

    def scores(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)  # 3 x (b, h, s, d_k)
        return q @ k.transpose(-2, -1) / math.sqrt(D // HEADS), v  # tfcheck: defect(LookAheadMissing)

    def weigh(self, scores, blocked):
        if blocked is not None:
            scores = scores.masked_fill(blocked, torch.finfo(scores.dtype).min)
        return scores.softmax(dim=-1)

    def forward(self, x, blocked):
        b, s, _ = x.shape
        scores, v = self.scores(x)
        return self.out((self.weigh(scores, blocked) @ v).transpose(1, 2).reshape(b, s, D))


class _Block(nn.Module):
    attention = _Attention

    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn = self.attention()
        self.ffn = nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, D))

    def mix(self, h, blocked):
        return self.attn(h, blocked)

    def forward(self, x, blocked):
        x = x + self.mix(self.norm1(x), blocked)
        return x + self.ffn(self.norm2(x))


class LookAheadLM(nn.Module):
    """Correct: blocked = triu(ones, diagonal=1), True above the diagonal: a position sees itself and the past."""

    __tfcheck__ = {"kind": "decoder"}
    block = _Block

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Embedding(MAX_LEN, D)
        self.blocks = nn.ModuleList(self.block() for _ in range(2))
        self.head = nn.Linear(D, VOCAB)

    def look_ahead(self, s, device):
        return torch.triu(torch.ones(s, s, dtype=torch.bool, device=device), diagonal=1)

    def forward(self, idx):
        s = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(s, device=idx.device))
        blocked = self.look_ahead(s, idx.device)
        for block in self.blocks:
            x = block(x, blocked)
        return self.head(x)


class LookAheadOffByTwo(LookAheadLM):
    """``diagonal=3`` where 1 was meant: position t also sees t + 1 and t + 2."""

    def look_ahead(self, s, device):
        return torch.triu(torch.ones(s, s, dtype=torch.bool, device=device), diagonal=3)  # tfcheck: defect


class LookAheadDiagonalMasked(LookAheadLM):
    """``diagonal=0``: the diagonal is masked too, so position 0 has no key left and, with a finite fill
    (finfo.min), attends uniformly over the whole sequence."""

    def look_ahead(self, s, device):
        return torch.triu(torch.ones(s, s, dtype=torch.bool, device=device), diagonal=0)  # tfcheck: defect


class _NegInfAttention(_Attention):
    def weigh(self, scores, blocked):
        return scores.masked_fill(blocked, float("-inf")).softmax(dim=-1)


class _NegInfBlock(_Block):
    attention = _NegInfAttention


class LookAheadDiagonalMaskedNegInf(LookAheadLM):
    """``diagonal=0`` with a -inf fill: position 0's row is all -inf, its softmax NaN, and the NaN spreads, so no
    leak can be measured; the mask that reaches the scores shows it."""

    block = _NegInfBlock

    def look_ahead(self, s, device):
        return torch.triu(torch.ones(s, s, dtype=torch.bool, device=device), diagonal=0)  # tfcheck: defect


class LookAheadInverted(LookAheadLM):
    """A keep mask (tril, True = may attend) given where the may-not-attend mask is expected: every position
    is blocked from itself and the past, and sees the future."""

    def look_ahead(self, s, device):
        return torch.tril(torch.ones(s, s, dtype=torch.bool, device=device))  # tfcheck: defect


class LookAheadOnQueries(LookAheadLM):
    """Both sides of the comparison on the query axis (``pos[None, :] > pos[:, None]`` was meant): the mask is
    (s, 1), blocks whole query rows (here none), and never a later key."""

    def look_ahead(self, s, device):
        pos = torch.arange(s, device=device)
        return pos[:, None] > pos[:, None]  # tfcheck: defect


class LookAheadLastRowOnly(LookAheadLM):
    """Code written for one-step decoding: the row of the newest position is cut from the look-ahead mask, and
    in a full forward that single row, (1, s), is broadcast over every query: nothing is blocked."""

    def look_ahead(self, s, device):
        return torch.triu(torch.ones(s, s, dtype=torch.bool, device=device), diagonal=1)[s - 1:]  # tfcheck: defect


class LookAheadMissing(LookAheadLM):
    """No mask at all: nothing reaches the scores, so mask.causal names the line that computes them (the line
    that should build the mask is not known) and says why."""

    def look_ahead(self, s, device):
        return None


class _AfterSoftmaxAttention(_Attention):
    def weigh(self, scores, blocked):
        return scores.softmax(dim=-1).masked_fill(blocked, 0.0)  # tfcheck: defect(LookAheadAfterSoftmax)


class _AfterSoftmaxBlock(_Block):
    attention = _AfterSoftmaxAttention


class LookAheadAfterSoftmax(LookAheadLM):
    """The weights are masked after the softmax: the future's scores are still in its normalising sum."""

    block = _AfterSoftmaxBlock


class _ShiftedBlock(_Block):
    def mix(self, h, blocked):
        return self.attn(h, blocked).roll(-1, dims=1)  # tfcheck: defect(LookAheadShiftedAfterAttention)


class LookAheadShiftedAfterAttention(LookAheadLM):
    """The mask is right, but the attention's output is rolled one position back along the sequence (a shift in
    the wrong direction): position t receives the attention output of t + 1."""

    block = _ShiftedBlock


# ----- an additive mask: 0 where a position may attend, -inf where it may not ------------------------------

class _AdditiveAttention(_Attention):
    def weigh(self, scores, additive):
        return (scores + additive).softmax(dim=-1)


class _AdditiveBlock(_Block):
    attention = _AdditiveAttention


class AdditiveLookAheadLM(LookAheadLM):
    """Correct: the look-ahead mask as an additive float mask, 0 on and below the diagonal, -inf above."""

    block = _AdditiveBlock

    def look_ahead(self, s, device):
        blocked = torch.triu(torch.ones(s, s, dtype=torch.bool, device=device), diagonal=1)
        return torch.zeros(s, s, device=device).masked_fill(blocked, float("-inf"))


class AdditiveLookAheadFloat01(AdditiveLookAheadLM):
    """The bool mask turned into floats with ``.float()`` and added: the scores move by 0 or 1, nothing is masked."""

    def look_ahead(self, s, device):
        blocked = torch.triu(torch.ones(s, s, dtype=torch.bool, device=device), diagonal=1)
        return blocked.float()  # tfcheck: defect


# ----- GPT-lecture style: blocks in an nn.Sequential, each attention building its own mask -------------------

class _SelfMaskingAttention(_Attention):
    def forward(self, x):
        b, s, _ = x.shape
        scores, v = self.scores(x)
        ahead = torch.triu(torch.ones(s, s, dtype=torch.bool, device=x.device), diagonal=2)  # tfcheck: defect(SequentialLookAheadOffByOne)  # noqa: E501
        weights = scores.masked_fill(ahead, float("-inf")).softmax(dim=-1)
        return self.out((weights @ v).transpose(1, 2).reshape(b, s, D))


class _SequentialBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn = _SelfMaskingAttention()
        self.ffn = nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, D))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class SequentialLookAheadOffByOne(nn.Module):
    """Blocks in an nn.Sequential (no nn.ModuleList of layers to name the first leaking one), the may-not-attend
    mask built with ``triu(..., diagonal=2)``: position t sees t + 1. At the output of the two blocks position t
    sees t + 2, and the mask itself says the diagonal is shifted by one."""

    __tfcheck__ = {"kind": "decoder"}

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Embedding(MAX_LEN, D)
        self.blocks = nn.Sequential(_SequentialBlock(), _SequentialBlock())
        self.head = nn.Linear(D, VOCAB)

    def forward(self, idx):
        s = idx.shape[1]
        return self.head(self.blocks(self.tok(idx) + self.pos(torch.arange(s, device=idx.device))))
