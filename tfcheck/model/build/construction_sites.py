"""Where the user's code built each part of a model: the line that registered each submodule, parameter and
buffer, the last line that wrote a parameter in place (an init), and the line that froze it; and the plain
attributes each module had when the build ended (so a cache a forward fills later can be told apart).

Many defects sit on construction lines a forward never shows (``requires_grad_(False)``, an init that
re-draws the head, ``nn.Embedding(..., padding_idx=0)``), so the build tfcheck performs is watched: torch's
global registration hooks see every ``register_module`` / ``register_parameter`` / ``register_buffer``, and a
pass-through torch-function mode sees in-place writes and ``requires_grad`` changes. Each event costs one walk
up the stack to the model's innermost frame (``model_line``). Everything is removed when the build
ends, raised or not: the model keeps no hook, and a torch without these hooks simply records less.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tfcheck.frames import model_frame

#: Why no line is known for a model the spec named as an instance (tfcheck never saw it built).
INSTANCE_REASON = "the construction line of a model given as an instance is unknown"
#: The three torch hooks, by what they register (absent in old torch: nothing is recorded for that kind).
_HOOKS = {"module": "register_module_module_registration_hook",
          "parameter": "register_module_parameter_registration_hook",
          "buffer": "register_module_buffer_registration_hook"}


@dataclass(frozen=True)
class Site:
    """A user's source line, as the recorder gives op lines (the frame's own file name)."""

    file: str
    line: int


@dataclass
class ConstructionSites:
    """The sites of one built model, by dotted path (``named_modules`` / ``named_parameters`` /
    ``named_buffers``)."""

    modules: dict[str, Site] = field(default_factory=dict)
    parameters: dict[str, Site] = field(default_factory=dict)
    buffers: dict[str, Site] = field(default_factory=dict)
    #: parameter -> the last line that wrote it in place (``nn.init.normal_(w)``; its construction line when only
    #: torch's own init wrote it)
    written: dict[str, Site] = field(default_factory=dict)
    #: parameter -> the line that set its requires_grad to False
    frozen: dict[str, Site] = field(default_factory=dict)
    #: module path -> its plain instance attributes when the build ended: name -> whether it held None (an
    #: attribute a forward fills later, a lazily built cache, is absent here or held None)
    attributes: dict[str, dict[str, bool]] = field(default_factory=dict)
    #: why nothing was recorded (a torch without the hooks); None when the build was watched
    reason: str | None = None

    def of(self, path: str) -> Site | None:
        """The registration line of the parameter, buffer or submodule at ``path``."""
        return self.parameters.get(path) or self.buffers.get(path) or self.modules.get(path)




def model_line() -> tuple[str, int] | None:
    """The innermost user frame of the model's own code on the current stack, never the script or test that
    called tfcheck (a torch.nn model built from a spec has no line of its own): ``frames.model_frame``."""
    return model_frame(1)


class _Watch:
    """Events of one build, keyed by object identity (the objects are held, so an id is never reused)."""

    def __init__(self) -> None:
        self.registered: dict[int, tuple[Any, Site]] = {}
        self.written: dict[int, tuple[Any, Site]] = {}
        self.frozen: dict[int, tuple[Any, Site]] = {}

    @staticmethod
    def site() -> Site | None:
        found = model_line()
        return Site(*found) if found is not None else None

    def registration(self, module: Any, name: str, value: Any) -> None:
        # The first registration is the construction: a module wrapped later keeps the line that built it.
        if value is not None and id(value) not in self.registered:
            where = self.site()
            if where is not None:
                self.registered[id(value)] = (value, where)

    def change(self, events: dict[int, tuple[Any, Site]], tensor: Any, keep: bool = True) -> None:
        """Note the line changing ``tensor`` (``keep``), or forget it (a freeze undone)."""
        base = getattr(tensor, "_base", None)
        target = base if base is not None else tensor  # weight[pad].normal_() writes the weight
        where = self.site() if keep else None
        if where is not None:
            events[id(target)] = (target, where)
        else:
            events.pop(id(target), None)


def _tensor_mode(watch: _Watch) -> Any:
    """A torch-function mode that passes every call through and notes in-place writes and freezes."""
    import torch
    from torch.overrides import TorchFunctionMode

    set_requires_grad = torch.Tensor.requires_grad.__set__  # type: ignore[attr-defined]

    class Watching(TorchFunctionMode):
        def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = kwargs or {}
            # nn.init passes the tensor by keyword (tensor=...)
            first = args[0] if args else kwargs.get("tensor")
            if isinstance(first, torch.Tensor):
                name = getattr(func, "__name__", "")
                if name == "requires_grad_" or func == set_requires_grad:
                    wanted = args[1] if len(args) > 1 else kwargs.get("requires_grad", name == "requires_grad_")
                    watch.change(watch.frozen, first, keep=not wanted)
                elif name.endswith("_") and not name.startswith("_"):
                    watch.change(watch.written, first)
            return func(*args, **kwargs)

    return Watching()


@contextlib.contextmanager
def watched_build() -> Iterator[Callable[[Any], ConstructionSites]]:
    """Watch the build inside the block; the yielded function maps what was seen onto the built model.
    Every hook and the mode are gone when the block ends, whether the build raised or not."""
    watch = _Watch()
    missing = []
    with contextlib.ExitStack() as stack:
        try:
            import torch.nn.modules.module as module_api

            for kind, hook_name in _HOOKS.items():
                register = getattr(module_api, hook_name, None)
                if register is None:
                    missing.append(kind)
                    continue
                stack.callback(register(watch.registration).remove)
            stack.enter_context(_tensor_mode(watch))
        except Exception as exc:  # noqa: BLE001 - a torch that cannot be watched builds unwatched
            missing.append(f"the build could not be watched ({type(exc).__name__}: {exc})")
        reason = (f"this torch has no {', '.join(missing)} registration hook" if missing else None)
        yield lambda model: _sites(watch, model, reason)


def _sites(watch: _Watch, model: Any, reason: str | None) -> ConstructionSites:
    out = ConstructionSites(reason=reason)
    try:
        for path, module in model.named_modules():
            _note(out.modules, path, watch.registered, module)
        for path, param in model.named_parameters():
            _note(out.parameters, path, watch.registered, param)
            _note(out.written, path, watch.written, param)
            _note(out.frozen, path, watch.frozen, param)
        for path, buffer in model.named_buffers():
            _note(out.buffers, path, watch.registered, buffer)
        for path, module in model.named_modules():
            out.attributes[path] = {name: value is None for name, value in vars(module).items()}
    except Exception as exc:  # noqa: BLE001 - a model whose traversal raises gets no sites, not a crash
        out.reason = f"the built model's parts could not be listed ({type(exc).__name__}: {exc})"
    return out


def _note(into: dict[str, Site], path: str, seen: dict[int, tuple[Any, Site]], obj: Any) -> None:
    found = seen.get(id(obj))
    if found is not None and found[0] is obj:
        into[path] = found[1]


__all__ = ["ConstructionSites", "INSTANCE_REASON", "Site", "model_line", "watched_build"]
