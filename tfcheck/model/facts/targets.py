"""Which forward parameter takes a seq2seq model's decoder input, read from names and structure only.

An exact name (``tgt``, ``trg``, ``decoder_input_ids``) is the decoder input on any model. A name of the
decoder-input patterns (``trg_seq``, ``tgt_tokens``, ``dec_inp``: names.FORWARD_ARG_PATTERNS) is one only on a
model that is encoder-decoder by structure: two token embeddings. A loss target (``targets``, ``labels``, ``y``)
is one only when the forward requires it on such a model, and the trial forward shows the output following its
length; never the target side's mask, flag, length or positions (``tgt_mask``, ``tgt_is_causal``).
"""
from __future__ import annotations

import inspect
import re

import torch.nn as nn

from tfcheck.model.build.names import CONFIG_NAMES, FORWARD_ARG_PATTERNS, LOSS_TARGET_ARGS, TARGET_ARGS


def pattern_role(name: str) -> str | None:
    """The role the first matching pattern of names.FORWARD_ARG_PATTERNS gives ``name``, or None."""
    return next((role for pattern, role in FORWARD_ARG_PATTERNS if re.fullmatch(pattern, name)), None)


def token_embeddings(model: nn.Module) -> list[str]:
    """The nn.Embedding modules that are not position tables (a table as long as a max-length the model or its
    config states, or one longer), by path."""
    lengths: set[int] = set()
    for holder in (model, getattr(model, "config", None)):
        for name in CONFIG_NAMES["max_len"]:
            value = getattr(holder, name, None) if holder is not None else None
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                lengths |= {value, value + 1}
    return [n for n, m in model.named_modules() if isinstance(m, nn.Embedding) and m.num_embeddings not in lengths]


def target_embedding(model: nn.Module) -> tuple[str, nn.Embedding] | None:
    """The token embedding on the decoder side, by structure: the first token embedding after the source's (the
    first) that sits outside the module holding the source's (any later one where the source's sits at the top),
    and is not the source's table under another name. A hypothesis: the trial forward shows which table the decoder
    input really reaches (tfcheck.model.trial.target_vocab). A second table inside the source's module is its
    position or segment table, not the target's."""
    names = token_embeddings(model)
    modules = dict(model.named_modules())
    if len(names) < 2:
        return None
    source = modules[names[0]]
    holder = names[0].rpartition(".")[0]
    for name in names[1:]:
        module = modules[name]
        if module.weight is source.weight or (holder and name.startswith(holder + ".")):
            continue
        return name, module
    return None


def decoder_input(model: nn.Module, params: dict[str, inspect.Parameter]) -> tuple[str, str] | None:
    """(parameter, why) for the parameter after the first that takes the decoder input, or None."""
    names = list(params)[1:]
    for name in names:
        if name in TARGET_ARGS:
            return name, f"forward takes a target argument ({name})"
    embeddings: list[str] | None = None
    for name in names:
        if name in LOSS_TARGET_ARGS or name in TARGET_ARGS or pattern_role(name) != "decoder input":
            continue
        embeddings = token_embeddings(model) if embeddings is None else embeddings
        if len(embeddings) >= 2:
            return name, (f"forward takes {name} (a decoder-input name) and the model has two token embeddings "
                          f"('{embeddings[0]}', '{embeddings[1]}'): an encoder-decoder")
    return required_loss_target(model, params)


def required_loss_target(model: nn.Module, params: dict[str, inspect.Parameter]) -> tuple[str, str] | None:
    """A loss-target name the forward *requires*, on a model with two token embeddings: ``forward(src, targets)``
    of a seq2seq tutorial, whose targets are the decoder input (nanoGPT's are optional: labels). A hypothesis
    only: the trial forward keeps it when the output follows the targets' length (tfcheck.model.trial.
    target_reading), and reads the targets as labels otherwise."""
    name = next((n for n in list(params)[1:] if n in LOSS_TARGET_ARGS
                 and params[n].default is inspect.Parameter.empty), None)
    embeddings = token_embeddings(model) if name is not None else []
    if name is None or len(embeddings) < 2:
        return None
    return name, (f"forward requires {name} and the model has two token embeddings ('{embeddings[0]}', "
                  f"'{embeddings[-1]}'): read as the decoder input of an encoder-decoder, if the output follows "
                  "its length")
