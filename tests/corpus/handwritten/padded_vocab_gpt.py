"""A GPT-NeoX-like decoder in the style of Lightning-AI's lit-gpt / litgpt ``model.py`` + ``config.py`` (the 2023
layout), with a Megatron-style block; a fresh, shortened rewrite.

Idioms kept: a plain ``@dataclass Config`` (no ``from_name`` needed) whose ``__post_init__`` pads ``vocab_size``
up to a multiple of ``padding_multiple`` into ``padded_vocab_size`` (50254 -> 50304, as for Pythia), so the
embedding and the ``lm_head`` are ``padded_vocab_size`` wide while the tokenizer's ids stay below
``vocab_size``; ``GPT(config)`` with ``transformer = ModuleDict(wte, h, ln_f)``; partial rotary embeddings
(``rotary_percentage``, ``rope_n_elem``) and a boolean ``tril`` mask, both built lazily on the first forward by
``build_rope_cache`` / ``build_mask_cache`` methods and kept as plain attributes; one fused ``attn`` Linear in
the NeoX (B, T, n_head, 3 * head_size) layout; SDPA with ``attn_mask=mask``; blocks that keep the residual in a
copy of their input (``residual = x.clone()`` ... ``x = residual + x``, as Megatron-LM writes it);
``forward(idx)`` returns logits (B, T, padded_vocab_size).

``BuggyGPT`` builds the boolean mask with ``triu`` instead of ``tril`` (the masked_fill convention carried over
to SDPA, where True means "may attend"): each position sees itself and the future, not the past.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


def find_multiple(n: int, k: int) -> int:
    if n % k == 0:
        return n
    return n + k - (n % k)


@dataclass
class Config:
    block_size: int = 2048
    vocab_size: int = 50254
    padding_multiple: int = 128
    padded_vocab_size: int | None = None
    n_layer: int = 24
    n_head: int = 16
    n_embd: int = 1024
    rotary_percentage: float = 0.25
    bias: bool = True
    norm_eps: float = 1e-5

    def __post_init__(self):
        assert self.n_embd % self.n_head == 0
        self.head_size = self.n_embd // self.n_head
        if self.padded_vocab_size is None:
            self.padded_vocab_size = find_multiple(self.vocab_size, self.padding_multiple)
        else:
            self.vocab_size = min(self.vocab_size, self.padded_vocab_size)
        self.rope_n_elem = int(self.rotary_percentage * self.head_size)


def build_rope_cache(seq_len: int, n_elem: int, device=None, base: int = 10000) -> tuple[torch.Tensor, torch.Tensor]:
    theta = 1.0 / (base ** (torch.arange(0, n_elem, 2, device=device).float() / n_elem))
    idx_theta = torch.outer(torch.arange(seq_len, device=device).float(), theta).repeat(1, 2)
    return torch.cos(idx_theta), torch.sin(idx_theta)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    head_size = x.size(-1)
    x1, x2 = x[..., : head_size // 2], x[..., head_size // 2:]
    rotated = torch.cat((-x2, x1), dim=-1)
    return (x * cos + rotated * sin).type_as(x)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)  # q, k, v for all heads
        self.proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.config = config

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor | None):
        B, T, C = x.size()
        hs, n_elem = self.config.head_size, self.config.rope_n_elem
        qkv = self.attn(x).view(B, T, self.config.n_head, 3 * hs).permute(0, 2, 1, 3)  # (B, nh, T, 3 * hs)
        q, k, v = qkv.split(hs, dim=-1)
        cos, sin = rope
        q = torch.cat((apply_rope(q[..., :n_elem], cos, sin), q[..., n_elem:]), dim=-1)
        k = torch.cat((apply_rope(k[..., :n_elem], cos, sin), k[..., n_elem:]), dim=-1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0,
                                           scale=1.0 / math.sqrt(hs), is_causal=mask is None)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.norm_1 = nn.LayerNorm(config.n_embd, eps=config.norm_eps)
        self.attn = CausalSelfAttention(config)
        self.norm_2 = nn.LayerNorm(config.n_embd, eps=config.norm_eps)
        self.mlp = MLP(config)

    def forward(self, x, rope, mask):
        residual = x.clone()
        x = self.norm_1(x)
        x = self.attn(x, rope, mask)
        x = residual + x
        residual = x.clone()
        x = self.norm_2(x)
        x = self.mlp(x)
        x = residual + x
        return x


class GPT(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        assert config.padded_vocab_size is not None
        self.config = config
        self.lm_head = nn.Linear(config.n_embd, config.padded_vocab_size, bias=False)
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.padded_vocab_size, config.n_embd),
            h=nn.ModuleList(Block(config) for _ in range(config.n_layer)),
            ln_f=nn.LayerNorm(config.n_embd, eps=config.norm_eps),
        ))
        self.rope_cache: tuple[torch.Tensor, torch.Tensor] | None = None
        self.mask_cache: torch.Tensor | None = None

    def build_rope_cache(self, idx: torch.Tensor):
        return build_rope_cache(self.config.block_size, self.config.rope_n_elem, device=idx.device)

    def build_mask_cache(self, idx: torch.Tensor) -> torch.Tensor:
        ones = torch.ones((self.config.block_size, self.config.block_size), device=idx.device, dtype=torch.bool)
        return torch.tril(ones).unsqueeze(0).unsqueeze(0)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        B, T = idx.size()
        if T > self.config.block_size:
            raise ValueError(f"Cannot forward sequence of length {T}, block size is only {self.config.block_size}")
        if self.rope_cache is None:
            self.rope_cache = self.build_rope_cache(idx)
        if self.mask_cache is None:
            self.mask_cache = self.build_mask_cache(idx)
        cos, sin = self.rope_cache
        rope, mask = (cos[:T], sin[:T]), self.mask_cache[:, :, :T, :T]
        x = self.transformer.wte(idx)
        for block in self.transformer.h:
            x = block(x, rope, mask)
        x = self.transformer.ln_f(x)
        return self.lm_head(x)  # (B, T, padded_vocab_size)


class BuggyGPT(GPT):
    def build_mask_cache(self, idx: torch.Tensor) -> torch.Tensor:
        ones = torch.ones((self.config.block_size, self.config.block_size), device=idx.device, dtype=torch.bool)
        return torch.triu(ones).unsqueeze(0).unsqueeze(0)  # injected bug: triu for tril, sees the future
