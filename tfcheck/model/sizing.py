"""Size safety: before tfcheck allocates a model it builds, count its parameters on the meta device and
refuse a build that would not fit, with a message that says how to shrink it."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Share of the memory limit (tfcheck.model.memory_limits) a model tfcheck builds may take (the probes and copies
#: need the rest).
MEMORY_SHARE = 0.25


def meta_parameter_bytes(build: Callable[[], Any]) -> tuple[int, int, bool] | None:
    """(parameter count, bytes, whether it is an estimate) of the module ``build()`` makes, built on the meta
    device (nothing is allocated); None when the constructor cannot run there (or is not a module). An
    estimate: the constructor read tensor values, which the build answered with 0."""
    import torch
    import torch.nn as nn

    from tfcheck.model.meta_build import MetaBuild
    from tfcheck.model.user_code import user_code

    mode = MetaBuild()
    try:
        with torch.device("meta"), mode, user_code():
            model = build()
    except Exception:  # noqa: BLE001 - any constructor failure here just means "measure it for real"
        return None
    if not isinstance(model, nn.Module):
        return None
    # Lazy modules' parameters have no size until the first forward: what they will take is not known here.
    tensors = {id(t): t for t in [*model.parameters(), *model.buffers()] if not nn.parameter.is_lazy(t)}.values()
    return (sum(t.numel() for t in model.parameters() if not nn.parameter.is_lazy(t)),
            sum(t.numel() * t.element_size() for t in tensors), mode.invented)


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"
