"""Llama's convention: Transformer(params) with a ModelArgs dataclass (imported from another module) of dim,
n_heads, n_kv_heads (grouped-query attention), multiple_of, norm_eps; a decoder with RMSNorm."""
import torch
import torch.nn as nn
from frontdoor_blocks import Attention, leak
from llama_args import ModelArgs  # noqa: F401  (the config the constructor takes)


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int, multiple_of: int):
        super().__init__()
        hidden_dim = multiple_of * ((int(2 * hidden_dim / 3) + multiple_of - 1) // multiple_of)
        self.w1, self.w2 = nn.Linear(dim, hidden_dim, bias=False), nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.attention = Attention(args.dim, args.n_heads, bias=False, causal=True, kv_heads=args.n_kv_heads,
                                   decoder_self=True)
        self.feed_forward = FeedForward(args.dim, 4 * args.dim, args.multiple_of)
        self.attention_norm = nn.RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = nn.RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, params):
        super().__init__()
        self.params = params
        self.tok_embeddings = nn.Embedding(params.vocab_size, params.dim)
        self.pos = nn.Parameter(0.02 * torch.randn(params.max_seq_len, params.dim))
        self.layers = nn.ModuleList(TransformerBlock(params) for _ in range(params.n_layers))
        self.norm = nn.RMSNorm(params.dim, eps=params.norm_eps)
        self.output = nn.Linear(params.dim, params.vocab_size, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens) + self.pos[: tokens.size(1)]
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h)).float()


class LeakyTransformer(Transformer):
    def __init__(self, params):
        super().__init__(params)
        leak(self)
