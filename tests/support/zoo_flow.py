"""Broken models for batch.independence, position.sensitivity and cross.dependence written in other people's
styles (GPT-style forward(idx), tutorial forward(x, mask), nn.MultiheadAttention-based, HF-like
forward(input_ids, attention_mask), nn.Transformer-based seq2seq): one defect each, named in its docstring.
The reference-model variants live in reference_model/broken/flow.py."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from reference_model import TransformerLM
from reference_model.layers import EncoderLayer, SinusoidalPositionalEncoding

VOCAB, D, HEADS, MAX_LEN, PAD = 101, 32, 4, 64, 0


class MultiheadAttentionBatchFirstMismatch(nn.Module):
    """nn.MultiheadAttention built with the default batch_first=False, called on (batch, length, d) tensors:
    it reads them as (length=batch, batch=length, d), so attention runs across the samples of the batch."""

    def __init__(self):
        super().__init__()
        self.__tfcheck__ = {"kind": "encoder"}
        self.embed = nn.Embedding(VOCAB, D)
        self.pos = SinusoidalPositionalEncoding(D, MAX_LEN)
        self.attn = nn.MultiheadAttention(D, HEADS)  # BUG: batch_first=True for (b, s, d) inputs
        self.norm = nn.LayerNorm(D)

    def forward(self, input_ids):
        x = self.pos(self.embed(input_ids))  # (b, s, d)
        h, _ = self.attn(x, x, x, need_weights=False)
        return self.norm(x + h)


class _CausalBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln = nn.LayerNorm(D)

    def forward(self, x):  # (B, T, C)
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, HEADS, C // HEADS).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class GPTPositionsFromBatchSize(nn.Module):
    """A nanoGPT-style LM whose position ids are arange(b) where arange(t) was meant: every position of a
    sequence gets the same learned position vector (sample i gets wpe[i])."""

    def __init__(self):
        super().__init__()
        self.__tfcheck__ = {"kind": "decoder"}
        self.wte = nn.Embedding(VOCAB, D)
        self.wpe = nn.Embedding(MAX_LEN, D)
        self.blocks = nn.ModuleList(_CausalBlock() for _ in range(2))
        self.lm_head = nn.Linear(D, VOCAB)

    def forward(self, idx):
        b, t = idx.size()
        pos = torch.arange(0, b, dtype=torch.long, device=idx.device)  # BUG: arange(0, t)
        x = self.wte(idx) + self.wpe(pos)[:, None, :]  # (b, t, C)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(x)


class HFStyleEncoderCentresOverTheBatch(nn.Module):
    """An HF-like encoder, forward(input_ids, attention_mask), that "centres" the embeddings with the mean
    over dim 0 — the batch — instead of over the features: every sample's output depends on its batch."""

    def __init__(self):
        super().__init__()
        self.__tfcheck__ = {"kind": "encoder"}
        self.word_embeddings = nn.Embedding(VOCAB, D, padding_idx=PAD)
        self.position_embeddings = nn.Embedding(MAX_LEN, D)
        layer = nn.TransformerEncoderLayer(D, HEADS, 2 * D, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, input_ids, attention_mask=None):
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)
        x = x - x.mean(dim=0, keepdim=True)  # BUG: x.mean(dim=-1, keepdim=True)
        pad = None if attention_mask is None else attention_mask == 0
        return self.encoder(x, src_key_padding_mask=pad)


class TutorialEncoderWithoutPositions(nn.Module):
    """A tutorial-style encoder, forward(x, mask), that embeds and scales the tokens but never adds the
    positional encoding it built: a bag of words."""

    def __init__(self):
        super().__init__()
        self.__tfcheck__ = {"kind": "encoder", "mask": "mask:keep"}
        self.embedding = nn.Embedding(VOCAB, D, padding_idx=PAD)
        self.pe = SinusoidalPositionalEncoding(D, MAX_LEN)
        self.layers = nn.ModuleList(EncoderLayer(D, HEADS, 2 * D) for _ in range(2))

    def forward(self, x, mask=None):
        h = self.embedding(x) * math.sqrt(D)  # BUG: self.pe(self.embedding(x) * math.sqrt(D))
        keep = None if mask is None else mask.bool()[:, None, None, :]
        for layer in self.layers:
            h = layer(h, keep)
        return h


class LMWithoutPositions(TransformerLM):
    """The reference LM with its positional encoding removed: a position-free (NoPE) causal decoder. Not a
    failure — the causal mask lets a decoder infer positions — but worth a warning."""

    __tfcheck__ = {**TransformerLM.__tfcheck__}

    def __init__(self):
        super().__init__()
        self.pos = nn.Identity()


class TokenTransformerWithoutMemoryMask(nn.Module):
    """A seq2seq model around nn.Transformer(batch_first=True) that builds the source padding mask from
    pad_id and passes it as src_key_padding_mask only: without memory_key_padding_mask, cross-attention
    attends to the padded memory positions."""

    def __init__(self):
        super().__init__()
        self.__tfcheck__ = {"kind": "seq2seq", "mask": "internal", "pad_id": PAD}
        self.src_embed = nn.Embedding(VOCAB, D, padding_idx=PAD)
        self.tgt_embed = nn.Embedding(VOCAB, D, padding_idx=PAD)
        self.pos = SinusoidalPositionalEncoding(D, MAX_LEN)
        # Nested tensors off: tfcheck's module tracker cannot yet describe them (explainer.shape_of).
        layer = nn.TransformerEncoderLayer(D, HEADS, 2 * D, dropout=0.0, batch_first=True)
        encoder = nn.TransformerEncoder(layer, 2, nn.LayerNorm(D), enable_nested_tensor=False)
        self.transformer = nn.Transformer(D, HEADS, 2, 2, 2 * D, dropout=0.0, batch_first=True, custom_encoder=encoder)
        self.head = nn.Linear(D, VOCAB)

    def forward(self, src, tgt):
        src_pad = src == PAD  # (b, s), True = padding (torch convention)
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.size(1), device=tgt.device)
        out = self.transformer(self.pos(self.src_embed(src)), self.pos(self.tgt_embed(tgt)), tgt_mask=causal,
                               tgt_is_causal=True, src_key_padding_mask=src_pad)  # BUG: memory_key_padding_mask=src_pad
        return self.head(out)


class _Decoder(nn.Module):
    def __init__(self, reads_memory: bool):
        super().__init__()
        self.reads_memory = reads_memory
        self.self_attn = nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)

    def forward(self, x, memory, memory_pad):
        t = x.size(1)
        future = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1)
        x = self.ln1(x + self.self_attn(x, x, x, attn_mask=future, need_weights=False)[0])
        if self.reads_memory:
            h = self.cross_attn(x, memory, memory, key_padding_mask=memory_pad, need_weights=False)[0]
        else:  # BUG: the query's own states as key and value
            h = self.cross_attn(x, x, x, need_weights=False)[0]
        return self.ln2(x + h)


class HFStyleSeq2SeqCrossAttendsToItself(nn.Module):
    """An HF-like seq2seq model, forward(input_ids, attention_mask, decoder_input_ids), whose FIRST decoder
    layer's cross-attention is given the decoder's own states: that layer never reads the source."""

    def __init__(self):
        super().__init__()
        self.__tfcheck__ = {"kind": "seq2seq", "pad_id": PAD}
        self.shared = nn.Embedding(VOCAB, D, padding_idx=PAD)
        self.pos = SinusoidalPositionalEncoding(D, MAX_LEN)
        layer = nn.TransformerEncoderLayer(D, HEADS, 2 * D, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.decoder = nn.ModuleList([_Decoder(reads_memory=False), _Decoder(reads_memory=True)])
        self.lm_head = nn.Linear(D, VOCAB)

    def forward(self, input_ids, attention_mask=None, decoder_input_ids=None):
        pad = None if attention_mask is None else attention_mask == 0
        memory = self.encoder(self.pos(self.shared(input_ids)), src_key_padding_mask=pad)
        x = self.pos(self.shared(decoder_input_ids))
        for layer in self.decoder:
            x = layer(x, memory, pad)
        return self.lm_head(x)
