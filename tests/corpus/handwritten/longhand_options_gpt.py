"""A decoder-only language model in the style of a course notebook turned script: the sizes come from an argparse
options namespace read by attribute, spelled out long-hand (issue 29's constructor names).

Kept: ``LanguageModel(hyperparameters)`` where ``hyperparameters`` is the ``argparse.Namespace`` the script's
``parse_args()`` returns, read only by attribute (``hyperparameters.vocabulary_size``, ``.model_dimension``,
``.number_of_heads``, ``.number_of_layers``, ``.feed_forward_dimension``, ``.max_sequence_length``,
``.dropout_rate``); the submodules take those sizes as long-hand names (``MultiHeadSelfAttention(
model_dimension, number_of_heads, dropout_rate)``); a boolean look-ahead mask built per forward with
``torch.triu(..., diagonal=1)`` (True = blocked) and applied with ``masked_fill(-inf)``; pre-LN blocks; learned
positions; ``forward(token_ids)`` returns logits (batch, length, vocabulary_size). No config class, no defaults:
run zero-config, tfcheck must read the long-hand names as sizes and give the namespace small ones.

``BuggyLanguageModel`` builds its mask with ``torch.tril(..., diagonal=-1)``: the past is blocked and the future
open, so every position reads the tokens after it.
"""
import argparse
import math

import torch
import torch.nn as nn


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, model_dimension, number_of_heads, dropout_rate):
        super().__init__()
        assert model_dimension % number_of_heads == 0, "the model dimension must split evenly over the heads"
        self.number_of_heads = number_of_heads
        self.head_dimension = model_dimension // number_of_heads
        self.query_key_value = nn.Linear(model_dimension, 3 * model_dimension)
        self.output_projection = nn.Linear(model_dimension, model_dimension)
        self.attention_dropout = nn.Dropout(dropout_rate)

    @staticmethod
    def look_ahead_mask(length, device):
        return torch.triu(torch.ones(length, length, dtype=torch.bool, device=device), diagonal=1)

    def forward(self, hidden_states):
        batch, length, width = hidden_states.shape
        query, key, value = self.query_key_value(hidden_states).split(width, dim=-1)
        # (batch, length, width) -> (batch, heads, length, head_dimension)
        query, key, value = (t.view(batch, length, self.number_of_heads, self.head_dimension).transpose(1, 2)
                             for t in (query, key, value))
        scores = query @ key.transpose(-2, -1) / math.sqrt(self.head_dimension)
        scores = scores.masked_fill(self.look_ahead_mask(length, hidden_states.device), float("-inf"))
        weights = self.attention_dropout(scores.softmax(dim=-1))
        context = (weights @ value).transpose(1, 2).reshape(batch, length, width)
        return self.output_projection(context)


class FeedForward(nn.Module):
    def __init__(self, model_dimension, feed_forward_dimension, dropout_rate):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(model_dimension, feed_forward_dimension), nn.GELU(),
                                    nn.Linear(feed_forward_dimension, model_dimension), nn.Dropout(dropout_rate))

    def forward(self, hidden_states):
        return self.layers(hidden_states)


class DecoderBlock(nn.Module):
    attention_class = MultiHeadSelfAttention

    def __init__(self, model_dimension, number_of_heads, feed_forward_dimension, dropout_rate):
        super().__init__()
        self.attention_norm = nn.LayerNorm(model_dimension)
        self.attention = self.attention_class(model_dimension, number_of_heads, dropout_rate)
        self.feed_forward_norm = nn.LayerNorm(model_dimension)
        self.feed_forward = FeedForward(model_dimension, feed_forward_dimension, dropout_rate)

    def forward(self, hidden_states):
        hidden_states = hidden_states + self.attention(self.attention_norm(hidden_states))
        return hidden_states + self.feed_forward(self.feed_forward_norm(hidden_states))


class LanguageModel(nn.Module):
    block_class = DecoderBlock

    def __init__(self, hyperparameters):
        super().__init__()
        self.hyperparameters = hyperparameters
        self.token_embedding = nn.Embedding(hyperparameters.vocabulary_size, hyperparameters.model_dimension)
        self.position_embedding = nn.Embedding(hyperparameters.max_sequence_length, hyperparameters.model_dimension)
        self.embedding_dropout = nn.Dropout(hyperparameters.dropout_rate)
        self.blocks = nn.ModuleList([
            self.block_class(hyperparameters.model_dimension, hyperparameters.number_of_heads,
                         hyperparameters.feed_forward_dimension, hyperparameters.dropout_rate)
            for _ in range(hyperparameters.number_of_layers)])
        self.final_norm = nn.LayerNorm(hyperparameters.model_dimension)
        self.language_model_head = nn.Linear(hyperparameters.model_dimension, hyperparameters.vocabulary_size)

    def forward(self, token_ids):
        positions = torch.arange(token_ids.size(1), device=token_ids.device)
        hidden_states = self.embedding_dropout(self.token_embedding(token_ids) + self.position_embedding(positions))
        for block in self.blocks:
            hidden_states = block(hidden_states)
        return self.language_model_head(self.final_norm(hidden_states))


class BuggyMultiHeadSelfAttention(MultiHeadSelfAttention):
    @staticmethod
    def look_ahead_mask(length, device):
        ones = torch.ones(length, length, dtype=torch.bool, device=device)
        return torch.tril(ones, diagonal=-1)  # injected bug: tril for triu, blocks the past and opens the future


class BuggyDecoderBlock(DecoderBlock):
    attention_class = BuggyMultiHeadSelfAttention


class BuggyLanguageModel(LanguageModel):
    """LanguageModel whose attention masks come from BuggyMultiHeadSelfAttention."""

    block_class = BuggyDecoderBlock


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="train a small decoder-only language model")
    parser.add_argument("--vocabulary_size", type=int, default=50257)
    parser.add_argument("--model_dimension", type=int, default=768)
    parser.add_argument("--number_of_heads", type=int, default=12)
    parser.add_argument("--number_of_layers", type=int, default=12)
    parser.add_argument("--feed_forward_dimension", type=int, default=3072)
    parser.add_argument("--max_sequence_length", type=int, default=1024)
    parser.add_argument("--dropout_rate", type=float, default=0.1)
    return parser.parse_args(argv)


if __name__ == "__main__":
    model = LanguageModel(parse_args())
    print(sum(p.numel() for p in model.parameters()), "parameters")
