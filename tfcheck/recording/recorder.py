"""The recorder core: one recorder that sees, during a forward (and backward), every module call and every
tensor operation, with shapes, dtypes, the module it ran in and the user's source line.

It uses torch's own machinery, and removes all of it on exit, also when the model raises:
- module forward (pre-)hooks give the module-call stack and paths;
- a ``TorchFunctionMode`` sees the Python-level calls with their arguments (``torch.matmul``,
  ``Tensor.view``, ``F.scaled_dot_product_attention(..., scale=...)``, ``masked_fill(mask, value)``);
- a ``TorchDispatchMode`` sees the aten operations inside everything, fused paths and backward included.

Checks that need values, not only shapes, pass ``on_op``: it receives each event with the real arguments
and outputs, so the recorder never keeps tensors alive.
"""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils._python_dispatch import TorchDispatchMode

from tfcheck.frames import file_kind as frame_kind
from tfcheck.frames import model_frame
from tfcheck.recording.hooks import Hook, hooked
from tfcheck.recording.tensor_meta import TensorMeta, describe, structure_dict, structure_text, tensors_in
from tfcheck.recording.tensor_meta import described as _described
from tfcheck.recording.tensor_meta import output_metas as _output_metas

#: Python-level calls that say nothing about the computation (property reads, size queries).
_NOISE = ("__get__", ".dim", ".size", ".numel", ".is_floating_point", ".is_contiguous",
          ".__len__", ".__bool__", ".__index__", ".__format__", ".__repr__", ".__iter__",
          "_has_compatible_shallow_copy_type")
#: Where torch writes Tensor methods in Python (frames.called_by_tfcheck passes over them).
_TENSOR_METHODS = os.path.join("torch", "_tensor.py")


@dataclass
class ModuleCall:
    index: int
    path: str
    cls: str
    depth: int
    parent: int | None
    inputs: Any
    params: int
    outputs: Any = None
    raised: bool = False
    first_op: int = 0
    last_op: int = -1
    input_ids: tuple[int, ...] = ()  # tensor identities, when the recorder tracks them
    output_ids: tuple[int, ...] = ()

    def to_dict(self) -> dict:
        return {"index": self.index, "path": self.path, "class": self.cls, "depth": self.depth,
                "parent": self.parent, "inputs": structure_dict(self.inputs),
                "outputs": structure_dict(self.outputs), "params": self.params, "raised": self.raised}


@dataclass
class OpEvent:
    index: int
    level: str  # "function" (Python-level call) or "aten" (dispatcher)
    name: str
    call: int | None  # index of the innermost module call it ran in
    module: str
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[TensorMeta, ...]
    scalars: dict
    file: str | None
    line: int | None
    phase: str  # "forward" or "backward"
    parent_op: int | None = None  # for aten ops: the function-level call they ran inside
    raised: bool = False
    input_ids: tuple[int, ...] = ()  # tensor identities, when the recorder tracks them
    output_ids: tuple[int, ...] = ()
    by_tfcheck: bool = False  # called by tfcheck's own code (a probe's hook), not by the model

    @property
    def model_forward(self) -> bool:
        """A Python-level op of the model's own forward: what the observers that read a forward's structure see
        (not the aten ops inside it, not the backward, not the ops a probe's hook runs)."""
        return self.level == "function" and self.phase == "forward" and not self.by_tfcheck

    @property
    def short_name(self) -> str:
        """'matmul', 'view', 'scaled_dot_product_attention', 'bmm' — what a reader calls the op."""
        name = self.name.split(".")[-2] if self.level == "aten" and self.name.count(".") >= 2 else self.name
        return name.rsplit(".", 1)[-1]

    def to_dict(self) -> dict:
        return {"index": self.index, "level": self.level, "name": self.name, "call": self.call,
                "module": self.module, "inputs": [m.to_dict() for m in self.inputs],
                "outputs": [m.to_dict() for m in self.outputs], "scalars": self.scalars,
                "file": self.file, "line": self.line, "phase": self.phase, "parent_op": self.parent_op,
                "raised": self.raised}


OnOp = Callable[[OpEvent, tuple, dict, Any], None]


@dataclass
class Recording:
    calls: list[ModuleCall] = field(default_factory=list)
    ops: list[OpEvent] = field(default_factory=list)

    def ops_in(self, call: ModuleCall, level: str | None = None) -> list[OpEvent]:
        return [o for o in self.ops[call.first_op:call.last_op + 1] if level is None or o.level == level]


class Recorder:
    """``with Recorder(model) as rec: model(x)`` records into ``rec.recording``.

    ``functions`` / ``aten`` switch the two op levels; ``aten`` may also be a set of function names whose
    aten internals alone are recorded (the dispatch level costs a Python call per aten op, so a trace that
    shows only the insides of fused calls records only those). ``on_op(event, args, kwargs, out)`` sees
    real values.
    """

    def __init__(self, model: nn.Module, functions: bool = True, aten: bool | frozenset[str] = True,
                 on_op: OnOp | None = None, track_ids: bool = False):
        self.model = model
        self.recording = Recording()
        self.on_op = on_op
        # Identities let a check follow one tensor from op to op (a residual add's operands back to the
        # sublayer that made them). The tensors are kept alive while recording so no id is reused.
        self._alive: list[torch.Tensor] | None = [] if track_ids else None
        self._stack: list[int] = []
        self._hooks = contextlib.ExitStack()
        self._modes: list = []
        self._function_op: int | None = None
        if functions:
            self._modes.append(_FunctionMode(self))
        self._aten_inside = aten if isinstance(aten, frozenset) else None
        self._inside: dict[str, bool] = {}
        if aten is True:
            self._modes.append(_DispatchMode(self))

    def __enter__(self) -> Recorder:
        params = _param_counts(self.model)
        post = self._post_hook()  # the same for every module

        def hooks():
            for path, module in self.model.named_modules():
                yield Hook(module, self._pre_hook(path, params), pre=True, with_kwargs=True)
                yield Hook(module, post, with_kwargs=True)

        try:
            self._hooks.enter_context(hooked(hooks()))
            for mode in self._modes:
                mode.__enter__()
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._remove()
        self._alive = None if self._alive is None else []
        for index in self._stack:  # calls still open when the model raised
            self.recording.calls[index].raised = True
            self.recording.calls[index].last_op = len(self.recording.ops) - 1

    def ids(self, value: Any) -> tuple[int, ...]:
        if self._alive is None:
            return ()
        tensors = tensors_in(value)
        self._alive.extend(tensors)
        return tuple(id(t) for t in tensors)

    def _remove(self) -> None:
        for mode in reversed(self._modes):
            if getattr(mode, "_entered", False):
                mode.__exit__(None, None, None)
                mode._entered = False
        self._hooks.close()

    # ----- module calls ----------------------------------------------------------------------------
    # The hooks run inside the forward, under the function mode: reading the shapes of a call's arguments would
    # send every .shape, .dtype, .device and .is_nested through the mode (most of its calls on a small model),
    # so they read them with it off. Those reads are never recorded either way.
    def _pre_hook(self, path: str, params: dict[int, int]):
        calls, ops, stack = self.recording.calls, self.recording.ops, self._stack

        def hook(module, args, kwargs):
            with torch._C.DisableTorchFunction():
                inputs = describe([*args, kwargs] if kwargs else list(args))
            call = _new(ModuleCall)  # the fields left out keep their defaults
            call.index, call.path, call.cls, call.depth = len(calls), path, type(module).__name__, len(stack)
            call.parent, call.inputs, call.params, call.first_op = stack[-1] if stack else None, inputs, \
                params[id(module)], len(ops)
            if self._alive is not None:
                call.input_ids = self.ids((args, kwargs))
            calls.append(call)
            stack.append(call.index)
        return hook

    def _post_hook(self):
        calls, ops, stack = self.recording.calls, self.recording.ops, self._stack

        def hook(module, args, kwargs, output):
            if stack:
                call = calls[stack.pop()]
                with torch._C.DisableTorchFunction():
                    call.outputs = describe(output)
                if self._alive is not None:
                    call.output_ids = self.ids(output)
                call.last_op = len(ops) - 1
        return hook

    # ----- ops: every recorded op passes here (hundreds in a forward): one frame, the event the one object made
    def observe(self, level: str, name: str, func, args: tuple, kwargs: dict) -> Any:
        """Run one op and record it; aten ops run inside a function-level call point back at it. The event is
        appended before the op runs, so the aten ops inside a function-level call follow it."""
        ops = self.recording.ops
        stack = self._stack
        call = stack[-1] if stack else None
        outer = self._function_op
        event = _new(OpEvent)
        if level == "function":
            # observe <- the mode's __torch_function__ <- the op's caller
            event.file, event.line, by_tfcheck = _origin(sys._getframe(2))
            if by_tfcheck:
                event.by_tfcheck = True
            self._function_op = len(ops)
        elif outer is not None:  # the function-level call it runs inside already found the user's line
            event.parent_op = outer
            event.file, event.line = ops[outer].file, ops[outer].line
        else:
            event.file, event.line = _model_line(sys._getframe(2))
        event.index, event.level, event.name, event.call = len(ops), level, name, call
        event.module = self.recording.calls[call].path if call is not None else ""
        event.inputs, event.scalars = _described(args, kwargs)
        event.outputs = ()
        event.phase = "forward" if _graph_task() == -1 else "backward"
        if self._alive is not None:
            event.input_ids = self.ids((args, kwargs))
        ops.append(event)
        try:
            if level == "function" and self._dispatches_inside(name):
                with _DispatchMode(self):
                    out = func(*args, **kwargs)
            else:
                out = func(*args, **kwargs)
        except BaseException:
            event.raised = True
            raise
        finally:
            self._function_op = outer
        event.outputs = _output_metas(out)
        if self._alive is not None:
            event.output_ids = self.ids(out)
        if self.on_op is not None:
            # An observer's own tensor ops (a NaN test, a clone) are not the model's: keep them out of
            # the recording, the other modes and the observer itself.
            with torch._C.DisableTorchFunction(), torch._C._DisableTorchDispatch():
                self.on_op(event, args, kwargs, out)
        return out

    def _dispatches_inside(self, name: str) -> bool:
        """Whether the aten ops inside this function-level call are recorded (``aten=`` a set of names)."""
        if self._aten_inside is None:
            return False
        if name not in self._inside:
            self._inside[name] = name.rsplit(".", 1)[-1] in self._aten_inside
        return self._inside[name]


_new = object.__new__
_graph_task = torch._C._current_graph_task_id


#: Each function's name as recorded, None for the noise: the mode asks for every call it sees.
_RECORDED_NAMES: dict = {}


def _recorded_name(func) -> str | None:
    """torch's name for a function (resolve_name is slow: it catches warnings on every call), or None for a call
    that says nothing about the computation."""
    name = resolve_name(func) or getattr(func, "__qualname__", repr(func))
    recorded = None if name.endswith(_NOISE) else name
    try:
        _RECORDED_NAMES[func] = recorded
    except TypeError:  # an unhashable callable
        pass
    return recorded


class _Entered:
    """Remembers whether a mode was entered, so an early failure removes only what was installed."""

    def __enter__(self):
        self._entered = True
        return super().__enter__()


class _FunctionMode(_Entered, TorchFunctionMode):
    def __init__(self, recorder: Recorder):
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        try:
            name = _RECORDED_NAMES[func]
        except (KeyError, TypeError):
            name = _recorded_name(func)
        if name is None:
            return func(*args, **(kwargs or {}))
        return self.recorder.observe("function", name, func, args, kwargs or {})


class _DispatchMode(_Entered, TorchDispatchMode):
    def __init__(self, recorder: Recorder):
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        try:
            name = _ATEN_NAMES[func]
        except KeyError:  # str() of an aten op formats its schema's name each time
            name = _ATEN_NAMES[func] = str(func)
        return self.recorder.observe("aten", name, func, args, kwargs or {})


_ATEN_NAMES: dict = {}


def _origin(frame: FrameType | None) -> tuple[str | None, int | None, bool]:
    """(file, line) of the model's line of an op called from ``frame`` (``frames.model_frame``) and whether
    tfcheck's own code called it (``frames.called_by_tfcheck``), each file's kind looked up once."""
    caller = frame
    while caller is not None and caller.f_code.co_filename.endswith(_TENSOR_METHODS):
        caller = caller.f_back
    if caller is None:
        return None, None, False
    kind = _file_kind(caller.f_code.co_filename)
    if caller is frame and kind == "user":  # the common case: the model's own line called it
        return frame.f_code.co_filename, frame.f_lineno, False
    return (*_model_line(frame), kind == "tfcheck")


def _model_line(frame: FrameType | None) -> tuple[str | None, int | None]:
    """``frames.model_frame`` from ``frame`` (the caller of the mode's handler), or (None, None)."""
    while frame is not None and _file_kind(frame.f_code.co_filename) == "tfcheck":
        frame = frame.f_back
    while frame is not None and (kind := _file_kind(frame.f_code.co_filename)) != "tfcheck":
        if kind == "user":
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return None, None


#: Each file's kind (frames' rule), by file name: the walks above ask for a frame or more of every op.
_FILE_KINDS: dict[str, str] = {}


def _file_kind(filename: str) -> str:
    kind = _FILE_KINDS.get(filename)
    if kind is None:
        if len(_FILE_KINDS) > 4096:
            _FILE_KINDS.clear()
        kind = _FILE_KINDS[filename] = frame_kind(filename)
    return kind


def _param_counts(model: nn.Module) -> dict[int, int]:
    """Parameters under each module, each tensor counted once (shared and tied weights too): one walk up the
    tree, each module's parameters gathered from its children's (a module's own ``parameters()`` walks its
    whole subtree, once per module)."""
    gathered: dict[int, dict[int, int]] = {}

    def under(module: nn.Module) -> dict[int, int]:
        if id(module) in gathered:  # shared (or, in a cyclic tree, still being gathered)
            return gathered[id(module)]
        sizes = gathered[id(module)] = {}
        for child in module._modules.values():
            if child is not None:
                sizes.update(under(child))
        sizes.update((id(p), p.numel()) for p in module._parameters.values() if p is not None)
        return sizes

    under(model)
    return {key: sum(sizes.values()) for key, sizes in gathered.items()}


def user_line() -> tuple[str | None, int | None]:
    """The innermost frame of the model's own code (not torch, tfcheck or the standard library, and never the
    code above tfcheck that called it): ``frames.model_frame``."""
    found = model_frame(2)
    return found if found is not None else (None, None)


# The descriptions of tensors live in tensor_meta; the modules that read recordings take them from here too.
__all__ = ["ModuleCall", "OnOp", "OpEvent", "Recorder", "Recording", "TensorMeta", "describe", "structure_dict",
           "structure_text", "tensors_in", "user_line"]
