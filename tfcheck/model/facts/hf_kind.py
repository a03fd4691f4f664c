"""The kind of a Hugging Face model (encoder, decoder, seq2seq), read from its config and its class names:
the config's switches and family first, then the class, the config's architectures and the heads its modeling
module defines."""
from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch.nn as nn

from tfcheck.model.build.names import HF_CLASS_KINDS, HF_FAMILIES


def kind_from_hf_config(cfg: Any, set_by_tfcheck: Callable[[str], str]) -> tuple[str, str] | None:
    """The kind a Hugging Face-style config states (its switches, then its model_type's family)."""
    if cfg is None:
        return None
    if getattr(cfg, "is_encoder_decoder", False) is True:
        return "seq2seq", "config.is_encoder_decoder = True"
    if getattr(cfg, "is_decoder", False) is True:
        return "decoder", "config.is_decoder = True" + set_by_tfcheck("is_decoder")
    if isinstance(getattr(cfg, "causal", None), bool):  # XLM's switch: False (its default) is a masked LM
        return ("decoder" if cfg.causal else "encoder"), f"config.causal = {cfg.causal}"
    family = HF_FAMILIES.get(str(getattr(cfg, "model_type", "")))
    if family is not None:
        return family, f"config.model_type = {cfg.model_type!r} (model family: {family})"
    return None


def kind_from_hf_class(model: nn.Module, config: Any) -> tuple[str, str] | None:
    """A Hugging Face model of a family tfcheck does not list: its class name, the config's
    architectures, then the classes its modeling module defines (a masked-LM head means a bidirectional
    family; a causal-LM head and no masked-LM one, a decoder-only family)."""
    if config is None:
        return None
    cls = type(model).__name__
    for suffix, kind in HF_CLASS_KINDS:
        if cls.endswith(suffix):
            return kind, f"Hugging Face class {cls} (*{suffix}: {kind}) with a config"
    for name in getattr(config, "architectures", None) or ():
        for suffix, kind in HF_CLASS_KINDS:
            if isinstance(name, str) and name.endswith(suffix):
                return kind, f"config.architectures names {name} (*{suffix}: {kind})"
    module = inspect.getmodule(type(model))
    if module is None or not module.__name__.startswith("transformers."):
        return None
    heads = [n for n, v in vars(module).items() if inspect.isclass(v) and v.__module__ == module.__name__]
    masked = sorted(n for n in heads if n.endswith("ForMaskedLM"))
    causal = sorted(n for n in heads if n.endswith(("ForCausalLM", "LMHeadModel")))
    if masked:
        return "encoder", (f"{module.__name__} defines the masked-LM head {masked[0]} (a bidirectional family; "
                           "config.is_decoder is not set)")
    if causal:
        return "decoder", f"{module.__name__} defines the causal-LM head {causal[0]} and no masked-LM head"
    return None
