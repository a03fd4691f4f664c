"""Which module is running: a stack kept by forward pre/post hooks while ``tracking(model)`` is active, with
the shapes (and the values) each running module received. Explainers read it when the model raises."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from tfcheck.recording.hooks import Hook, hooked


@dataclass
class ModuleStack:
    """Module calls in flight: pushed by a forward pre-hook, popped by a forward hook. After an exception
    the entries still on the stack are the modules that were running when it was raised.

    ``values`` holds, beside each entry, the tensors it was called with (read by the diagnosers for the
    largest token id or the attention shape; empty for stacks built by hand); ``model`` is the root."""

    entries: list[tuple[str, nn.Module, list]] = field(default_factory=list)
    values: list[tuple] = field(default_factory=list)
    model: nn.Module | None = None

    def innermost(self) -> tuple[str, nn.Module, list] | None:
        return self.entries[-1] if self.entries else None

    def innermost_values(self) -> tuple:
        return self.values[-1] if self.values and len(self.values) == len(self.entries) else ()

    def root(self) -> nn.Module | None:
        return self.model if self.model is not None else (self.entries[0][1] if self.entries else None)


@contextlib.contextmanager
def tracking(model: nn.Module) -> Iterator[ModuleStack]:
    """Track the module stack during calls of ``model``; every hook is removed on exit."""
    stack = ModuleStack(model=model)

    def hooks():
        for name, module in model.named_modules():
            yield Hook(module, push(stack, name), pre=True, with_kwargs=True)
            yield Hook(module, pop(stack))

    with hooked(hooks()):
        yield stack


def push(stack: ModuleStack, name: str):
    def hook(module, args, kwargs):
        if name == "" and module is stack.model:
            # A new call of the root: entries left by an earlier call that raised (and was caught) are stale.
            stack.entries.clear()
            stack.values.clear()
        stack.entries.append((name, module, [shape_of(a) for a in args] + [
            f"{k}={shape_of(v)}" for k, v in kwargs.items() if isinstance(v, torch.Tensor)]))
        stack.values.append(tuple(args) + tuple(v for v in kwargs.values() if isinstance(v, torch.Tensor)))
    return hook


def pop(stack: ModuleStack):
    def hook(module, args, output):
        if stack.entries:
            stack.entries.pop()
        if stack.values:
            stack.values.pop()
    return hook


def shape_of(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        if value.is_nested:  # nn.TransformerEncoder's padded fast path: a nested tensor has no sizes
            return f"nested tensor of {value.size(0)} {str(value.dtype).replace('torch.', '')}"
        return f"{tuple(value.shape)} {str(value.dtype).replace('torch.', '')}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(shape_of(v) for v in value) + ")"
    return type(value).__name__
