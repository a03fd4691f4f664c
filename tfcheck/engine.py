"""The engine: load a subject, run the battery on it (forward.smoke first), and collect a report.
Every exception is caught here: from the model it becomes a failed finding, from tfcheck an error finding."""
from __future__ import annotations

import contextlib
import time
import traceback
from pathlib import Path
from typing import Any, Iterable, Iterator

from tfcheck import declarations as decl
from tfcheck.context import CheckContext, ModelRaised
from tfcheck.errors import DeclarationError, SpecError, UsageError
from tfcheck.findings import Finding
from tfcheck.guard import Baseline, preserved
from tfcheck.registry import Check, all_checks
from tfcheck.report import Assumption, CheckResult, ModelReport
from tfcheck.status import Status
from tfcheck.subject import Subject, build_subject

SMOKE = "forward.smoke"
BUG_REPORT = "this is a bug in tfcheck; please report it with the model spec and this message"


def load_subject(model_or_spec: Any, strong: dict[str, decl.Declared] | None = None,
                 base: Path | None = None) -> Subject:
    """Build the subject from a spec string, a module class / factory, or an instance.

    ``strong`` holds the declarations that outrank the model's own ``__tfcheck__`` (command line,
    pyproject, run_checks arguments), already merged strongest first.
    """
    import torch.nn as nn

    from tfcheck import spec as spec_mod

    strong = dict(strong or {})
    if isinstance(model_or_spec, str):
        target, attr = spec_mod.split_spec(model_or_spec)
        origin = spec_mod.resolve_attr(spec_mod.import_target(target, base), target, attr)
        label = model_or_spec
    else:
        origin = model_or_spec
        name = getattr(origin, "__name__", type(origin).__name__)
        label = f"<{name} instance>" if isinstance(origin, nn.Module) else name
    from_origin = _own_declarations(origin, label)
    merged = decl.merge(strong, from_origin)
    loaded = spec_mod.build(origin, label, merged["kwargs"].value if "kwargs" in merged else {})
    if loaded.model is not origin:
        # The instance may carry its own __tfcheck__ (one that follows its constructor arguments, e.g.
        # pad_id); it outranks the class's or factory's.
        merged = decl.merge(strong, _own_declarations(loaded.model, label), from_origin)
    return build_subject(loaded, merged)


def _own_declarations(obj: Any, label: str) -> dict[str, decl.Declared]:
    mapping = getattr(obj, "__tfcheck__", None)
    if mapping is None:
        return {}
    if not isinstance(mapping, dict):
        raise DeclarationError(f"__tfcheck__ on {label} must be a dict of declarations, not {type(mapping).__name__}")
    return decl.from_mapping(mapping, f"__tfcheck__ on {getattr(obj, '__name__', type(obj).__name__)}")


def applicable_checks(subject: Subject, only: Iterable[str] | None = None) -> list[Check]:
    """The checks that apply to the subject (by kind and by each check's own ``applies``), in battery order.
    Those that do not apply are noted once among the subject's assumptions, with the reason."""
    checks = []
    for chk in all_checks():
        reason = chk.not_applicable(subject)
        if reason is None:
            checks.append(chk)
        elif chk.applies_to(subject.kind) and not any(a.key == "not applicable" and a.value == chk.id
                                                       for a in subject.assumptions):
            subject.assumptions.append(Assumption("not applicable", chk.id, reason))
    if only is not None:
        wanted = set(only)
        known = {c.id for c in all_checks()}
        unknown = wanted - known
        if unknown:
            raise UsageError(f"unknown check id(s) {', '.join(sorted(unknown))}; checks are: {', '.join(sorted(known))}")
        checks = [c for c in checks if c.id in wanted]
    _validate_accept(subject)
    return checks


def _validate_accept(subject: Subject) -> None:
    known = {c.id for c in all_checks()}
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
        self.subject = subject
        self.smoke_reported = smoke_reported
        self._smoke: CheckResult | None = None

    def result(self, chk: Check) -> CheckResult:
        if chk.id == SMOKE:
            return self.smoke()
        smoke = self.smoke()
        if smoke.status in (Status.FAIL, Status.ERROR):
            return blocked(chk, smoke, fail=not self.smoke_reported)
        return run_check(self.subject, chk)

    def smoke(self) -> CheckResult:
        if self._smoke is None:
            self._smoke = run_check(self.subject, next(c for c in all_checks() if c.id == SMOKE))
        return self._smoke


def run_model(subject: Subject, only: Iterable[str] | None = None) -> ModelReport:
    only = list(only) if only is not None else None
    runner = Runner(subject, smoke_reported=only is None or SMOKE in only)
    results = [runner.result(chk) for chk in applicable_checks(subject, only)]
    return ModelReport(subject.spec, assumptions=subject.assumptions, results=results)


def blocked(chk: Check, smoke: CheckResult, fail: bool = False) -> CheckResult:
    first = smoke.findings[0]
    if fail:
        return CheckResult(chk.id, chk.title, [Finding(
            chk.id, Status.FAIL, f"{SMOKE} (not selected) failed, so {chk.id} cannot run: {first.message}",
            first.location, {**first.evidence, "blocked_by": SMOKE}, first.row)])
    return CheckResult(chk.id, chk.title, [Finding(chk.id, Status.SKIP, f"blocked by {SMOKE}: {first.message}",
                                                   evidence={"blocked_by": SMOKE})])


def run_check(subject: Subject, chk: Check) -> CheckResult:
    """Run one check with the model in eval mode, and leave the model as it was."""
    ctx = CheckContext(subject)
    start = time.perf_counter()
    if subject.baseline is None:
        subject.baseline = Baseline(subject.model)
    with preserved(subject.model, baseline=subject.baseline), _threads_for(subject.model):
        subject.model.eval()
        findings = _findings(ctx, chk)
    findings = [_accept(f, subject.accepted) for f in findings]
    return CheckResult(chk.id, chk.title, findings, ctx.cost, time.perf_counter() - start)


#: Below this many parameters a probe is a stream of tiny ops: one intra-op thread runs it many times faster
#: than several (whose hand-offs dominate, worse still on a loaded machine).
SMALL_MODEL_PARAMS = 5_000_000


@contextlib.contextmanager
def _threads_for(model) -> Iterator[None]:
    import torch

    threads = torch.get_num_threads()
    small = sum(p.numel() for p in model.parameters()) < SMALL_MODEL_PARAMS
    if small and threads > 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def _findings(ctx: CheckContext, chk: Check) -> list[Finding]:
    try:
        findings = list(chk.func(ctx))
    except ModelRaised as raised:
        e = raised.explanation
        return [Finding(chk.id, Status.FAIL, e.message, e.location, e.evidence, e.row)]
    except UsageError as exc:
        return [Finding(chk.id, Status.FAIL, str(exc), row="forward-fails")]
    except Exception as exc:  # tfcheck itself broke: say so, never crash the run
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        return [Finding(chk.id, Status.ERROR, f"{chk.id} raised {type(exc).__name__}: {exc} — {BUG_REPORT}",
                        evidence={"traceback": "".join(tb[-6:])})]
    if not findings:
        return [Finding(chk.id, Status.ERROR, f"{chk.id} returned no finding — {BUG_REPORT}")]
    return findings


def _accept(finding: Finding, accepted: dict[str, str]) -> Finding:
    reason = accepted.get(finding.check)
    if reason is None or finding.status is not Status.FAIL:
        return finding
    return finding.with_status(Status.ACCEPTED, f"{finding.message} (accepted: {reason})")


__all__ = ["load_subject", "run_model", "run_check", "applicable_checks", "SpecError"]
