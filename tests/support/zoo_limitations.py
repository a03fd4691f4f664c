"""Models tfcheck's own instrumentation must not be blamed for: code that breaks under a TorchFunctionMode
(a kernel wrapper that refuses to run inside one), models compiled with torch.compile, a model with no norm.
Each is correct and runs as written; only tfcheck's limits could make it fail."""
from __future__ import annotations

import torch
import torch.nn as nn

from reference_model import TransformerLM

SMALL = {"vocab_size": 50, "d_model": 32, "num_heads": 4, "d_ff": 64, "num_layers": 2, "max_len": 32,
         "dropout": 0.0}


class RefusesFunctionModes(TransformerLM):
    """Stands in for a fused kernel's Python wrapper that refuses to run inside a TorchFunctionMode (it would
    see subclass-dispatched tensors): correct as called, it raises only under a mode."""

    def forward(self, tokens):
        if torch._C._is_torch_function_mode_enabled():
            raise RuntimeError("fused kernel: cannot run under a TorchFunctionMode")
        return super().forward(tokens)


class RaisesEveryway(TransformerLM):
    """A genuine model error: it raises with or without tfcheck's instrumentation."""

    def forward(self, tokens):
        raise RuntimeError("this model is broken")


class CompiledMethod(TransformerLM):
    """An inner method compiled with torch.compile (set at construction: importing this module imports no
    dynamo)."""

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self.project = torch.compile(self.lm_head.forward, backend="eager")

    def forward(self, tokens):
        mask = self.build_mask(tokens)
        x = self.dropout(self.pos(self.embed(tokens)))
        for layer in self.layers:
            x = layer(x, mask)
        return self.project(self.norm(x))


def compiled_lm():
    """A factory that returns the model wrapped by torch.compile, as a training script builds it."""
    return torch.compile(TransformerLM(**SMALL), backend="eager")


class NoNorm(nn.Module):
    """A correct one-block causal LM with residual adds and no normalisation at all."""

    def __init__(self, vocab_size: int = 50, d_model: int = 32, max_len: int = 32):
        super().__init__()
        self.vocab_size, self.max_len = vocab_size, max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.attn = nn.MultiheadAttention(d_model, 4, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model))
        self.head = nn.Linear(d_model, vocab_size)
        self.__tfcheck__ = {"kind": "decoder"}

    def forward(self, input_ids):
        x = self.embed(input_ids) + self.pos(torch.arange(input_ids.shape[1], device=input_ids.device))
        s = x.shape[1]
        future = torch.triu(torch.ones(s, s, dtype=torch.bool, device=x.device), diagonal=1)
        x = x + self.attn(x, x, x, attn_mask=future, need_weights=False)[0]
        return self.head(x + self.ff(x))


class AbsolutePositions(nn.Module):
    """A learned position table looked up for the stream's length: it reads x's shape, never its values."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.emb = nn.Embedding(max_len, d_model)

    def forward(self, x):
        return self.emb(torch.arange(x.shape[1], device=x.device))


class PositionTableAdded(NoNorm):
    """performer-pytorch's ``x += self.pos_emb(x)``: a (length, d_model) table broadcast over the batch."""

    def __init__(self, vocab_size: int = 50, d_model: int = 32, max_len: int = 32):
        super().__init__(vocab_size, d_model, max_len)
        self.pos = AbsolutePositions(max_len, d_model)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, input_ids):
        x = self.embed(input_ids)
        x += self.pos(x)
        s = x.shape[1]
        future = torch.triu(torch.ones(s, s, dtype=torch.bool, device=x.device), diagonal=1)
        h = self.norm(x)
        x = x + self.attn(h, h, h, attn_mask=future, need_weights=False)[0]
        return self.head(x + self.ff(self.norm(x)))


class ReturnsItsLoss(nn.Module):
    """A training wrapper in the style of x-transformers' XTransformer: forward(src, tgt) runs a seq2seq model and
    returns the cross-entropy of its next-token predictions, one number. Correct, but nothing per position comes
    back for the checks to read."""

    def __init__(self):
        super().__init__()
        from reference_model import Seq2SeqTransformer

        self.net = Seq2SeqTransformer(src_vocab_size=50, tgt_vocab_size=50, d_model=32, num_heads=4, d_ff=64,
                                      num_encoder_layers=1, num_decoder_layers=1, max_len=32, dropout=0.0)

    def forward(self, src, tgt):  # (b, s), (b, t) long -> ()
        logits = self.net(src, tgt[:, :-1])
        return nn.functional.cross_entropy(logits.transpose(1, 2), tgt[:, 1:])
