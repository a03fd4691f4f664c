"""What tfcheck's own instrumentation may change about a forward, and how the engine keeps it from being
blamed on the model: a forward that raises under tfcheck's modes only (a recorder's, the neutraliser's) is a
limit of tfcheck, and a model compiled with ``torch.compile`` is checked as its uncompiled module, with dynamo
switched off for every forward (dynamo is never imported for a model that is not compiled). A check that
finds out only from its forward that it does not apply says so with a value the runner reads."""
from __future__ import annotations

import contextlib
import inspect
import linecache
import sys
from collections.abc import Iterator
from typing import Any

import torch

from tfcheck.engine.registry import inconclusive
from tfcheck.explainers.explanation import Explanation
from tfcheck.frames import raised_in_user_code, short_path
from tfcheck.report.findings import Finding, Location
from tfcheck.report.report import Assumption

#: The assumption's key when a forward raised only under tfcheck's instrumentation.
LIMIT = "limit of tfcheck"
COMPILED = "compiled with torch.compile"
COMPILED_WHY = "the uncompiled module is checked, dynamo disabled"


#: The evidence key of a check's finding that it does not apply, found out only by its forward (the reason).
NOT_APPLICABLE = "not_applicable"


def found_not_applicable(result: Any) -> str | None:
    """Why a check's result says it does not apply (``CheckContext.not_applicable``), or None."""
    findings = result.findings
    return findings[0].evidence.get(NOT_APPLICABLE) if len(findings) == 1 else None


class InstrumentationLimit(Exception):
    """A forward raised under tfcheck's instrumentation and ran without it: a limit of tfcheck, not a bug of the
    model. ``plain`` is what the forward returned without it; ``reason`` names the op, its line and the error."""

    def __init__(self, explanation: Explanation, plain: Any):
        where = explanation.location
        at = f" at {where.file}:{where.line}" if where is not None and where.file else ""
        error = explanation.evidence.get("exception", explanation.message)
        self.reason = (f"the model raises only under tfcheck's instrumentation ({_op_text(where)}{at}: {error}); "
                       "this is a limit of tfcheck")
        super().__init__(self.reason)
        self.explanation, self.plain = explanation, plain

    def note(self, assumptions: list[Assumption], what: str) -> None:
        """Say once among the report's assumptions what the limit cost."""
        if not any(a.key == LIMIT and a.value == what for a in assumptions):
            assumptions.append(Assumption(LIMIT, what, self.reason))


def instrumented() -> bool:
    """Whether a torch function or dispatch mode is active (tfcheck's recorder and neutraliser are modes)."""
    return torch._C._len_torch_function_stack() > 0 or torch._C._len_torch_dispatch_stack() > 0


@contextlib.contextmanager
def without_modes() -> Iterator[None]:
    """Every torch function and dispatch mode popped for the block and pushed back after, in their order."""
    from torch.utils import _python_dispatch as dispatch

    functions: list = []
    dispatches: list = []
    try:
        while torch._C._len_torch_function_stack() > 0:
            functions.append(torch._C._pop_torch_function_stack())
        while torch._C._len_torch_dispatch_stack() > 0:
            dispatches.append(dispatch._pop_mode())
        yield
    finally:
        for mode in reversed(dispatches):
            dispatch._push_mode(mode)
        for mode in reversed(functions):
            torch._C._push_on_torch_function_stack(mode)


def _op_text(where: Any) -> str:
    """The raising line of the user's code, as the op it calls (``x.softmax(-1)``)."""
    text = linecache.getline(where.file, where.line).strip() if where is not None and where.file else ""
    return f"`{text}`" if text else "an op"


def dynamo_disabled() -> Any:
    """torch.compile switched off for the block (a compiled method then runs as Python, as tfcheck sees it);
    nothing to switch off while nothing imported dynamo, and it stays unimported."""
    dynamo = sys.modules.get("torch._dynamo")
    return contextlib.nullcontext() if dynamo is None else dynamo.config.patch(disable=True)


def uncompiled(model: Any) -> tuple[Any, bool]:
    """The module a ``torch.compile`` wrapper compiles (its ``_orig_mod``), and whether the model was compiled or
    has compiled methods. No model is compiled while nothing imported dynamo."""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is None or not isinstance(model, torch.nn.Module):
        return model, False
    compiled = dynamo.eval_frame.OptimizedModule
    inner = model._orig_mod if isinstance(model, compiled) else model
    assert isinstance(inner, torch.nn.Module)  # torch.compile wraps modules only
    return inner, inner is not model or any(isinstance(m, compiled) or _compiled_methods(m) for m in inner.modules())


def _compiled_methods(module: torch.nn.Module) -> bool:
    """A method wrapped by torch.compile (on the class or set on the instance) is a function carrying dynamo's
    original; only functions are looked at, so no attribute of the user's objects is computed."""
    classes = [cls for cls in type(module).__mro__ if issubclass(cls, torch.nn.Module) and cls is not torch.nn.Module]
    return any(inspect.isfunction(v) and "_torchdynamo_orig_callable" in vars(v)
               for owner in (vars(module), *(vars(cls) for cls in classes)) for v in list(owner.values()))


def raised_by_the_model(check_id: str, exc: Exception) -> Finding | None:
    """An exception the model's own code raised where tfcheck called it outside a forward it guards (a backward, a
    custom autograd function, a hook): the check cannot run on this model as tfcheck runs it (gradients in eval
    mode, for one), which is inconclusive, neither a failure of the model nor a bug of tfcheck."""
    frame = raised_in_user_code(exc)
    if frame is None:
        return None
    first_line = str(exc).splitlines()[0] if str(exc) else ""
    return inconclusive(check_id, f"the model raised {type(exc).__name__}: {first_line} at {short_path(frame.filename)}"
                        f":{frame.lineno}, outside a forward (tfcheck takes gradients and runs its probes in eval "
                        "mode); this check cannot run on it as it is", Location(file=frame.filename, line=frame.lineno),
                        {"exception": f"{type(exc).__name__}: {exc}"})
