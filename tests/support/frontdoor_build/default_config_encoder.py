"""A second get_default_config() convention: a classmethod returning a SimpleNamespace with release-size
defaults (hidden_size, num_attention_heads, ...) for a bidirectional encoder with an MLM head."""
from types import SimpleNamespace

import torch
import torch.nn as nn
from frontdoor_blocks import Block, misscale


class TextEncoder(nn.Module):
    @classmethod
    def get_default_config(cls):
        return SimpleNamespace(vocab_size=30522, hidden_size=768, num_attention_heads=12, num_hidden_layers=12,
                               intermediate_size=3072, max_position_embeddings=512, hidden_dropout_prob=0.1,
                               pad_token_id=0, layer_norm_eps=1e-12)

    def __init__(self, config):
        super().__init__()
        self.pad_token_id = config.pad_token_id
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.layers = nn.ModuleList(Block(config.hidden_size, config.num_attention_heads, config.intermediate_size,
                                          config.hidden_dropout_prob) for _ in range(config.num_hidden_layers))
        self.mlm_head = nn.Linear(config.hidden_size, config.vocab_size)

    def forward(self, input_ids, attention_mask=None):
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.norm(self.word_embeddings(input_ids) + self.position_embeddings(positions))
        mask = None if attention_mask is None else attention_mask[:, None, None, :]
        for layer in self.layers:
            x = layer(x, mask)
        return self.mlm_head(x)


class MisscaledTextEncoder(TextEncoder):
    def __init__(self, config):
        super().__init__(config)
        misscale(self)
