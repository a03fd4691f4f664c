"""A set-up method the forward needs first: gpt-fast's ``setup_caches(max_batch_size, max_seq_length)`` allocates
the KV caches, the rotary table and the causal mask its forward reads (before it, forward raises: "Caches must be
initialized first", or an attribute of None).

A hypothesis tried only after the trial forward raised, and only on a method named as a set-up
(``names.SETUP_METHOD``: setup / init / allocate / reset ... + cache) whose required parameters are a batch size and
a length, read by their names. The forward is then run through a view of the model (``composed.view``, sharing
its state) that, before each forward, calls the method with that forward's own batch and length (a cache sized
for another batch does not broadcast), gives an unset positions argument (``input_pos``) ``arange(length)``, and,
after the forward, puts back every attribute, submodule, parameter and buffer the method set: the user's model
is left as it was, and no forward sees another's cache. Kept only when the trial then runs, and stated.
"""
from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

from tfcheck.model.build.composed import view
from tfcheck.model.build.names import POSITIONS_ARGS, SETUP_BATCH_ARG, SETUP_LENGTH_ARG, SETUP_METHOD
from tfcheck.report.report import Assumption

if TYPE_CHECKING:
    from tfcheck.model.facts.under_test import ModelUnderTest

#: The assumption's key, and the marker the view's class carries its plan under.
SET_UP = "set-up method"
MARKER = "__tfcheck_set_up__"


@dataclass(frozen=True)
class SetUp:
    """The method to call before each forward, its batch and length parameters, and the positions argument."""

    method: str
    batch: str
    length: str
    positions: str | None  # forward's optional positions argument, given arange(length)
    signature: inspect.Signature  # the class's own forward's, without self


def set_up_of(model: nn.Module) -> SetUp | None:
    """The set-up method of the model's class, when one is named so and its required parameters are a batch size
    and a length (none other required); None otherwise, or when the model is already run through one."""
    cls = type(model)
    if getattr(cls, MARKER, None) is not None:
        return None
    try:
        forward = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return None
    for name in sorted(dir(cls)):
        method = getattr(cls, name, None)
        if not re.fullmatch(SETUP_METHOD, name) or not inspect.isfunction(method):
            continue
        params = list(inspect.signature(method).parameters.values())[1:]
        batch = next((p.name for p in params if re.fullmatch(SETUP_BATCH_ARG, p.name)), None)
        length = next((p.name for p in params if re.fullmatch(SETUP_LENGTH_ARG, p.name)), None)
        required = {p.name for p in params if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        if batch is None or length is None or not required <= {batch, length} or \
                any(p.kind is p.POSITIONAL_ONLY for p in params):
            continue
        positions = next((n for n in POSITIONS_ARGS if n in forward.parameters
                          and forward.parameters[n].default is None), None)
        return SetUp(name, batch, length, positions, forward)
    return None


def try_set_up(subject: ModelUnderTest, first_error: str, forward: Callable[[], Any],
               model_error: type[Exception]) -> tuple[bool, Any]:
    """After the trial forward raised ``first_error``: run ``forward()`` again through the set-up view when the
    model has a set-up method. (True, its result) when it runs (the view kept, stated among the assumptions);
    (False, None) otherwise, the model as it was."""
    plan = set_up_of(subject.model)
    if plan is None:
        return False, None
    before = subject.loaded
    rebuild = before.rebuild
    subject.loaded = dataclasses.replace(
        before, model=set_up_view(before.model, plan),
        rebuild=(lambda: set_up_view(rebuild(), plan)) if rebuild is not None else None)
    try:
        result = forward()
    except model_error:
        subject.loaded = before
        return False, None
    name = type(before.model).__name__
    given = (f"; forward's {plan.positions}=None is given arange(length) (every probe starts at position 0)"
             if plan.positions else "")
    subject.assumptions.append(Assumption(SET_UP, f"{plan.method}({plan.batch}=BATCH, {plan.length}=LENGTH)", (
        f"the forward raised without it ({first_error}); {name}.{plan.method} is named as a set-up and takes a "
        f"batch size and a length (read by name): tfcheck calls it before each forward with that forward's batch "
        f"and length{given}, on a view of the model, and puts back every attribute, submodule and buffer it set "
        "after the forward, so the model is left as it was" + (
            f". A {plan.positions} the call gives is never replaced (inputs=module:factory could give it, but "
            "switches the token checks off)"
            if plan.positions else ""))))
    return True, result


def set_up_view(model: nn.Module, plan: SetUp) -> nn.Module:
    own = type(model).forward

    def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        bound = plan.signature.bind(*args, **kwargs)
        batch, length = _sizes(bound.arguments)
        saved = _state(self)
        try:
            getattr(self, plan.method)(**{plan.batch: batch, plan.length: length})
            if plan.positions is not None and bound.arguments.get(plan.positions) is None:
                first = next(iter(bound.arguments.values()))
                bound.arguments[plan.positions] = torch.arange(length, device=first.device)
            return own(self, *bound.args, **bound.kwargs)
        finally:
            _restore(saved)

    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    forward.__signature__ = plan.signature.replace(  # type: ignore[attr-defined]
        parameters=[self_param, *plan.signature.parameters.values()])
    return view(model, forward, MARKER, plan)


def _sizes(arguments: dict[str, Any]) -> tuple[int, int]:
    """The batch and length of the forward's first argument (token ids or features, batch first)."""
    first = next(iter(arguments.values()), None)
    if not isinstance(first, torch.Tensor) or first.dim() < 2:
        raise TypeError(f"the set-up reads the batch and length of forward's first argument, a (batch, length) "
                        f"tensor; got {type(first).__name__}")
    return int(first.shape[0]), int(first.shape[1])


_State = list[tuple[nn.Module, dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]]


def _state(model: nn.Module) -> _State:
    """Each module's attributes and its submodule, parameter and buffer registries, as they are now."""
    return [(m, dict(vars(m)), dict(m._modules), dict(m._parameters), dict(m._buffers)) for m in model.modules()]


def _restore(saved: _State) -> None:
    for module, attributes, modules, parameters, buffers in saved:
        for live, kept in ((module._modules, modules), (module._parameters, parameters), (module._buffers, buffers)):
            if list(live) != list(kept) or any(live[k] is not v for k, v in kept.items()):  # by identity: tensors
                live.clear()
                live.update(kept)
        now = vars(module)
        for name in [n for n in now if n not in attributes]:
            del now[name]
        for name, value in attributes.items():
            if now.get(name) is not value:
                now[name] = value
