"""Seq2seq Transformers that build every mask inside forward from their pad ids, written for tfcheck's
front-door tests (no declaration; small constructor defaults; source and target pad ids differ):

- PadIdSeq2Seq: attention-is-all-you-need-pytorch's style, forward(src_seq, trg_seq), get_pad_mask(seq, pad)
  (b, 1, s) and get_subsequent_mask from torch.triu(ones, diagonal=1), masked_fill(mask == 0, -1e9).
- PadIdxTransformer: hyunwoongko/transformer's style, forward(src, trg), make_src_mask (b, 1, 1, s) and
  make_trg_mask = pad mask & torch.tril(ones(t, t)), its pad ids as src_pad_idx / trg_pad_idx attributes.
The variants carry one defect each, named in their docstring.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn


def sinusoid_table(n_position: int, d: int) -> torch.Tensor:
    position = torch.arange(n_position, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    table = torch.zeros(n_position, d)
    table[:, 0::2], table[:, 1::2] = torch.sin(position * div), torch.cos(position * div)
    return table


class Attention(nn.Module):
    """Multi-head attention with the tutorials' masked_fill(mask == 0, -1e9); the mask arrives with the heads
    axis missing (jadore) or present (hyunwoongko): ``heads_axis`` says whether to add it."""

    def __init__(self, d_model: int, n_head: int, heads_axis: bool):
        super().__init__()
        self.n_head, self.d_k, self.heads_axis = n_head, d_model // n_head, heads_axis
        self.w_q, self.w_k, self.w_v = (nn.Linear(d_model, d_model) for _ in range(3))
        self.fc = nn.Linear(d_model, d_model)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, q, k, v, mask=None):
        b, lq, lk = q.size(0), q.size(1), k.size(1)
        residual = q
        q = self.w_q(q).view(b, lq, self.n_head, self.d_k).transpose(1, 2)
        k = self.w_k(k).view(b, lk, self.n_head, self.d_k).transpose(1, 2)
        v = self.w_v(v).view(b, lk, self.n_head, self.d_k).transpose(1, 2)
        attn = q @ k.transpose(2, 3) / math.sqrt(self.d_k)
        if mask is not None:
            attn = attn.masked_fill((mask.unsqueeze(1) if self.heads_axis else mask) == 0, -1e9)
        out = (attn.softmax(dim=-1) @ v).transpose(1, 2).contiguous().view(b, lq, -1)
        return self.norm(self.fc(out) + residual)


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_inner: int):
        super().__init__()
        self.w_1, self.w_2, self.norm = nn.Linear(d_model, d_inner), nn.Linear(d_inner, d_model), nn.LayerNorm(d_model)

    def forward(self, x):
        return self.norm(self.w_2(torch.relu(self.w_1(x))) + x)


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_head, d_inner, heads_axis):
        super().__init__()
        self.slf_attn, self.pos_ffn = Attention(d_model, n_head, heads_axis), FeedForward(d_model, d_inner)

    def forward(self, x, mask):
        return self.pos_ffn(self.slf_attn(x, x, x, mask))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, n_head, d_inner, heads_axis):
        super().__init__()
        self.slf_attn = Attention(d_model, n_head, heads_axis)
        self.enc_attn = Attention(d_model, n_head, heads_axis)
        self.pos_ffn = FeedForward(d_model, d_inner)

    def forward(self, x, memory, self_mask, memory_mask):
        x = self.slf_attn(x, x, x, self_mask)
        return self.pos_ffn(self.enc_attn(x, memory, memory, memory_mask))


# ----- attention-is-all-you-need-pytorch's style ---------------------------------------------------------

def get_pad_mask(seq, pad_idx):
    return (seq != pad_idx).unsqueeze(-2)  # (b, 1, s)


def get_subsequent_mask(seq):
    len_s = seq.size(1)
    return (1 - torch.triu(torch.ones((1, len_s, len_s), device=seq.device), diagonal=1)).bool()


class PadIdSeq2Seq(nn.Module):
    def __init__(self, n_src_vocab=101, n_trg_vocab=101, src_pad_idx=1, trg_pad_idx=2, d_word_vec=32, d_model=32,
                 d_inner=64, n_layers=1, n_head=2, dropout=0.0, n_position=64):
        super().__init__()
        self.src_pad_idx, self.trg_pad_idx, self.d_model = src_pad_idx, trg_pad_idx, d_model
        self.src_word_emb = nn.Embedding(n_src_vocab, d_word_vec, padding_idx=src_pad_idx)
        self.trg_word_emb = nn.Embedding(n_trg_vocab, d_word_vec, padding_idx=trg_pad_idx)
        self.register_buffer("pos_table", sinusoid_table(n_position, d_word_vec).unsqueeze(0))
        self.dropout = nn.Dropout(dropout)
        self.encoder = nn.ModuleList(EncoderLayer(d_model, n_head, d_inner, True) for _ in range(n_layers))
        self.decoder = nn.ModuleList(DecoderLayer(d_model, n_head, d_inner, True) for _ in range(n_layers))
        self.trg_word_prj = nn.Linear(d_model, n_trg_vocab, bias=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def embed(self, emb, seq):
        return self.dropout(emb(seq) + self.pos_table[:, :seq.size(1)])

    def masks(self, src_seq, trg_seq):
        return get_pad_mask(src_seq, self.src_pad_idx), \
            get_pad_mask(trg_seq, self.trg_pad_idx) & get_subsequent_mask(trg_seq)

    def memory_mask(self, src_mask):
        return src_mask

    def encoder_mask(self, src_seq, src_mask):
        return src_mask

    def forward(self, src_seq, trg_seq):
        src_mask, trg_mask = self.masks(src_seq, trg_seq)
        memory = self.embed(self.src_word_emb, src_seq)
        for layer in self.encoder:
            memory = layer(memory, self.encoder_mask(src_seq, src_mask))
        x = self.embed(self.trg_word_emb, trg_seq)
        for layer in self.decoder:
            x = layer(x, memory, trg_mask, self.memory_mask(src_mask))
        return self.trg_word_prj(x)


class PadIdSeq2SeqPadMaskOnQueries(PadIdSeq2Seq):
    """The encoder's pad mask is laid out (b, s, 1): it masks the pads' query rows, never the padded keys.
    Fix: get_pad_mask(src_seq, pad), (b, 1, s)."""

    def encoder_mask(self, src_seq, src_mask):
        return (src_seq != self.src_pad_idx).unsqueeze(-1)


class PadIdSeq2SeqCrossAttentionUnmasked(PadIdSeq2Seq):
    """Cross-attention gets no source pad mask: the decoder attends to padded memory. Fix: pass src_mask."""

    def memory_mask(self, src_mask):
        return None


# ----- hyunwoongko/transformer's style -------------------------------------------------------------------

class PadIdxTransformer(nn.Module):
    def __init__(self, src_pad_idx=1, trg_pad_idx=0, trg_sos_idx=2, enc_voc_size=101, dec_voc_size=101, d_model=32,
                 n_head=2, max_len=64, ffn_hidden=64, n_layers=1, drop_prob=0.0, device="cpu"):
        super().__init__()
        self.src_pad_idx, self.trg_pad_idx, self.trg_sos_idx = src_pad_idx, trg_pad_idx, trg_sos_idx
        self.device = device
        self.enc_emb = nn.Embedding(enc_voc_size, d_model, padding_idx=1)
        self.dec_emb = nn.Embedding(dec_voc_size, d_model, padding_idx=1)
        self.register_buffer("encoding", sinusoid_table(max_len, d_model))
        self.enc_layers = nn.ModuleList(EncoderLayer(d_model, n_head, ffn_hidden, False) for _ in range(n_layers))
        self.dec_layers = nn.ModuleList(DecoderLayer(d_model, n_head, ffn_hidden, False) for _ in range(n_layers))
        self.linear = nn.Linear(d_model, dec_voc_size)
        self.drop = nn.Dropout(drop_prob)

    def embedding(self, emb, x):
        return self.drop(emb(x) + self.encoding[:x.size(1), :])

    def make_src_mask(self, src):
        return (src != self.src_pad_idx).unsqueeze(1).unsqueeze(2)  # (b, 1, 1, s)

    def make_trg_mask(self, trg):
        trg_pad_mask = (trg != self.trg_pad_idx).unsqueeze(1).unsqueeze(3)  # (b, 1, t, 1)
        trg_len = trg.shape[1]
        trg_sub_mask = torch.tril(torch.ones(trg_len, trg_len)).type(torch.ByteTensor).to(self.device)
        return trg_pad_mask & trg_sub_mask

    def make_enc_mask(self, src):
        return self.make_src_mask(src)

    def forward(self, src, trg):
        src_mask = self.make_src_mask(src)
        trg_mask = self.make_trg_mask(trg)
        enc_src = self.embedding(self.enc_emb, src)
        for layer in self.enc_layers:
            enc_src = layer(enc_src, self.make_enc_mask(src))
        x = self.embedding(self.dec_emb, trg)
        for layer in self.dec_layers:
            x = layer(x, enc_src, trg_mask, src_mask)
        return self.linear(x)


class PadIdxTransformerWithoutSubsequentMask(PadIdxTransformer):
    """The target mask keeps only the pads: the decoder sees the future. Fix: & torch.tril(ones(t, t))."""

    def make_trg_mask(self, trg):
        return (trg != self.trg_pad_idx).unsqueeze(1).unsqueeze(3)


class PadIdxTransformerPadMaskOnQueries(PadIdxTransformer):
    """The encoder's pad mask is laid out (b, 1, s, 1): the pads' query rows are masked, the padded keys are
    not. Fix: make_src_mask(src), .unsqueeze(1).unsqueeze(2)."""

    def make_enc_mask(self, src):
        return (src != self.src_pad_idx).unsqueeze(1).unsqueeze(3)
