"""tfcheck: a diagnostic test battery and debugging toolkit for Transformer implementations in PyTorch.

Importing this package does not import torch; the public functions do, when called.

    >>> import tfcheck
    >>> report = tfcheck.run_checks("reference_model:TransformerLM")
    >>> tfcheck.assert_checks_pass(report)
"""
from __future__ import annotations

__all__ = ["run_checks", "assert_checks_pass", "trace_shapes", "watch", "explain", "TfcheckError", "UsageError",
           "Status", "__version__"]

from tfcheck.errors import TfcheckError, UsageError  # noqa: E402  (torch-free)
from tfcheck.report.status import Status  # noqa: E402  (torch-free)
from tfcheck.version import __version__  # noqa: E402


def __getattr__(name: str):
    # Lazy so that `pytest --help` (which imports the plugin, which imports this package) stays fast.
    if name in ("run_checks", "assert_checks_pass", "trace_shapes", "watch", "explain"):
        import random

        # rich draws from Python's global generator when first imported (rich.style's id counter): the caller's
        # seeded stream must not move because tfcheck was looked up.
        state = random.getstate()
        from tfcheck.ui import views  # noqa: F401 - registers how what they return prints

        random.setstate(state)
    if name in ("run_checks", "assert_checks_pass"):
        from tfcheck import api

        return getattr(api, name)
    if name == "trace_shapes":
        from tfcheck.tools.trace import trace_shapes

        return trace_shapes
    if name == "watch":
        from tfcheck.tools.watch import watch

        return watch
    if name == "explain":
        from tfcheck.explainers.explanation import explain_error

        return explain_error
    raise AttributeError(f"module 'tfcheck' has no attribute {name!r}")
