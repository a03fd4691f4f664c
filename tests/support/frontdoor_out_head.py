"""Models whose forward returns d_model-wide states and whose head is applied by the loss, outside forward.
The Annotated Transformer's EncoderDecoder (forward(src, tgt, src_mask, tgt_mask) returns the decoder's states;
``generator``, a module wrapping nn.Linear + log_softmax, is applied by the loss) and a decoder-only LM with a
bare nn.Linear ``lm_head`` that only its ``loss`` method applies; a generator that normalises over the sequence
axis; and a model with two heads forward never calls, where the head must be declared."""
from __future__ import annotations

import copy
import math

import torch
import torch.nn as nn
from torch.nn import functional as F

from frontdoor_out_parts import Block, LeakyBlock


class Generator(nn.Module):
    """The Annotated Transformer's generator: linear projection to the vocabulary, then log_softmax."""

    axis = -1

    def __init__(self, d_model, vocab):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab)

    def forward(self, x):
        return F.log_softmax(self.proj(x), dim=self.axis)


class SequenceAxisGenerator(Generator):
    axis = 1  # the defect: normalised over the target positions, so each output depends on later ones


class Embeddings(nn.Module):
    def __init__(self, d_model, vocab):
        super().__init__()
        self.lut, self.d_model = nn.Embedding(vocab, d_model), d_model

    def forward(self, x):
        return self.lut(x) * math.sqrt(self.d_model)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
        pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div_term), torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x):
        return x + self.pe[:, : x.size(1)].requires_grad_(False)


class EncoderDecoder(nn.Module):
    """forward(src, tgt, src_mask, tgt_mask) -> decode(encode(src, src_mask), src_mask, tgt, tgt_mask)."""

    generator_class = Generator

    def __init__(self, src_vocab=101, tgt_vocab=101, N=1, d_model=32, h=4):
        super().__init__()
        torch.manual_seed(0)
        self.src_embed = nn.Sequential(Embeddings(d_model, src_vocab), PositionalEncoding(d_model))
        self.tgt_embed = copy.deepcopy(self.src_embed)
        self.encoder = nn.ModuleList(Block(d_model, h) for _ in range(N))
        self.decoder = nn.ModuleList(Block(d_model, h, cross=True) for _ in range(N))
        self.enc_norm, self.dec_norm = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.generator = self.generator_class(d_model, tgt_vocab)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        with torch.no_grad():  # the tutorial's xavier init on a lookup: scaled back to unit variance for √d_model
            self.src_embed[0].lut.weight.mul_(d_model ** -0.5 / self.src_embed[0].lut.weight.std())
            self.tgt_embed[0].lut.weight.mul_(d_model ** -0.5 / self.tgt_embed[0].lut.weight.std())

    def forward(self, src, tgt, src_mask, tgt_mask):
        return self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask)

    def encode(self, src, src_mask):
        x = self.src_embed(src)
        for layer in self.encoder:
            x = layer(x, keep=src_mask)
        return self.enc_norm(x)

    def decode(self, memory, src_mask, tgt, tgt_mask):
        x = self.tgt_embed(tgt)
        for layer in self.decoder:
            x = layer(x, keep=tgt_mask, memory=memory, memory_keep=src_mask)
        return self.dec_norm(x)


class SequenceAxisEncoderDecoder(EncoderDecoder):
    """The generator's log_softmax runs over dim=1, the target positions: mask.causal must catch it."""

    generator_class = SequenceAxisGenerator


class StatesLM(nn.Module):
    """A decoder-only LM whose forward returns the final norm's states; ``loss`` applies the bare nn.Linear
    ``lm_head`` (as training loops that fuse the head into a chunked cross-entropy do)."""

    block = Block

    def __init__(self, vocab_size=101, dim=32, n_heads=2, n_layers=2, max_seq_len=64):
        super().__init__()
        torch.manual_seed(0)
        self.tok_embeddings = nn.Embedding(vocab_size, dim)
        self.pos_embeddings = nn.Embedding(max_seq_len, dim)
        self.layers = nn.ModuleList(self.block(dim, n_heads) for _ in range(n_layers))
        self.norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab_size, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens) + self.pos_embeddings(torch.arange(tokens.size(1), device=tokens.device))
        for layer in self.layers:
            h = layer(h, future_blocked=True)
        return self.norm(h)

    def loss(self, tokens, targets):
        logits = self.lm_head(self(tokens))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    @torch.no_grad()
    def generate(self, tokens, steps):
        for _ in range(steps):
            tokens = torch.cat([tokens, self.lm_head(self(tokens))[:, -1].argmax(-1, keepdim=True)], dim=1)
        return tokens


class LeakyStatesLM(StatesLM):
    """The look-ahead mask is dropped: mask.causal must catch it through the head."""

    block = LeakyBlock


class TwoHeadsLM(StatesLM):
    """Two modules forward never calls map the states to the vocabulary: a language-model head and a
    second one (a multi-token-prediction head); which one the loss applies is the user's to say."""

    def __init__(self):
        super().__init__()
        self.next_next_head = nn.Linear(32, 101, bias=False)
