import torch
import torch.nn as nn


class GPT(nn.Module):
    """A small GPT on nn.TransformerEncoder layers, with a classic bug in its causal mask."""

    def __init__(self, vocab_size=101, d_model=32, n_head=4, n_layer=2, block_size=64):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(block_size, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_head, 4 * d_model, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, n_layer, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, idx):
        s = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(s, device=idx.device))
        # BUG: True = may NOT attend, so diagonal=2 lets position t see t + 1 (diagonal=1 is right)
        future = torch.triu(torch.ones(s, s, dtype=torch.bool, device=idx.device), diagonal=2)
        return self.head(self.blocks(x, mask=future))


# The bug, seen without tfcheck: the output at position 0 changes with the token at position 1.
_gpt = GPT().eval()
with torch.no_grad():
    assert not torch.equal(_gpt(torch.tensor([[1, 2]]))[0, 0], _gpt(torch.tensor([[1, 3]]))[0, 0])
