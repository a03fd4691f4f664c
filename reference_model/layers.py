"""Building blocks: feed-forward, embeddings, positional encoding, encoder/decoder layers."""

import math

import torch
from torch import nn

from .attention import MultiHeadAttention


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = W2 dropout(relu(W1 x)), applied to each position independently (§3.3)."""

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):  # (b, s, d_model)
        h = self.dropout(torch.relu(self.w_1(x)))  # (b, s, d_ff)
        return self.w_2(h)  # (b, s, d_model)


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sin/cos table of §3.5: sin on even features, cos on odd ones."""

    def __init__(self, d_model, max_len):
        super().__init__()
        self.max_len = max_len
        position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)  # (max_len, 1)
        div_term = torch.exp(
            torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model)
        )  # (ceil(d_model / 2),)
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term[: d_model // 2])  # odd d_model has one fewer cos
        # Not persistent: the table is a deterministic function of the shape, so it
        # need not bloat or constrain checkpoints.
        self.register_buffer("pe", pe.unsqueeze(0), persistent=False)  # (1, max_len, d_model)

    def forward(self, x):  # (b, s, d_model)
        s = x.size(1)
        if s > self.max_len:
            # Without this check the slice silently returns max_len rows and the add
            # fails with an opaque broadcasting error.
            raise ValueError(
                f"sequence length {s} exceeds the positional encoding's max_len={self.max_len}; "
                "build the model with a larger max_len"
            )
        return x + self.pe[:, :s]  # (b, s, d_model)


class TokenEmbedding(nn.Module):
    """Token lookup scaled by sqrt(d_model) (§3.4).

    Initialised with std d_model**-0.5 so that after the sqrt(d_model) scale the
    token signal has std ~1, the same order as the positional table; with
    nn.Embedding's default N(0, 1) init the scale would drown the positions.
    """

    def __init__(self, vocab_size, d_model, pad_id):
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        nn.init.normal_(self.embedding.weight, std=d_model**-0.5)
        with torch.no_grad():
            self.embedding.weight[pad_id].zero_()  # normal_ overwrote the padding row

    def forward(self, tokens):  # (b, s) long
        return self.embedding(tokens) * math.sqrt(self.d_model)  # (b, s, d_model)


class _Residual(nn.Module):
    """Shared Post-LN / Pre-LN residual wiring for the layers below."""

    def __init__(self, d_model, dropout, norm_first):
        super().__init__()
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)

    def residual(self, x, norm, sublayer):
        if self.norm_first:
            return x + self.dropout(sublayer(norm(x)))  # Pre-LN
        return norm(x + self.dropout(sublayer(x)))  # Post-LN, as in the paper


class EncoderLayer(_Residual):
    """Self-attention + FFN. Also the decoder-only (LM) layer when given a causal mask."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(d_model, dropout, norm_first)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x, mask=None):  # x: (b, s, d_model); mask: keep mask
        x = self.residual(x, self.norm1, lambda h: self.self_attn(h, h, h, mask))  # (b, s, d_model)
        return self.residual(x, self.norm2, self.ffn)  # (b, s, d_model)


class DecoderLayer(_Residual):
    """Masked self-attention + cross-attention over the encoder memory + FFN."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(d_model, dropout, norm_first)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        # x: (b, t, d_model); memory: (b, s, d_model)
        # self_mask: keep mask over (t, t); memory_mask: keep mask over (t, s)
        x = self.residual(x, self.norm1, lambda h: self.self_attn(h, h, h, self_mask))
        x = self.residual(x, self.norm2, lambda h: self.cross_attn(h, memory, memory, memory_mask))
        return self.residual(x, self.norm3, self.ffn)  # (b, t, d_model)
