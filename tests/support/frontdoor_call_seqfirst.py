"""Sequence-first word-level LMs (token ids (length, batch)), as the PyTorch examples write them, written for
tfcheck's front-door tests: no declaration, small constructor defaults. Each builds its own look-ahead mask from
the length on axis 0 and cuts a (max_len, 1, d) sinusoid table by x.size(0).

- WordLanguageModel: the word_language_model example's style, a subclass of nn.Transformer (ntoken, ninp,
  nhead, nhid, nlayers), forward(src, has_mask=True), its own _generate_square_subsequent_mask.
- TutorialSeqFirstLM: the "Language Modeling with nn.Transformer" tutorial's style, an nn.Module around
  nn.TransformerEncoder (batch_first=False), forward(src, src_mask=None) that builds the mask when none is given.
The variants carry one defect each, named in their docstring.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def init_uniform(embedding: nn.Embedding, head: nn.Linear, scale: float = 0.1) -> None:
    """The examples' init_weights: U(-0.1, 0.1) for the lookup and the head, a zero head bias."""
    nn.init.uniform_(embedding.weight, -scale, scale)
    nn.init.uniform_(head.weight, -scale, scale)
    nn.init.zeros_(head.bias)


class PositionalEncoding(nn.Module):
    """The sinusoid table as (max_len, 1, d_model), added as x + pe[:x.size(0)] to (length, batch, d)."""

    def __init__(self, d_model: int, dropout: float = 0.0, max_len: int = 64):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):  # (length, batch, d)
        return self.dropout(x + self.pe[: x.size(0)])


class WordLanguageModel(nn.Transformer):
    """nn.Transformer's encoder as a word LM; ``decoder`` is reassigned to the output projection, as the example
    does, so the torch decoder it was built with is not kept."""

    def __init__(self, ntoken=101, ninp=32, nhead=2, nhid=64, nlayers=1, dropout=0.0):
        super().__init__(d_model=ninp, nhead=nhead, dim_feedforward=nhid, num_encoder_layers=nlayers,
                         num_decoder_layers=1, dropout=dropout)
        self.src_mask = None
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.input_emb = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)
        self.encoder.enable_nested_tensor = False
        init_uniform(self.input_emb, self.decoder)

    def _generate_square_subsequent_mask(self, sz):
        return torch.log(torch.tril(torch.ones(sz, sz)))  # 0 on and below the diagonal, -inf above

    def forward(self, src, has_mask=True):  # src: (length, batch)
        if has_mask:
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                self.src_mask = self._generate_square_subsequent_mask(len(src)).to(src.device)
        else:
            self.src_mask = None
        x = self.pos_encoder(self.input_emb(src) * math.sqrt(self.ninp))
        return F.log_softmax(self.decoder(self.encoder(x, mask=self.src_mask)), dim=-1)


class TutorialSeqFirstLM(nn.Module):
    def __init__(self, vocab_size=101, d_model=32, nhead=2, d_hid=64, nlayers=2, dropout=0.0):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.pos_encoder = PositionalEncoding(d_model, dropout)
        layer = nn.TransformerEncoderLayer(d_model, nhead, d_hid, dropout)
        self.transformer_encoder = nn.TransformerEncoder(layer, nlayers, enable_nested_tensor=False)
        self.linear = nn.Linear(d_model, vocab_size)
        self.d_model = d_model
        init_uniform(self.embedding, self.linear)

    def causal(self, n: int, device) -> torch.Tensor:
        return nn.Transformer.generate_square_subsequent_mask(n, device=device)

    def forward(self, src, src_mask=None):  # src: (length, batch)
        if src_mask is None:
            src_mask = self.causal(len(src), src.device)
        x = self.pos_encoder(self.embedding(src) * math.sqrt(self.d_model))
        return self.linear(self.transformer_encoder(x, src_mask))


# ----- one defect each ----------------------------------------------------------------------------------

class WordLanguageModelMaskOffByOne(WordLanguageModel):
    """The look-ahead mask keeps one position above the diagonal: every token sees the next one.
    Fix: torch.tril(..., diagonal=0)."""

    def _generate_square_subsequent_mask(self, sz):
        return torch.log(torch.tril(torch.ones(sz, sz), diagonal=1))


class TutorialSeqFirstLMWithoutMask(TutorialSeqFirstLM):
    """The mask is built but never given to the encoder: it attends both ways. Fix: transformer_encoder(x, src_mask)."""

    def forward(self, src, src_mask=None):
        if src_mask is None:
            src_mask = self.causal(len(src), src.device)
        x = self.pos_encoder(self.embedding(src) * math.sqrt(self.d_model))
        return self.linear(self.transformer_encoder(x))
