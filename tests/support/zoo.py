"""Edge-case models for engine tests: strange signatures, outputs and failures (one oddity each).

The broken Transformers proper live in reference_model.broken; these are the shapes of other people's code.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from reference_model import TransformerEncoder, TransformerLM


class TinyLM(nn.Module):
    """A minimal correct causal LM (embedding + causal self-attention + head), forward(input_ids)."""

    def __init__(self, vocab_size: int, d_model: int, num_heads: int, max_len: int):
        super().__init__()
        self.vocab_size, self.max_len = vocab_size, max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.attn = nn.MultiheadAttention(d_model, num_heads, batch_first=True)
        self.head = nn.Linear(d_model, vocab_size)
        self.__tfcheck__ = {"kind": "decoder"}

    def forward(self, input_ids):
        x = self.embed(input_ids) + self.pos(torch.arange(input_ids.shape[1], device=input_ids.device))
        s = x.shape[1]
        # True above the diagonal = may NOT attend (nn.MultiheadAttention's boolean convention).
        future = torch.triu(torch.ones(s, s, dtype=torch.bool, device=x.device), diagonal=1)
        h, _ = self.attn(x, x, x, attn_mask=future, need_weights=False)
        return self.head(x + h)


class TupleOutput(TransformerLM):
    """Returns (logits, aux) like many research models."""

    __tfcheck__ = {"kind": "decoder", "pad_id": 0}

    def forward(self, tokens):
        logits = super().forward(tokens)
        return logits, {"aux_loss": logits.mean()}


class DictOutput(TransformerEncoder):
    """Returns a dict with the hidden states under an unusual key."""

    __tfcheck__ = {"kind": "encoder", "pad_id": 0}

    def forward(self, tokens):
        return {"hidden": super().forward(tokens), "n": 3}


@dataclass
class FakeModelOutput:
    """Stands for a Hugging Face ModelOutput: attributes, with logits among them."""

    loss: torch.Tensor | None
    logits: torch.Tensor


class ObjectOutput(TransformerLM):
    __tfcheck__ = {"kind": "decoder", "pad_id": 0}

    def forward(self, tokens):
        return FakeModelOutput(loss=None, logits=super().forward(tokens))


class NeedsArguments(nn.Module):
    """A constructor with required hyper-parameters under the usual names."""

    def __init__(self, vocab_size, d_model, nhead, num_layers, dim_feedforward, max_len, dropout):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers)
        self.max_len = max_len

    def forward(self, x):
        return self.encoder(self.embed(x))


class NeedsUnknownArgument(nn.Module):
    def __init__(self, tokenizer_path):
        super().__init__()
        self.path = tokenizer_path


class ConstructorRaises(nn.Module):
    def __init__(self):
        super().__init__()
        raise ValueError("d_model must be divisible by num_heads")


def factory_returning_junk():
    return "not a model"


def build_tiny_lm():
    """A factory: the usual way to hand tfcheck a model that needs arguments."""
    return TinyLM(vocab_size=50, d_model=16, num_heads=2, max_len=32)


tiny_lm_instance = build_tiny_lm()


class ForwardRaises(TransformerEncoder):
    def forward(self, tokens):
        raise RuntimeError("custom kernel not available on this device")


class ReturnsNothingUseful(TransformerEncoder):
    __tfcheck__ = {"kind": "encoder"}

    def forward(self, tokens):
        return None


class MutatesItself(TransformerEncoder):
    """Updates a buffer and its own weights in forward, and turns dropout on: tfcheck must undo all of it."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, tokens):
        self.calls += 1
        with torch.no_grad():
            self.layers[0].ffn.w_1.weight.mul_(1.01)
        self.train()
        return super().forward(tokens)


class SwapsBatchAndLength(TransformerEncoder):
    """batch_first confusion: returns (length, batch, d_model)."""

    def forward(self, tokens):
        return super().forward(tokens).transpose(0, 1)


class NeedsExtraInput(TransformerEncoder):
    def forward(self, tokens, speaker_embedding):
        return super().forward(tokens) + speaker_embedding


class VarArgsWrapper(nn.Module):
    """A wrapper whose forward passes *args on, as DataParallel-style wrappers do."""

    __tfcheck__ = {"kind": "decoder"}

    def __init__(self):
        super().__init__()
        self.inner = build_tiny_lm()
        self.max_len = self.inner.max_len

    def forward(self, *args, **kwargs):
        return self.inner(*args, **kwargs)
