"""Encoder in the style of hand-written "Transformer encoder from scratch" blog code with an additive mask.

Kept: ``TransformerEncoder(vocab_size=30000, d_model=512, n_heads=8, n_layers=6, d_ff=2048, max_len=512)``;
``forward(x, mask=None)`` where ``mask`` is an ADDITIVE float mask (b, 1, s, s): 0 where a query may attend,
-inf (or -1e9) where it may not, added to the scores (``scores = scores + mask``) and broadcast over the heads;
token embedding times sqrt(d_model) plus a sinusoidal table computed in a Python for-loop
(``math.sin(pos / 10000 ** (i / d_model))`` for even i, cos for odd) and kept as a plain tensor attribute
``self.pe`` (not a registered buffer, so it is moved by hand with ``.to(x.device)``); post-LN layers
``norm(x + dropout(sublayer(x)))``; returns the hidden states (b, s, d_model).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        assert d_model % n_heads == 0
        self.n_heads, self.d_k = n_heads, d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        b, s, _ = x.shape
        q = self.w_q(x).view(b, s, self.n_heads, self.d_k).transpose(1, 2)  # (b, h, s, d_k)
        k = self.w_k(x).view(b, s, self.n_heads, self.d_k).transpose(1, 2)
        v = self.w_v(x).view(b, s, self.n_heads, self.d_k).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)  # (b, h, s, s)
        if mask is not None:
            scores = scores + mask  # additive mask: 0 = attend, -inf = blocked
        attn = self.dropout(F.softmax(scores, dim=-1))
        out = torch.matmul(attn, v).transpose(1, 2).contiguous().view(b, s, -1)
        return self.w_o(out)


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.linear2(self.dropout(F.relu(self.linear1(x))))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, mask)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class TransformerEncoder(nn.Module):
    def __init__(self, vocab_size=30000, d_model=512, n_heads=8, n_layers=6, d_ff=2048, max_len=512, dropout=0.1):
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.pe = self.positional_encoding(max_len, d_model)  # (max_len, d_model), a plain attribute
        self.layers = nn.ModuleList([EncoderLayer(d_model, n_heads, d_ff, dropout) for _ in range(n_layers)])
        self.dropout = nn.Dropout(dropout)

    @staticmethod
    def positional_encoding(max_len, d_model):
        table = []
        for pos in range(max_len):
            row = []
            for i in range(d_model):
                angle = pos / (10000 ** ((i - i % 2) / d_model))  # 2k / d_model for dims 2k and 2k + 1
                row.append(math.sin(angle) if i % 2 == 0 else math.cos(angle))
            table.append(row)
        return torch.tensor(table)

    def forward(self, x, mask=None):
        pe = self.pe[:x.size(1)].to(x.device)  # (s, d_model), broadcast over the batch
        x = self.embedding(x) * math.sqrt(self.d_model) + pe
        x = self.dropout(x)
        for layer in self.layers:
            x = layer(x, mask)
        return x


class BuggyTransformerEncoder(TransformerEncoder):
    def forward(self, x, mask=None):
        pe = self.pe[x.size(1)].to(x.device)  # injected bug: pe[s], one row for every position, not pe[:s]
        x = self.embedding(x) * math.sqrt(self.d_model) + pe
        x = self.dropout(x)
        for layer in self.layers:
            x = layer(x, mask)
        return x
