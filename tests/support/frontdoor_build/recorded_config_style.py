"""No config anywhere: Encoder(cfg) reads sizes from cfg, a switch through getattr with a default, another
through hasattr; Decoder(cfg) also hard-reads cfg.tie_weights, which no config tfcheck can find has."""
import torch
import torch.nn as nn
from frontdoor_blocks import Block


class Encoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.causal = getattr(cfg, "causal", False)  # a config without the field: bidirectional
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Parameter(0.02 * torch.randn(cfg.max_len, cfg.d_model))
        self.layers = nn.ModuleList(Block(cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.dropout, causal=self.causal)
                                    for _ in range(cfg.n_layers))
        self.final_norm = nn.LayerNorm(cfg.d_model) if hasattr(cfg, "final_norm") and cfg.final_norm else None

    def forward(self, x):
        h = self.embed(x) + self.pos[: x.size(1)]
        for layer in self.layers:
            h = layer(h)
        return h if self.final_norm is None else self.final_norm(h)


class Decoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg.d_model, cfg.n_heads, cfg.d_ff, causal=True) for _ in range(cfg.n_layers))
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_weights:
            self.head.weight = self.embed.weight

    def forward(self, x):
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)
