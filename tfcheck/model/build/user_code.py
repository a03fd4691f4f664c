"""The one guard around calls into user code (a forward, a constructor or factory, an ``inputs=`` or
``schedule=`` factory, a model file's import).

``sys.exit()`` in user code raises SystemExit, which ``except Exception`` lets through: it used to end
tfcheck's process with the model's exit code and no report (``sys.exit(0)``: a silent pass). Inside the
guard it becomes :class:`UserExit`, an ordinary error that is reported as the model's, with the line that
called it. Everything else a BaseException means passes through untouched: Ctrl-C (KeyboardInterrupt),
tfcheck's own budget, pytest's outcomes (``pytest.skip`` / ``importorskip`` in a model file skip, ``pytest.exit``
exits) and hypothesis's control flow.
"""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from tfcheck.frames import innermost_user_frame, short_path


class UserExit(Exception):
    """User code called ``sys.exit(code)`` (or raised SystemExit)."""

    def __init__(self, code: object, where: str | None):
        self.code = code
        self.where = where
        at = f" at {where}" if where else ""
        super().__init__(f"sys.exit({code!r}) was called{at}; remove it from code tfcheck calls (a model file "
                         "that runs a script belongs under `if __name__ == \"__main__\":`)")


@contextlib.contextmanager
def user_code() -> Iterator[None]:
    try:
        yield
    except SystemExit as exc:
        frame = innermost_user_frame(exc)
        where = f"{short_path(frame.filename)}:{frame.lineno}" if frame is not None else None
        # The user's frames stay on the traceback, so the explainers name the line that exited.
        raise UserExit(exc.code, where).with_traceback(exc.__traceback__) from None


def is_pytest_outcome(exc: BaseException) -> bool:
    """pytest.skip / importorskip / exit / fail (their classes claim to live in builtins, so ask pytest)."""
    outcomes = sys.modules.get("_pytest.outcomes")
    return outcomes is not None and isinstance(exc, outcomes.OutcomeException)


def is_control_flow(exc: BaseException) -> bool:
    """Exceptions that are not errors of the code that raised them and must pass any handler: Ctrl-C,
    pytest's outcomes (skip, exit, fail), tfcheck's budget, hypothesis's control flow, generator exit."""
    if isinstance(exc, (KeyboardInterrupt, GeneratorExit)) or is_pytest_outcome(exc):
        return True
    return any(cls.__module__.startswith(("tfcheck.engine.budget", "hypothesis."))
               for cls in type(exc).__mro__ if cls not in (BaseException, Exception))
