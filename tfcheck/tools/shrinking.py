"""Minimal failing examples, the generic search: after a check has found a failure, hypothesis draws
examples of the check's own ``shrink=`` property (batch sizes, lengths, padding patterns) and shrinks the
failure to the smallest input that still shows it ("still leaks with batch 1, length 2: output position 0
changes when position 1 changes").

A check's verdict comes from its own batched, deterministic measurement; this search only describes a
failure already found, so a passing model never pays for it. It is bounded (MAX_FORWARDS extra forwards,
MAX_SECONDS of wall time and at most a quarter of the check's budget_s) and reproducible: hypothesis runs
derandomized, with no example database (nothing is written to the working directory) and with every
setting given explicitly, so neither a user's hypothesis profile nor the CI profile changes the result.
The finding's evidence holds the example and a one-line ``replay`` that measures it again
(tfcheck.tools.replay).

This module knows no check. A check owns its property (a ``Property`` subclass: the strategy of its
examples and ``shows(search, example)``, the measurement of one example in one or two forwards), registers
it with ``@check(..., shrink=PROPERTY)`` and passes it to ``with_minimal_example``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from tfcheck.errors import UsageError
from tfcheck.report.findings import Finding
from tfcheck.report.status import Status

#: Extra forwards one search may spend (each example costs one or two; outputs shared between examples
#: are reused).
MAX_FORWARDS = 40
#: Wall-clock cap of one search, also never more than a quarter of the check's budget_s.
MAX_SECONDS = 10.0
#: Examples hypothesis generates before it shrinks (most failures show at the very first, simplest one).
MAX_EXAMPLES = 12
#: Largest batch a property searches (batch.independence: one more), and the longest length when the
#: failing measurement does not say its own (the search never goes longer than the check's measurement).
MAX_BATCH, MAX_LENGTH = 3, 16


@dataclass(frozen=True)
class Shown:
    """What one example showed: the largest forbidden change, its tolerance, and where it was."""

    change: float
    tolerance: float
    detail: str  # e.g. "output position 0 changes by 0.412 when position 1 changes"

    @property
    def leaks(self) -> bool:
        return self.change > self.tolerance

    def __str__(self) -> str:
        verdict = "shows the failure" if self.leaks else "does not show the failure"
        return f"{verdict}: {self.detail} (tolerance {self.tolerance:.3g})"


# ----- the search -----------------------------------------------------------------------------------

class _Exhausted(Exception):
    """The search's forward or time budget is spent: no further example is measured."""


class Search:
    """The forwards of one search: counted against its budget, and shared between examples by key."""

    def __init__(self, ctx, max_forwards: int, max_seconds: float):
        self.ctx = ctx
        self.subject = ctx.subject
        self.max_forwards, self.max_seconds = max_forwards, max_seconds
        self.first_forward = ctx.cost.forward
        self.start = time.monotonic()
        self.stopped_by: str | None = None
        self._outputs: dict[Any, torch.Tensor] = {}

    @property
    def forwards(self) -> int:
        return self.ctx.cost.forward - self.first_forward

    def output(self, key: Any, args: tuple, kwargs: dict, what: str,
               during: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext) -> torch.Tensor:
        """The output of one forward; the same ``key`` is run once (a few recent outputs are kept)."""
        if key in self._outputs:
            return self._outputs[key]
        if self.forwards >= self.max_forwards:
            self.stopped_by = f"the budget of {self.max_forwards} forwards"
            raise _Exhausted
        if time.monotonic() - self.start > self.max_seconds:
            self.stopped_by = f"the time limit of {self.max_seconds:g} s"
            raise _Exhausted
        with during():
            out = self.ctx.run(args, kwargs, f"{what} (searching a minimal example)").output.detach()
        if len(self._outputs) >= 8:  # outputs of large vocabularies are big; examples rarely share older ones
            self._outputs.pop(next(iter(self._outputs)))
        self._outputs[key] = out
        return out


def search_settings():
    """The hypothesis settings of every search, each one given so that no profile (a user's, or the CI
    profile hypothesis loads when $CI is set) changes the result or writes an example database."""
    from hypothesis import HealthCheck, Phase, Verbosity
    from hypothesis import settings as hypothesis_settings

    return hypothesis_settings(
        max_examples=MAX_EXAMPLES, derandomize=True, database=None, deadline=None,
        phases=(Phase.generate, Phase.shrink), verbosity=Verbosity.quiet, report_multiple_bugs=False,
        print_blob=False, suppress_health_check=list(HealthCheck), stateful_step_count=1, backend="hypothesis")


def search(ctx, prop: Property, strategy, max_forwards: int | None = None,
           max_seconds: float | None = None) -> tuple[Any, Shown | None, Search, int]:
    """The smallest example of ``strategy`` that shows the failure: (example or None, what it showed,
    the search, the number of examples measured). Budgets default to MAX_FORWARDS and MAX_SECONDS."""
    from hypothesis import find
    from hypothesis.errors import NoSuchExample, Unsatisfiable

    from tfcheck.engine.context import ModelRaised

    runs = Search(ctx, MAX_FORWARDS if max_forwards is None else max_forwards,
                  MAX_SECONDS if max_seconds is None else max_seconds)
    verdicts: dict[Any, Shown | None] = {}

    def shows(example) -> bool:
        if example not in verdicts:
            try:
                verdicts[example] = prop.shows(runs, example)
            except _Exhausted:
                return False  # not remembered; the budget stays spent, so the answer stays the same
            except (ModelRaised, UsageError):
                verdicts[example] = None  # another failure (the model raised at this size), not this one
        shown = verdicts[example]
        return shown is not None and shown.leaks

    try:
        with isolated_hypothesis():
            example = find(strategy, shows, settings=search_settings())
    except (NoSuchExample, Unsatisfiable):
        return None, None, runs, len(verdicts)
    return example, verdicts[example], runs, len(verdicts)


@contextlib.contextmanager
def isolated_hypothesis() -> Iterator[None]:
    """Hypothesis as if no project were around it, for the block; everything restored after.

    Even with database=None, hypothesis writes a cache of the literals it mines from every local module
    (``.hypothesis/constants/``) into the working directory, and lets those literals bias what it draws,
    so the example found would depend on which of the user's modules are imported (pytest imports more
    than ``tfcheck check``). Its storage goes to a temporary directory, removed after; the mined literals
    are set aside for the block (an internal of hypothesis: where it is missing, only the storage moves)."""
    import shutil
    import tempfile

    from hypothesis import configuration

    home = vars(configuration).get("__hypothesis_home_directory")
    scratch = tempfile.mkdtemp(prefix="tfcheck-hypothesis-")
    configuration.set_hypothesis_home_dir(scratch)
    try:
        with _without_local_constants():
            yield
    finally:
        configuration.set_hypothesis_home_dir(home)
        shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def _without_local_constants() -> Iterator[None]:
    try:
        from hypothesis.internal.conjecture import providers

        mine, cache, empty = providers._get_local_constants, providers.CONSTANTS_CACHE, providers.Constants
    except (ImportError, AttributeError):  # another hypothesis version: its literals may bias the draws
        yield
        return
    cache.cache.clear()  # permitted constants computed with the user's literals
    providers._get_local_constants = lambda: empty()
    try:
        yield
    finally:
        providers._get_local_constants = mine
        cache.cache.clear()  # and those computed without them, so the user's own tests see theirs again


def with_minimal_example(ctx, finding: Finding, prop: Property | None) -> Finding:
    """``finding`` with the smallest input of ``prop`` (its check's property) that still shows its failure
    (message and evidence), when it is a failure or warning; any other finding as it is."""
    if prop is None or finding.status not in (Status.FAIL, Status.WARN):
        return finding
    from tfcheck.engine.budget import BudgetExceeded

    try:
        if _inside_hypothesis_test():
            return _add(finding, {"minimal_example": None, "minimal_example_search": {
                "result": "not searched: tfcheck ran inside a hypothesis test, where hypothesis allows no nested "
                          "search; run the check outside it to get the minimal example"}})
        strategy = prop.strategy(ctx.subject, finding)
        example, shown, runs, measured = search(ctx, prop, strategy, max_seconds=_seconds(ctx.subject))
    except BudgetExceeded as over:
        # The check's budget ran out during the search: the failure it found stands (and no torch op may
        # run from here on, the deadline being engaged).
        return _add(finding, {"minimal_example": None, "minimal_example_search": {
            "result": f"stopped by the check's time budget ({over}); the failure stands"}})
    except Exception as exc:  # noqa: BLE001 - describing a failure must never lose the failure itself
        return _add(finding, {"minimal_example": None, "minimal_example_search": {
            "result": f"the search raised {type(exc).__name__}: {exc} (a bug in tfcheck; the failure stands)"}})
    searched = {"examples_measured": measured, "forwards": runs.forwards, "budget_forwards": runs.max_forwards,
                "stopped_by": runs.stopped_by, "hypothesis": "derandomize=True, database=None, "
                f"max_examples={MAX_EXAMPLES}, phases=generate+shrink"}
    if example is None or shown is None:  # shown is None only when no example was found
        searched["result"] = ("no smaller input showed the failure within the search's budget; the check's own "
                              "measurement above is the example")
        return _add(finding, {"minimal_example": None, "minimal_example_search": searched})
    summary = prop.summary(example, shown)
    replay_line = replay_command(ctx.subject, finding.check, example_dict(example))
    evidence = {"minimal_example": {**example_dict(example), "inputs": prop.inputs(ctx.subject, example),
                                    "change": shown.change, "tolerance": shown.tolerance, "shows": shown.detail},
                "minimal_example_search": searched, "replay": replay_line}
    message = (f"{finding.message} Smallest input that still shows it: {summary} (found by hypothesis in "
               f"{runs.forwards} extra forwards; 'replay' in the evidence measures it again).")
    return dataclasses.replace(finding, message=message, evidence={**finding.evidence, **evidence})


def _add(finding: Finding, evidence: dict) -> Finding:
    return dataclasses.replace(finding, evidence={**finding.evidence, **evidence})


def _inside_hypothesis_test() -> bool:
    from hypothesis.control import currently_in_test_context

    return currently_in_test_context()


def _seconds(subject) -> float:
    from tfcheck.engine.budget import DEFAULT_BUDGET_S

    return min(MAX_SECONDS, 0.25 * float(subject.facts.budget_s or DEFAULT_BUDGET_S))


def example_dict(example) -> dict:
    if hasattr(example, "to_dict"):
        return example.to_dict()
    return dataclasses.asdict(example)


# ----- what a check's property provides ------------------------------------------------------------

class Property:
    """What one check's examples are, and how one is measured: subclassed next to the check it belongs to,
    whose measurement helpers it shares."""

    check: str
    example_type: type

    def strategy(self, subject, finding: Finding):
        raise NotImplementedError

    def shows(self, runs: Search, example) -> Shown | None:
        """Measure ``example``; None when it cannot be read (wrong output shape, nothing finite)."""
        raise NotImplementedError

    def summary(self, example, shown: Shown) -> str:
        raise NotImplementedError

    def inputs(self, subject, example) -> dict:
        """The example's inputs as data (token ids, or the shape of the features), for the evidence."""
        raise NotImplementedError

    def example(self, data: dict):
        if hasattr(self.example_type, "from_dict"):
            return self.example_type.from_dict(data)
        names = {f.name for f in dataclasses.fields(self.example_type)}
        missing = names - set(data)
        if missing:
            raise UsageError(f"a {self.check} example needs {', '.join(sorted(names))}; missing "
                             f"{', '.join(sorted(missing))}")
        return self.example_type(**{k: int(data[k]) for k in names})


def tokens_or_shape(t: torch.Tensor) -> Any:
    return t.tolist() if not t.is_floating_point() else f"random features {tuple(t.shape)}"


def longest_measured(finding: Finding, key: str) -> int:
    """The longest length the check measured (``key`` in its evidence: a length or a list of them): the
    search goes no longer."""
    value = finding.evidence.get(key)
    if isinstance(value, (list, tuple)) and value:
        value = max(value)
    return int(value) if isinstance(value, int) else MAX_LENGTH


def finite_rows(out: torch.Tensor) -> torch.Tensor:
    """(batch, length) bool: positions whose output is finite."""
    return torch.isfinite(out).reshape(*out.shape[:2], -1).all(-1)


# ----- the replay line -----------------------------------------------------------------------------

def replay_command(subject, check: str, example: dict) -> str:
    """A shell line that measures the example again; MODEL stands for a model given as an object that no
    spec string names (an instance, a class defined in __main__ or inside a function)."""
    spec = _spec_string(subject)
    target = json.dumps(spec) if spec else "MODEL"
    extra = "".join(f", {key}={_literal(value)}" for key, value in _replayed_declarations(subject).items())
    code = (f"from tfcheck.shrinking import replay; print(replay({target}, {json.dumps(check)}, "
            f"{_literal(example)}{extra}))")
    return f"python -c '{code}'" if "'" not in code else f"python -c {json.dumps(code)}"


def _spec_string(subject) -> str | None:
    label = subject.spec
    if ":" in label and not label.startswith("<"):
        return label
    origin = subject.loaded.origin
    module, qualname = getattr(origin, "__module__", None), getattr(origin, "__qualname__", None)
    if isinstance(origin, nn.Module) or not module or not qualname or module == "__main__" or "<" in qualname:
        return None
    return f"{module}:{qualname}"


def _replayed_declarations(subject) -> dict[str, Any]:
    """The declarations that do not come with the model itself (its __tfcheck__), and that change what an
    example measures."""
    out = {}
    for key, declared in subject.declared.items():
        if declared.source.startswith("__tfcheck__") or key in ("accept", "inputs", "schedule", "budget_s"):
            continue
        value = declared.value
        out[key] = str(value) if type(value).__name__ == "MaskSpec" else value
    return out


def _literal(value: Any) -> str:
    """Python source for a JSON-like value, with double-quoted strings (the line is single-quoted for the shell)."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(str(k))}: {_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return json.dumps(str(value))
