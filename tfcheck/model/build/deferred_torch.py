"""Three heavy modules left unimported while torch asks them only what plain Python values answer.

torch._dynamo (about 1 s; it also creates inductor's cache folder in the temp dir): many torch functions are
wrapped in ``torch._compile._disable_dynamo`` (the Python meta kernels of factories and arithmetic, from
torch._refs; every TorchDispatchMode's ``__torch_dispatch__``; torch.optim's Optimizer methods). Their first
call runs ``import torch._dynamo`` only to call ``torch._dynamo.disable(fn, recursive, wrapping=False)``, whose
wrapper turns dynamo's frame evaluation off around fn. While torch._dynamo is not imported nothing can be
compiling, so fn itself is the same call. torch.optim's step also calls ``graph_break()``, a no-op outside a
compiled frame.

torch.fx.experimental.symbolic_shapes (0.3 s): ``torch._check`` and the meta kernels import guard helpers from
it (``expect_true``, ``guard_or_false``, ``sym_eq``...) that, given a plain bool or int, return it (or the
obvious answer). sympy (0.4 s): torch's elementwise type promotion imports it only to ask
``isinstance(x, sympy.Basic)``, False for every object while sympy is not imported.

Inside ``deferred_torch_imports()`` torch's own imports of them get stand-ins that answer plain values exactly
as torch does and hand anything else (a SymInt, another name) to the real module, imported then; once a real
module exists, its stand-in only forwards to it. On leaving, what the dynamo stand-in handed out is taken
back, so that once dynamo exists those functions are wrapped as usual. The size guard's meta build and every
check the engine runs (tfcheck.engine.runner) are inside such a window."""
from __future__ import annotations

import builtins
import contextlib
import functools
import importlib
import operator
import sys
from collections.abc import Callable, Iterator
from typing import Any

DYNAMO = "torch._dynamo"
SHAPES = "torch.fx.experimental.symbolic_shapes"
SYMPY = "sympy"
#: Where torch._compile._disable_dynamo caches what disable() gave (a plain string: never name-mangled).
_CACHE = "__dynamo_disable"
_PLAIN = (bool, int)
#: The torch release whose internal calls the stand-ins were written against and tested with; on any other the
#: imports happen as usual (slower, never wrong).
TESTED_TORCH = "2.13."
_REAL = object()  # a known function's "not a plain value: the real module answers"


class _Standin:
    """A module as torch uses it here: the attributes in ``known`` while the real module is not imported,
    every other one (and all of them after) the real module's. A known function may return _REAL."""

    def __init__(self, name: str, known: dict[str, Any]) -> None:
        self.name = name
        self.known = {k: self._or_real(k, v) if callable(v) and not isinstance(v, type) else v
                      for k, v in known.items()}

    def __getattr__(self, attr: str) -> Any:
        known = self.__dict__.get("known", {})
        if attr in known and self.__dict__["name"] not in sys.modules:
            return known[attr]
        return getattr(self.real(), attr)

    def _or_real(self, attr: str, fast: Callable[..., Any]) -> Callable[..., Any]:
        def answer(*args: Any, **kwargs: Any) -> Any:
            out = _REAL if self.name in sys.modules else fast(*args, **kwargs)
            return getattr(self.real(), attr)(*args, **kwargs) if out is _REAL else out
        return answer

    def real(self) -> Any:
        return importlib.import_module(self.name)


class _NoSympyObject:
    """sympy.Basic while sympy is not imported: no object is a sympy expression then."""


def _same_bool(a: Any, *_: Any) -> Any:
    # expect_true, guard_or_false, guard_or_true, guard_size_oblivious, statically_known_true: a plain bool is
    # its own answer.
    return a if type(a) is bool else _REAL


def _sym_eq(x: Any, y: Any) -> Any:
    if isinstance(x, (tuple, list)) and isinstance(y, (tuple, list)):
        if len(x) != len(y):
            return False
        parts = [_sym_eq(a, b) for a, b in zip(x, y)]
        return _REAL if any(p is _REAL for p in parts) else all(parts)
    return x == y if type(x) in _PLAIN and type(y) in _PLAIN else _REAL


def _joined(op: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    # sym_and, sym_or over plain bools: and / or without bool casting (which bools do not need).
    return lambda x, *others: functools.reduce(op, others, x) if all(type(v) is bool for v in (x, *others)) \
        else _REAL


_SHAPES_KNOWN: dict[str, Callable[..., Any]] = {
    "expect_true": _same_bool, "guard_or_false": _same_bool, "guard_or_true": _same_bool,
    "guard_size_oblivious": _same_bool, "statically_known_true": _same_bool, "sym_eq": _sym_eq,
    "sym_and": _joined(operator.and_), "sym_or": _joined(operator.or_),
    "is_nested_int": lambda s: False if type(s) in (*_PLAIN, float) else _REAL,
    "guarding_hint_or_throw": lambda a: a if type(a) in _PLAIN else _REAL,
    "has_guarding_hint": lambda a: True if type(a) in (*_PLAIN, float) else _REAL,
}


class _DynamoStandin(_Standin):
    def __init__(self) -> None:
        super().__init__(DYNAMO, {"graph_break": lambda msg="": None, "disable": self._disable})
        self.handed_out: list[Any] = []

    def _disable(self, fn: Any = None, recursive: bool = True, *, reason: str | None = None,
                 wrapping: bool = True) -> Any:
        # Only torch's own lazy wrapper asks with wrapping=False; a caller's own disable() is the real one.
        if wrapping or reason is not None or not callable(fn):
            return _REAL
        self.handed_out.append(fn)
        return fn

    def real(self) -> Any:
        self.take_back()  # no function skips dynamo's disable once dynamo exists
        return super().real()

    def take_back(self) -> None:
        for fn in self.handed_out:
            if getattr(fn, "__dict__", {}).get(_CACHE) is fn:
                delattr(fn, _CACHE)
        self.handed_out.clear()


def _by_torch(globals: Any) -> bool:
    """An import made by torch's own code: only those get a stand-in (a model's own ``import sympy`` is real)."""
    caller = (globals or {}).get("__name__") or ""
    return caller == "torch" or caller.startswith("torch.")


@contextlib.contextmanager
def deferred_torch_imports() -> Iterator[None]:
    """Inside, torch's imports of torch._dynamo, symbolic_shapes and sympy for the answers above import none of
    them (see the module's text); a module already imported is used as it is."""
    import torch

    if not torch.__version__.startswith(TESTED_TORCH):  # the stand-ins answer as this torch's internals ask
        yield
        return
    dynamo = None if DYNAMO in sys.modules or "_dynamo" in vars(torch) else _DynamoStandin()
    shapes, sympy = _Standin(SHAPES, _SHAPES_KNOWN), _Standin(SYMPY, {"Basic": _NoSympyObject})
    plain_import = builtins.__import__

    def importing(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if level == 0 and name in (DYNAMO, SHAPES, SYMPY) and name not in sys.modules and _by_torch(globals):
            # `import torch._dynamo` gives the package torch, whose attribute _dynamo (the stand-in) is read
            # next; `from ...symbolic_shapes import a, b` reads a and b from what it gets.
            if name == DYNAMO and not fromlist and dynamo is not None and vars(torch).get("_dynamo") is dynamo:
                return torch
            if name == SHAPES and fromlist and all(n in _SHAPES_KNOWN for n in fromlist):
                return shapes
            if name == SYMPY and not fromlist:
                return sympy
        return plain_import(name, globals, locals, fromlist, level)

    if dynamo is not None:
        setattr(torch, "_dynamo", dynamo)  # noqa: B010 - a stand-in, not a module: mypy would refuse it
    builtins.__import__ = importing
    try:
        yield
    finally:
        if builtins.__import__ is importing:
            builtins.__import__ = plain_import
        if dynamo is not None:
            if vars(torch).get("_dynamo") is dynamo:
                del torch._dynamo  # type: ignore[attr-defined]
            dynamo.take_back()
