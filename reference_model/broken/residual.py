"""Broken residual connections (caught by shape.residual)."""

from torch import nn

from ..attention import MultiHeadAttention
from ..models import TransformerEncoder


class _LastQueryAttention(MultiHeadAttention):
    def forward(self, query, key, value, mask=None):
        # Only the last query is attended: (b, 1, d_model), which x + attn(x) broadcasts over every position.
        keep = None if mask is None else mask[..., -1:, :]
        return super().forward(query[:, -1:], key, value, keep)  # tfcheck: defect(AttentionForLastPositionOnly)


class AttentionForLastPositionOnly(TransformerEncoder):
    """Self-attention computes its output for the last query only, (b, 1, d_model); the residual add
    broadcasts it onto every position, so nothing raises and every output shape looks right.

    Fix: attend with every query: the sublayer must return (b, s, d_model).
    """

    __tfcheck_expect__ = {"check": "shape.residual", "row": "residual-width"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        c = self.config
        for layer in self.layers:
            layer.self_attn = _LastQueryAttention(c.d_model, c.num_heads, c.dropout)


class _NoResidual(nn.Module):
    """An encoder layer written as x = norm(attn(x)): the residual connection around attention is gone."""

    def __init__(self, layer):
        super().__init__()
        self.self_attn, self.ffn, self.norm1, self.norm2 = layer.self_attn, layer.ffn, layer.norm1, layer.norm2
        self.dropout = nn.Dropout(layer.dropout.p)

    def forward(self, x, mask=None):
        x = self.norm1(self.dropout(self.self_attn(x, x, x, mask)))  # tfcheck: defect(NoResidualAroundAttention)
        return self.norm2(x + self.dropout(self.ffn(x)))


class NoResidualAroundAttention(TransformerEncoder):
    """Each layer computes x = norm(attn(x)) instead of x = norm(x + attn(x)): it runs and has the right
    shapes, but the token signal must squeeze through every attention (deep stacks train badly).

    Fix: add the residual around the attention sublayer.
    """

    __tfcheck_expect__ = {"check": "shape.residual", "row": "residual-missing", "status": "warn"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self.layers = nn.ModuleList(_NoResidual(layer) for layer in self.layers)
