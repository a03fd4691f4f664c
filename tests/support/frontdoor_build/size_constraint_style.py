"""A constructor with a size constraint the small sizes break: its rotary table wants d_model of 128 or more."""
import torch.nn as nn
from frontdoor_blocks import Block


class Model(nn.Module):
    def __init__(self, vocab_size=1000, d_model=256, n_heads=4, n_layers=2):
        super().__init__()
        assert d_model >= 128, "d_model must be at least 128 for the rotary table"
        self.embed = nn.Embedding(vocab_size, d_model)
        self.layers = nn.ModuleList(Block(d_model, n_heads, 2 * d_model) for _ in range(n_layers))

    def forward(self, x):
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        return h
