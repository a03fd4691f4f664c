"""Time budgets: a check stops between two torch operations once its wall-clock budget is spent.

The deadline is a ``TorchFunctionMode`` (``Deadline``): once engaged, every torch call (the model's
forward, a check's own tensor arithmetic, each step of a training loop) raises ``BudgetExceeded``. A mode
on the stack costs a Python call per torch operation (about 2 µs: a quarter of the time of the reference
LM's battery), so in the main thread it is not engaged until the budget is spent: a watchdog thread wakes at
the deadline and has the main thread insert the mode, through a handler of tfcheck's own on an otherwise
unused real-time signal (``_thread.interrupt_main(WAKE_SIGNAL)`` simulates it: nothing is sent to the process).
SIGINT is never touched, so Ctrl-C stays the user's at every moment, before and after a deadline. Where
the main thread cannot be signalled (another thread, no real-time signals on the platform, the signal already
in use), the mode is engaged from the start and compares the clock at every call.

A budget of ``inf`` (or one longer than a thread can wait) means no budget.

What no deadline between operations can stop: a single call that never returns (a sleep, a C loop, a
pure-Python loop without torch operations) runs until it returns; the next torch operation then raises.

A stop is raised once and travels with its first traceback, which names the user's line it stopped
(``where_stopped``): while a BudgetExceeded is being handled (the ``finally`` blocks and ``__exit__`` methods
it unwinds through: mode exits, ``set_grad_enabled``, hook removal) the deadline lets torch calls run, so that
cleanup neither fails half-way nor raises a second stop that would replace the first and its line. Once the
stop is no longer being handled (a model that swallowed it), the next torch call raises again.
"""
from __future__ import annotations

import _thread
import contextlib
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any, cast

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode

from tfcheck.frames import is_user_frame, short_path

#: Seconds a check may run when ``budget_s`` is not declared.
DEFAULT_BUDGET_S = 120.0
#: How long leaving a budget waits for a watchdog wake-up already on its way to the main thread.
_DRAIN_S = 1.0
#: The signal whose handler engages a passed deadline: a real-time signal near the top of the range (glibc and
#: threading libraries take the bottom ones; SIGUSR1/SIGUSR2 belong to SLURM, Lightning and friends).
WAKE_SIGNAL = signal.SIGRTMAX - 2 if hasattr(signal, "SIGRTMAX") else None


class BudgetExceeded(BaseException):
    """A check ran past its budget. A BaseException, like KeyboardInterrupt, so that neither the model's
    ``except Exception`` nor tfcheck's explainer (which turns model exceptions into findings) mistakes it
    for an error of the model: it goes straight to the engine."""

    def __init__(self, budget_s: float, elapsed_s: float, first: BudgetExceeded | None = None):
        super().__init__(f"over the budget of {budget_s:g} s after {elapsed_s:.2f} s")
        self.budget_s = budget_s
        self.elapsed_s = elapsed_s
        #: the deadline's first stop, when this is a later one (the code running swallowed the first)
        self.first = first

    @property
    def origin(self) -> BudgetExceeded:
        """The first stop of its deadline: the one whose traceback holds the line the budget ran out at."""
        return self.first if self.first is not None else self


class Deadline(TorchFunctionMode):
    """Raises BudgetExceeded at every torch call made after the deadline, so that a model which swallows
    one is still stopped at its next operation."""

    def __init__(self, budget_s: float):
        super().__init__()
        self.budget_s = budget_s
        self.start = time.monotonic()
        self.deadline = self.start + budget_s
        self.first: BudgetExceeded | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        now = time.monotonic()
        if now > self.deadline and not isinstance(sys.exception(), BudgetExceeded):
            stop = BudgetExceeded(self.budget_s, now - self.start, self.first)
            if self.first is None:
                self.first = stop
            raise stop
        return func(*args, **(kwargs or {}))


@dataclass(frozen=True)
class StopPoint:
    """Where a budget stopped a check: the innermost line of the user's code that was running (none when
    tfcheck's own work was, between forwards) and the path in the model of the module whose forward was
    running (none when no forward was, or the module is not found in the model)."""

    file: str | None
    line: int | None
    module: str | None


def where_stopped(stop: BudgetExceeded, model: nn.Module | None = None, not_users: Iterable[str] = ()) -> StopPoint:
    """Where the first stop of ``stop``'s deadline was raised. ``not_users``: directories whose frames are not
    the user's even though they look it (libraries tfcheck runs checks with); ``model``: the model the module
    path is read in (else the outermost module called on the traceback: a training copy of it)."""
    frames = list(traceback.walk_tb(stop.origin.__traceback__))
    excluded = tuple(os.path.join(os.path.abspath(d), "") for d in not_users)
    users = [i for i, (frame, _) in enumerate(frames) if is_user_frame(frame.f_code.co_filename)
             and not os.path.abspath(frame.f_code.co_filename).startswith(excluded)]
    if not users:
        return StopPoint(None, None, _module_path(frames, model))
    frame, line = frames[users[-1]]
    return StopPoint(short_path(frame.f_code.co_filename), line, _module_path(frames[:users[-1] + 1], model))


def _module_path(frames: list[tuple[FrameType, int]], model: nn.Module | None) -> str | None:
    """The path of the innermost module whose method is on ``frames`` (outermost first), in ``model`` or else in
    the outermost module on them."""
    modules = [m for m in (_module_of(frame) for frame, _ in frames) if m is not None]
    if not modules:
        return None
    for root in (model, modules[0]):
        if root is None:
            continue
        try:
            found: str | None = next((name for name, m in root.named_modules() if m is modules[-1]), None)
        except Exception:  # noqa: BLE001 - a model whose named_modules raises: no module path
            return None
        if found is not None:
            return found
    return None


def _module_of(frame: FrameType) -> nn.Module | None:
    """The module a frame is a method of (its ``self``), if it is one."""
    try:
        this = frame.f_locals.get("self")
        return this if isinstance(this, nn.Module) else None
    except Exception:  # noqa: BLE001 - a strange object's __class__ may raise: not a module then
        return None


@contextlib.contextmanager
def time_budget(budget_s: float | None) -> Iterator[Deadline]:
    """The block runs under a deadline of ``budget_s`` seconds (``None``: the default budget); a torch
    call after it raises BudgetExceeded. Leaves no mode or handler behind (the one alarm thread of the
    process stays, asleep, for the next budget)."""
    deadline = Deadline(DEFAULT_BUDGET_S if budget_s is None else float(budget_s))
    if not deadline.budget_s < threading.TIMEOUT_MAX:  # inf, nan or longer than a thread can wait: no budget
        yield deadline
        return
    try:
        with _engaged(deadline):
            yield deadline
    finally:
        # Each stop carries the first itself; the deadline holding it too would make a cycle (its frames
        # hold the deadline) that keeps the model's tensors alive until the garbage collector runs.
        deadline.first = None


@contextlib.contextmanager
def _engaged(deadline: Deadline) -> Iterator[Deadline]:
    """The deadline engaged for the block: by a watchdog in the main thread, else on the stack from the start."""
    watchdog = _Watchdog(deadline, WAKE_SIGNAL) if WAKE_SIGNAL is not None and _can_wake_main_thread() else None
    try:
        if watchdog is not None:
            watchdog.__enter__()
    except (ValueError, RuntimeError, OSError):  # no handler here (a subinterpreter), or no thread could start
        watchdog = None
    if watchdog is None:
        with deadline:
            yield deadline
        return
    try:
        yield deadline
    finally:
        watchdog.__exit__()


def _can_wake_main_thread() -> bool:
    """In the main thread, with a real-time signal nobody else handles (a nested budget's own handler is ours)."""
    if WAKE_SIGNAL is None or threading.current_thread() is not threading.main_thread():
        return False
    current = signal.getsignal(WAKE_SIGNAL)
    return current in (signal.SIG_DFL, None) or isinstance(getattr(current, "__self__", None), _Watchdog)


class _Watchdog:
    """Engages a Deadline in the main thread when it passes, at no cost per operation before that.

    The alarm thread cannot touch the main thread's mode stack (it is thread-local), so it trips
    WAKE_SIGNAL with ``_thread.interrupt_main`` (no signal is sent to the process), and the handler, which
    Python runs in the main thread between two bytecodes, inserts the Deadline at the depth the stack had
    when the budget began: modes entered since (the recorder's) stay above it and leave in order.
    """

    def __init__(self, deadline: Deadline, signum: int):
        self.deadline = deadline
        self.signum = signum  # WAKE_SIGNAL
        self.depth = torch._C._len_torch_function_stack()
        self.fired = self.handled = self.closed = self.engaged = False
        self.previous: Callable[[int, FrameType | None], Any] | int | None = None

    def __enter__(self) -> _Watchdog:
        self.previous = signal.signal(self.signum, self._on_wake)
        try:
            _ALARM.arm(self)
        except BaseException:  # the alarm thread could not start: put the previous handler back
            signal.signal(self.signum, signal.SIG_DFL if self.previous is None else self.previous)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        _ALARM.disarm(self)  # after this the alarm thread cannot fire any more
        self.closed = True
        if self.fired:
            # The wake-up is on its way: let this handler take it rather than the previous one, which
            # (SIG_DFL on a real-time signal) would end the process.
            give_up = time.monotonic() + _DRAIN_S
            while not self.handled and time.monotonic() < give_up:
                time.sleep(0.001)
        # None: a handler not installed from Python; SIG_DFL is the nearest thing to put back.
        signal.signal(self.signum, signal.SIG_DFL if self.previous is None else self.previous)
        if self.engaged:
            _remove_mode(self.deadline)

    def fire(self) -> None:  # in the alarm thread
        self.fired = True
        # typeshed wants a signal.Signals; interrupt_main takes any signal number (a real-time one is not a member)
        _thread.interrupt_main(cast(signal.Signals, self.signum))

    def _on_wake(self, signum: int, frame: FrameType | None) -> None:  # in the main thread
        if self.fired and not self.handled:
            self.handled = True
            if not self.closed:
                _insert_mode(self.deadline, self.depth)
                self.engaged = True
            return
        if callable(self.previous):  # an outer budget's wake-up, delivered while this one is armed
            self.previous(signum, frame)


class _Alarm:
    """One daemon thread for every budget of the process (a thread started per check would cost more
    than the check's bookkeeping): it sleeps until the earliest armed deadline and fires its watchdog."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        """Fresh state; also in a forked child (a DataLoader worker), where the thread does not exist and
        the lock may have been held at the fork."""
        self.cond = threading.Condition()
        self.armed: list[_Watchdog] = []  # more than one only when budgets nest
        self.thread: threading.Thread | None = None

    def arm(self, watchdog: _Watchdog) -> None:
        with self.cond:
            self.armed.append(watchdog)
            if self.thread is None or not self.thread.is_alive():  # first use, or a forked child
                self.thread = threading.Thread(target=self._run, name="tfcheck-budget", daemon=True)
                self.thread.start()
            self.cond.notify()

    def disarm(self, watchdog: _Watchdog) -> None:
        # No notify: the thread wakes at the old deadline, finds it disarmed, and waits again.
        with self.cond:
            if watchdog in self.armed:
                self.armed.remove(watchdog)

    def _run(self) -> None:
        with self.cond:
            while True:
                if not self.armed:
                    self.cond.wait()
                    continue
                first = min(self.armed, key=lambda w: w.deadline.deadline)
                remaining = first.deadline.deadline - time.monotonic()
                if remaining > 0:
                    self.cond.wait(remaining)
                    continue
                self.armed.remove(first)
                first.fire()  # under the lock: disarm() returns either before this or after it


_ALARM = _Alarm()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_ALARM.reset)


def _insert_mode(mode: TorchFunctionMode, depth: int) -> None:
    above = []
    while torch._C._len_torch_function_stack() > depth:
        above.append(torch._C._pop_torch_function_stack())
    torch._C._push_on_torch_function_stack(mode)
    for m in reversed(above):
        torch._C._push_on_torch_function_stack(m)


def _remove_mode(mode: TorchFunctionMode) -> None:
    above = []
    while torch._C._len_torch_function_stack() > 0:
        top = torch._C._pop_torch_function_stack()
        if top is mode:
            break
        above.append(top)
    for m in reversed(above):  # all of them when the mode was already gone
        torch._C._push_on_torch_function_stack(m)
