"""A model whose forward needs a size its constructor never checks: a fixed 64-wide rotary part of every
token's features, as models with a rotary dimension written as a constant do. Shrunk below 64 wide its forward
raises; at its defaults (d_model 128) it runs. ``BrokenEverywhere`` raises at every size (its bug is the user's)."""
import torch
import torch.nn as nn

ROTARY = 64


class RotaryLM(nn.Module):
    def __init__(self, vocab_size=500, d_model=128, n_head=4, n_layer=1, dropout=0.0):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_head, 2 * d_model, dropout, batch_first=True)
        self.body = nn.TransformerEncoder(layer, n_layer, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, vocab_size)
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, ROTARY, 2).float() / ROTARY))

    def rotate(self, x):
        t = torch.arange(x.size(1), device=x.device).float()
        angles = torch.cat([torch.outer(t, self.inv_freq)] * 2, dim=-1)  # (length, ROTARY)
        head, rest = x[..., :ROTARY], x[..., ROTARY:]
        return torch.cat([head * angles.cos() + head.roll(ROTARY // 2, -1) * angles.sin(), rest], dim=-1)

    def forward(self, input_ids):
        x = self.rotate(self.embed(input_ids))
        s = x.size(1)
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        return self.head(self.body(x, mask=mask, is_causal=True))


class BrokenEverywhere(RotaryLM):
    def forward(self, input_ids):
        x = self.embed(input_ids)
        return self.head(x.transpose(1, 2))  # (b, d, s) into a Linear of d: wrong at every size
