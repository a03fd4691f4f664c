"""Sequence classifier in the style of a hand-written BERT (the layout of Hugging Face's modeling_bert).

Kept: ``BertClassifier(vocab_size=30522, hidden_size=768, num_layers=12, num_heads=12, intermediate_size=3072,
max_position=512, num_labels=2)``; ``forward(input_ids, attention_mask)`` with ``attention_mask`` (b, s), 1 = real
token, turned into the extended additive mask ``(1.0 - mask[:, None, None, :]) * -10000.0`` (b, 1, 1, s) and
added to the scores; word + position + token-type embeddings with LayerNorm(eps=1e-12); ``transpose_for_scores``;
post-LN layers (attention output, GELU intermediate, output, each ``LayerNorm(dense(x) + input)``); a tanh pooler
on the [CLS] (first) token; returns the logits (b, num_labels).
"""
import math

import torch
import torch.nn as nn


class BertSelfAttention(nn.Module):
    def __init__(self, hidden_size, num_heads, dropout=0.1):
        super().__init__()
        self.num_attention_heads, self.attention_head_size = num_heads, hidden_size // num_heads
        self.all_head_size = num_heads * self.attention_head_size
        self.query = nn.Linear(hidden_size, self.all_head_size)
        self.key = nn.Linear(hidden_size, self.all_head_size)
        self.value = nn.Linear(hidden_size, self.all_head_size)
        self.dropout = nn.Dropout(dropout)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_x_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_scores = attention_scores + attention_mask  # (b, 1, 1, s) extended mask
        attention_probs = self.dropout(nn.functional.softmax(attention_scores, dim=-1))
        context_layer = torch.matmul(attention_probs, value_layer).permute(0, 2, 1, 3).contiguous()
        return context_layer.view(context_layer.size()[:-2] + (self.all_head_size,))


class BertLayer(nn.Module):
    def __init__(self, hidden_size, num_heads, intermediate_size, dropout=0.1):
        super().__init__()
        self.attention = BertSelfAttention(hidden_size, num_heads, dropout)
        self.attention_output = nn.Linear(hidden_size, hidden_size)
        self.attention_norm = nn.LayerNorm(hidden_size, eps=1e-12)
        self.intermediate = nn.Linear(hidden_size, intermediate_size)
        self.output = nn.Linear(intermediate_size, hidden_size)
        self.output_norm = nn.LayerNorm(hidden_size, eps=1e-12)
        self.dropout = nn.Dropout(dropout)

    def forward(self, hidden_states, attention_mask):
        attn = self.dropout(self.attention_output(self.attention(hidden_states, attention_mask)))
        attention_output = self.attention_norm(attn + hidden_states)
        intermediate_output = nn.functional.gelu(self.intermediate(attention_output))
        return self.output_norm(self.dropout(self.output(intermediate_output)) + attention_output)


class BertEmbeddings(nn.Module):
    def __init__(self, vocab_size, hidden_size, max_position, type_vocab_size=2, dropout=0.1):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_position, hidden_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=1e-12)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_ids):
        position_ids = torch.arange(input_ids.size(1), device=input_ids.device).unsqueeze(0)
        token_type_ids = torch.zeros_like(input_ids)
        embeddings = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(embeddings))


class BertClassifier(nn.Module):
    def __init__(self, vocab_size=30522, hidden_size=768, num_layers=12, num_heads=12, intermediate_size=3072,
                 max_position=512, num_labels=2, dropout=0.1):
        super().__init__()
        self.embeddings = BertEmbeddings(vocab_size, hidden_size, max_position, dropout=dropout)
        self.layers = nn.ModuleList(
            [BertLayer(hidden_size, num_heads, intermediate_size, dropout) for _ in range(num_layers)])
        self.pooler = nn.Linear(hidden_size, hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(hidden_size, num_labels)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            module.bias.data.zero_()
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            module.weight.data[module.padding_idx].zero_()

    def forward(self, input_ids, attention_mask):
        hidden_states = self.embeddings(input_ids)
        extended_attention_mask = attention_mask[:, None, None, :].to(hidden_states.dtype)
        extended_attention_mask = (1.0 - extended_attention_mask) * -10000.0
        for layer in self.layers:
            hidden_states = layer(hidden_states, extended_attention_mask)
        pooled_output = torch.tanh(self.pooler(hidden_states[:, 0]))  # [CLS]
        return self.classifier(self.dropout(pooled_output))


class BuggyBertClassifier(BertClassifier):
    def forward(self, input_ids, attention_mask):
        hidden_states = self.embeddings(input_ids)
        extended_attention_mask = attention_mask[:, None, :, None].to(hidden_states.dtype)  # injected bug: query axis
        extended_attention_mask = (1.0 - extended_attention_mask) * -10000.0
        for layer in self.layers:
            hidden_states = layer(hidden_states, extended_attention_mask)
        pooled_output = torch.tanh(self.pooler(hidden_states[:, 0]))  # [CLS]
        return self.classifier(self.dropout(pooled_output))
