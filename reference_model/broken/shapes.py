"""A gallery of deliberately broken models, ONE defect each.

Each variant is a small subclass of a working model from ``reference_model``
whose construction (not a flag read in forward) carries a real bug that users
actually write. ``__tfcheck_expect__`` names the tfcheck check that must catch
it and the troubleshooting row that must explain it.
"""

import torch
from torch import nn

from ..attention import MultiHeadAttention
from ..layers import SinusoidalPositionalEncoding
from ..models import TransformerEncoder, TransformerLM


class LinearInFeaturesMismatch(TransformerEncoder):
    """The FFN's second Linear is built as Linear(d_model, d_model) instead of
    Linear(d_ff, d_model), so it receives d_ff features it was not built for:
    "RuntimeError: mat1 and mat2 shapes cannot be multiplied (21x64 and 32x32)".

    Fix: a Linear's in_features must equal the last dimension of its input;
    the second FFN layer is nn.Linear(d_ff, d_model).
    """

    __tfcheck_expect__ = {"check": "forward.smoke", "row": "mat1-mat2-shapes"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        for layer in self.layers:
            layer.ffn.w_2 = nn.Linear(self.config.d_model, self.config.d_model)  # tfcheck: defect


class ResidualWidthMismatch(TransformerEncoder):
    """The FFN's second Linear is built as Linear(d_ff, d_ff), so the sublayer
    returns width d_ff and the residual add x + ffn(x) fails:
    "RuntimeError: The size of tensor a (32) must match the size of tensor b (64)".

    Fix: every sublayer must map d_model back to d_model so the residual stream
    keeps one width; the second FFN layer is nn.Linear(d_ff, d_model).
    """

    __tfcheck_expect__ = {"check": "forward.smoke", "row": "tensor-size-mismatch"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        for layer in self.layers:
            layer.ffn.w_2 = nn.Linear(self.config.d_ff, self.config.d_ff)  # tfcheck: defect


class LMWithoutHead(TransformerLM):
    """The language model forgets its vocabulary projection and returns the final
    hidden states, (b, s, d_model), where logits (b, s, vocab_size) are expected.
    It runs without error; the loss then fails or, worse, quietly trains on
    the wrong "classes".

    Fix: apply the LM head, ``return self.lm_head(x)``, an
    nn.Linear(d_model, vocab_size).
    """

    __tfcheck_expect__ = {"check": "shape.contract", "row": "output-shape"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self.lm_head = nn.Identity()  # tfcheck: defect


class _NegInfAttention(MultiHeadAttention):
    """Attention that masks with -inf, so a row with every key masked softmaxes to NaN."""

    def attend(self, q, k, v, mask):
        scores = q @ k.transpose(-2, -1) / self.d_k**0.5  # (b, h, s_q, s_k)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))  # tfcheck: defect(CausalMaskHidesDiagonal)
        weights = self.dropout(scores.softmax(dim=-1))  # NaN where a whole row is -inf
        return weights @ v, weights  # (b, h, s_q, d_k)


class CausalMaskHidesDiagonal(TransformerLM):
    """The causal mask is built with torch.tril(..., diagonal=-1), so a position
    may not attend to itself, and masked scores are filled with float('-inf').
    The first position then has no key left at all: softmax over all -inf is
    NaN, and the NaN spreads through later layers into the logits and the loss.

    Fix: keep the diagonal (torch.tril(ones) with the default diagonal=0: a
    position sees itself and the past), and fill masked scores with
    torch.finfo(scores.dtype).min so even a fully masked row stays finite.
    """

    __tfcheck_expect__ = {"check": "shape.contract", "row": "loss-nan"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        c = self.config
        for layer in self.layers:
            layer.self_attn = _NegInfAttention(c.d_model, c.num_heads, c.dropout)

    def build_mask(self, tokens):
        s = tokens.size(1)
        causal = torch.tril(torch.ones(s, s, dtype=torch.bool, device=tokens.device), diagonal=-1)  # tfcheck: defect
        return (tokens != self.config.pad_id)[:, None, None, :] & causal  # (b, 1, s, s)


class _UncheckedPositionalEncoding(SinusoidalPositionalEncoding):
    def forward(self, x):  # (b, s, d_model)
        # No length check: past max_len the slice quietly stops at max_len rows.
        return x + self.pe[:, : x.size(1)]


class PositionalTableTooShort(TransformerEncoder):
    """The positional-encoding table is built for 16 positions while the config
    still promises max_len=64, and nothing checks the length. Inputs up to 16
    tokens work; longer ones fail with
    "RuntimeError: The size of tensor a (64) must match the size of tensor b (16)".

    Fix: build the table from the config, SinusoidalPositionalEncoding(d_model,
    config.max_len), and raise a clear error when a sequence exceeds max_len.
    """

    __tfcheck_expect__ = {"check": "shape.contract", "row": "tensor-size-mismatch"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self.pos = _UncheckedPositionalEncoding(self.config.d_model, max_len=16)  # tfcheck: defect

