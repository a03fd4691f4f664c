"""Leave the model exactly as it was: the module tree, parameters and buffers (the objects themselves, their
storage and their values), plain tensor attributes, gradients, train/eval mode, requires_grad, hooks of every
kind (module, tensor and global), the random number generators (CPU and CUDA) and torch's process-wide
settings and modes are restored after every check, whatever the check or the model did. ``placed_on`` runs a
check on another device and puts every tensor back where it was."""
from __future__ import annotations

import contextlib
import operator
import os
import random
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any, cast

import torch
import torch.nn as nn
import torch.nn.modules.module as module_globals
from torch.utils._python_dispatch import _pop_mode

from tfcheck.recording.tensor_storage import beside, put_back_values, strided

#: Every per-module hook registry of nn.Module (the with_kwargs / always_call sets are keyed by hook id).
_HOOK_DICTS = ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
               "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks", "_state_dict_hooks",
               "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks")
#: The process-wide hook registries of torch.nn.modules.module (register_module_forward_hook and friends).
_GLOBAL_HOOK_DICTS = tuple(name for name in dir(module_globals) if name.startswith("_global_") and "hooks" in name)
#: Hook registries on a tensor (register_hook, register_post_accumulate_grad_hook).
_TENSOR_HOOK_ATTRS = ("_backward_hooks", "_post_accumulate_grad_hooks")


class Baseline:
    """One copy of a model's parameters and buffers, taken before its first check: every check restores
    to it, so a battery of twenty checks copies a large model once, not twenty times."""

    def __init__(self, model: nn.Module):
        self.values = {id(t): t.detach().clone() for t in [*model.parameters(), *model.buffers()]}


@contextlib.contextmanager
def preserved(model: nn.Module, copy_parameters: bool = True, baseline: Baseline | None = None) -> Iterator[list[str]]:
    """Restore the model on exit, to ``baseline`` when given (else to a copy taken now).
    ``copy_parameters=False`` (trace_shapes on big models) skips the copy of the parameters: a forward that
    writes its own weights in place is then reported (the names are yielded in the list, filled on exit)
    instead of undone."""
    modules = list(model.modules())
    params, named_buffers = _members(model, modules)
    modes = [(m, m.training) for m in modules]
    tree = _Tree(modules, params, named_buffers)
    flags = [(p, p.requires_grad, p.grad) for p in params]
    if baseline is not None:
        values = baseline.values
    else:
        values = {id(t): t.detach().clone() for t in params} if copy_parameters else {}
    versions = {id(t): t._version for t in params}
    written: list[str] = []
    changed: list[nn.Parameter] = []
    buffers = [(b, baseline.values[id(b)] if baseline is not None and id(b) in baseline.values else b.detach().clone())
               for b in named_buffers]
    hooks = [(m, _hooks_of(m)) for m in modules]
    tensor_hooks = [(p, {a: None if (h := getattr(p, a, None)) is None else dict(h) for a in _TENSOR_HOOK_ATTRS})
                    for p in params]
    process = _ProcessState()
    try:
        yield written
    finally:
        process.restore()
        tree.restore()  # first: the checks below must find the model's own parameter and buffer objects
        with torch.no_grad():
            for p in params:
                if id(p) in values:
                    saved = beside(values[id(p)], p)
                    # The version counter misses writes through .data; the comparison does not.
                    if p._version != versions[id(p)] or not torch.equal(p.detach(), saved):
                        p.copy_(saved)
                elif p._version != versions[id(p)]:
                    changed.append(p)
            if changed:  # named now, in the tree restored above (the names it had on entry)
                written.extend(name for name, p in model.named_parameters() if any(p is c for c in changed))
            for b, saved in buffers:
                put_back_values(b, beside(saved, b))
        for p, requires_grad, grad in flags:  # set only where changed: each write is a call into torch
            if p.requires_grad != requires_grad:
                p.requires_grad_(requires_grad)
            if p.grad is not grad:
                p.grad = grad
        for m, training in modes:
            if m.training is not training:
                m.training = training
        for m, saved_hooks in hooks:
            _put_back_hooks(m, saved_hooks)
        for p, saved_tensor_hooks in tensor_hooks:
            for attr, tensor_entries in saved_tensor_hooks.items():
                current = getattr(p, attr, None)
                if tensor_entries is None and current:
                    setattr(p, attr, None)
                else:
                    _put_back(current, tensor_entries)


def _members(model: nn.Module, modules: list[nn.Module]) -> tuple[list[nn.Parameter], list[torch.Tensor]]:
    """parameters() and buffers() from the one walk of the tree (trace_shapes pays the guard on every call)."""
    own, base = type(model), nn.Module
    if (own.named_parameters, own.named_buffers, own._named_members) != \
            (base.named_parameters, base.named_buffers, base._named_members):
        return list(model.parameters()), list(model.buffers())
    params = {id(p): p for m in modules for p in m._parameters.values() if p is not None}
    buffers = {id(b): b for m in modules for b in m._buffers.values() if b is not None}
    return list(params.values()), list(buffers.values())


def _hooks_of(module: nn.Module) -> dict[str, dict]:
    """Copies of the module's hook registries that hold any hook (most hold none: an empty one is restored to
    empty without a copy)."""
    own = vars(module)
    return {d: dict(own[d]) for d in _HOOK_DICTS if own.get(d)}


def _put_back_hooks(module: nn.Module, saved: dict[str, dict]) -> None:
    own = vars(module)
    for d in _HOOK_DICTS:
        current = own.get(d)
        if current or d in saved:
            _put_back(current, saved.get(d, {}))


def _put_back(current: Any, entries: dict | None) -> None:
    """A hook registry (an OrderedDict keyed by handle id) back to its saved entries, in place."""
    if current is not None and entries is not None and current != entries:  # an OrderedDict equals a dict by items
        current.clear()
        current.update(entries)


class _Tree:
    """The model's structure by identity: each module's submodules, parameters and buffers (the objects, and
    each parameter's and buffer's storage, dtype and shape) and its plain tensor and scalar attributes (a KV
    cache and its length).
    A forward that reassigns ``self.step = self.step + 1``, ``p.data = ...``, ``self.head.bias =
    nn.Parameter(...)`` or adds and deletes submodules gets its original objects back."""

    def __init__(self, modules: list[nn.Module], parameters: list[nn.Parameter], buffers: list[torch.Tensor]):
        self.modules = [(m, dict(m._modules), dict(m._parameters), dict(m._buffers), dict(vars(m))) for m in modules]
        self.data = {id(t): (t, t.data) for t in [*parameters, *buffers]}

    def restore(self) -> None:
        for module, children, parameters, buffers, attributes in self.modules:
            stores: tuple[tuple[dict[str, Any], dict[str, Any]], ...] = (
                (module._modules, children), (module._parameters, parameters), (module._buffers, buffers))
            for live, saved in stores:
                if (live or saved) and not _same(live, saved) and \
                        (live.keys() != saved.keys() or any(live[k] is not v for k, v in saved.items())):
                    live.clear()
                    live.update(saved)
            now = vars(module)
            if _same(now, attributes):  # the common case, decided without a look at each attribute
                continue
            for name in [k for k, v in now.items() if k not in attributes and _state_like(v)]:
                del now[name]
            for name, value in attributes.items():
                if now.get(name, _MISSING) is not value and (_state_like(value) or _state_like(now.get(name))):
                    now[name] = value
        for tensor, data in self.data.values():
            # the tensor's own pointer, dtype and shape are its .data's (reading .data makes a new tensor each time)
            # (a sparse or nested tensor has no data pointer to compare: it is put back regardless)
            if not strided(tensor) or tensor.data_ptr() != data.data_ptr() or tensor.dtype != data.dtype or \
                    tensor.shape != data.shape:
                tensor.data = data


_MISSING = object()


def _same(live: dict, saved: dict) -> bool:
    """The same keys in the same order, each holding the very object it held."""
    return len(live) == len(saved) and list(live) == list(saved) and all(map(operator.is_, live.values(),
                                                                            saved.values()))
#: Plain values a forward keeps as state beside its tensors: a cache's length next to its buffer
#: (rotary-embedding-torch's ``cached_freqs_seq_len``), a step counter. Restored with the tensors, or the
#: restored buffer and a stale length disagree and every later forward reads the wrong cache.
_PLAIN_STATE = (bool, int, float, str, type(None))


def _state_like(value: Any) -> bool:
    return isinstance(value, (torch.Tensor, *_PLAIN_STATE))


class _ProcessState:
    """What a forward or a check can change outside the model: the random generators, torch's default
    dtype and device, grad and anomaly modes, the stacks of torch function and dispatch modes (a model that
    enters a mode and never leaves it), global module hooks, torch's backend flags, thread count,
    determinism and matmul precision, the warning filters (a model that silences warnings silences
    tfcheck and ``-W``), the working directory and ``sys.path``."""

    def __init__(self):
        self.global_hooks = {name: dict(getattr(module_globals, name)) for name in _GLOBAL_HOOK_DICTS}
        self.flags = _backend_flags()
        self.threads = torch.get_num_threads()
        self.deterministic = (torch.are_deterministic_algorithms_enabled(),
                              torch.is_deterministic_algorithms_warn_only_enabled())
        self.matmul_precision = torch.get_float32_matmul_precision()
        self.default_device = torch.get_default_device()
        self.warning_filters = list(warnings.filters)
        self.cwd = os.getcwd()
        self.sys_path = list(sys.path)
        self.python = random.getstate()
        self.numpy = _numpy_state()
        self.cpu = torch.get_rng_state()
        # Only when CUDA is already initialised: saving its state must not initialise it.
        self.cuda = torch.cuda.get_rng_state_all() if _cuda_initialized() else None
        self.default_dtype, self.grad_enabled = torch.get_default_dtype(), torch.is_grad_enabled()
        self.anomaly = torch.is_anomaly_enabled()
        self.function_modes = torch._C._len_torch_function_stack()
        self.dispatch_modes = torch._C._len_torch_dispatch_stack()

    def restore(self) -> None:
        _pop_down_to(self.function_modes, torch._C._len_torch_function_stack, torch._C._pop_torch_function_stack)
        _pop_down_to(self.dispatch_modes, torch._C._len_torch_dispatch_stack, _pop_mode)
        random.setstate(self.python)
        _set_numpy_state(self.numpy)
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        elif _cuda_initialized():
            _reseed_fresh_cuda()
        torch.set_default_dtype(self.default_dtype)
        torch.set_grad_enabled(self.grad_enabled)
        torch.set_anomaly_enabled(self.anomaly)
        for name, entries in self.global_hooks.items():
            _put_back(getattr(module_globals, name), entries)
        _set_backend_flags(self.flags)
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        if (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()) \
                != self.deterministic:
            torch.use_deterministic_algorithms(self.deterministic[0], warn_only=self.deterministic[1])
        if torch.get_float32_matmul_precision() != self.matmul_precision:
            torch.set_float32_matmul_precision(self.matmul_precision)
        if torch.get_default_device() != self.default_device:
            torch.set_default_device(self.default_device)
        if warnings.filters != self.warning_filters:
            # a list at runtime (typeshed declares it a Sequence)
            cast("list[Any]", warnings.filters)[:] = self.warning_filters
            # The module caches its filters (an internal of CPython's warnings, absent on some versions).
            getattr(warnings, "_filters_mutated", lambda: None)()
        if os.getcwd() != self.cwd:
            os.chdir(self.cwd)
        sys.path[:] = self.sys_path


#: torch.backends switches a model may flip: (module, attribute) for the boolean ones that exist here.
#: (TF32 is not among them: float32_matmul_precision sets it, and mixing its legacy switches with that API makes
#: torch refuse to read the precision at all.)
_BACKEND_FLAGS = (("cudnn", "enabled"), ("cudnn", "benchmark"), ("cudnn", "deterministic"), ("mkldnn", "enabled"),
                  ("cuda.matmul", "allow_fp16_reduced_precision_reduction"),
                  ("cuda.matmul", "allow_bf16_reduced_precision_reduction"))
#: The SDPA backend switches (torch.backends.cuda.enable_flash_sdp and friends, which apply on CPU too).
_SDPA_BACKENDS = ("flash", "mem_efficient", "math", "cudnn")


def _backend(path: str) -> Any:
    target: Any = torch.backends
    for part in path.split("."):
        target = getattr(target, part, None)
    return target


def _backend_flags() -> dict:
    flags: dict = {}
    for path, attr in _BACKEND_FLAGS:
        with contextlib.suppress(Exception):
            flags[(path, attr)] = getattr(_backend(path), attr)
    for name in _SDPA_BACKENDS:
        with contextlib.suppress(Exception):
            flags[("sdp", name)] = getattr(torch.backends.cuda, f"{name}_sdp_enabled")()
    return flags


def _set_backend_flags(flags: dict) -> None:
    now = _backend_flags()
    for (path, attr), value in flags.items():
        if now.get((path, attr)) == value:
            continue
        with contextlib.suppress(Exception):
            if path == "sdp":
                getattr(torch.backends.cuda, f"enable_{attr}_sdp")(value)
            else:
                setattr(_backend(path), attr, value)


def _pop_down_to(depth: int, length: Callable[[], int], pop: Callable[[], Any]) -> None:
    while length() > depth:
        pop()


def _cuda_initialized() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def _reseed_fresh_cuda() -> None:
    """CUDA was first initialised during the block: put each device's generator back to its fresh state
    (its initial seed, offset 0), the state it would have had had nothing drawn from it."""
    for generator in torch.cuda.default_generators:
        generator.manual_seed(generator.initial_seed())


def _numpy_state():
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        return None
    return np.random.get_state()


def _set_numpy_state(state: Any) -> None:
    if state is not None:
        import numpy as np

        np.random.set_state(state)


# ----- devices ---------------------------------------------------------------------------------------

@contextlib.contextmanager
def placed_on(model: nn.Module, device: torch.device | str | None) -> Iterator[bool]:
    """The model on ``device`` for the block, placed as ``model.to(device)`` would place it (parameters
    keep their identity where torch can move them in place, buffers are replaced); yields whether
    anything moved. On exit every parameter, gradient and buffer is again the very tensor it was, with its
    original data on its original device: nothing is copied back, so nothing the block did to the moved
    copies survives."""
    undo: list[Callable[[], None]] = []
    try:
        target = None if device is None else torch.device(device)
        moved = target is not None and any(_elsewhere(t, target) for t in [*model.parameters(), *model.buffers()])
        if moved and target is not None:  # moved implies a target
            _move(model, target, undo)
        yield moved
    finally:
        for step in reversed(undo):
            step()


def _elsewhere(t: torch.Tensor, device: torch.device) -> bool:
    if t.device.type != device.type:
        return True
    return device.index is not None and t.device.index != device.index


def _move(model: nn.Module, device: torch.device, undo: list[Callable[[], None]]) -> None:
    moved_params: dict[int, nn.Parameter] = {}
    moved_buffers: dict[int, torch.Tensor] = {}
    for module in model.modules():
        for key, p in list(module._parameters.items()):
            if p is None:
                continue
            if id(p) not in moved_params:  # a tied weight is moved once and stays tied
                moved_params[id(p)] = _move_parameter(p, device, undo)
            if moved_params[id(p)] is not p:
                module._parameters[key] = moved_params[id(p)]
                undo.append(_putting_back(module, "_parameters", key, p))
        for key, b in list(module._buffers.items()):
            if b is None:
                continue
            if id(b) not in moved_buffers:
                with torch.no_grad():
                    moved_buffers[id(b)] = b.to(device)
            module._buffers[key] = moved_buffers[id(b)]
            undo.append(_putting_back(module, "_buffers", key, b))


def _putting_back(module: nn.Module, store: str, key: str, original: torch.Tensor) -> Callable[[], None]:
    """The undo step that puts ``original`` back under ``key`` in the module's ``_parameters`` or ``_buffers``
    (the registry read when the step runs)."""
    return lambda: getattr(module, store).__setitem__(key, original)


def _move_parameter(p: nn.Parameter, device: torch.device, undo: list[Callable[[], None]]) -> nn.Parameter:
    """The parameter on ``device``: the same object with its data swapped where torch allows it (CPU and
    CUDA), else a new Parameter (as Module._apply does); its gradient goes along."""
    with torch.no_grad():
        data = p.data.to(device)
    grad = p.grad
    if torch._has_compatible_shallow_copy_type(p, data) and \
            not torch.__future__.get_overwrite_module_params_on_conversion():
        original = p.data
        p.data = data
        undo.append(lambda: setattr(p, "data", original))
        if grad is not None:
            original_grad = grad.data
            grad.data = grad.data.to(device)
            undo.append(lambda: setattr(grad, "data", original_grad))
        return p
    moved = nn.Parameter(data, requires_grad=p.requires_grad)
    if grad is not None:
        moved.grad = grad.detach().to(device)
    return moved
