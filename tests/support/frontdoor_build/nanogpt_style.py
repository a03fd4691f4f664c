"""nanoGPT's convention: a @dataclass GPTConfig in the model's module, with release-size defaults, and
GPT.__init__(self, config) without an annotation, reading config.n_embd, config.bias, ..."""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from frontdoor_blocks import Block, leak


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.vocab_size is not None
        assert config.block_size is not None
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.h = nn.ModuleList([Block(config.n_embd, config.n_head, 4 * config.n_embd, config.dropout, config.bias,
                                      causal=True) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying

    def forward(self, idx, targets=None):
        t = idx.size(1)
        assert t <= self.config.block_size, f"Cannot forward sequence of length {t}, block size is only " \
            f"{self.config.block_size}"
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(t, device=idx.device)))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens):
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -self.config.block_size:])
            idx = torch.cat((idx, logits[:, -1].argmax(-1, keepdim=True)), dim=1)
        return idx


class LeakyGPT(GPT):
    """The defect: the blocks' self-attention sees the future."""

    def __init__(self, config):
        super().__init__(config)
        leak(self)
