"""Models whose eval-mode forward is random: dropout left on in three ways (tfcheck neutralises them for the
checks that compare forwards), the same with a real causal-mask bug besides, and noise tfcheck cannot
neutralise (``torch.randn_like`` added at inference, alone and next to dropout)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from reference_model import TransformerLM
from reference_model.attention import MultiHeadAttention, scaled_dot_product
from reference_model.models import padding_mask


class _Attention(MultiHeadAttention):
    """The reference attention with one random op after it; the subclasses say which."""

    def attend(self, q, k, v, mask):
        out, weights = scaled_dot_product(q, k, v, mask)
        return self.noisy(out), weights

    def noisy(self, out):
        raise NotImplementedError


class _DropoutAlwaysOn(_Attention):
    def noisy(self, out):
        return F.dropout(out, self.dropout.p)  # training defaults to True: on in eval too


class _BernoulliMask(_Attention):
    def noisy(self, out):
        keep = 1 - self.dropout.p
        return out * torch.bernoulli(torch.full_like(out, keep)) / keep  # a hand-written mask, never gated


class _SDPADropout(MultiHeadAttention):
    def attend(self, q, k, v, mask):
        bias = None if mask is None else torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(
            ~mask, torch.finfo(q.dtype).min)
        # dropout_p not gated on self.training
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=self.dropout.p), None


class _GaussianNoise(_Attention):
    def noisy(self, out):
        return out + torch.randn_like(out) * 0.1  # noise at inference: nothing says what "off" would be


class _DropoutAndNoise(_Attention):
    def noisy(self, out):
        return F.dropout(out, self.dropout.p) + torch.randn_like(out) * 0.1


def _with_attention(model: TransformerLM, attention: type[MultiHeadAttention]) -> None:
    c = model.config
    for layer in model.layers:
        layer.self_attn = attention(c.d_model, c.num_heads, c.dropout)


class SDPADropoutInEval(TransformerLM):
    """F.scaled_dot_product_attention(..., dropout_p=p) in eval mode too."""

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        _with_attention(self, _SDPADropout)


class BernoulliMaskInEval(TransformerLM):
    """Inverted dropout written by hand with torch.bernoulli, in eval mode too."""

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        _with_attention(self, _BernoulliMask)


class DropoutInEvalAndCausalMaskOffByOne(TransformerLM):
    """Two defects: F.dropout without training= (random at inference) and a causal keep mask built with
    torch.tril(ones, diagonal=1) (position t sees t + 1)."""

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        _with_attention(self, _DropoutAlwaysOn)

    def build_mask(self, tokens):
        s = tokens.size(1)
        causal = torch.tril(torch.ones(s, s, dtype=torch.bool, device=tokens.device), diagonal=1)
        return padding_mask(tokens, self.config.pad_id) & causal


class NoiseInEval(TransformerLM):
    """Adds torch.randn_like(out) * 0.1 after attention, in eval mode too."""

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        _with_attention(self, _GaussianNoise)


class DropoutAndNoiseInEval(TransformerLM):
    """F.dropout without training= and torch.randn_like noise, both at inference."""

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        _with_attention(self, _DropoutAndNoise)
