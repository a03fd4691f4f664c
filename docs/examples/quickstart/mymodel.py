"""A user's own small GPT, as it might sit in a project: the README runs tfcheck on it."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, vocab_size, d_model, n_head, n_layer, block_size):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(block_size, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_head, 4 * d_model, dropout=0.1, batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, n_layer, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, idx):
        b, s = idx.shape
        x = self.tok(idx) + self.pos(torch.arange(s, device=idx.device))
        causal = nn.Transformer.generate_square_subsequent_mask(s, device=idx.device)
        return self.head(self.blocks(x, mask=causal, is_causal=True))
