"""A speedrun-recipe decoder in the style of Keller Jordan's modded-nanogpt ``train_gpt.py`` (the late-2024
records; a fresh, shortened rewrite with SDPA in place of flex_attention and batched input).

Idioms kept: plain constructor arguments ``GPT(vocab_size=50304, num_layers=12, num_heads=6, model_dim=768)``;
``CastedLinear``; separate ``c_q``/``c_k``/``c_v``; the output projections of attention and MLP zero-initialised
in ``__init__`` (``self.c_proj.weight.data.zero_()``, so every block starts as the identity); a parameter-free
RMSNorm through ``F.rms_norm``; QK-norm; rotary embeddings from a cached ``Rotary`` module;
``F.scaled_dot_product_attention(q, k, v, is_causal=True)``; ReLU-squared MLP; per-block ``lambdas`` mixing the
stream with the normed embedding ``x0``; a tanh logit soft-cap; ``forward(idx)`` returns float logits (B, T, V).

``BuggyGPT`` calls SDPA with ``is_causal=False``: every position attends to the whole sequence. At
initialisation the zeroed ``c_proj`` hides this from the output entirely.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def norm(x):
    return F.rms_norm(x, (x.size(-1),))


class CastedLinear(nn.Linear):
    def __init__(self, in_features, out_features):
        super().__init__(in_features, out_features, bias=False)

    def forward(self, x):
        return F.linear(x, self.weight.to(x.dtype))


class Rotary(nn.Module):
    def __init__(self, dim, base=10000):
        super().__init__()
        self.register_buffer("inv_freq", (1 / base) ** (torch.arange(0, dim, 2).float() / dim), persistent=False)
        self.seq_len_cached = None
        self.cos_cached = None
        self.sin_cached = None

    def forward(self, x):
        seq_len = x.shape[1]
        if seq_len != self.seq_len_cached:
            self.seq_len_cached = seq_len
            t = torch.arange(seq_len, device=x.device).type_as(self.inv_freq)
            freqs = torch.outer(t, self.inv_freq)
            self.cos_cached, self.sin_cached = freqs.cos(), freqs.sin()
        cos, sin = self.cos_cached[None, :, None, :], self.sin_cached[None, :, None, :]
        d = x.shape[3] // 2
        x1, x2 = x[..., :d], x[..., d:]
        return torch.cat([x1 * cos + x2 * sin, x1 * (-sin) + x2 * cos], 3).type_as(x)


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        assert dim % num_heads == 0
        self.num_heads = num_heads
        self.c_q = CastedLinear(dim, dim)
        self.c_k = CastedLinear(dim, dim)
        self.c_v = CastedLinear(dim, dim)
        self.rotary = Rotary(dim // num_heads)
        self.c_proj = CastedLinear(dim, dim)
        self.c_proj.weight.data.zero_()  # zero init: the block starts as the identity

    def forward(self, x):
        B, T = x.size(0), x.size(1)
        q = self.c_q(x).view(B, T, self.num_heads, -1)
        k = self.c_k(x).view(B, T, self.num_heads, -1)
        v = self.c_v(x).view(B, T, self.num_heads, -1)
        q, k = norm(q), norm(k)  # QK norm
        q, k = self.rotary(q), self.rotary(k)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True)
        y = y.transpose(1, 2).contiguous().view_as(x)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.c_fc = CastedLinear(dim, 4 * dim)
        self.c_proj = CastedLinear(4 * dim, dim)
        self.c_proj.weight.data.zero_()

    def forward(self, x):
        x = F.relu(self.c_fc(x)).square()
        return self.c_proj(x)


class Block(nn.Module):
    def __init__(self, model_dim, num_heads):
        super().__init__()
        self.attn = CausalSelfAttention(model_dim, num_heads)
        self.mlp = MLP(model_dim)
        self.lambdas = nn.Parameter(torch.tensor([1.0, 0.0]))

    def forward(self, x, x0):
        x = self.lambdas[0] * x + self.lambdas[1] * x0
        x = x + self.attn(norm(x))
        x = x + self.mlp(norm(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab_size=50304, num_layers=12, num_heads=6, model_dim=768):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, model_dim)
        self.blocks = nn.ModuleList([Block(model_dim, num_heads) for _ in range(num_layers)])
        self.lm_head = CastedLinear(model_dim, vocab_size)

    def forward(self, idx):
        x = x0 = norm(self.embed(idx))
        for block in self.blocks:
            x = block(x, x0)
        x = norm(x)
        logits = self.lm_head(x)
        logits = 30 * torch.tanh(logits / 30)  # soft-cap
        return logits.float()


class BuggyCausalSelfAttention(CausalSelfAttention):
    def forward(self, x):
        B, T = x.size(0), x.size(1)
        q = self.c_q(x).view(B, T, self.num_heads, -1)
        k = self.c_k(x).view(B, T, self.num_heads, -1)
        v = self.c_v(x).view(B, T, self.num_heads, -1)
        q, k = norm(q), norm(k)  # QK norm
        q, k = self.rotary(q), self.rotary(k)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=False)  # injected bug: is_causal=False, no causal mask
        y = y.transpose(1, 2).contiguous().view_as(x)
        return self.c_proj(y)


class BuggyGPT(GPT):
    """GPT whose attention layers are BuggyCausalSelfAttention (weights unchanged)."""

    def __init__(self, vocab_size=50304, num_layers=12, num_heads=6, model_dim=768):
        super().__init__(vocab_size, num_layers, num_heads, model_dim)
        for block in self.blocks:
            block.attn.__class__ = BuggyCausalSelfAttention
