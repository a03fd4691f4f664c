"""Factories for the corpus models whose natural constructor takes a layer stack or a config object: each
calls the constructor as the package's README shows it, at tiny sizes. No third-party code is copied here."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, MAX_LEN, DIM = 97, 64, 32


def x_decoder():
    from x_transformers import Decoder, TransformerWrapper

    return TransformerWrapper(num_tokens=VOCAB, max_seq_len=MAX_LEN,
                              attn_layers=Decoder(dim=DIM, depth=2, heads=4, attn_dim_head=8, rotary_pos_emb=True))


def x_encoder():
    from x_transformers import Encoder, TransformerWrapper

    return TransformerWrapper(num_tokens=VOCAB, max_seq_len=MAX_LEN,
                              attn_layers=Encoder(dim=DIM, depth=2, heads=4, attn_dim_head=8, ff_glu=True))


def perceiver_lm():
    from perceiver_pytorch import PerceiverLM

    return PerceiverLM(num_tokens=VOCAB, dim=DIM, depth=2, max_seq_len=MAX_LEN, num_latents=16, latent_dim=DIM,
                       cross_heads=1, latent_heads=4, cross_dim_head=8, latent_dim_head=8)


class RotaryBlock(nn.Module):
    """rotary-embedding-torch is a positional layer, not a model: its README's use (rotate q and k before the
    dot product), in the smallest pre-LN causal block around it."""

    def __init__(self, rotary: nn.Module, heads: int = 4):
        super().__init__()
        self.rotary, self.heads, self.causal = rotary, heads, True
        self.norm1, self.qkv, self.out = nn.LayerNorm(DIM), nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.norm2 = nn.LayerNorm(DIM)
        self.ff = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in self.qkv(self.norm1(x)).chunk(3, dim=-1))
        q, k = self.rotary.rotate_queries_or_keys(q), self.rotary.rotate_queries_or_keys(k)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        x = x + self.out(attended.transpose(1, 2).reshape(b, n, DIM))
        return x + self.ff(self.norm2(x))


def rotary_decoder():
    from rotary_embedding_torch import RotaryEmbedding

    # cache_if_possible=False: the cached frequencies sit in a buffer and their length in a plain int, which
    # the state guard of tfcheck 0.x does not put back together (reported on issue 15: a stale cache, false alarms)
    blocks = [RotaryBlock(RotaryEmbedding(dim=DIM // 4 // 2, cache_if_possible=False)) for _ in range(2)]
    return nn.Sequential(nn.Embedding(VOCAB, DIM), *blocks, nn.LayerNorm(DIM), nn.Linear(DIM, VOCAB))
