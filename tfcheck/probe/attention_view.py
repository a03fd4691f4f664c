"""Attention with its internals visible to the recorder: the probes that read attention's scores, the
trace and the shape checks all run forwards under ``visible_attention()``."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def visible_attention() -> Iterator[None]:
    """Take the math path through attention so its internals appear in the recorded ops: nn.MultiheadAttention's
    fused fast path off, and the math backend of scaled_dot_product_attention (same results). The fast-path
    switch is global, so it is put back however the block ends."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with sdpa_kernel(SDPBackend.MATH):
            yield
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
