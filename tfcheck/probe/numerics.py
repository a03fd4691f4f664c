"""Shared by the numerics checks: ``on_op`` observers for the recorder that find the first op producing a
NaN or Inf, and the constants a model fills masks with, each with its module path and source line.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
from torch.utils._pytree import tree_flatten

from tfcheck.recording.recorder import OpEvent, tensors_in
from tfcheck.recording.tensor_storage import owned_storages

FLOAT16_MAX = float(torch.finfo(torch.float16).max)
BFLOAT16_MAX = float(torch.finfo(torch.bfloat16).max)
#: Ops that write a constant into a tensor: their scalar is a fill value, the tensor they write into the dtype.
FILLS = frozenset({"masked_fill", "masked_fill_", "fill_", "full", "full_like", "where", "new_full"})
ADDS = frozenset({"add", "__add__", "__radd__", "__iadd__", "add_"})


def all_finite(t: torch.Tensor) -> bool:
    """No NaN and no Inf in a float tensor (see ``_nonfinite`` for why a sum decides it first)."""
    return not any(_nonfinite(t))


def _nonfinite(t: torch.Tensor) -> tuple[bool, bool]:
    """(has NaN, has ±Inf); integer and boolean tensors have neither."""
    if not (t.is_floating_point() or t.is_complex()) or t.is_nested or t.numel() == 0:
        return False, False
    # One reduction decides the common case: a sum is finite only if every element is (an overflowing
    # sum falls through to the exact test). Checked on every op of a recorded backward, so it matters.
    # (summed in float32 at least, so that a half-precision sum of large activations does not overflow)
    wide = None if t.is_complex() else torch.float64 if t.dtype == torch.float64 else torch.float32
    if bool(torch.isfinite(t.detach().sum(dtype=wide))):
        return False, False
    return bool(torch.isnan(t).any()), bool(torch.isinf(t).any())


def summary(t: torch.Tensor) -> dict:
    """What a tensor held: shape, dtype, NaN/Inf counts, and whether whole rows (last axis) were −inf."""
    out: dict[str, Any] = {"shape": tuple(t.shape), "dtype": str(t.dtype).replace("torch.", "")}
    if t.is_floating_point() and t.numel() and not t.is_nested:
        d = t.detach()
        out.update({"nan": int(torch.isnan(d).sum()), "inf": int(torch.isinf(d).sum())})
        if d.dim() >= 1 and d.shape[-1] > 0:
            rows = (d == float("-inf")).all(-1)
            out["rows_all_minus_inf"] = int(rows.sum())
            finite = d[torch.isfinite(d)]
            if finite.numel():
                out["finite_range"] = (float(finite.min()), float(finite.max()))
    return out


@dataclass
class Producer:
    """The op whose output first held a NaN (or an Inf) while none of its inputs did."""

    event: OpEvent
    what: str  # "NaN" or "Inf"
    inputs: list[dict]
    output: dict

    def describe(self) -> str:
        e = self.event
        where = f"'{e.module or '<root>'}'" + (f" at {e.file}:{e.line}" if e.file else "")
        rows = sum(i.get("rows_all_minus_inf", 0) for i in self.inputs)
        cause = f"; its input had {rows} rows that were entirely −inf" if rows else ""
        return f"{e.short_name} ({e.name}, {e.phase}) in {where} produced {self.what}{cause}"

    def to_dict(self) -> dict:
        e = self.event
        return {"op": e.name, "module": e.module, "file": e.file, "line": e.line, "phase": e.phase,
                "produced": self.what, "inputs": self.inputs, "output": self.output}


#: Ops whose output is uninitialised memory (F.dropout's mask starts as empty_like, then bernoulli_ fills it).
_UNINITIALISED = ("empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided", "empty_permuted")


def _allocates_uninitialised(name: str) -> bool:
    op = name.split(".")[-2] if name.startswith("aten.") and name.count(".") >= 2 else name.rsplit(".", 1)[-1]
    return op in _UNINITIALISED


@dataclass
class NonFiniteTracker:
    """``on_op``: the first NaN producer and the first Inf producer (an Inf written from a scalar, such as
    ``masked_fill(mask, -inf)``, is an intentional fill and is left out)."""

    nan: Producer | None = None
    inf: Producer | None = None
    ops: int = 0

    def __call__(self, event: OpEvent, args: tuple, kwargs: dict, out: Any) -> None:
        self.ops += 1
        if self.nan is not None and self.inf is not None and event.level == "aten":
            return
        if _allocates_uninitialised(event.name):
            return  # its output is whatever the memory held (NaN at random); the op that fills it is judged
        outs = tensors_in(out)
        flags = [_nonfinite(t) for t in outs]
        out_nan, out_inf = any(f[0] for f in flags), any(f[1] for f in flags)
        if not (out_nan or out_inf):
            return
        ins = tensors_in((args, kwargs))
        in_flags = [_nonfinite(t) for t in ins]
        in_nan, in_inf = any(f[0] for f in in_flags), any(f[1] for f in in_flags)
        scalar_inf = any(isinstance(v, float) and v in (float("inf"), float("-inf"))
                         for v in tree_flatten((args, kwargs))[0])
        if out_nan and not in_nan and (self.nan is None or self.nan.event.parent_op == event.index):
            # a function-level op finishes after the aten ops inside it: it names the user's call
            self.nan = Producer(event, "NaN", [summary(t) for t in ins[:4]], summary(outs[0]))
        if out_inf and not in_inf and not in_nan and not scalar_inf and (
                self.inf is None or self.inf.event.parent_op == event.index):
            self.inf = Producer(event, "Inf", [summary(t) for t in ins[:4]], summary(outs[0]))


@dataclass
class Fill:
    """A constant a model wrote into a float tensor (a mask fill, an additive mask's value)."""

    event: OpEvent
    value: float
    dtype: torch.dtype
    how: str  # "fill value" or "additive mask"

    @property
    def tracks_dtype(self) -> bool:
        """The value is the extreme of the very dtype it fills (torch.finfo(x.dtype).min): it follows the
        dtype under autocast, so it never overflows."""
        info = torch.finfo(self.dtype)
        return self.value in (float(info.min), float(info.max), float(info.min) / 2)

    def overflows(self) -> list[str]:
        """The half precisions this constant does not fit in (it becomes ±inf there)."""
        if self.tracks_dtype or self.value in (float("inf"), float("-inf")) or self.value != self.value:
            return []
        return [name for name, top in (("float16", FLOAT16_MAX), ("bfloat16", BFLOAT16_MAX)) if abs(self.value) > top]

    def to_dict(self) -> dict:
        e = self.event
        return {"value": self.value, "into_dtype": str(self.dtype).replace("torch.", ""), "how": self.how,
                "op": e.name, "module": e.module, "file": e.file, "line": e.line,
                "overflows": self.overflows()}


@dataclass
class FillRecorder:
    """``on_op``: the constants written into float tensors by fills, and the extreme of additive masks
    (a tensor of zeros and one large negative constant added to the scores)."""

    model: nn.Module
    fills: list[Fill] = field(default_factory=list)

    def __post_init__(self):
        self._owned = owned_storages((*self.model.parameters(), *self.model.buffers()))

    def __call__(self, event: OpEvent, args: tuple, kwargs: dict, out: Any) -> None:
        if event.level != "function" or event.phase != "forward":
            return
        name = event.short_name
        result = out if isinstance(out, torch.Tensor) else None
        if result is None or not result.is_floating_point():
            return
        if name in FILLS:
            for value in _fill_scalars(name, args, kwargs):
                self.fills.append(Fill(event, value, result.dtype, "fill value"))
        elif name in ADDS or name == "scaled_dot_product_attention":
            operands: list[Any] = [kwargs.get("attn_mask")] if name == "scaled_dot_product_attention" \
                else list(args[:2])
            if name == "scaled_dot_product_attention" and len(args) > 3:
                operands = [args[3]]
            for t in operands:
                mask_value = _additive_mask_value(t)
                if mask_value is not None:
                    self.fills.append(Fill(event, mask_value, t.dtype, "additive mask"))


def _fill_scalars(name: str, args: tuple, kwargs: dict) -> list[float]:
    if name in ("masked_fill", "masked_fill_"):
        candidates = [args[2] if len(args) > 2 else kwargs.get("value")]
    elif name == "fill_":
        candidates = [args[1] if len(args) > 1 else kwargs.get("value")]
    elif name in ("full", "new_full"):
        candidates = [args[-1] if args else None, kwargs.get("fill_value")]
    elif name == "full_like":
        candidates = [args[1] if len(args) > 1 else kwargs.get("fill_value")]
    else:  # where(cond, x, y): scalar branches
        candidates = list(args[1:3])
    out = []
    for v in candidates:
        if isinstance(v, torch.Tensor) and v.numel() == 1 and v.is_floating_point():
            v = float(v)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append(float(v))
    return out


def _additive_mask_value(t: Any) -> float | None:
    """The large negative constant of an additive mask: a float tensor holding only 0 and one value
    below -1e3 (a mask, not activations). None for anything else."""
    if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.numel() < 2 or t.is_nested:
        return None
    d = t.detach()
    low = float(d.min())
    if not low < -1e3 or low == float("-inf"):
        return None
    if not bool(((d == 0) | (d == low)).all()):
        return None
    return low
