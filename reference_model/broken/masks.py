"""Broken masks, ONE defect each: causal masks that let the future in, and padding masks that let pad
content reach real tokens. Caught by ``mask.causal`` and ``mask.padding``; each docstring says the fix.

The base models build boolean KEEP masks (True = may attend); see reference_model.attention.
"""

import torch
import torch.nn.functional as F

from ..attention import MultiHeadAttention
from ..models import Seq2SeqTransformer, TransformerEncoder, TransformerLM, padding_mask


def _swap_self_attention(model, attention_cls):
    c = model.config
    for layer in model.layers:
        layer.self_attn = attention_cls(c.d_model, c.num_heads, c.dropout)


# ----- causal ---------------------------------------------------------------------------------------

class LMWithoutCausalMask(TransformerLM):
    """The LM builds only the padding mask and forgets the causal one, so every position attends to
    the whole sequence: training loss drops fast (the next token is visible), generation is bad.

    Fix: combine the padding mask with ``torch.tril(torch.ones(s, s, dtype=torch.bool))``.
    """

    __tfcheck_expect__ = {"check": "mask.causal", "row": "inference-worse-than-training"}

    def build_mask(self, tokens):
        return padding_mask(tokens, self.config.pad_id)  # (b, 1, 1, s): padding only  # tfcheck: defect


class CausalMaskOffByOne(TransformerLM):
    """The causal keep mask is ``torch.tril(ones, diagonal=1)``: position t may also attend to t + 1,
    so the model is trained to read the token it should predict.

    Fix: ``torch.tril(ones)`` (diagonal=0): a position sees itself and the past.
    """

    __tfcheck_expect__ = {"check": "mask.causal", "row": "causal-mask-misaligned"}

    def build_mask(self, tokens):
        s = tokens.size(1)
        causal = torch.tril(torch.ones(s, s, dtype=torch.bool, device=tokens.device), diagonal=1)  # tfcheck: defect
        return padding_mask(tokens, self.config.pad_id) & causal  # (b, 1, s, s)


class CausalMaskInverted(TransformerLM):
    """The causal keep mask is built with ``torch.triu``: each position attends to itself and the
    FUTURE, never the past.

    Fix: ``torch.tril`` for a keep mask (True = may attend); ``torch.triu(..., diagonal=1)`` is the
    may-NOT-attend mask that nn.MultiheadAttention expects.
    """

    __tfcheck_expect__ = {"check": "mask.causal", "row": "causal-mask-misaligned"}

    def build_mask(self, tokens):
        s = tokens.size(1)
        causal = torch.triu(torch.ones(s, s, dtype=torch.bool, device=tokens.device))  # tfcheck: defect
        return padding_mask(tokens, self.config.pad_id) & causal


class _MaskAfterSoftmaxAttention(MultiHeadAttention):
    def attend(self, q, k, v, mask):
        weights = (q @ k.transpose(-2, -1) / self.d_k**0.5).softmax(dim=-1)  # (b, h, s, s)
        if mask is not None:
            weights = weights.masked_fill(~mask, 0.0)  # the future already entered the softmax's sum  # tfcheck: defect(CausalMaskAfterSoftmax)  # noqa: E501
        return self.dropout(weights) @ v, weights


class CausalMaskAfterSoftmax(TransformerLM):
    """The mask zeroes attention weights AFTER the softmax, so the future's scores are still in the
    softmax denominator: each output depends on every later token through the normalisation.

    Fix: mask the scores before the softmax (``scores.masked_fill(~mask, finfo.min)``).
    """

    __tfcheck_expect__ = {"check": "mask.causal", "row": "causal-mask-ineffective"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        _swap_self_attention(self, _MaskAfterSoftmaxAttention)


class _FloatMaskSDPAAttention(MultiHeadAttention):
    def attend(self, q, k, v, mask):
        # BUG: a float attn_mask is ADDED to the scores; 1.0 / 0.0 masks nothing.
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.float() if mask is not None else None)  # tfcheck: defect(CausalMaskFloatAdded)  # noqa: E501
        return out, None


class CausalMaskFloatAdded(TransformerLM):
    """The boolean keep mask is converted with ``.float()`` before F.scaled_dot_product_attention,
    which adds float masks to the scores: the scores move by 0 or 1 and nothing is masked.

    Fix: pass the boolean mask itself (True = may attend), or an additive float mask of 0 and -inf.
    """

    __tfcheck_expect__ = {"check": "mask.causal", "row": "causal-mask-ineffective"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        _swap_self_attention(self, _FloatMaskSDPAAttention)


class _TinyFillAttention(MultiHeadAttention):
    def attend(self, q, k, v, mask):
        scores = q @ k.transpose(-2, -1) / self.d_k**0.5
        if mask is not None:
            scores = scores.masked_fill(~mask, -1e-12)  # BUG: meant -1e12  # tfcheck: defect(CausalMaskFillTooSmall)
        weights = scores.softmax(dim=-1)
        return self.dropout(weights) @ v, weights


class CausalMaskFillTooSmall(TransformerLM):
    """Masked scores are filled with -1e-12 (meant: -1e12), which is no mask at all after the softmax.

    Fix: fill with ``torch.finfo(scores.dtype).min``.
    """

    __tfcheck_expect__ = {"check": "mask.causal", "row": "causal-mask-ineffective"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        _swap_self_attention(self, _TinyFillAttention)


class LMNormalisesOverTheSequence(TransformerLM):
    """The embedded input is normalised with ``F.layer_norm(x, x.shape[1:])``, over (s, d) instead of d:
    the statistics include every later position, so the future leaks into each output (a little).

    Fix: normalise over the features only, ``F.layer_norm(x, x.shape[-1:])`` (nn.LayerNorm(d_model)).
    """

    __tfcheck_expect__ = {"check": "mask.causal", "row": "sequence-statistics-leak"}

    def forward(self, tokens):
        mask = self.build_mask(tokens)
        x = self.pos(self.embed(tokens))
        x = F.layer_norm(x, x.shape[1:])  # BUG: over (s, d)  # tfcheck: defect
        for layer in self.layers:
            x = layer(x, mask)
        return self.lm_head(self.norm(x))


# ----- padding --------------------------------------------------------------------------------------

class EncoderPaddingMaskInverted(TransformerEncoder):
    """The padding mask is built as ``tokens == pad_id``: pads attend, real tokens are masked, so each
    real token's output is made of padding.

    Fix: ``tokens != pad_id`` for a keep mask (True = real token).
    """

    __tfcheck_expect__ = {"check": "mask.padding", "row": "padding-mask-inverted"}

    def forward(self, tokens):
        mask = (tokens == self.config.pad_id)[:, None, None, :]  # BUG: inverted  # tfcheck: defect
        x = self.pos(self.embed(tokens))
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class EncoderPaddingMaskOnQueries(TransformerEncoder):
    """The padding mask is laid out (b, 1, s, 1) instead of (b, 1, 1, s): it masks pad QUERIES, and
    every real token still attends to the pads.

    Fix: mask the key axis, ``(tokens != pad_id)[:, None, None, :]``.
    """

    __tfcheck_expect__ = {"check": "mask.padding", "row": "padding-mask-query-axis"}

    def forward(self, tokens):
        mask = (tokens != self.config.pad_id)[:, None, :, None]  # BUG: query axis  # tfcheck: defect
        x = self.pos(self.embed(tokens))
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class EncoderPaddingMaskIgnored(TransformerEncoder):
    """The padding mask is built but never given to the layers, so pads are attended like words.

    Fix: pass the mask to every layer (``layer(x, mask)``).
    """

    __tfcheck_expect__ = {"check": "mask.padding", "row": "padding-mask-ignored"}

    def forward(self, tokens):
        x = self.pos(self.embed(tokens))
        for layer in self.layers:
            x = layer(x)  # BUG: the mask is not passed  # tfcheck: defect
        return self.norm(x)


class Seq2SeqCrossAttentionUnmasked(Seq2SeqTransformer):
    """The decoder's cross-attention gets no memory mask: the encoder masks source padding in its own
    self-attention, but the decoder attends to the memory at padded source positions.

    Fix: give cross-attention the source padding mask (``memory_mask = padding_mask(src, pad_id)``).
    """

    __tfcheck_expect__ = {"check": "mask.padding", "row": "padding-mask-cross-attention"}

    def decode(self, tgt, memory, src):
        pad_id = self.config.pad_id
        self_mask = padding_mask(tgt, pad_id) & torch.tril(
            torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool, device=tgt.device))
        x = self.pos(self.tgt_embed(tgt))
        for layer in self.decoder_layers:
            x = layer(x, memory, self_mask, None)  # BUG: no memory mask  # tfcheck: defect
        return self.generator(self.decoder_norm(x))
