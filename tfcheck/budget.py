"""Time budgets: a check stops between two torch operations once its wall-clock budget is spent.

The deadline is a ``TorchFunctionMode``: every torch call made while it is active (the model's forward,
a check's own tensor arithmetic, each step of a training loop) first compares the clock with the
deadline. A single call that never returns (a sleep, a C loop, a pure-Python loop without torch ops)
is stopped at its next torch operation, not inside it.
"""
from __future__ import annotations

import contextlib
import time
from typing import Iterator

from torch.overrides import TorchFunctionMode

#: Seconds a check may run when ``budget_s`` is not declared.
DEFAULT_BUDGET_S = 120.0


class BudgetExceeded(BaseException):
    """A check ran past its budget. A BaseException, like KeyboardInterrupt, so that neither the model's
    ``except Exception`` nor tfcheck's explainer (which turns model exceptions into findings) mistakes it
    for an error of the model: it goes straight to the engine."""

    def __init__(self, budget_s: float, elapsed_s: float):
        super().__init__(f"over the budget of {budget_s:g} s after {elapsed_s:.2f} s")
        self.budget_s = budget_s
        self.elapsed_s = elapsed_s


class Deadline(TorchFunctionMode):
    """Raises BudgetExceeded at the first torch call after ``budget_s`` seconds, and at every call after
    that one, so a model that swallows the first one is still stopped at its next operation."""

    def __init__(self, budget_s: float):
        super().__init__()
        self.budget_s = budget_s
        self.start = self.deadline = 0.0

    def __enter__(self) -> "Deadline":
        self.start = time.monotonic()
        self.deadline = self.start + self.budget_s
        return super().__enter__()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        # One clock read per call: a few tens of nanoseconds against the mode's own dispatch cost.
        now = time.monotonic()
        if now > self.deadline:
            raise BudgetExceeded(self.budget_s, now - self.start)
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def time_budget(budget_s: float | None) -> Iterator[Deadline]:
    """The deadline active for the block; ``None`` means the default budget."""
    deadline = Deadline(DEFAULT_BUDGET_S if budget_s is None else float(budget_s))
    with deadline:
        yield deadline
