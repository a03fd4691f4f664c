"""Models that return their logits flattened for the loss, (batch·length, vocab), as F.cross_entropy takes them.
Two naming styles (nanoGPT-like ``logits.view(-1, logits.size(-1))``; a tutorial encoder's
``out.reshape(b * t, -1)`` with its own padding mask), each with one defect injected by a subclass; a seq-first
model (torch.nn.TransformerEncoder, batch_first=False: (length, batch) rows); and two whose rows are not
batch × length (the last position dropped, only the real tokens kept)."""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from frontdoor_out_head import EncoderDecoder
from frontdoor_out_parts import Block, LeakyBlock


class FlatLogitsGPT(nn.Module):
    """A causal LM whose forward returns logits.view(-1, vocab_size)."""

    block = Block

    def __init__(self, vocab_size=101, n_embd=32, n_head=4, n_layer=2, block_size=64):
        super().__init__()
        torch.manual_seed(0)
        self.wte, self.wpe = nn.Embedding(vocab_size, n_embd), nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(self.block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)

    def features(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for block in self.h:
            x = block(x, future_blocked=True)
        return self.ln_f(x)

    def forward(self, idx):
        logits = self.lm_head(self.features(idx))
        return logits.view(-1, logits.size(-1))

    @torch.no_grad()
    def generate(self, idx, max_new_tokens):
        for _ in range(max_new_tokens):
            step = self(idx).view(idx.size(0), idx.size(1), -1)[:, -1]
            idx = torch.cat([idx, step.argmax(-1, keepdim=True)], dim=1)
        return idx


class LeakyFlatLogitsGPT(FlatLogitsGPT):
    """The look-ahead mask is dropped: mask.causal must catch it through the flattened rows."""

    block = LeakyBlock


class SinusoidalPositions(nn.Module):
    def __init__(self, dim, max_len=64):
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        div = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
        table = torch.zeros(1, max_len, dim)
        table[0, :, 0::2], table[0, :, 1::2] = torch.sin(position * div), torch.cos(position * div)
        self.register_buffer("table", table)

    def forward(self, x):
        return x + self.table[:, : x.size(1)]


class PaddedTagger(nn.Module):
    """A bidirectional token model that takes torch's key_padding_mask (True = padding) and returns
    out.reshape(b * t, -1)."""

    masks_padding = True

    def __init__(self, n_tokens=101, dim=32, heads=2, layers=1, pad_idx=0):
        super().__init__()
        torch.manual_seed(0)
        self.pad_idx = pad_idx
        self.embed = nn.Embedding(n_tokens, dim, padding_idx=pad_idx)
        self.positions = SinusoidalPositions(dim)
        self.layers = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, n_tokens)

    def forward(self, tokens, key_padding_mask=None):
        b, t = tokens.shape
        keep = ~key_padding_mask if self.masks_padding and key_padding_mask is not None else None
        x = self.positions(self.embed(tokens))
        for layer in self.layers:
            x = layer(x, keep=keep)
        return self.out(self.norm(x)).reshape(b * t, -1)


class UnmaskedPaddedTagger(PaddedTagger):
    """The padding mask is never applied: mask.padding must catch it through the flattened rows."""

    masks_padding = False


class SeqFirstLM(nn.Module):
    """PyTorch's word_language_model style: (length, batch) in, nn.TransformerEncoder with batch_first=False,
    a causal mask built in forward, and the logits flattened seq-first: output.view(-1, ntoken)."""

    def __init__(self, ntoken=101, ninp=32, nhead=2, nhid=64, nlayers=1):
        super().__init__()
        torch.manual_seed(0)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.pos = nn.Parameter(torch.randn(64, 1, ninp) * 0.02)
        layer = nn.TransformerEncoderLayer(ninp, nhead, nhid, dropout=0.0)
        self.transformer_encoder = nn.TransformerEncoder(layer, nlayers, enable_nested_tensor=False)
        self.decoder = nn.Linear(ninp, ntoken)

    def forward(self, src):
        t = src.size(0)
        mask = torch.triu(torch.full((t, t), float("-inf"), device=src.device), diagonal=1)
        x = self.encoder(src) + self.pos[:t]
        output = self.decoder(self.transformer_encoder(x, mask=mask))
        return output.view(-1, self.decoder.out_features)

    @torch.no_grad()
    def generate(self, src, steps):
        for _ in range(steps):
            last = self(src).view(src.size(0), src.size(1), -1)[-1]
            src = torch.cat([src, last.argmax(-1)[None]], dim=0)
        return src


class LastDroppedLM(FlatLogitsGPT):
    """Returns the logits of every position but the last, flattened: (batch·(length - 1), vocab) rows."""

    def forward(self, idx):
        logits = self.lm_head(self.features(idx))[:, :-1]
        return logits.reshape(-1, logits.size(-1))


class RealTokensTagger(PaddedTagger):
    """Returns the rows of the real tokens only: out[tokens != pad_idx], fewer rows than batch × length once a
    batch is padded."""

    def forward(self, tokens, key_padding_mask=None):
        keep = tokens != self.pad_idx if key_padding_mask is None else ~key_padding_mask
        x = self.positions(self.embed(tokens))
        for layer in self.layers:
            x = layer(x, keep=keep)
        return self.out(self.norm(x))[keep]


class FlatEncoderDecoder(EncoderDecoder):
    """The Annotated-style seq2seq model with its generator applied in forward and the log-probabilities
    flattened for the loss: (batch·target length, vocab) rows."""

    def forward(self, src, tgt, src_mask, tgt_mask):
        out = self.generator(self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask))
        return out.view(-1, out.size(-1))


class LastDroppedEncoderDecoder(EncoderDecoder):
    """Drops the last target position before flattening: rows that are not batch × target length."""

    def forward(self, src, tgt, src_mask, tgt_mask):
        out = self.generator(self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask))[:, :-1]
        return out.reshape(-1, out.size(-1))
