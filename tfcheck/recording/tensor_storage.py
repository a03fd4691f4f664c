"""Tensors compared by the storage under them and by their values, in any layout.

A model may keep a buffer that is sparse (a graph's adjacency) or nested: it has no data pointer, and torch.equal
and copy_ do not run on it. tfcheck asks whether a tensor is the model's own (by its storage) and puts buffers back
after a forward that wrote them; both must hold for every layout, or a strange buffer stops the battery.
"""
from __future__ import annotations

from typing import Any

import torch


def storage_address(t: torch.Tensor) -> int | None:
    """The address of the storage under ``t``, shared by its views; None for a tensor that has none to compare
    (sparse and nested layouts, meta tensors, functional wrappers)."""
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def owned_storages(tensors: Any) -> set[int]:
    """The storage addresses of ``tensors`` (a model's parameters and buffers), those without one left out."""
    return {a for t in tensors if (a := storage_address(t)) is not None}


def strided(t: torch.Tensor) -> bool:
    return t.layout == torch.strided and not t.is_nested


def beside(saved: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
    """The saved copy on the live tensor's device (a baseline taken on one device, compared on another)."""
    return saved if saved.device == live.device else saved.to(live.device)


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """torch.equal for any layout: a sparse or nested pair compared densely; False where no dense form exists."""
    if strided(a) and strided(b):
        return torch.equal(a, b)
    try:
        return a.layout == b.layout and a.shape == b.shape and torch.equal(a.to_dense(), b.to_dense())
    except (RuntimeError, NotImplementedError, TypeError, AttributeError):
        return False


def put_back_values(live: torch.Tensor, saved: torch.Tensor) -> None:
    """A buffer's values back to its saved copy, keeping the buffer object: in place where the layout allows (a
    forward that wrote BatchNorm statistics or a cache), by replacing its data for a sparse or nested one."""
    if strided(live) and strided(saved):
        if live.shape == saved.shape and not torch.equal(live, saved):
            live.copy_(saved)
    elif not same_values(live, saved):
        live.data = saved
