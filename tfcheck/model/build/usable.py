"""A model tfcheck can check has data in every parameter and buffer: not on the meta device, and no lazy
module waiting for its first forward. Both are refused before any check runs, with what to do, since
checking them would either measure nothing (meta) or change the model (a forward initialises lazy modules)."""
from __future__ import annotations

import torch.nn as nn

from tfcheck.errors import SpecError


def refuse_unusable(model: nn.Module, spec: str, meta_ok: bool = False) -> None:
    lazy = [name for name, p in model.named_parameters() if nn.parameter.is_lazy(p)]
    lazy += [name for name, b in model.named_buffers() if nn.parameter.is_lazy(b)]
    if lazy:
        raise SpecError(
            f"{spec} has uninitialised (lazy) parameters: {', '.join(lazy[:4])}{' ...' if len(lazy) > 4 else ''}. "
            "Their first forward would initialise them, and tfcheck never changes the model it checks. Run one "
            "forward on a dummy batch before checking it (a factory: m = Model(); m(torch.zeros(1, 8, "
            "dtype=torch.long)); return m), or give the layers their input sizes (nn.Linear for nn.LazyLinear).")
    meta = [name for name, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if meta and not meta_ok:
        raise SpecError(
            f"{spec} is on the meta device ({', '.join(meta[:4])}{' ...' if len(meta) > 4 else ''} hold no data), "
            "so no forward can be measured. Build it on a real device (without `with torch.device('meta')`), or "
            "materialise it first: model.to_empty(device='cpu') and then initialise its weights.")
