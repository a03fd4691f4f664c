"""Copies of the model for the training checks to train: tfcheck never steps the model it checks.

``copy.deepcopy`` first; a model deepcopy refuses (an attribute that cannot be pickled: simple-hierarchical-
transformer holds a staticmethod object) is rebuilt by the constructor tfcheck called, with the model's parameters,
buffers and requires_grad flags loaded, and the report says so.
"""
from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch.nn as nn

from tfcheck.model.build.memory_limits import Limit
from tfcheck.model.build.sizing import human
from tfcheck.model.facts.memory_budget import limit_for
from tfcheck.report.report import Assumption


class CannotCopy(Exception):
    """The model cannot be copied (nor rebuilt), so tfcheck will not train it (it trains copies only)."""


#: Share of the memory limit a training copy may take: its parameters, their gradients and Adam's two moments.
TRAINING_SHARE = 0.5


def training_copy(subject) -> nn.Module:
    """``copy_model`` of a check's subject, within its memory limit; a copy rebuilt from the constructor is stated
    among the subject's assumptions."""
    def stated(refused: str) -> None:
        if not any(a.key == TRAINING_COPY for a in subject.assumptions):
            subject.assumptions.append(Assumption(
                TRAINING_COPY, "rebuilt by the constructor tfcheck called, the model's parameters and buffers loaded",
                refused))
    return copy_model(subject.model, limit_for(subject), subject.loaded.rebuild, stated)


#: The assumption that says a training copy was rebuilt rather than deep-copied.
TRAINING_COPY = "training copy"


def copy_model(model: nn.Module, limit: Limit | None = None, rebuild: Callable[[], Any] | None = None,
               rebuilt: Callable[[str], None] | None = None) -> nn.Module:
    """A deep copy of the model in eval mode (dropout off, so a descent measures the wiring, not noise); refused
    (CannotCopy) when training it would not fit ``limit``. A model deepcopy refuses (an attribute that cannot be
    pickled) is copied by ``rebuild`` (the constructor tfcheck called) with the model's state loaded into it, and
    ``rebuilt`` is told why."""
    if limit is not None:
        parameters = sum(p.numel() * p.element_size() for p in model.parameters())
        buffers = sum(b.numel() * b.element_size() for b in model.buffers())
        need = 4 * parameters + buffers
        if need > limit.bytes * TRAINING_SHARE:
            raise CannotCopy(
                f"training a copy needs about {human(need)} (its parameters, their gradients and Adam's two moments: "
                f"4 × {human(parameters)}), over {int(TRAINING_SHARE * 100)}% of the {limit.source} "
                f"({human(limit.bytes)}); "
                "declare a larger memory_budget if the machine has it, or shrink the model with kwargs")
    try:
        clone = copy.deepcopy(model)
    except Exception as exc:  # a model holding a file handle, a lock, a C++ object ...
        refused = f"copy.deepcopy of the model raised {type(exc).__name__}: {exc}"
        if rebuild is None:
            raise CannotCopy(refused) from None
        clone = rebuilt_copy(model, rebuild, refused)
        if rebuilt is not None:
            rebuilt(refused)
    return clone.eval()


def rebuilt_copy(model: nn.Module, rebuild: Callable[[], Any], refused: str) -> nn.Module:
    """A fresh build holding the model's parameters and buffers (and their requires_grad), on the model's device."""
    try:
        clone = rebuild()
        clone.load_state_dict(model.state_dict(), strict=True)
    except Exception as exc:  # noqa: BLE001 - whatever the user's constructor raises, the copy is refused
        raise CannotCopy(f"{refused}, and a rebuild with the model's state loaded raised {type(exc).__name__}: "
                         f"{exc}") from None
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
    for name, p in clone.named_parameters():
        p.requires_grad_(name not in frozen)
    device = next((t.device for t in model.parameters()), None)
    return clone.to(device) if device is not None else clone
