"""Progress of long work, for a person watching a terminal: which check runs, its seconds against its budget,
and the step of a training check. The engine and the training loop report here; only a front end that shows it
listens (the CLI on a terminal); with no listener a report costs one lookup."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field


@dataclass
class Progress:
    """What runs now. A front end reads it when it redraws (the fields change under it, never its identity)."""

    spec: str = ""
    check: str | None = None
    budget_s: float | None = None
    started: float = field(default_factory=time.perf_counter)
    step: int | None = None
    steps: int | None = None

    def line(self) -> str:
        """``reference_model:TransformerLM  train.overfit_batch  step 12/30  4.1 s of 120 s``."""
        if self.check is None:
            return f"{self.spec}  building and settling the facts"
        elapsed = time.perf_counter() - self.started
        parts = [self.spec, self.check]
        if self.steps:
            parts.append(f"step {self.step}/{self.steps}")
        parts.append(f"{elapsed:.1f} s" + (f" of {self.budget_s:g} s" if self.budget_s else ""))
        return "  ".join(parts)


_CURRENT: ContextVar[Progress | None] = ContextVar("tfcheck_progress", default=None)


@contextlib.contextmanager
def watched(spec: str) -> Iterator[Progress]:
    """Report the progress of the work inside the block to the returned object (one model's battery)."""
    progress = Progress(spec)
    token = _CURRENT.set(progress)
    try:
        yield progress
    finally:
        _CURRENT.reset(token)


def check_started(check: str, budget_s: float | None) -> None:
    progress = _CURRENT.get()
    if progress is not None:
        progress.check, progress.budget_s, progress.started = check, budget_s, time.perf_counter()
        progress.step = progress.steps = None


def step(done: int, total: int) -> None:
    """A training loop finished step ``done`` of ``total``."""
    progress = _CURRENT.get()
    if progress is not None:
        progress.step, progress.steps = done, total
