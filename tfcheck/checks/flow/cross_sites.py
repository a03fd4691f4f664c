"""What cross.dependence records at each module that receives both sides of a seq2seq forward: the call,
which per-sample tensors are target-side and which source-side, and how far an output moved."""
from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
import torch.nn as nn

from tfcheck.report.findings import Location

#: The check's id and its rows, shared by its two halves (per-layer attribution and source padding).
ID = "cross.dependence"
ROW_SOURCE = "cross-attention-ignores-source"
ROW_PAD = "source-padding-reaches-cross-attention"
#: Real source lengths of the padded samples: distinct from the target length, the head count and each other.
REAL_LENGTHS = (3, 6)


@dataclass
class CrossCall:
    path: str
    cls: str
    parent: int | None
    both: bool  # receives a target-length and a source-length tensor
    change: float = 0.0
    tol: float = 0.0
    has_output: bool = False
    module: nn.Module | None = None
    file: str | None = None  # the user's line that made the call
    line: int | None = None


@dataclass
class Sides:
    """Which per-sample tensors are target-side and which source-side, by their length axis."""

    batch: int
    target_length: int
    source_length: int

    def side(self, value) -> str | None:
        if (isinstance(value, torch.Tensor) and not value.is_nested and value.dim() >= 2
                and value.shape[0] == self.batch):
            if value.shape[1] == self.target_length:
                return "target"
            if value.shape[1] == self.source_length:
                return "source"
        return None


def max_change(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    diff = torch.nan_to_num((a.detach().double() - b.detach().double()).abs(), nan=float("inf"))
    return float(diff.max()) if diff.numel() else 0.0


def wiring_call(deaf: CrossCall, reading: list[CrossCall],
                calls: list[CrossCall]) -> tuple[CrossCall, CrossCall] | None:
    """(the call inside ``deaf`` that stands where a sibling of it, another layer of the same stack, calls a module
    that reads the source; that reading call): the first is the call that passes ``deaf``'s sublayer the wrong keys
    and values. None where no layer of the stack reads the source, or ``deaf`` has no such sublayer."""
    stack = deaf.path.rpartition(".")[0]
    for call in reading:
        parts = call.path.split(".")
        for depth in range(1, len(parts)):
            sibling = ".".join(parts[:depth])
            if sibling != deaf.path and sibling.rpartition(".")[0] == stack:
                wanted = deaf.path + call.path[len(sibling):]
                found = next((c for c in calls if c.path == wanted and c.line), None)
                if found is not None:
                    return found, call
    return None


def location_of(call: CrossCall) -> Location:
    if call.module is None:
        return Location(module=call.path)
    try:
        cls = type(call.module)
        return Location(module=call.path, file=inspect.getsourcefile(cls), line=inspect.getsourcelines(cls.forward)[1])
    except (TypeError, OSError, AttributeError):
        return Location(module=call.path)
