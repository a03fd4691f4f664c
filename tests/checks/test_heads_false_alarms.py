"""attention.heads false alarms on real implementations (issue 15), fixed at their cause: an attention whose queries
and keys are gathered by indices ranked from activations (routing-transformer's k-means routing, any top-k
routing) holds tokens in the routing's order, so moving one token moves others' places there, which is no head
split mixing positions; the check says it cannot judge such a site. A gather by positions (an arange) is no
routing, and a split without its transpose still fails."""
from __future__ import annotations

import torch
import torch.nn as nn

import tfcheck
from tfcheck import Status

HEADS = "attention.heads"
VOCAB, D, H = 50, 16, 2


class _Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.to_out, self.router = nn.Linear(D, 3 * D), nn.Linear(D, D), nn.Linear(D, 1)

    def order(self, x):
        return None

    def split(self, t, b, s):
        return t.view(b, s, H, D // H).transpose(1, 2)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (self.split(t, b, s) for t in self.qkv(x).chunk(3, dim=-1))
        order = self.order(x)
        if order is not None:
            where = order[:, None, :, None].expand(b, H, s, D // H)
            q, k, v = (t.gather(2, where) for t in (q, k, v))
        context = torch.softmax(q @ k.transpose(-2, -1) / (D // H) ** 0.5, dim=-1) @ v
        if order is not None:
            context = torch.empty_like(context).scatter(2, where, context)  # back to the sequence's order
        return self.to_out(context.transpose(1, 2).reshape(b, s, D))


class RoutedAttention(_Attention):
    def order(self, x):
        return self.router(x).squeeze(-1).argsort(dim=-1)  # tokens grouped by a learned score, as routing does


class PositionallyReordered(_Attention):
    def order(self, x):
        return torch.arange(x.shape[1] - 1, -1, -1, device=x.device).expand(x.shape[0], -1)


class SplitWithoutTranspose(_Attention):
    def split(self, t, b, s):
        return t.reshape(b, H, s, D // H)


class _LM(nn.Module):
    __tfcheck__ = {"kind": "encoder", "d_model": D}
    attention = _Attention

    def __init__(self):
        super().__init__()
        self.emb, self.attn, self.head = nn.Embedding(VOCAB, D), self.attention(), nn.Linear(D, VOCAB)

    def forward(self, ids):
        x = self.emb(ids)
        return self.head(x + self.attn(x))


def _heads(attention):
    model = type(attention.__name__ + "LM", (_LM,), {"attention": attention})
    return tfcheck.run_checks(model, only=[HEADS]).models[0].result(HEADS)


def test_an_attention_over_tokens_routed_by_content_is_not_judged_by_position():
    result = _heads(RoutedAttention)
    assert result.status is Status.SKIP, str(result)
    assert "regrouped by content" in result.findings[0].message and "argsort" not in result.findings[0].message
    assert "test_heads_false_alarms.py" in result.findings[0].message  # the gather's line


def test_a_gather_by_positions_is_no_routing():
    result = _heads(PositionallyReordered)
    assert "regrouped by content" not in str(result)


def test_a_split_without_its_transpose_still_fails():
    result = _heads(SplitWithoutTranspose)
    assert result.status is Status.FAIL and result.findings[0].row == "head-split-mixes-positions", str(result)
