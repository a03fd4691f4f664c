"""What an explainer may read off the model itself: the integer hyper-parameters of its config and modules,
which of them equal a width in an error message, and the longest sequence it was built for."""
from __future__ import annotations

import contextlib
import re
from typing import Any

import torch
import torch.nn as nn

from tfcheck.model.build import names

#: Config names of the longest sequence a model was built for (the names the model layer reads).
MAX_LEN_NAMES = names.MAX_LEN
#: Config ints that are counts, lengths or ids, never a layer width: not offered as the width that disagrees.
NOT_A_WIDTH = re.compile(r"len|vocab|layer|head|ctx|position|block|batch|pad|_id$|idx|token|seq|drop|eps|"
                          r"bos|eos|seed|step|expert", re.IGNORECASE)
HEAD_NAMES = names.NUM_HEADS


def config_ints(model: nn.Module | None) -> dict[str, int]:
    """Integer hyper-parameters of a model: the fields of ``model.config`` (a dataclass, a dict, an object)
    and the model's own int attributes, as ``{'config.d_ff': 64, 'd_model': 32}``."""
    if model is None:
        return {}
    found: dict[str, int] = {}
    config = getattr(model, "config", None)
    if config is not None:
        fields = config if isinstance(config, dict) else _public_attrs(config)
        for key, value in fields.items():
            if isinstance(value, int) and not isinstance(value, bool):
                found[f"config.{key}"] = value
    for key, value in _public_attrs(model).items():
        if isinstance(value, int) and not isinstance(value, bool):
            found.setdefault(key, value)
    return found


def _public_attrs(obj: Any) -> dict[str, Any]:
    if hasattr(obj, "to_dict") and callable(obj.to_dict):  # Hugging Face configs
        with contextlib.suppress(Exception):
            return dict(obj.to_dict())
    try:
        attrs = dict(vars(obj))
    except TypeError:
        return {}
    return {k.lstrip("_"): v for k, v in attrs.items() if not k.startswith("__")}


def config_key(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def width_names(model: nn.Module | None, value: int) -> list[str]:
    """The hyper-parameters that are a layer width equal to ``value`` (d_ff=64, d_model=32, ...)."""
    return [f"{n}={v}" for n, v in config_ints(model).items()
            if v == value and v > 1 and not NOT_A_WIDTH.search(config_key(n))]


def max_len_values(*objects: Any) -> dict[str, int]:
    """The max_len / block_size-like ints of models, modules or configs."""
    found: dict[str, int] = {}
    for obj in objects:
        if obj is None:
            continue
        ints = config_ints(obj) if isinstance(obj, nn.Module) else {
            k: v for k, v in _public_attrs(obj).items() if isinstance(v, int)}
        for name, value in ints.items():
            if config_key(name) in MAX_LEN_NAMES and not isinstance(value, bool):
                found[name] = value
    return found


def tensors_of(values: tuple) -> list[torch.Tensor]:
    return [v for v in values if isinstance(v, torch.Tensor)]


def names_of(module: nn.Module | None, path: str | None) -> str:
    return f"'{path or '<root>'}' ({type(module).__name__})"
