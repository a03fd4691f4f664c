"""Encoder in the style of graph-transformer / "relation-aware" code that attends along a given relation.

Kept: ``RelationAwareEncoder(vocab_size=32000, d_model=256, n_heads=8, n_layers=4, d_ff=1024, max_len=512,
dropout=0.1)`` with ``forward(tokens, mask)`` where ``mask`` is a REQUIRED (b, s, s) bool relation /
adjacency matrix, True where token i may attend to token j (self-loops included by the caller), broadcast over
heads and applied as ``scores.masked_fill(~mask.unsqueeze(1), torch.finfo(scores.dtype).min)``; a fused ``qkv``
projection split with ``chunk(3, dim=-1)``; learned positions; pre-LN blocks with a final LayerNorm; returns the hidden
states (b, s, d_model). Nodes are the tokens of a sequence (an AST or a schema linearised), so the model keeps
a positional signal.
"""
import math

import torch
import torch.nn as nn


class RelationAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.attn_drop = nn.Dropout(dropout)

    def forward(self, x, mask):
        b, s, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.view(b, s, self.n_heads, self.d_head).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)  # (b, h, s, s)
        scores = scores.masked_fill(~mask.unsqueeze(1), torch.finfo(scores.dtype).min)  # (b, s, s) -> (b, 1, s, s)
        attn = self.attn_drop(scores.softmax(dim=-1))
        out = (attn @ v).transpose(1, 2).reshape(b, s, d)
        return self.proj(out)


class RelationBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = RelationAttention(d_model, n_heads, dropout)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model), nn.Dropout(dropout))

    def forward(self, x, mask):
        x = x + self.attn(self.ln1(x), mask)
        return x + self.mlp(self.ln2(x))


class RelationAwareEncoder(nn.Module):
    def __init__(self, vocab_size=32000, d_model=256, n_heads=8, n_layers=4, d_ff=1024, max_len=512, dropout=0.1):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([RelationBlock(d_model, n_heads, d_ff, dropout) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model)

    def forward(self, tokens, mask):
        """tokens: (b, s) ids; mask: (b, s, s) bool, mask[b, i, j] = token i may attend to token j."""
        positions = torch.arange(tokens.size(1), device=tokens.device)
        x = self.drop(self.tok_emb(tokens) + self.pos_emb(positions))
        for block in self.blocks:
            x = block(x, mask)
        return self.ln_f(x)


class BuggyRelationAttention(RelationAttention):
    def forward(self, x, mask):
        b, s, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.view(b, s, self.n_heads, self.d_head).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)  # (b, h, s, s)
        scores = scores.masked_fill(~mask.unsqueeze(1), torch.finfo(scores.dtype).min)  # (b, s, s) -> (b, 1, s, s)
        attn = self.attn_drop(scores.softmax(dim=-1))
        out = (attn @ v).reshape(b, s, d)  # injected bug: heads merged without transpose(1, 2)
        return self.proj(out)


class BuggyRelationAwareEncoder(RelationAwareEncoder):
    def __init__(self, vocab_size=32000, d_model=256, n_heads=8, n_layers=4, d_ff=1024, max_len=512, dropout=0.1):
        super().__init__(vocab_size, d_model, n_heads, n_layers, d_ff, max_len, dropout)
        for block in self.blocks:
            block.attn.__class__ = BuggyRelationAttention
