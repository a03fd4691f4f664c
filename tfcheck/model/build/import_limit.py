"""A time limit on importing a model file: a file that runs a script when imported (trains, reads a data set)
is stopped and told to guard the script part with ``if __name__ == "__main__":``.

No SIGALRM (pytest-xdist workers, a user's own alarm): a timer thread sends a real-time signal of tfcheck's own
to the main thread (``signal.pthread_kill``), whose handler raises ``ImportTimedOut``; a blocking call (a sleep,
a read) returns early with it too. Where the main thread cannot be signalled (another thread, no real-time
signals, the signal already in use), the import runs without a limit.
"""
from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType

#: Seconds a model file's import may take: defining a model takes well under a second.
IMPORT_LIMIT_S = 30.0
#: tfcheck's signal for it: a real-time one below the budget's (tfcheck.engine.budget.WAKE_SIGNAL).
LIMIT_SIGNAL = signal.SIGRTMAX - 3 if hasattr(signal, "SIGRTMAX") else None
#: How long leaving the limit waits for a signal already on its way.
_DRAIN_S = 1.0


class ImportTimedOut(BaseException):
    """The import ran past its limit. A BaseException, so that the module's own ``except Exception`` does not
    swallow it."""

    def __init__(self, limit_s: float):
        super().__init__(f"the import did not finish within {limit_s:g} s")
        self.limit_s = limit_s


def _can_signal_main_thread() -> bool:
    if LIMIT_SIGNAL is None or threading.current_thread() is not threading.main_thread():
        return False
    return signal.getsignal(LIMIT_SIGNAL) in (signal.SIG_DFL, None)


@contextlib.contextmanager
def import_time_limit(limit_s: float | None = None) -> Iterator[None]:
    """The block runs under the limit (``None``: IMPORT_LIMIT_S, read when the block starts); past it,
    ImportTimedOut is raised in the main thread."""
    limit = IMPORT_LIMIT_S if limit_s is None else float(limit_s)
    if not 0 < limit < threading.TIMEOUT_MAX or not _can_signal_main_thread():
        yield
        return
    assert LIMIT_SIGNAL is not None
    state = {"armed": True, "sent": False, "handled": False}
    lock = threading.Lock()
    main = threading.main_thread().ident
    assert main is not None

    def on_signal(signum: int, frame: FrameType | None) -> None:
        state["handled"] = True
        if state["armed"]:
            state["armed"] = False
            raise ImportTimedOut(limit)

    def send() -> None:
        with lock:
            if not state["armed"]:
                return
            state["sent"] = True
            signal.pthread_kill(main, LIMIT_SIGNAL)

    previous = signal.signal(LIMIT_SIGNAL, on_signal)
    timer = threading.Timer(limit, send)
    timer.daemon = True
    try:
        timer.start()
        yield
    finally:
        try:  # the handler raises at most once (it disarms first), so the clean-up below always runs
            with lock:
                state["armed"] = False
        finally:
            timer.cancel()
            give_up = time.monotonic() + _DRAIN_S
            while state["sent"] and not state["handled"] and time.monotonic() < give_up:
                time.sleep(0.001)  # the handler takes the signal already sent (and, disarmed, ignores it)
            signal.signal(LIMIT_SIGNAL, signal.SIG_DFL if previous is None else previous)
