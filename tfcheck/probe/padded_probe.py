"""The padded batch's recorded forward, shared by the checks that read what a model does with padding.

``numerics.nan_source`` runs a padded batch [full, half padded, fully padded] forward and backward under the op
recorder. ``numerics.half`` reads the mask constants a padded forward writes, which that same forward writes:
instead of a recorded forward of its own, its observer rides along in nan_source's (registered here at import),
and it reads what the observer saw. When nan_source did not run first (not applicable, not selected, or the
model raised on its batch) the observer saw nothing and numerics.half runs its own forward, as before.

An observer that raises is set aside with its error (``recorded_probe.FanOut``) and raised again in the check
that owns it: one check's bug never becomes another check's failure.
"""
from __future__ import annotations

from typing import Any

import torch.nn as nn

from tfcheck.probe.recorded_probe import FanOut, ObserverFactory, registrar

_OBSERVERS: dict[str, ObserverFactory] = {}
#: The probe cache's key of the observers that rode along (one padded forward per model).
KEY = "padded forward observers"


#: Register ``factory(model) -> on_op`` to ride along in the padded batch's recorded forward.
observer = registrar(_OBSERVERS)


def start(model: nn.Module) -> FanOut:
    """The registered observers, to call from the padded forward's ``on_op``."""
    return FanOut.of(_OBSERVERS, model)


def keep(subject, fan_out: FanOut) -> None:
    """What the observers saw in a padded forward that ran to its end."""
    subject.probe_cache[KEY] = fan_out


def observed(ctx, name: str) -> Any | None:
    """The observer registered as ``name`` after the padded forward (charged as reused), its own error if it
    raised; None when no padded forward ran."""
    fan_out: FanOut | None = ctx.subject.probe_cache.get(KEY)
    if fan_out is None or name not in fan_out.observers:
        return None
    if name in fan_out.errors:
        raise fan_out.errors[name]
    ctx.cost.reused += 1
    return fan_out.observers[name]
