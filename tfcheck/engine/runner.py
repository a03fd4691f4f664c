"""The engine: run the battery on a subject (forward.smoke first) and collect a report. Every exception is
caught here: from the model it becomes a failed finding, from tfcheck an error finding. Subjects are loaded by
``tfcheck.engine.loading`` (re-exported here, where the front-ends import them from)."""
from __future__ import annotations

import contextlib
import dataclasses
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from tfcheck import progress
from tfcheck.engine.budget import DEFAULT_BUDGET_S, BudgetExceeded, time_budget
from tfcheck.engine.context import CheckContext, ModelRaised
from tfcheck.engine.guard import Baseline, placed_on, preserved
from tfcheck.engine.limits import InstrumentationLimit, found_not_applicable, raised_by_the_model
from tfcheck.engine.loading import BUILD_SEED, load_declared, load_subject
from tfcheck.engine.memory import fit_probes
from tfcheck.engine.registry import Check, NotApplicable, battery, inconclusive
from tfcheck.engine.symptoms import symptom_checks
from tfcheck.errors import DeclarationError, MaskUnread, SpecError, UsageError
from tfcheck.model.build.deferred_torch import deferred_torch_imports
from tfcheck.model.subject import Subject
from tfcheck.model.trial.trial import SETTLED_BY_TRIAL, Trial
from tfcheck.report import root_cause
from tfcheck.report.findings import Finding, Location
from tfcheck.report.report import Assumption, CheckResult, ModelReport
from tfcheck.report.status import Status
from tfcheck.report.verdict import OVER_BUDGET

T = TypeVar("T")
SMOKE = "forward.smoke"
BUG_REPORT = "this is a bug in tfcheck; please report it with the model spec and this message"


def applicable_checks(subject: Subject, only: Iterable[str] | None = None) -> list[Check]:
    """The checks that apply to the subject (by kind and by each check's own ``applies``), in battery order.
    Those that do not apply are noted once among the subject's assumptions, with the reason."""
    checks = []
    for chk in battery():
        why_not = chk.not_applicable(subject)
        if why_not is None:
            checks.append(chk)
        elif chk.applies_to(subject.kind) and not any(a.key == NotApplicable.PREFIX and a.value == chk.id
                                                       for a in subject.assumptions):
            subject.assumptions.append(Assumption(NotApplicable.PREFIX, chk.id, why_not.reason))
    if only is not None:
        wanted = set(only)
        known = {c.id for c in battery()}
        unknown = wanted - known
        if unknown:
            raise UsageError(f"unknown check id(s) {', '.join(sorted(unknown))}; checks are: "
                             f"{', '.join(sorted(known))}")
        checks = [c for c in checks if c.id in wanted]
    _validate_accept(subject)
    return checks


def _validate_accept(subject: Subject) -> None:
    known = {c.id for c in battery()}
    unknown = set(subject.accepted) - known
    if unknown:
        raise DeclarationError(
            f"'accept' names unknown check(s) {', '.join(sorted(unknown))}; checks are: {', '.join(sorted(known))}")


class Runner:
    """Runs checks of one subject one at a time (the pytest plugin runs one per item), with forward.smoke
    run first and once: when it fails, every other check is skipped as blocked by it.

    ``smoke_reported`` says whether forward.smoke's own result is shown (it is not under ``--only`` or
    ``-k`` selections that leave it out); when it is not, a blocked check fails with its explanation, so a
    broken forward is never hidden behind skips."""

    def __init__(self, subject: Subject, smoke_reported: bool = True):
        fit_probes(subject)  # before any check reads a probe length
        self.subject = subject
        self.smoke_reported = smoke_reported
        self._smoke: CheckResult | None = None

    def result(self, chk: Check) -> CheckResult:
        if chk.id == SMOKE:
            return self.smoke()
        smoke = self.smoke()
        if smoke.status in (Status.FAIL, Status.ERROR):
            return blocked(chk, smoke, fail=not self.smoke_reported)
        if over_budget(smoke):  # one forward did not fit the budget: no other check would
            return blocked(chk, smoke)
        return run_check(self.subject, chk)

    def late_reason(self, chk: Check) -> str | None:
        """Why a check collected before the trial (it did not apply then) still does not apply after it; None
        when it now applies (its "not applicable" note is then dropped, as tfcheck check drops it)."""
        smoke = self.smoke()  # runs the trial
        if smoke.status in (Status.FAIL, Status.ERROR) or over_budget(smoke):
            return None  # blocked like any check: result() says so
        why = chk.not_applicable(self.subject)
        if why is not None:
            return why.reason
        self.subject.assumptions[:] = [a for a in self.subject.assumptions
                                       if not (a.key == NotApplicable.PREFIX and a.value == chk.id)]
        return None

    def smoke(self) -> CheckResult:
        if self._smoke is None:
            self._smoke = run_check(self.subject, next(c for c in battery() if c.id == SMOKE))
        return self._smoke


def run_model(subject: Subject, only: Iterable[str] | None = None) -> ModelReport:
    only = list(only) if only is not None else None
    runner = Runner(subject, smoke_reported=only is None or SMOKE in only)
    done = {chk.id: runner.result(chk) for chk in applicable_checks(subject, only)}
    # A fact only the trial forward shows (a padding mask built inside from the pad id) may make a check apply
    # that did not before it: run it too, and drop the reason it was left out for.
    late = [c for c in applicable_checks_after_trial(subject, only) if c.id not in done]
    for chk in late:
        subject.assumptions[:] = [a for a in subject.assumptions
                                  if not (a.key == NotApplicable.PREFIX and a.value == chk.id)]
        done[chk.id] = runner.result(chk)
    # One that finds out from its forward that it does not apply (no norm to place) is a line among the
    # assumptions too, as one known beforehand not to apply.
    for chk_id, result in list(done.items()):
        why = found_not_applicable(result)
        if why is not None:
            del done[chk_id]
            subject.assumptions.append(Assumption(NotApplicable.PREFIX, chk_id, why))
    results = [done[c.id] for c in battery() if c.id in done]
    return root_cause.link(ModelReport(subject.spec, assumptions=subject.reported_assumptions(), results=results),
                           symptom_checks())


def may_apply_after_trial(subject: Subject, applicable: list[Check]) -> list[Check]:
    """The checks that do not apply now, to the subject's kind, for a reason read from a fact the trial forward
    may settle (mask=internal from the mask-building code, causal from a look-ahead mask it builds): they may
    apply after it. The pytest plugin collects them as items, skipped with the reason if they still do not."""
    now = {c.id for c in applicable}
    return [c for c in battery() if c.id not in now and c.applies_to(subject.kind)
            and facts_read_by(c, subject) & SETTLED_BY_TRIAL]


def facts_read_by(chk: Check, subject: Subject) -> set[str]:
    """The facts a check's applicability reads (its ``applies`` run on a view of the facts that notes them)."""
    seen = _FactsRead(subject.facts)
    chk.not_applicable(dataclasses.replace(subject, facts=seen))  # type: ignore[arg-type]
    read: set[str] = seen.read
    return read


class _FactsRead:
    """The subject's facts, noting each one read."""

    def __init__(self, facts: Any):
        object.__setattr__(self, "facts", facts)
        object.__setattr__(self, "read", set())

    def __getattr__(self, name: str) -> Any:
        self.read.add(name)
        return getattr(self.facts, name)


def applicable_checks_after_trial(subject: Subject, only: Iterable[str] | None) -> list[Check]:
    """The checks that apply once the trial forward ran (none when it did not: forward.smoke reports why)."""
    trial = subject.trial
    if trial is None or not trial.ran:
        return []
    wanted = set(only) if only is not None else None
    return [c for c in battery() if (wanted is None or c.id in wanted) and c.not_applicable(subject) is None]


def blocked(chk: Check, smoke: CheckResult, fail: bool = False) -> CheckResult:
    first = smoke.findings[0]
    if fail:
        # An ERROR of tfcheck stays an error (exit 3 with or without --only); the model's failure, a failure.
        status = Status.ERROR if first.status is Status.ERROR else Status.FAIL
        return CheckResult(chk.id, chk.title, [Finding(
            chk.id, status, f"{SMOKE} (not selected) failed, so {chk.id} cannot run: {first.message}",
            first.location, {**first.evidence, "blocked_by": SMOKE}, first.row)])
    return CheckResult(chk.id, chk.title, [Finding(chk.id, Status.SKIP, f"blocked by {SMOKE}: {first.message}",
                                                   evidence={"blocked_by": SMOKE})])


def run_check(subject: Subject, chk: Check) -> CheckResult:
    """Run one check on the declared device, with the model in eval mode and within the time budget, and
    leave the model as it was."""
    ctx = CheckContext(subject)
    start = time.perf_counter()
    progress.check_started(chk.id, subject.facts.budget_s or DEFAULT_BUDGET_S)
    try:
        with subject.facts.reading() as read:
            findings = _guarded(subject, lambda: _findings(ctx, chk))
    except _MoveFailed as failed:  # out of memory on the device, a device lost: the move is undone
        return CheckResult(chk.id, chk.title, [_move_failed(chk, str(subject.facts.device), failed.error)], ctx.cost,
                           time.perf_counter() - start)
    findings = [_accept(f, subject.accepted) for f in findings]
    return CheckResult(chk.id, chk.title, findings, ctx.cost, time.perf_counter() - start, sorted(read))


def settle_facts(subject: Subject) -> Trial | None:
    """The trial forward alone, run as the battery runs it (tfcheck trace settles a mask layout so): on the
    declared device, in eval mode, within the budget, the model left as it was. None when it could not run:
    the caller's own forward then shows why."""
    ctx = CheckContext(subject)

    def trial() -> Trial:
        with time_budget(subject.facts.budget_s):
            return ctx.settle()
    try:
        return _guarded(subject, trial)
    except (Exception, BudgetExceeded):  # noqa: BLE001 - whatever stopped it, the trace's forward reports
        return None


class _MoveFailed(Exception):
    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


def _guarded(subject: Subject, work: Callable[[], T]) -> T:
    """``work()`` on the declared device, with the model in eval mode, the random generators seeded and the
    model's state put back after (a _MoveFailed when the move to the device raised). torch's imports of dynamo
    and sympy are deferred (dispatch modes and optimizer steps would spend 1 s on them to learn nothing compiles)."""
    placement = placed_on(subject.model, subject.facts.device)
    try:
        moved = placement.__enter__()
    except Exception as exc:
        raise _MoveFailed(exc) from exc
    try:
        # A model moved for the check is put back as it was by the move itself: no baseline is needed
        # (and the moved tensors are new ones each check).
        if subject.baseline is None and not moved:
            subject.baseline = Baseline(subject.model)
        with preserved(subject.model, copy_parameters=not moved, baseline=None if moved else subject.baseline), \
                _threads_for(subject.model), deferred_torch_imports():
            subject.model.eval()
            _seed_generators()
            return work()
    finally:
        placement.__exit__(None, None, None)


def _move_failed(chk: Check, device: str, exc: Exception) -> Finding:
    from tfcheck.explainers.explanation import explain_error

    explanation = explain_error(exc)
    return Finding(chk.id, Status.FAIL, f"moving the model to device={device} for {chk.id} raised "
                   f"{type(exc).__name__}: {exc}", evidence={"device": device, **explanation.evidence},
                   row=explanation.row or "forward-fails")


#: The seed of the random generators at the start of every check (the guard puts the caller's back after).
CHECK_SEED = 0


def _seed_generators() -> None:
    """Every check starts from the same random state, whatever ran before it in this process: dropout masks
    and the like are the same in a serial run, in each pytest-xdist worker and in a rerun."""
    import random

    import numpy as np
    import torch

    # Not torch.manual_seed: with CUDA not yet initialised it would queue a seed that replaces the caller's
    # own queued one and outlives the guard.
    torch.random.default_generator.manual_seed(CHECK_SEED)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(CHECK_SEED)
    random.seed(CHECK_SEED)
    np.random.seed(CHECK_SEED)


#: Below this many parameters a probe is a stream of tiny ops: one intra-op thread runs it many times faster
#: than several (whose hand-offs dominate, worse still on a loaded machine).
SMALL_MODEL_PARAMS = 5_000_000


@contextlib.contextmanager
def _threads_for(model: Any) -> Iterator[None]:
    import torch

    threads = torch.get_num_threads()
    if threads > 1 and sum(p.numel() for p in model.parameters()) < SMALL_MODEL_PARAMS:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def _findings(ctx: CheckContext, chk: Check) -> list[Finding]:
    try:
        with time_budget(ctx.subject.facts.budget_s):
            # Facts only a forward shows are settled before the first check reads them (forward.smoke, run
            # first, pays for it); a trial that raised in every layout leaves forward.smoke the model's error.
            ctx.settle()
            # A fact the trial settled (the padding mask read from the forward's structure) may take it out.
            why_not = chk.not_applicable(ctx.subject) if chk.id != SMOKE else None
            if why_not is not None:  # said among the assumptions, as for a check known not to apply beforehand
                return [ctx.not_applicable(chk.id, why_not.reason)]
            findings = ctx.run_flow_check(chk) if chk.flow else list(chk.func(ctx))
    except BudgetExceeded as over:
        return [_over_budget(ctx.subject, chk, over)]
    # The model runs without tfcheck's modes, or no reading of its optional mask ran in the trial: tfcheck's limit.
    except (InstrumentationLimit, MaskUnread) as limit:
        return [inconclusive(chk.id, limit.reason)]
    except ModelRaised as raised:
        e = raised.explanation
        return [Finding(chk.id, Status.FAIL, e.message, e.location, e.evidence, e.row)]
    except UsageError as exc:
        return [Finding(chk.id, Status.FAIL, str(exc), row="forward-fails")]
    except Exception as exc:  # tfcheck itself broke (unless the model's code raised): say so, never crash the run
        if (by_model := raised_by_the_model(chk.id, exc)) is not None:
            return [by_model]
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        return [Finding(chk.id, Status.ERROR, f"{chk.id} raised {type(exc).__name__}: {exc} — {BUG_REPORT}",
                        evidence={"traceback": "".join(tb[-6:])})]
    if not findings:
        return [Finding(chk.id, Status.ERROR, f"{chk.id} returned no finding — {BUG_REPORT}")]
    return findings


def _over_budget(subject: Subject, chk: Check, over: BudgetExceeded) -> Finding:
    """A check stopped by its budget is inconclusive, not failed: a slow machine is no bug in the model."""
    source = subject.source_of("budget_s")
    budget = f"budget_s={over.budget_s:g} from {source}" if source else f"the default budget of {over.budget_s:g} s"
    location = _stopped_in(subject, over)
    more = _roomier(max(over.budget_s, over.elapsed_s))
    return Finding(
        chk.id, Status.SKIP,
        f"{chk.id} stopped after {over.elapsed_s:.2f} s {_stop_text(location)}: over {budget}, so it is "
        f"inconclusive. Give it more time with --set budget_s={more} (tfcheck check), --tfcheck-set "
        f"budget_s={more} (pytest), or budget_s in [[tool.tfcheck.models]] / __tfcheck__; or shrink the model "
        "with the kwargs declaration.",
        location, {"blocked_by": OVER_BUDGET, "budget_s": over.budget_s, "elapsed_s": round(over.elapsed_s, 3)})


#: Libraries tfcheck runs checks with: a check stopped inside them was not stopped in the user's code.
_OWN_LIBRARIES = ("hypothesis", "numpy", "rich")


def _stopped_in(subject: Subject, over: BudgetExceeded) -> Location:
    """Where the budget first stopped the check: the innermost line of the user's code (their model, a Hugging
    Face model) then running and the module whose forward it ran in, or why there is no line."""
    import importlib.util
    import os

    from tfcheck.engine.budget import where_stopped

    dirs = []
    for name in _OWN_LIBRARIES:
        found = importlib.util.find_spec(name)
        if found is not None and found.origin:
            dirs.append(os.path.dirname(found.origin))
    stop = where_stopped(over, subject.model, dirs)
    if stop.file:
        return Location(stop.module, stop.file, stop.line)
    if stop.module is not None:
        return Location(stop.module, reason="stopped in torch's or tfcheck's code (a layer of torch's, a hook) "
                                            "during the module's call: no line of yours was running")
    return Location(reason="stopped in tfcheck's own work between the model's forwards: no line of the model was "
                           "running")


def _stop_text(location: Location) -> str:
    """Where a stop happened, for the message: "at model.py:41 in module 'layers.3.attn'", or why no line."""
    module = f" in module '{location.module or '<root>'}'" if location.module is not None else ""
    if location.file:
        return f"at {location.file}:{location.line}{module}"
    return f"{module.lstrip()} ({location.reason})" if module else f"({location.reason})"


def _roomier(seconds: float) -> str:
    """A round budget at least 2.5 times ``seconds``: 1, 2, 5, 10, 20, 50, ..."""
    step = 1.0
    while True:
        for factor in (1, 2, 5):
            if step * factor >= 2.5 * seconds:
                return f"{step * factor:g}"
        step *= 10


def over_budget(result: CheckResult) -> bool:
    return any(f.evidence.get("blocked_by") == OVER_BUDGET for f in result.findings)


def _accept(finding: Finding, accepted: dict[str, str]) -> Finding:
    reason = accepted.get(finding.check)
    if reason is None or finding.status not in (Status.FAIL, Status.WARN):  # the warnings say accept silences them
        return finding
    return dataclasses.replace(finding, status=Status.ACCEPTED, message=f"{finding.message} (accepted: {reason})",
                               evidence={**finding.evidence, "accepted": reason})


__all__ = ["load_subject", "load_declared", "BUILD_SEED", "run_model", "run_check", "settle_facts", "applicable_checks",
           "SpecError"]
