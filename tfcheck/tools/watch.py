"""``tfcheck.watch``: debug the user's own code. Around any block that calls the model,

    with tfcheck.watch(model) as w:
        loss = step(batch)

an exception raised in the block comes out as the same exception with the explanation added as a note
(the module that raised, the shapes it received, the troubleshooting row), and the first NaN or Inf a
module's forward produces is located: the module's path and class and the user's source line.

Only module-level forward hooks are used: the origin of a NaN is the first module (innermost first, as
hooks fire) whose inputs were finite and whose output is not; the child that first *received* the value
narrows it to a line inside that module's forward. An op-level recorder could name the exact operation.
Every hook is removed when the block exits; parameters, train/eval mode and the RNG are not touched.
"""
from __future__ import annotations

import contextlib
import linecache
import sys
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any, Literal

import torch
import torch.nn as nn

from tfcheck.display import rich_view
from tfcheck.errors import TfcheckError, UsageError
from tfcheck.explainers.explanation import Explanation, explain
from tfcheck.frames import is_user_frame, short_path
from tfcheck.model.build.byte_sizes import parse_bytes
from tfcheck.recording.hooks import Hook, hooked
from tfcheck.recording.module_stack import ModuleStack, tracking

#: What ``watch`` does with the first non-finite value: warn once (default), raise NonFiniteError, only
#: record it on ``w.first_nonfinite``, or not look at all (no per-module check: no cost on a GPU).
ON_NONFINITE = ("warn", "raise", "record", "off")
NONFINITE_ROW = "loss-nan"


class NonFiniteError(TfcheckError, FloatingPointError):
    """A module's forward produced NaN or Inf inside ``tfcheck.watch(model, on_nonfinite="raise")``.
    ``.nonfinite`` holds where (a ``NonFinite``)."""

    def __init__(self, nonfinite: NonFinite):
        super().__init__(nonfinite.message)
        self.nonfinite = nonfinite


class NonFiniteWarning(RuntimeWarning):
    """The first NaN or Inf produced inside ``tfcheck.watch(model)`` (on_nonfinite="warn")."""


@dataclass(frozen=True)
class NonFinite:
    """The first non-finite value seen: the module it came out of, what it was, and the user's line.

    ``entered`` is the child module that first received it (the value was made in ``module``'s own code
    before that call, at ``file:line``); when None, ``file:line`` is where ``module`` was called.
    ``from_input`` is True when the model's own inputs already held it."""

    module: str
    module_class: str
    kinds: tuple[str, ...]
    count: int
    shape: tuple[int, ...]
    dtype: str
    call: int
    file: str | None = None
    line: int | None = None
    code: str | None = None
    entered: str | None = None
    parameters: tuple[str, ...] = ()
    from_input: bool = False
    row: str = NONFINITE_ROW

    @property
    def message(self) -> str:
        what = " and ".join(self.kinds)
        value = f"{self.count} {what} in a {self.shape} {self.dtype} tensor"
        where = f" at {self.file}:{self.line}" + (f": `{self.code}`" if self.code else "") if self.file else ""
        if self.from_input:
            return (f"the first {what} was already in the inputs of '{self.module or '<root>'}' ({self.module_class}) "
                    f"at forward call {self.call} ({value}): it came from outside the model (the batch){where}")
        text = (f"the first {what} came out of '{self.module or '<root>'}' ({self.module_class}) "
                f"at forward call {self.call}: ")
        text += f"its inputs were finite and its output holds {value}"
        if self.parameters:
            shown = ", ".join(self.parameters[:3]) + (", ..." if len(self.parameters) > 3 else "")
            text += (f"; its own parameters are not finite ({shown}): an earlier optimizer step broke them "
                     "(learning rate too high, no warmup, no gradient clipping)")
        elif self.entered is not None:
            text += f"; it was made in its forward before the call of '{self.entered}'{where}"
        else:
            text += f"; it was called{where}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"module": self.module, "module_class": self.module_class, "kinds": list(self.kinds),
                "count": self.count, "shape": list(self.shape), "dtype": self.dtype, "call": self.call,
                "file": self.file, "line": self.line, "code": self.code, "entered": self.entered,
                "parameters": list(self.parameters), "from_input": self.from_input, "row": self.row,
                "message": self.message}

    def __str__(self) -> str:
        return self.message

    def __rich__(self):
        return rich_view(self)


class Watch:
    """The context manager ``tfcheck.watch(model)`` returns; see the module docstring.

    After the block: ``first_nonfinite`` (a NonFinite or None), ``explanation`` (of the exception that
    left the block, or None), ``calls`` (forward calls of the model seen)."""

    def __init__(self, model: nn.Module, on_nonfinite: str = "warn", budget: int | str | None = None):
        if not isinstance(model, nn.Module):
            raise UsageError(f"tfcheck.watch needs the nn.Module your code calls, not a {type(model).__name__}; "
                             "pass the model: `with tfcheck.watch(model): ...`")
        if on_nonfinite not in ON_NONFINITE:
            raise UsageError(f"tfcheck.watch(on_nonfinite={on_nonfinite!r}): expected one of {', '.join(ON_NONFINITE)}")
        self.model = model
        self.on_nonfinite = on_nonfinite
        self.budget = parse_bytes(budget)
        self.first_nonfinite: NonFinite | None = None
        self.explanation: Explanation | None = None
        self.calls = 0
        self._stack: ModuleStack | None = None
        self._exit: contextlib.ExitStack | None = None
        self._received: list[tuple[str, str | None, int | None]] = []

    # ----- the context manager ------------------------------------------------------------------------
    def __enter__(self) -> Watch:
        if self._exit is not None:
            raise UsageError("this tfcheck.watch is already active; a watch object cannot be entered twice at once")
        self._exit = contextlib.ExitStack()
        try:
            self._stack = self._exit.enter_context(tracking(self.model))
            self._exit.enter_context(self._hooks())
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        try:
            if isinstance(exc, Exception) and not isinstance(exc, NonFiniteError):
                self.explanation = self._explain(exc)
                _attach(exc, self.explanation)
        except Exception:  # noqa: BLE001 - explaining must never replace the user's exception with tfcheck's
            self.explanation = None
        finally:
            self._close()
        return False  # the user's exception goes on, with its own traceback

    def _close(self) -> None:
        exit_stack, self._exit = self._exit, None
        if exit_stack is not None:
            exit_stack.close()

    def _explain(self, exc: BaseException) -> Explanation:
        stack = (self._stack if self._stack is not None and _raised_inside(exc, self._stack)
                 else ModuleStack(model=self.model))
        what = f"forward call {self.calls} of the watched model" if stack.entries else "the watched block"
        return explain(exc, stack, what, self.budget)

    # ----- non-finite values --------------------------------------------------------------------------
    def _hooks(self) -> contextlib.AbstractContextManager[None]:
        def hooks():
            yield Hook(self.model, self._count, pre=True)
            if self.on_nonfinite != "off":
                for name, module in self.model.named_modules():
                    yield Hook(module, self._checker(name), with_kwargs=True)

        return hooked(hooks())

    def _count(self, module, args) -> None:
        self.calls += 1
        self._received.clear()

    def _checker(self, path: str):
        def hook(module, args, kwargs, output):
            if self.first_nonfinite is not None:
                return  # first one wins; later modules only see its consequences
            bad = first_nonfinite_tensor(output)
            if bad is None:
                return
            came_in = first_nonfinite_tensor((args, kwargs)) is not None
            if came_in and path != "":
                self._received.append((path, *call_site()))
                return
            self._found(self._describe(path, module, bad, from_input=came_in))
        return hook

    def _describe(self, path: str, module: nn.Module, bad: torch.Tensor, from_input: bool) -> NonFinite:
        nan, inf = int(bad.isnan().sum()), int(bad.isinf().sum())
        kinds = tuple(k for k, n in (("NaN", nan), ("Inf", inf)) if n)
        entered = None if from_input else _outermost_inside(path, self._received)
        file, line = (entered[1], entered[2]) if entered else call_site()
        params = () if from_input else tuple(
            n for n, p in module.named_parameters() if p.is_floating_point() and p.device.type != "meta"
            and not bool(torch.isfinite(p).all()))
        code = linecache.getline(file, line).strip() if file and line else None
        return NonFinite(path, type(module).__name__, kinds, nan + inf, tuple(bad.shape),
                         str(bad.dtype).replace("torch.", ""), self.calls, _short(file), line, code or None,
                         entered[0] if entered else None, params, from_input)

    def _found(self, found: NonFinite) -> None:
        self.first_nonfinite = found
        if self.on_nonfinite == "raise":
            raise NonFiniteError(found)
        if self.on_nonfinite == "warn":
            warnings.warn_explicit(NonFiniteWarning(found.message + f" (troubleshooting row [{found.row}])"),
                                   NonFiniteWarning, found.file or "<unknown>", found.line or 0)


def watch(model: nn.Module, on_nonfinite: str = "warn", budget: int | str | None = None) -> Watch:
    """Watch ``model`` while a block of your code runs: ``with tfcheck.watch(model) as w: loss = step(batch)``.

    An exception raised in the block is re-raised unchanged (same type, same traceback) with the
    explanation added as a note (Python >= 3.11 shows it under the traceback) and kept on
    ``w.explanation``; ``tfcheck.explain(exc)`` returns it too. The first NaN/Inf a module's forward
    produces is kept on ``w.first_nonfinite`` and, by ``on_nonfinite``: "warn" (a NonFiniteWarning,
    once), "raise" (NonFiniteError from that module's call), "record" (silently), or "off" (no check).
    ``budget`` (bytes or "8GiB") sizes the out-of-memory advice."""
    return Watch(model, on_nonfinite, budget)


# ----- helpers -----------------------------------------------------------------------------------------

def first_nonfinite_tensor(value: Any) -> torch.Tensor | None:
    """The first floating tensor inside ``value`` (tensors, tuples, lists, dicts, dataclass-like outputs)
    that holds NaN or Inf, or None."""
    for t in _tensors_in(value, depth=0):
        if (t.is_floating_point() or t.is_complex()) and t.device.type != "meta" and t.numel() \
                and not bool(torch.isfinite(t).all()):
            return t
    return None


def _tensors_in(value: Any, depth: int) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif depth > 4:
        return
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors_in(v, depth + 1)
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors_in(v, depth + 1)
    elif hasattr(value, "__dataclass_fields__"):
        for name in value.__dataclass_fields__:
            yield from _tensors_in(getattr(value, name, None), depth + 1)


def call_site() -> tuple[str | None, int | None]:
    """The innermost frame of the running Python stack in the user's code: inside a forward hook, the
    line that called the module."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if is_user_frame(frame.f_code.co_filename):
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return None, None


def _short(file: str | None) -> str | None:
    return short_path(file) if file else None


def _outermost_inside(path: str, received: list[tuple[str, str | None, int | None]]):
    """Of the modules that received the value, the first of the shallowest ones inside ``path``: its call
    is the line of ``path``'s forward that already had it."""
    inside = [r for r in received if path == "" or r[0].startswith(path + ".")]
    return min(inside, key=lambda r: r[0].count(".")) if inside else None


def _raised_inside(exc: BaseException, stack: ModuleStack) -> bool:
    """Whether the entries on the stack are the modules the exception came through: entries left by an
    exception the user caught inside the block must not be blamed for a later one."""
    inner = stack.innermost()
    if inner is None:
        return False
    code = getattr(getattr(type(inner[1]), "forward", None), "__code__", None)
    if code is None:
        return True
    return any(frame.f_code is code for frame, _ in traceback.walk_tb(exc.__traceback__))


def _attach(exc: BaseException, explanation: Explanation) -> None:
    note = "tfcheck: " + str(explanation)
    with contextlib.suppress(Exception):  # an exception type with __slots__ or a read-only __dict__
        exc.__tfcheck_explanation__ = explanation  # type: ignore[attr-defined]  # tfcheck's mark on any exception
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    else:  # Python 3.10: no notes in the traceback; the explanation stays on w.explanation
        with contextlib.suppress(Exception):
            exc.__notes__ = [*getattr(exc, "__notes__", []), note]
