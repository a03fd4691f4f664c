"""Scaled dot-product attention and multi-head attention (Vaswani et al., 2017, §3.2).

Mask convention used throughout this package: a mask is a boolean KEEP mask,
True = this query may attend to this key, broadcastable to (b, h, s_q, s_k).
It is the same convention as the boolean ``attn_mask`` of
``torch.nn.functional.scaled_dot_product_attention`` and the opposite of the
boolean masks of ``nn.MultiheadAttention`` (where True = NOT allowed).
"""

import math

import torch
from torch import nn


def scaled_dot_product(q, k, v, mask=None, dropout=None):
    """softmax(q k^T / sqrt(d_k)) v.

    q: (..., s_q, d_k), k: (..., s_k, d_k), v: (..., s_k, d_v);
    mask: boolean keep mask broadcastable to (..., s_q, s_k), True = may attend;
    dropout: optional module applied to the attention weights (the paper's
    attention dropout). Returns (out (..., s_q, d_v), weights (..., s_q, s_k)).
    """
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (b, h, s_q, s_k)
    if mask is not None:
        # masked_fill writes where ITS argument is True, so the keep mask is
        # inverted. finfo.min rather than -inf: a fully masked row then softmaxes
        # to a finite uniform row instead of NaN, and unlike -1e9 it is
        # representable in float16.
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)  # (b, h, s_q, s_k)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ v, weights  # (b, h, s_q, d_v), (b, h, s_q, s_k)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with separate q/k/v/output projections.

    forward(query (b, s_q, d_model), key (b, s_k, d_model), value (b, s_k, d_model),
    mask=None) -> (b, s_q, d_model). ``mask`` is a boolean keep mask (see module
    docstring), typically (b, 1, 1, s_k) for padding or (1, 1, s_q, s_k) / (b, 1, s_q, s_k)
    for causal masks.
    """

    def __init__(self, d_model, num_heads, dropout=0.0):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads={num_heads}; "
                "each head gets d_model // num_heads features"
            )
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def _split_heads(self, x):
        b, s, _ = x.shape
        # view then transpose (not a direct view to (b, h, s, d_k)), so each head
        # gets a contiguous slice of features rather than a slice of positions.
        return x.view(b, s, self.num_heads, self.d_k).transpose(1, 2)  # (b, h, s, d_k)

    def attend(self, q, k, v, mask):
        """The attention kernel; a seam so variants can swap it."""
        return scaled_dot_product(q, k, v, mask, self.dropout)

    def forward(self, query, key, value, mask=None):
        b, s_q, _ = query.shape
        q = self._split_heads(self.w_q(query))  # (b, h, s_q, d_k)
        k = self._split_heads(self.w_k(key))  # (b, h, s_k, d_k)
        v = self._split_heads(self.w_v(value))  # (b, h, s_k, d_k)
        out, _ = self.attend(q, k, v, mask)  # (b, h, s_q, d_k)
        # transpose makes the tensor non-contiguous; view needs contiguous memory.
        out = out.transpose(1, 2).contiguous().view(b, s_q, self.d_model)  # (b, s_q, d_model)
        return self.w_o(out)  # (b, s_q, d_model)
