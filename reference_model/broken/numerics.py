"""Broken attention numerics (caught by attention.scale, attention.softmax_axis, numerics.nan_source,
numerics.half) and an embedding scale that drowns the positions (embedding.scale).

Every variant runs without an error and has the right output shape.
"""

import math

import torch
from torch import nn

from ..attention import MultiHeadAttention
from ..layers import TokenEmbedding
from ..models import Seq2SeqTransformer, TransformerEncoder, TransformerLM


def _with_attention(model, attention_cls):
    c = model.config
    layers = getattr(model, "layers", None) or model.encoder_layers
    for layer in layers:
        layer.self_attn = attention_cls(c.d_model, c.num_heads, c.dropout)
    return model


def _attention(q, k, v, mask, scale, fill, dim=-1):
    scores = q @ k.transpose(-2, -1) * scale  # (b, h, s_q, s_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, fill)
    weights = scores.softmax(dim=dim)
    return weights @ v, weights


class _ScaledByDModel(MultiHeadAttention):
    def attend(self, q, k, v, mask):
        # The bug: √d_model, the full width, instead of √d_k, the per-head size.
        return _attention(q, k, v, mask, 1 / math.sqrt(self.d_model), torch.finfo(q.dtype).min)  # tfcheck: defect(AttentionScaledByDModel)  # noqa: E501


class AttentionScaledByDModel(TransformerLM):
    """Logits divided by √d_model instead of √d_k: too small by √num_heads, so attention is flatter
    than designed. Fix: ``/ math.sqrt(q.size(-1))``."""

    __tfcheck_expect__ = {"check": "attention.scale", "row": "attention-scale-wrong"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        _with_attention(self, _ScaledByDModel)


class _MultipliedBySqrtDk(MultiHeadAttention):
    def attend(self, q, k, v, mask):
        return _attention(q, k, v, mask, math.sqrt(self.d_k), torch.finfo(q.dtype).min)  # the bug: * not /  # tfcheck: defect(AttentionMultipliedBySqrtDk)  # noqa: E501


class AttentionMultipliedBySqrtDk(TransformerEncoder):
    """Logits multiplied by √d_k instead of divided: the softmax saturates and gradients vanish.

    Fix: divide the scores by math.sqrt(d_k).
    """

    __tfcheck_expect__ = {"check": "attention.scale", "row": "attention-scale-wrong"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        _with_attention(self, _MultipliedBySqrtDk)


class _Unscaled(MultiHeadAttention):
    def attend(self, q, k, v, mask):
        return _attention(q, k, v, mask, 1.0, torch.finfo(q.dtype).min)  # the bug: no 1/√d_k at all  # tfcheck: defect(AttentionUnscaled)  # noqa: E501


class AttentionUnscaled(Seq2SeqTransformer):
    """Raw q·kᵀ logits, never scaled; the model declares nothing that would make this intended.

    Fix: divide the scores by math.sqrt(d_k) (or declare the scale folded into the initialisation).
    """

    __tfcheck_expect__ = {"check": "attention.scale", "row": "attention-scale-wrong"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        _with_attention(self, _Unscaled)


class _SoftmaxOverQueries(MultiHeadAttention):
    def attend(self, q, k, v, mask):
        # The bug: dim=-2 normalises each key's column over the queries.
        return _attention(q, k, v, mask, 1 / math.sqrt(self.d_k), torch.finfo(q.dtype).min, dim=-2)  # tfcheck: defect(SoftmaxOverQueries)  # noqa: E501


class SoftmaxOverQueries(TransformerEncoder):
    """``scores.softmax(dim=-2)``: weights sum to 1 over the queries, not over the keys a query attends to.

    Fix: softmax over the key axis, dim=-1.
    """

    __tfcheck_expect__ = {"check": "attention.softmax_axis", "row": "softmax-wrong-axis"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        _with_attention(self, _SoftmaxOverQueries)


class _MinusInfFill(MultiHeadAttention):
    def attend(self, q, k, v, mask):
        # The bug: -inf makes a row with every key masked softmax to 0/0 = NaN.
        return _attention(q, k, v, mask, 1 / math.sqrt(self.d_k), float("-inf"))  # tfcheck: defect(MaskFilledWithMinusInf)  # noqa: E501


class MaskFilledWithMinusInf(TransformerEncoder):
    """Masks filled with -inf: a fully padded sequence gives NaN, and the NaN reaches every gradient
    through the backward even though the loss ignores that row. Fix: ``torch.finfo(scores.dtype).min``."""

    __tfcheck_expect__ = {"check": "numerics.nan_source", "row": "nan-from-masked-row"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        _with_attention(self, _MinusInfFill)


class _MinusOneE9Fill(MultiHeadAttention):
    def attend(self, q, k, v, mask):
        return _attention(q, k, v, mask, 1 / math.sqrt(self.d_k), -1e9)  # the bug: -1e9 overflows float16  # tfcheck: defect(MaskFilledWithMinusOneE9)  # noqa: E501


class MaskFilledWithMinusOneE9(TransformerLM):
    """The Annotated Transformer's ``masked_fill(mask == 0, -1e9)``: right in float32, -inf in float16.
    A warning unless the model declares precision=fp16.

    Fix: fill with torch.finfo(scores.dtype).min.
    """

    __tfcheck_expect__ = {"check": "numerics.half", "row": "mask-fill-overflows-half", "status": "warn"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        _with_attention(self, _MinusOneE9Fill)


class _UnitStdEmbedding(TokenEmbedding):
    def __init__(self, vocab_size, d_model, pad_id):
        super().__init__(vocab_size, d_model, pad_id)
        nn.init.normal_(self.embedding.weight, std=1.0)  # the bug: std 1 and then × √d_model  # tfcheck: defect(EmbeddingDrownsPositions)  # noqa: E501


class EmbeddingDrownsPositions(TransformerEncoder):
    """nn.Embedding's N(0, 1) init multiplied by √d_model: tokens are √d_model times the sinusoidal
    table, which then barely registers. Fix: init std d_model**-0.5 (or drop the scale)."""

    __tfcheck_expect__ = {"check": "embedding.scale", "row": "embedding-position-imbalance", "status": "warn"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        c = self.config
        self.embed = _UnitStdEmbedding(c.vocab_size, c.d_model, c.pad_id)
