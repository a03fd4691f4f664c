"""Seq2seq Transformers whose caller builds the look-ahead mask and passes it as an optional argument, written
for tfcheck's front-door tests (no declaration, small constructor defaults):

- CallerMaskedSeq2Seq: the Annotated Transformer's style, forward(src, tgt, src_mask=None, tgt_mask=None), a keep
  mask read as masked_fill(mask == 0, -1e9) after mask.unsqueeze(1) adds the heads axis.
- LookAheadSeq2Seq: the TensorFlow tutorial's style ported to PyTorch, forward(enc_inp, dec_inp,
  enc_padding_mask=None, look_ahead_mask=None, dec_padding_mask=None), masks with 1 = blocked added as
  logits += mask * -1e9.
The variants carry one defect each, named in their docstring.
"""
from __future__ import annotations

import copy
import math

import torch
import torch.nn as nn


def attention(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    return scores.softmax(dim=-1) @ value


class MultiHeadedAttention(nn.Module):
    def __init__(self, h, d_model):
        super().__init__()
        self.d_k, self.h = d_model // h, h
        self.linears = nn.ModuleList(copy.deepcopy(nn.Linear(d_model, d_model)) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            mask = mask.unsqueeze(1)  # the same mask for every head
        b = query.size(0)
        query, key, value = (lin(x).view(b, -1, self.h, self.d_k).transpose(1, 2)
                             for lin, x in zip(self.linears, (query, key, value)))
        x = attention(query, key, value, mask).transpose(1, 2).contiguous().view(b, -1, self.h * self.d_k)
        return self.linears[-1](x)


class Sublayer(nn.Module):
    """Pre-norm residual: x + sublayer(norm(x))."""

    def __init__(self, size):
        super().__init__()
        self.norm = nn.LayerNorm(size)

    def forward(self, x, sublayer):
        return x + sublayer(self.norm(x))


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, h, d_ff):
        super().__init__()
        self.self_attn, self.ff = MultiHeadedAttention(h, d_model), FeedForward(d_model, d_ff)
        self.sub = nn.ModuleList(Sublayer(d_model) for _ in range(2))

    def forward(self, x, mask):
        x = self.sub[0](x, lambda y: self.self_attn(y, y, y, mask))
        return self.sub[1](x, self.ff)


class DecoderLayer(nn.Module):
    def __init__(self, d_model, h, d_ff):
        super().__init__()
        self.self_attn, self.src_attn = MultiHeadedAttention(h, d_model), MultiHeadedAttention(h, d_model)
        self.ff = FeedForward(d_model, d_ff)
        self.sub = nn.ModuleList(Sublayer(d_model) for _ in range(3))

    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.sub[0](x, lambda y: self.self_attn(y, y, y, tgt_mask))
        x = self.sub[1](x, lambda y: self.src_attn(y, memory, memory, src_mask))
        return self.sub[2](x, self.ff)


class Embeddings(nn.Module):
    def __init__(self, d_model, vocab, max_len=64):
        super().__init__()
        self.lut, self.d_model = nn.Embedding(vocab, d_model), d_model
        position = torch.arange(max_len).unsqueeze(1)
        div = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div), torch.cos(position * div)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x):
        return self.lut(x) * math.sqrt(self.d_model) + self.pe[:, : x.size(1)]


class CallerMaskedSeq2Seq(nn.Module):
    def __init__(self, src_vocab=101, tgt_vocab=101, N=1, d_model=32, d_ff=64, h=2, dropout=0.0):
        super().__init__()
        self.src_embed, self.tgt_embed = Embeddings(d_model, src_vocab), Embeddings(d_model, tgt_vocab)
        self.encoder = nn.ModuleList(EncoderLayer(d_model, h, d_ff) for _ in range(N))
        self.decoder = nn.ModuleList(DecoderLayer(d_model, h, d_ff) for _ in range(N))
        self.enc_norm, self.dec_norm = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.generator = nn.Linear(d_model, tgt_vocab)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        for emb in (self.src_embed.lut, self.tgt_embed.lut):
            nn.init.normal_(emb.weight, std=d_model ** -0.5)

    def encode(self, src, src_mask):
        x = self.src_embed(src)
        for layer in self.encoder:
            x = layer(x, src_mask)
        return self.enc_norm(x)

    def self_mask(self, tgt_mask):
        return tgt_mask

    def decode(self, memory, src_mask, tgt, tgt_mask):
        x = self.tgt_embed(tgt)
        for layer in self.decoder:
            x = layer(x, memory, src_mask, self.self_mask(tgt_mask))
        return self.dec_norm(x)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.generator(self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask))


class CallerMaskedSeq2SeqIgnoresTgtMask(CallerMaskedSeq2Seq):
    """The decoder's self-attention never gets tgt_mask: it sees the future. Fix: pass tgt_mask to it."""

    def self_mask(self, tgt_mask):
        return None


# ----- the TensorFlow tutorial's style -------------------------------------------------------------------

class TFStyleAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads, self.depth = num_heads, d_model // num_heads
        self.wq, self.wk, self.wv, self.dense = (nn.Linear(d_model, d_model) for _ in range(4))

    def split_heads(self, x):
        return x.view(x.size(0), -1, self.num_heads, self.depth).transpose(1, 2)

    def forward(self, v, k, q, mask):
        q, k, v = self.split_heads(self.wq(q)), self.split_heads(self.wk(k)), self.split_heads(self.wv(v))
        logits = q @ k.transpose(-2, -1) / math.sqrt(self.depth)
        if mask is not None:
            logits += mask * -1e9
        out = (logits.softmax(dim=-1) @ v).transpose(1, 2).reshape(q.size(0), -1, self.num_heads * self.depth)
        return self.dense(out)


class TFStyleDecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, dff):
        super().__init__()
        self.mha1, self.mha2 = TFStyleAttention(d_model, num_heads), TFStyleAttention(d_model, num_heads)
        self.ffn = FeedForward(d_model, dff)
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3))

    def forward(self, x, enc_output, look_ahead_mask, padding_mask):
        x = self.norms[0](x + self.mha1(x, x, x, look_ahead_mask))
        x = self.norms[1](x + self.mha2(enc_output, enc_output, x, padding_mask))
        return self.norms[2](x + self.ffn(x))


class TFStyleEncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, dff):
        super().__init__()
        self.mha, self.ffn = TFStyleAttention(d_model, num_heads), FeedForward(d_model, dff)
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(2))

    def forward(self, x, mask):
        x = self.norms[0](x + self.mha(x, x, x, mask))
        return self.norms[1](x + self.ffn(x))


class LookAheadSeq2Seq(nn.Module):
    def __init__(self, num_layers=1, d_model=32, num_heads=2, dff=64, input_vocab_size=101, target_vocab_size=101,
                 pe_input=64, pe_target=64, rate=0.0):
        super().__init__()
        self.d_model = d_model
        self.enc_embedding = Embeddings(d_model, input_vocab_size, pe_input)
        self.dec_embedding = Embeddings(d_model, target_vocab_size, pe_target)
        nn.init.normal_(self.enc_embedding.lut.weight, std=d_model ** -0.5)
        nn.init.normal_(self.dec_embedding.lut.weight, std=d_model ** -0.5)
        self.enc_layers = nn.ModuleList(TFStyleEncoderLayer(d_model, num_heads, dff) for _ in range(num_layers))
        self.dec_layers = nn.ModuleList(TFStyleDecoderLayer(d_model, num_heads, dff) for _ in range(num_layers))
        self.final_layer = nn.Linear(d_model, target_vocab_size)

    def look_ahead(self, look_ahead_mask):
        return look_ahead_mask

    def forward(self, enc_inp, dec_inp, enc_padding_mask=None, look_ahead_mask=None, dec_padding_mask=None):
        x = self.enc_embedding(enc_inp)
        for layer in self.enc_layers:
            x = layer(x, enc_padding_mask)
        y = self.dec_embedding(dec_inp)
        for layer in self.dec_layers:
            y = layer(y, x, self.look_ahead(look_ahead_mask), dec_padding_mask)
        return self.final_layer(y)


class LookAheadSeq2SeqMaskShifted(LookAheadSeq2Seq):
    """The look-ahead mask is shifted one column right before use: each position also sees the next one.
    Fix: use look_ahead_mask as given (1 above the diagonal)."""

    def look_ahead(self, look_ahead_mask):
        if look_ahead_mask is None:
            return None
        shifted = torch.zeros_like(look_ahead_mask)
        shifted[..., 1:] = look_ahead_mask[..., :-1]
        return shifted


# ----- a decoder whose mask argument has a generic name ----------------------------------------------------

class ForgetfulDecoder(nn.Module):
    """A GPT-style decoder (it has generate()) with forward(x, mask=None) that builds no look-ahead mask when none
    is given: the generic name says nothing about who builds it, so tfcheck gives none and the leak shows."""

    def __init__(self, vocab_size=101, d_model=32, n_head=2, max_len=64):
        super().__init__()
        self.embed = Embeddings(d_model, vocab_size, max_len)
        self.block = EncoderLayer(d_model, n_head, 2 * d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, x, mask=None):
        return self.head(self.block(self.embed(x), mask))

    @torch.no_grad()
    def generate(self, idx, steps: int):
        for _ in range(steps):
            idx = torch.cat([idx, self(idx)[:, -1:].argmax(-1)], dim=1)
        return idx
