"""The weights the flow checks measure: the model's own, unless some weight tensors are all zero at init
(tfcheck.probe.zero_weights), which blind every information-flow probe. Those are re-drawn for the flow checks
only, with the probes they memoise kept apart from the shared ones, and the report says so once."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from tfcheck.probe.zero_weights import redrawn, zero_weights
from tfcheck.report.report import Assumption

#: The probe-cache entries of the flow checks made with the zero weights re-drawn, and the names found.
REDRAWN_PROBES = "probes with zero weights re-drawn"
FOUND = "zero weights found"
KEY = "zero weights re-drawn"


@contextlib.contextmanager
def flow_weights(subject: Any) -> Iterator[None]:
    """The block runs on the model with its all-zero weights re-drawn (the identity when there are none)."""
    shared = subject.probe_cache
    if FOUND not in shared:
        shared[FOUND] = zero_weights(subject.model)
        if shared[FOUND]:
            subject.assumptions.append(Assumption(KEY, f"{len(shared[FOUND])}: {_listed(shared[FOUND])}", (
                "all-zero weight tensors at init (a zero-init recipe) make each block return its input, so no flow "
                "probe could see through it: the information-flow, mask and attention checks measure the model "
                "with them re-drawn (normal, std 1/sqrt(fan_in)); the training checks keep your init")))
    names = shared[FOUND]
    if not names:
        yield
        return
    subject.probe_cache = shared.setdefault(REDRAWN_PROBES, {})
    try:
        with redrawn(subject.model, names):
            yield
    finally:
        subject.probe_cache = shared


def _listed(names: list[str]) -> str:
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
