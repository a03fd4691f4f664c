"""Module hooks that never outlive the block that needs them: tfcheck promises to leave the model under test
as it found it, so every forward and pre-forward hook it installs goes through ``hooked()``, which removes
each one in ``finally``, whether the forward returned, raised or was stopped by the budget, and also when
installing a later hook failed half-way."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

import torch.nn as nn


class Hook(NamedTuple):
    """One hook to install: ``fn`` on ``module``, before its forward (``pre``) or after it, with the
    forward's keyword arguments passed too where ``with_kwargs`` (torch's own flag). A named tuple: the
    recorder makes two per module on every trace, and a frozen dataclass costs several times as much to make."""

    module: nn.Module
    fn: Callable
    pre: bool = False
    with_kwargs: bool = False


@contextlib.contextmanager
def hooked(hooks: Iterable[Hook]) -> Iterator[None]:
    """Install ``hooks`` (read lazily, so a generator over the model's modules works) for the block."""
    handles = []
    try:
        for hook in hooks:
            register = hook.module.register_forward_pre_hook if hook.pre else hook.module.register_forward_hook
            handles.append(register(hook.fn, with_kwargs=hook.with_kwargs))
        yield
    finally:
        for handle in reversed(handles):
            handle.remove()
