"""A module-level config instance, read as attributes: HP = Hyperparameters(), and Encoder(hp)."""
import torch
import torch.nn as nn
from frontdoor_blocks import Block, misscale


class Hyperparameters:
    def __init__(self):
        self.vocab = 32000
        self.d_model = 512
        self.nhead = 8
        self.depth = 6
        self.dim_feedforward = 2048
        self.max_len = 512
        self.dropout = 0.1
        self.norm_first = True


HP = Hyperparameters()


class Encoder(nn.Module):
    def __init__(self, hp):
        super().__init__()
        self.embed = nn.Embedding(hp.vocab, hp.d_model)
        self.pos = nn.Parameter(0.02 * torch.randn(hp.max_len, hp.d_model))
        self.layers = nn.ModuleList(Block(hp.d_model, hp.nhead, hp.dim_feedforward, hp.dropout)
                                    for _ in range(hp.depth))
        self.norm = nn.LayerNorm(hp.d_model) if hp.norm_first else nn.Identity()

    def forward(self, src):
        x = self.embed(src) + self.pos[: src.size(1)]
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


class MisscaledEncoder(Encoder):
    def __init__(self, hp):
        super().__init__(hp)
        misscale(self)
