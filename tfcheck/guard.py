"""Leave the model exactly as it was: parameters, buffers, gradients, train/eval mode, requires_grad,
hooks and the random number generators are restored after every check, whatever the check or the model did."""
from __future__ import annotations

import contextlib
import random
from typing import Iterator

import torch
import torch.nn as nn

_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
               "_state_dict_hooks", "_load_state_dict_pre_hooks")


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
    modes = [(m, m.training) for m in model.modules()]
    params = list(model.named_parameters())
    flags = [(p, p.requires_grad, p.grad) for _, p in params]
    if baseline is not None:
        values = baseline.values
    else:
        values = {id(t): t.detach().clone() for _, t in params} if copy_parameters else {}
    versions = {id(t): t._version for _, t in params}
    written: list[str] = []
    buffers = [(b, baseline.values[id(b)] if baseline is not None and id(b) in baseline.values else b.detach().clone())
               for _, b in model.named_buffers()]
    hooks = [(m, {d: dict(getattr(m, d, {})) for d in _HOOK_DICTS}) for m in model.modules()]
    py_state = random.getstate()
    np_state = _numpy_state()
    # Process-wide torch settings a model's forward (or a check) could flip.
    default_dtype, grad_enabled = torch.get_default_dtype(), torch.is_grad_enabled()
    anomaly = torch.is_anomaly_enabled()
    try:
        with torch.random.fork_rng(devices=[]):
            yield written
    finally:
        random.setstate(py_state)
        _set_numpy_state(np_state)
        torch.set_default_dtype(default_dtype)
        torch.set_grad_enabled(grad_enabled)
        torch.set_anomaly_enabled(anomaly)
        with torch.no_grad():
            for name, p in params:
                if id(p) in values:
                    # The version counter misses writes through .data; the comparison does not.
                    if p._version != versions[id(p)] or not torch.equal(p.detach(), values[id(p)]):
                        p.copy_(values[id(p)])
                elif p._version != versions[id(p)]:
                    written.append(name)
            for b, saved in buffers:
                if b.shape == saved.shape and not torch.equal(b, saved):
                    b.copy_(saved)
        for p, requires_grad, grad in flags:
            p.requires_grad_(requires_grad)
            p.grad = grad
        for m, training in modes:
            m.training = training
        for m, saved_hooks in hooks:
            for d, entries in saved_hooks.items():
                current = getattr(m, d, None)
                if current is not None and dict(current) != entries:
                    current.clear()
                    current.update(entries)


def _numpy_state():
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        return None
    return np.random.get_state()


def _set_numpy_state(state) -> None:
    if state is not None:
        import numpy as np

        np.random.set_state(state)
