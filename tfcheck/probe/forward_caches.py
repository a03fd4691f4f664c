"""Tensors a forward cached on the model: a plain attribute that was absent or None when tfcheck built the model
and holds a tensor now (a look-ahead mask or a rotary table built on first use, ``if self.mask_cache is None:
self.mask_cache = self.build_mask_cache(idx)``), and a block that lets one forward build them again.

A recorded forward reads such a cache (``self.mask_cache[:, :, :T, :T]``) but the ops that built it ran in an
earlier forward, so a check that walks a tensor back to the line that made it stops at the read. Unsetting the
caches for one recorded forward makes the model's own first-use path run under the recorder; the cached objects
are put back when the block ends, raised or not, so the model ends as it was.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn


@dataclass(frozen=True)
class Cache:
    """One attribute a forward filled: the module, its path, the name, and how it was when the build ended."""

    module: nn.Module
    path: str
    name: str
    held_none: bool  # False: absent when the build ended


def _holds_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return not isinstance(value, nn.Parameter)
    return isinstance(value, (tuple, list)) and bool(value) and all(isinstance(v, torch.Tensor) for v in value)


def forward_caches(model: nn.Module, attributes: dict[str, dict[str, bool]] | None) -> list[Cache]:
    """The tensor attributes a forward filled since the build, from the build's record of each module's
    attributes (``ConstructionSites.attributes``; None for a model tfcheck did not build: none are known)."""
    if not attributes:
        return []
    found = []
    for path, module in model.named_modules():
        built = attributes.get(path)
        if built is None:  # a module made after the build (by a forward too): its own attributes are not known
            continue
        for name, value in vars(module).items():
            if _holds_tensor(value) and built.get(name, True):
                found.append(Cache(module, path, name, name in built))
    return found


@contextlib.contextmanager
def unset(caches: list[Cache]) -> Iterator[None]:
    """Put each cache back as the build left it (None, or absent) for the block, and the cached object back
    after; written to the instance dict so no ``__setattr__`` of the model runs."""
    saved = [(c, c.module.__dict__[c.name]) for c in caches if c.name in c.module.__dict__]
    try:
        for cache, _ in saved:
            if cache.held_none:
                cache.module.__dict__[cache.name] = None
            else:
                del cache.module.__dict__[cache.name]
        yield
    finally:
        for cache, value in saved:
            cache.module.__dict__[cache.name] = value
