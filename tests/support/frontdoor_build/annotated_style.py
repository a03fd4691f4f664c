"""The Annotated Transformer's convention: make_model(src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8,
dropout=0.1) returns an EncoderDecoder whose forward(src, tgt, src_mask, tgt_mask) returns the decoder's states
(the caller applies model.generator); src_mask (b, 1, s), tgt_mask (b, t, t), keep masks."""
import copy
import math

import torch.nn as nn
from frontdoor_blocks import Block, leak, sinusoids


class Embeddings(nn.Module):
    def __init__(self, d_model, vocab):
        super().__init__()
        self.lut, self.d_model = nn.Embedding(vocab, d_model), d_model
        self.register_buffer("pe", sinusoids(5000, d_model))

    def forward(self, x):
        return self.lut(x) * math.sqrt(self.d_model) + self.pe[: x.size(1)]


class EncoderDecoder(nn.Module):
    def __init__(self, encoder, decoder, src_embed, tgt_embed, generator):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.src_embed, self.tgt_embed, self.generator = src_embed, tgt_embed, generator

    def encode(self, src, src_mask):
        x = self.src_embed(src)
        for layer in self.encoder:
            x = layer(x, src_mask.unsqueeze(1))
        return x

    def decode(self, memory, src_mask, tgt, tgt_mask):
        x = self.tgt_embed(tgt)
        for layer in self.decoder:
            x = layer(x, tgt_mask.unsqueeze(1), memory, src_mask.unsqueeze(1))
        return x

    def forward(self, src, tgt, src_mask, tgt_mask):
        return self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask)


def make_model(src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1):
    c = copy.deepcopy
    layer = Block(d_model, h, d_ff, dropout)
    model = EncoderDecoder(nn.ModuleList(c(layer) for _ in range(N)),
                           nn.ModuleList(c(Block(d_model, h, d_ff, dropout, cross=True, decoder_self=True))
                                         for _ in range(N)),
                           Embeddings(d_model, src_vocab), Embeddings(d_model, tgt_vocab),
                           nn.Linear(d_model, tgt_vocab))
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    return model


def make_leaky_model(src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1):
    return leak(make_model(src_vocab, tgt_vocab, N, d_model, d_ff, h, dropout))
