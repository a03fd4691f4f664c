"""Encoder-decoder in the style of Harvard NLP's "The Annotated Transformer".

Kept: ``make_model(src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1)`` (vocabs required);
``EncoderDecoder(encoder, decoder, src_embed, tgt_embed, generator).forward(src, tgt, src_mask, tgt_mask)`` takes
every mask from the caller and returns d_model-wide states (the generator is applied outside); ``src_mask =
(src != pad).unsqueeze(-2)`` (b, 1, s), ``tgt_mask`` (b, t, t) from ``subsequent_mask``: keep masks, given a heads
axis by ``mask.unsqueeze(1)``, applied by ``masked_fill(mask == 0, -1e9)``; own pre-norm LayerNorm, scaled
embeddings, sinusoidal buffer, xavier init. Changed: ``clones`` takes a factory; ``attention`` is a method.
"""
import math

import torch
import torch.nn as nn


def clones(make, N):
    return nn.ModuleList([make() for _ in range(N)])

def subsequent_mask(size):
    "Mask out subsequent positions: (1, size, size), True where attending is allowed."
    return torch.triu(torch.ones((1, size, size)), diagonal=1).type(torch.uint8) == 0

class LayerNorm(nn.Module):
    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.a_2, self.b_2, self.eps = nn.Parameter(torch.ones(features)), nn.Parameter(torch.zeros(features)), eps
    def forward(self, x):
        mean, std = x.mean(-1, keepdim=True), x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2

class SublayerConnection(nn.Module):
    def __init__(self, size, dropout):
        super().__init__()
        self.norm, self.dropout = LayerNorm(size), nn.Dropout(dropout)
    def forward(self, x, sublayer):
        return x + self.dropout(sublayer(self.norm(x)))

class MultiHeadedAttention(nn.Module):
    def __init__(self, h, d_model, dropout=0.1):
        super().__init__()
        self.d_k, self.h = d_model // h, h
        self.linears = clones(lambda: nn.Linear(d_model, d_model), 4)
        self.attn, self.dropout = None, nn.Dropout(p=dropout)
    def attention(self, query, key, value, mask=None):
        scores = query @ key.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        p_attn = self.dropout(scores.softmax(dim=-1))
        return torch.matmul(p_attn, value), p_attn
    def forward(self, query, key, value, mask=None):
        if mask is not None:
            mask = mask.unsqueeze(1)  # same mask applied to all h heads
        nbatches = query.size(0)
        query, key, value = [lin(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
                             for lin, x in zip(self.linears, (query, key, value))]
        x, self.attn = self.attention(query, key, value, mask=mask)
        x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        return self.linears[-1](x)

class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1, self.w_2, self.dropout = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model), nn.Dropout(dropout)
    def forward(self, x):
        return self.w_2(self.dropout(self.w_1(x).relu()))

class EncoderLayer(nn.Module):
    def __init__(self, size, self_attn, feed_forward, dropout):
        super().__init__()
        self.self_attn, self.feed_forward, self.size = self_attn, feed_forward, size
        self.sublayer = clones(lambda: SublayerConnection(size, dropout), 2)
    def forward(self, x, mask):
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, mask))
        return self.sublayer[1](x, self.feed_forward)

class DecoderLayer(nn.Module):
    def __init__(self, size, self_attn, src_attn, feed_forward, dropout):
        super().__init__()
        self.size, self.self_attn, self.src_attn, self.feed_forward = size, self_attn, src_attn, feed_forward
        self.sublayer = clones(lambda: SublayerConnection(size, dropout), 3)
    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, tgt_mask))
        x = self.sublayer[1](x, lambda x: self.src_attn(x, memory, memory, src_mask))
        return self.sublayer[2](x, self.feed_forward)

class Encoder(nn.Module):
    def __init__(self, make_layer, N):
        super().__init__()
        self.layers = clones(make_layer, N)
        self.norm = LayerNorm(self.layers[0].size)
    def forward(self, x, mask):
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)

class Decoder(Encoder):
    def forward(self, x, memory, src_mask, tgt_mask):
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return self.norm(x)

class Embeddings(nn.Module):
    def __init__(self, d_model, vocab):
        super().__init__()
        self.lut, self.d_model = nn.Embedding(vocab, d_model), d_model
    def forward(self, x):
        return self.lut(x) * math.sqrt(self.d_model)

class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
        pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div_term), torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))
    def forward(self, x):
        return self.dropout(x + self.pe[:, : x.size(1)].requires_grad_(False))

class EncoderDecoder(nn.Module):
    def __init__(self, encoder, decoder, src_embed, tgt_embed, generator):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.src_embed, self.tgt_embed, self.generator = src_embed, tgt_embed, generator
    def forward(self, src, tgt, src_mask, tgt_mask):
        return self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask)
    def encode(self, src, src_mask):
        return self.encoder(self.src_embed(src), src_mask)
    def decode(self, memory, src_mask, tgt, tgt_mask):
        return self.decoder(self.tgt_embed(tgt), memory, src_mask, tgt_mask)

def make_model(src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1):
    def attn(): return MultiHeadedAttention(h, d_model)
    def ff(): return PositionwiseFeedForward(d_model, d_ff, dropout)
    model = EncoderDecoder(
        Encoder(lambda: EncoderLayer(d_model, attn(), ff(), dropout), N),
        Decoder(lambda: DecoderLayer(d_model, attn(), attn(), ff(), dropout), N),
        nn.Sequential(Embeddings(d_model, src_vocab), PositionalEncoding(d_model, dropout)),
        nn.Sequential(Embeddings(d_model, tgt_vocab), PositionalEncoding(d_model, dropout)),
        nn.Sequential(nn.Linear(d_model, tgt_vocab), nn.LogSoftmax(dim=-1)))  # the generator
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    return model

class BuggyMultiHeadedAttention(MultiHeadedAttention):
    def attention(self, query, key, value, mask=None):
        scores = query @ key.transpose(-2, -1) / math.sqrt(self.h * self.d_k)  # injected bug: sqrt(d_model)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        p_attn = self.dropout(scores.softmax(dim=-1))
        return torch.matmul(p_attn, value), p_attn

def BuggyMakeModel(src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1):
    model = make_model(src_vocab, tgt_vocab, N, d_model, d_ff, h, dropout)
    for module in model.modules():
        if type(module) is MultiHeadedAttention:
            module.__class__ = BuggyMultiHeadedAttention
    return model
