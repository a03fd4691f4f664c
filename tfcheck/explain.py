"""The forward-error explainer: an exception from the model becomes a finding that names the innermost
module running, the shapes it received, the user's source line and the troubleshooting row."""
from __future__ import annotations

import contextlib
import os
import traceback
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
import torch.nn as nn

from tfcheck import table
from tfcheck.findings import Location


@dataclass
class ModuleStack:
    """Module calls in flight: pushed by a forward pre-hook, popped by a forward hook. After an exception
    the entries still on the stack are the modules that were running when it was raised."""

    entries: list[tuple[str, nn.Module, list]] = field(default_factory=list)

    def innermost(self) -> tuple[str, nn.Module, list] | None:
        return self.entries[-1] if self.entries else None


@contextlib.contextmanager
def tracking(model: nn.Module) -> Iterator[ModuleStack]:
    """Track the module stack during calls of ``model``; every hook is removed on exit."""
    stack = ModuleStack()
    handles = []
    try:
        for name, module in model.named_modules():
            handles.append(module.register_forward_pre_hook(_push(stack, name), with_kwargs=True))
            handles.append(module.register_forward_hook(_pop(stack)))
        yield stack
    finally:
        for h in handles:
            h.remove()


def _push(stack: ModuleStack, name: str):
    def hook(module, args, kwargs):
        stack.entries.append((name, module, [shape_of(a) for a in args] + [
            f"{k}={shape_of(v)}" for k, v in kwargs.items() if isinstance(v, torch.Tensor)]))
    return hook


def _pop(stack: ModuleStack):
    def hook(module, args, output):
        if stack.entries:
            stack.entries.pop()
    return hook


def shape_of(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{tuple(value.shape)} {str(value.dtype).replace('torch.', '')}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(shape_of(v) for v in value) + ")"
    return type(value).__name__


@dataclass(frozen=True)
class Explanation:
    message: str
    location: Location
    row: str
    evidence: dict


def explain(exc: BaseException, stack: ModuleStack, what: str) -> Explanation:
    """Describe an exception raised by the model during ``what`` (e.g. 'forward at batch 3, length 7')."""
    text = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    inner = stack.innermost()
    module_path = inner[0] if inner else None
    detail = ""
    evidence: dict = {"exception": text, "during": what}
    if inner is not None:
        name, module, shapes = inner
        evidence["module_class"] = type(module).__name__
        evidence["module_inputs"] = shapes
        detail = f" in '{name or '<root>'}' ({type(module).__name__}) which received {', '.join(shapes) or 'no tensors'}"
        detail += _module_hint(module, shapes)
    file, line = user_frame(exc)
    matched = table.match_error(str(exc))
    row = matched.id if matched else "forward-fails"
    message = f"the model raised during {what}: {text}{detail}."
    return Explanation(message, Location(module_path, file, line), row, evidence)


def _module_hint(module: nn.Module, shapes: list[str]) -> str:
    if isinstance(module, nn.Linear) and shapes and shapes[0].startswith("("):
        last = shapes[0].split(")")[0].split(",")[-1].strip()
        if last and last != str(module.in_features):
            return f": Linear expects in_features={module.in_features}, got last dim {last}"
    if isinstance(module, nn.Embedding):
        return f": Embedding has num_embeddings={module.num_embeddings} (ids must be below it)"
    return ""


def user_frame(exc: BaseException) -> tuple[str | None, int | None]:
    """The innermost traceback frame in the user's code: not torch, not tfcheck, not the standard library."""
    frames = traceback.extract_tb(exc.__traceback__)
    torch_dir = os.path.dirname(torch.__file__)
    own_dir = os.path.dirname(os.path.abspath(__file__))
    stdlib = os.path.dirname(os.__file__)
    for frame in reversed(frames):
        path = os.path.abspath(frame.filename)
        if path.startswith((torch_dir, own_dir)) or (path.startswith(stdlib) and "site-packages" not in path):
            continue
        return _short_path(path), frame.lineno
    return None, None


def _short_path(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path
