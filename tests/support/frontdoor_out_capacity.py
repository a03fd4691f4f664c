"""Models whose position table holds 32 positions and that never store a max_len attribute: the capacity is
only in their constructor's default and in the table the forward indexes or slices. Two naming styles
(nanoGPT's block_size / wpe indexed by arange, minGPT's old pos_emb parameter sliced [:, :t] with a cached
triangular buffer), each with one defect injected by a subclass; and two models whose stated capacity their
table contradicts."""
from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn as nn
from torch.nn import functional as F

from frontdoor_out_parts import Block, LeakyBlock


class BlockGPT(nn.Module):
    """nanoGPT's naming: wte, wpe = nn.Embedding(block_size, n_embd) indexed by arange(t), lm_head."""

    block = Block

    def __init__(self, vocab_size=101, block_size=32, n_embd=32, n_head=4, n_layer=2):
        super().__init__()
        torch.manual_seed(0)
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(self.block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)

    def forward(self, idx):
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x, future_blocked=True)
        return self.lm_head(self.ln_f(x))

    @torch.no_grad()
    def generate(self, idx, max_new_tokens):
        for _ in range(max_new_tokens):
            logits = self(idx[:, -self.wpe.num_embeddings:])
            idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return idx


class LeakyBlockGPT(BlockGPT):
    """The look-ahead mask is dropped: mask.causal must catch it."""

    block = LeakyBlock


class _CachedMaskBlock(nn.Module):
    """minGPT's old CausalSelfAttention: a (1, 1, max_len, max_len) triangular buffer sliced [:, :, :T, :T]."""

    scaled = True

    def __init__(self, d_model, nhead, max_len):
        super().__init__()
        self.nhead = nhead
        self.key, self.query, self.value, self.proj = (nn.Linear(d_model, d_model) for _ in range(4))
        self.register_buffer("mask", torch.tril(torch.ones(max_len, max_len)).view(1, 1, max_len, max_len))
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def attend(self, x):
        B, T, C = x.size()
        k = self.key(x).view(B, T, self.nhead, C // self.nhead).transpose(1, 2)
        q = self.query(x).view(B, T, self.nhead, C // self.nhead).transpose(1, 2)
        v = self.value(x).view(B, T, self.nhead, C // self.nhead).transpose(1, 2)
        att = q @ k.transpose(-2, -1)
        if self.scaled:
            att = att * (1.0 / (k.size(-1) ** 0.5))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attend(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class _UnscaledCachedMaskBlock(_CachedMaskBlock):
    scaled = False


class TinyTransformerLM(nn.Module):
    """minGPT's old naming: tok_emb, pos_emb = nn.Parameter(1, max_len, d_model) sliced [:, :t, :], a head."""

    layer = _CachedMaskBlock

    def __init__(self, ntoken=101, d_model=32, nhead=2, num_layers=1, max_len=32):
        super().__init__()
        torch.manual_seed(0)
        self.tok_emb = nn.Embedding(ntoken, d_model)
        self.pos_emb = nn.Parameter(torch.randn(1, max_len, d_model) * 0.02)
        self.blocks = nn.Sequential(*[self.layer(d_model, nhead, max_len) for _ in range(num_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, ntoken)

    def forward(self, src):
        t = src.size(1)
        x = self.tok_emb(src) + self.pos_emb[:, :t, :]
        return self.head(self.ln_f(self.blocks(x)))

    @torch.no_grad()
    def generate(self, src, steps):
        for _ in range(steps):
            src = torch.cat([src, self(src[:, -self.pos_emb.size(1):])[:, -1].argmax(-1, keepdim=True)], 1)
        return src


class UnscaledTinyTransformerLM(TinyTransformerLM):
    """Attention scores are not divided by sqrt(d_head): numerics.attention_scale must catch it."""

    layer = _UnscaledCachedMaskBlock


class MisbuiltTable(BlockGPT):
    """States max_len = 48 (its constructor's default, kept as an attribute) but builds a 32-row table: a real
    defect, which shape.contract reports at length 48."""

    def __init__(self, vocab_size=101, max_len=48, n_embd=32):
        super().__init__(vocab_size, 32, n_embd)
        self.max_len = max_len


class ShortTableLM(TinyTransformerLM):
    """States its capacity in a config object (config.max_seq_len = 128) that the 32-row table contradicts."""

    def __init__(self):
        super().__init__()
        self.config = SimpleNamespace(max_seq_len=128, vocab_size=101)
