"""Broken variants for the information-flow checks batch.independence, position.sensitivity and
cross.dependence: ONE defect each, built into the modules (not a flag read in forward)."""

import torch
from torch import nn

from ..layers import DecoderLayer, SinusoidalPositionalEncoding
from ..models import Seq2SeqTransformer, TransformerEncoder, TransformerLM, causal_mask, padding_mask


class _SeqFirstSelfAttention(nn.Module):
    """Self-attention through a sequence-first nn.MultiheadAttention, converting the batch-first input
    with a RESHAPE where a transpose was meant: (b, s, d).reshape(s, b, d) keeps the memory order, so
    "position t of sample i" becomes a mixture of samples. Same call signature as MultiHeadAttention."""

    def __init__(self, d_model, num_heads):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, num_heads)  # batch_first=False: expects (s, b, d)

    def forward(self, query, key, value, mask=None):
        b, s, d = query.shape
        x = query.reshape(s, b, d)  # BUG: query.transpose(0, 1)  # tfcheck: defect(EncoderMergesBatchWithReshape)
        pad = None if mask is None else ~mask.reshape(b, -1)[:, -s:]  # keep mask (b, 1, 1, s) -> pad (b, s)
        out, _ = self.attn(x, x, x, key_padding_mask=pad, need_weights=False)  # (s, b, d)
        return out.reshape(b, s, d)  # the reverse reshape does not undo the mixing


class EncoderMergesBatchWithReshape(TransformerEncoder):
    """The self-attention moves to nn.MultiheadAttention's sequence-first layout with
    x.reshape(s, b, d) instead of x.transpose(0, 1): samples and positions are interleaved, so each
    sample's output depends on the others in its batch (it trains, and evaluates differently per batch).

    Fix: x.transpose(0, 1) to go to (s, b, d) and back, or nn.MultiheadAttention(batch_first=True).
    """

    __tfcheck_expect__ = {"check": "batch.independence", "row": "sample-depends-on-batch"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        for layer in self.layers:
            layer.self_attn = _SeqFirstSelfAttention(self.config.d_model, self.config.num_heads)


class _BatchAxisLayerNorm(nn.LayerNorm):
    """A hand-written LayerNorm that takes its statistics over dim 0 (the batch) instead of dim -1."""

    def forward(self, x):  # (b, s, d)
        mean = x.mean(dim=0, keepdim=True)  # BUG: dim=-1  # tfcheck: defect(LMNormalisesOverTheBatch)
        var = x.var(dim=0, keepdim=True, unbiased=False)  # BUG: dim=-1  # tfcheck: defect(LMNormalisesOverTheBatch)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class LMNormalisesOverTheBatch(TransformerLM):
    """Every LayerNorm is a hand-written one that averages over dim 0, the batch, so a sample's logits
    depend on which other samples share its batch (and batch-1 inference differs from training).

    Fix: normalise over the feature axis, x.mean(-1, keepdim=True), or use nn.LayerNorm(d_model).
    """

    __tfcheck_expect__ = {"check": "batch.independence", "row": "sample-depends-on-batch"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        for layer in self.layers:
            layer.norm1 = _BatchAxisLayerNorm(self.config.d_model)
            layer.norm2 = _BatchAxisLayerNorm(self.config.d_model)


class EncoderWithoutPositionalEncoding(TransformerEncoder):
    """The positional encoding is left out (self.pos is an identity), so the encoder is a bag of words:
    permuting the tokens only permutes the outputs. It trains, and cannot tell "dog bites man" from
    "man bites dog".

    Fix: add the positional table to the token embedding, x = embed(tokens) + pe[:, :s].
    """

    __tfcheck_expect__ = {"check": "position.sensitivity", "row": "no-position-signal"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self.pos = nn.Identity()  # tfcheck: defect


class _SequenceFirstPositionalEncoding(SinusoidalPositionalEncoding):
    """The sequence-first tutorial encoding, table (max_len, 1, d), x + pe[:x.size(0)]: on batch-first input
    x.size(0) is the batch size, so sample i gets pe[i] at every position."""

    def __init__(self, d_model, max_len):
        super().__init__(d_model, max_len)
        self.pe = self.pe.transpose(0, 1)  # (max_len, 1, d_model), as in the tutorial

    def forward(self, x):  # (b, s, d_model), though the tutorial's code expects (s, b, d_model)
        return x + self.pe[: x.size(0)]  # BUG: self.pe[: x.size(1)].transpose(0, 1)  # tfcheck: defect(EncoderPositionTableIndexedByBatch)  # noqa: E501


class EncoderPositionTableIndexedByBatch(TransformerEncoder):
    """The positional table comes from the sequence-first tutorial (x + pe[:x.size(0)]) but the model is
    batch-first: every position of sample i gets pe[i], so positions repeat and the output depends on
    the sample's index in the batch.

    Fix: index the table with the length, pe[:, :x.size(1)] for a (1, max_len, d) table.
    """

    __tfcheck_expect__ = {"check": "position.sensitivity", "row": "position-table-wrong-axis"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self.pos = _SequenceFirstPositionalEncoding(self.config.d_model, self.config.max_len)


class _SelfWiredCrossAttentionLayer(DecoderLayer):
    """A decoder layer whose cross-attention reads the decoder's own states as key and value."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        x = self.residual(x, self.norm1, lambda h: self.self_attn(h, h, h, self_mask))
        # BUG: self.cross_attn(h, memory, memory, memory_mask); the memory mask then no longer fits.
        x = self.residual(x, self.norm2, lambda h: self.cross_attn(h, h, h))  # tfcheck: defect(Seq2SeqCrossAttentionOnDecoderStates)  # noqa: E501
        return self.residual(x, self.norm3, self.ffn)


class Seq2SeqCrossAttentionOnDecoderStates(Seq2SeqTransformer):
    """The LAST decoder layer's cross-attention is wired to the decoder's own states,
    cross_attn(x, x, x) instead of cross_attn(x, memory, memory): that layer never reads the source. The
    first layer still does, so the output depends on the source and nothing looks wrong from outside.

    Fix: cross_attn(query=x, key=memory, value=memory, mask=memory_mask) in every decoder layer.
    """

    __tfcheck_expect__ = {"check": "cross.dependence", "row": "cross-attention-ignores-source"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        c = self.config
        old = self.decoder_layers[-1]
        new = _SelfWiredCrossAttentionLayer(c.d_model, c.num_heads, c.d_ff, c.dropout, c.norm_first)
        new.load_state_dict(old.state_dict())
        self.decoder_layers[-1] = new


class Seq2SeqSourcePaddingReachesCrossAttention(Seq2SeqTransformer):
    """The source padding mask is applied in the encoder only; the decoder's cross-attention gets
    memory_mask=None and attends to the padded memory positions, so a translation changes with how much
    padding its batch has.

    Fix: pass padding_mask(src, pad_id) to every cross-attention as its memory mask.
    """

    __tfcheck_expect__ = {"check": "cross.dependence", "row": "source-padding-reaches-cross-attention"}

    def decode(self, tgt, memory, src):
        self_mask = padding_mask(tgt, self.config.pad_id) & causal_mask(tgt.size(1), tgt.device)
        x = self.dropout(self.pos(self.tgt_embed(tgt)))
        for layer in self.decoder_layers:
            x = layer(x, memory, self_mask, None)  # BUG: padding_mask(src, self.config.pad_id)  # tfcheck: defect
        return self.generator(self.decoder_norm(x))
