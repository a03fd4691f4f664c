"""A forward composed for a model that has none of its own: the "Attention is all you need" tutorials that
define ``encode(src, src_mask)``, ``decode(memory, src_mask, tgt, tgt_mask)`` and ``project(x)`` and leave the
call to the training loop (nn.Module.forward then raises NotImplementedError).

The composition is a hypothesis read from names and signatures, never from behaviour: encode's parameters,
then decode's (one of a name in ``names.ENCODER_OUTPUT_ARG`` takes encode's output; a parameter both take, the
source mask, is given once), and ``project`` applied to decode's output when the class defines that method. The
trial forward verifies it like any other reading: a composition under which the model raises is reported as
tfcheck's reading, with the assumption that states it.

What tfcheck checks is a *view* of the user's model: an instance of a subclass made here, adding only the
composed forward, that shares the model's ``__dict__`` (its submodules, parameters, buffers, hooks, mode and
attributes are the model's own objects). Module paths, construction lines and hooks are therefore the user's;
the user's object, class and attributes are left as they were (nothing is set on them to compose the call).
"""
from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch.nn as nn

from tfcheck.model.build.loaded import Loaded
from tfcheck.model.build.names import ENCODER_OUTPUT_ARG, PROJECT_METHODS
from tfcheck.report.report import Assumption

#: The assumption's key: the report shows the composed call under it.
COMPOSED = "forward composed"
_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


@dataclass(frozen=True)
class Composition:
    """How the composed forward calls the model: which parameters go to encode and decode, and by what name."""

    encode: tuple[str, ...]
    decode: tuple[str, ...]  # decode's parameters other than the one taking encode's output
    memory: str  # decode's parameter that takes encode's output
    project: str | None  # the method applied to decode's output, if any
    signature: inspect.Signature  # the composed forward's, without self

    def call_text(self) -> str:
        inner = f"decode({self.memory}=encode({', '.join(self.encode)}), {', '.join(self.decode)})"
        return f"{self.project}({inner})" if self.project else inner


def own_forward(model: nn.Module) -> bool:
    """Whether the model has a forward of its own (its class or a base above nn.Module defines one, or the
    instance carries one)."""
    return "forward" in vars(model) or type(model).forward is not nn.Module.forward


def composition(model: nn.Module) -> Composition | None:
    """The composed call of a model with no forward of its own but ``encode`` and ``decode`` methods; None when
    it has a forward, lacks either method, or their signatures do not say how to chain them."""
    if own_forward(model):
        return None
    encode, decode = (_params(getattr(type(model), name, None)) for name in ("encode", "decode"))
    if not encode or decode is None:
        return None
    memory = next((n for n in decode if re.fullmatch(ENCODER_OUTPUT_ARG, n) and n not in encode), None)
    if memory is None:
        return None
    rest = [n for n in decode if n != memory]
    merged: dict[str, inspect.Parameter] = {}
    for name, param in [*encode.items(), *((n, decode[n]) for n in rest)]:
        seen = merged.get(name)
        # A parameter one method requires is required of the composed call; a default is the first one's.
        required = param.default is param.empty or (seen is not None and seen.default is seen.empty)
        merged[name] = param.replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                     default=param.empty if required else (seen or param).default)
    ordered = [p for p in merged.values() if p.default is p.empty] + \
              [p for p in merged.values() if p.default is not p.empty]  # a signature lists required ones first
    return Composition(tuple(encode), tuple(rest), memory, _projection(model), inspect.Signature(ordered))


def _params(method: Any) -> dict[str, inspect.Parameter] | None:
    """A method's named parameters without self; None when it is no function of the class, or takes ``*args``,
    ``**kwargs`` or positional-only parameters (no name to give them by)."""
    if not inspect.isfunction(method):
        return None
    try:
        params = list(inspect.signature(method).parameters.values())[1:]
    except (TypeError, ValueError):
        return None
    if any(p.kind not in _NAMED for p in params):
        return None
    return {p.name: p for p in params}


def _projection(model: nn.Module) -> str | None:
    """A method (not a submodule: the trial's head rule reads those) of PROJECT_METHODS taking one argument."""
    for name in PROJECT_METHODS:
        params = _params(getattr(type(model), name, None))
        if params is not None and sum(p.default is p.empty for p in params.values()) == 1:
            return name
    return None


def composed_forward(plan: Composition) -> Callable[..., Any]:
    """The forward of the view: the arguments given, bound to the composed signature, passed on by name (an
    argument not given is left to each method's own default)."""

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        given = plan.signature.bind(*args, **kwargs).arguments
        memory = self.encode(**{n: given[n] for n in plan.encode if n in given})
        out = self.decode(**{plan.memory: memory}, **{n: given[n] for n in plan.decode if n in given})
        return getattr(self, plan.project)(out) if plan.project else out

    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    forward.__signature__ = plan.signature.replace(  # type: ignore[attr-defined]
        parameters=[self_param, *plan.signature.parameters.values()])
    return forward


def view(model: nn.Module, forward: Callable[..., Any], marker: str, plan: Any) -> nn.Module:
    """The model with another ``forward``: an instance of a subclass of its class (named as it, so messages and
    module lookups read as the user's) sharing its ``__dict__``, the plan kept on the subclass as ``marker``.
    A deepcopy of the view is a view of the copy (its state copied, the class kept)."""
    cls = type(model)
    forward.__qualname__ = f"{cls.__qualname__}.forward"
    sub = type(cls.__name__, (cls,), {"forward": forward, "__module__": cls.__module__,
                                      "__qualname__": cls.__qualname__, marker: plan})
    made: nn.Module = object.__new__(sub)
    made.__dict__ = model.__dict__  # the very dict: the view's state is the model's
    return made


def composed_view(model: nn.Module, plan: Composition) -> nn.Module:
    return view(model, composed_forward(plan), "__tfcheck_composed__", plan)


def compose(loaded: Loaded) -> tuple[Loaded, Assumption | None]:
    """The loaded model as a view with a composed forward, and the assumption that says so; unchanged when it
    has a forward of its own or no encode/decode to compose."""
    model = loaded.model
    plan = composition(model) if isinstance(model, nn.Module) else None
    if plan is None:
        return loaded, None
    try:
        made = composed_view(model, plan)
    except TypeError:  # a class whose __init_subclass__ refuses a subclass: left as it is, its forward missing
        return loaded, None
    rebuild = loaded.rebuild
    composed = dataclasses.replace(loaded, model=made,
                                   rebuild=(lambda: composed_view(rebuild(), plan)) if rebuild is not None else None)
    name = type(model).__name__
    methods = "encode/decode" + (f"/{plan.project}" if plan.project else "")
    return composed, Assumption(COMPOSED, plan.call_text(), (
        f"{name} defines no forward() of its own but {methods}: tfcheck calls {plan.call_text()}, the argument "
        f"names read from their signatures ('{plan.memory}' takes encode's output), on a view of the model "
        "sharing its modules and state (the model itself is not changed). Give the class a forward for another call "
        "(inputs=module:factory would do it too, but switches the token checks off)"))
