"""What the recorder keeps of a tensor: its shape, dtype and device (never the tensor), and the same through
the tuples, lists, dicts and output objects a module takes and returns.

Every recorded op describes its inputs and outputs, so this runs thousands of times in one forward: a
description is shared by every tensor of the same shape, dtype and device (it is immutable), and the plain
containers of op arguments are walked without pytree's generality.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import SUPPORTED_NODES, tree_flatten

#: Descriptions made so far, by (shape, dtype, device); cleared when a long session has seen this many.
_KNOWN_LIMIT = 4096


@dataclass(frozen=True)
class TensorMeta:
    shape: tuple[int, ...]
    dtype: str
    device: str

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorMeta:
        if t.is_nested:  # a nested tensor has no single shape; its component count stands in
            return cls((t.size(0),), "nested " + _dtype_name(t.dtype), t.device.type)
        key = (t.shape, t.dtype, t.device)
        try:
            return _KNOWN[key]
        except KeyError:
            if len(_KNOWN) >= _KNOWN_LIMIT:
                _KNOWN.clear()
            meta = _KNOWN[key] = cls(tuple(key[0]), _dtype_name(key[1]), key[2].type)
            return meta
        except TypeError:  # a symbolic size (torch.export's SymInt) has no hash: described each time
            return cls(tuple(key[0]), _dtype_name(key[1]), key[2].type)

    def __str__(self) -> str:
        return f"{self.shape} {self.dtype}" + ("" if self.device == "cpu" else f" {self.device}")

    def to_dict(self) -> dict:
        return {"shape": list(self.shape), "dtype": self.dtype, "device": self.device}


_KNOWN: dict[tuple, TensorMeta] = {}
_DTYPE_NAMES: dict = {}


def _dtype_name(dtype: torch.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).replace("torch.", "")
    return name


def output_metas(out: Any) -> tuple[TensorMeta, ...]:
    """``metas(out)``, a lone tensor (most ops' output) without the walk."""
    if isinstance(out, torch.Tensor):
        try:  # a hit is never a nested tensor: only TensorMeta.of adds, and never for one
            return (_KNOWN[out.shape, out.dtype, out.device],)
        except Exception:  # a new shape, a nested tensor's missing sizes, a symbolic size
            return (TensorMeta.of(out),)
    return metas(out)


def described(args: tuple, kwargs: dict) -> tuple[tuple[TensorMeta, ...], dict]:
    """(``metas((args, kwargs))``, ``scalars(args, kwargs)``) of one op's arguments, in one pass over flat
    arguments (every recorded op asks); nested ones (a shape tuple, a list of tensors to cat) take the general
    way."""
    found = []
    known = _KNOWN
    positional = None
    for i, v in enumerate(args):
        kind = type(v)
        if kind is not int and kind is not float and isinstance(v, torch.Tensor):
            try:  # TensorMeta.of, inlined (see output_metas)
                found.append(known[v.shape, v.dtype, v.device])
            except Exception:
                found.append(TensorMeta.of(v))
        elif isinstance(v, (int, float)):
            if kind is not bool:
                if positional is None:
                    positional = {}
                positional[i] = v
        elif kind is tuple or kind is list or kind is torch.Size:  # a shape (of ints: no tensor, no scalar)
            for x in v:
                if type(x) is not int:
                    return metas((args, kwargs)), scalars(args, kwargs)
        elif isinstance(v, (tuple, list, dict)):
            return metas((args, kwargs)), scalars(args, kwargs)
    out: dict[str, Any] = {}
    if kwargs:
        for k, v in kwargs.items():
            if isinstance(v, torch.Tensor):
                found.append(TensorMeta.of(v))
            elif isinstance(v, (tuple, list, dict)):
                return metas((args, kwargs)), scalars(args, kwargs)
            elif k in SCALAR_KWARGS and isinstance(v, (int, float, bool, type(None))):
                out[k] = v
    if positional:
        out["positional"] = positional
    return tuple(found), out


#: Scalar arguments worth keeping with an op (the attention scale, a fill value, a softmax axis, ...).
SCALAR_KWARGS = ("dim", "scale", "value", "is_causal", "alpha", "beta", "eps", "dropout_p", "diagonal", "p")


def scalars(args: tuple, kwargs: dict) -> dict:
    """Scalar arguments: the named ones worth keeping, and positional numbers by position (a fill value,
    a softmax axis, a scale passed positionally)."""
    out: dict[str, Any] = {k: v for k, v in kwargs.items()
                           if k in SCALAR_KWARGS and isinstance(v, (int, float, bool, type(None)))} if kwargs else {}
    positional = None
    for i, v in enumerate(args):  # most ops have none: no dict made for them
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            positional = positional or {}
            positional[i] = v
    if positional:
        out["positional"] = positional
    return out


def metas(value: Any) -> tuple[TensorMeta, ...]:
    """The descriptions of the tensors inside op arguments or outputs, in order."""
    return tuple(map(TensorMeta.of, tensors_in(value)))


def tensors_in(value: Any) -> list[torch.Tensor]:
    """The tensors inside op arguments or outputs, in pytree's order; the common cases without pytree."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], dict) and isinstance(value[0], tuple):
        args, kwargs = value  # (args, kwargs) of one call
        flat: Any = [*args, *kwargs.values()] if kwargs else args
    elif isinstance(value, (tuple, list)):
        flat = value
    else:
        return _flattened(value)
    found = []
    for v in flat:
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif isinstance(v, (tuple, list, dict)):  # nested arguments: a shape tuple, a list of tensors to cat
            nested: list[torch.Tensor] = []
            return nested if _plain_walk(flat, nested) else _flattened(flat)
    return found


def _plain_walk(values: Any, found: list[torch.Tensor]) -> bool:
    """Collect the tensors of nested plain tuples, lists and dicts as pytree orders them (dicts in insertion
    order); False on any other container pytree would open (a namedtuple, an OrderedDict, a registered output
    class), which the caller leaves to pytree. A torch.Size holds only ints."""
    for v in values.values() if type(values) is dict else values:
        kind = type(v)
        if kind is tuple or kind is list or kind is dict:
            if not _plain_walk(v, found):
                return False
        elif kind is torch.Size:
            continue
        elif kind in SUPPORTED_NODES:
            return False
        elif isinstance(v, torch.Tensor):
            found.append(v)
        elif isinstance(v, (tuple, list, dict)):
            return False
    return True


def _flattened(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def describe(value: Any, depth: int = 0) -> Any:
    """The shapes and dtypes inside a value: through tuples, lists, dicts and output objects."""
    if isinstance(value, torch.Tensor):
        try:  # TensorMeta.of, inlined (see output_metas): every module call describes its arguments and outputs
            return _KNOWN[value.shape, value.dtype, value.device]
        except Exception:
            return TensorMeta.of(value)
    if depth > 4:
        return type(value).__name__
    if isinstance(value, (tuple, list)):
        return [describe(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): describe(v, depth + 1) for k, v in value.items()}
    fields = getattr(value, "__dataclass_fields__", None)
    if fields is not None:  # Hugging Face ModelOutput and other dataclass outputs
        return {k: describe(getattr(value, k), depth + 1) for k in fields if getattr(value, k, None) is not None}
    if value is None or isinstance(value, (int, float, bool, str)):
        return value
    return type(value).__name__


def structure_text(value: Any) -> str:
    if isinstance(value, TensorMeta):
        return str(value)
    if isinstance(value, list):
        return "(" + ", ".join(structure_text(v) for v in value) + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {structure_text(v)}" for k, v in value.items()) + "}"
    return repr(value)


def structure_dict(value: Any) -> Any:
    if isinstance(value, TensorMeta):
        return value.to_dict()
    if isinstance(value, list):
        return [structure_dict(v) for v in value]
    if isinstance(value, dict):
        return {k: structure_dict(v) for k, v in value.items()}
    return value
