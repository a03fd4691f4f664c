"""The size guard's meta build: the model built on the meta device (nothing allocated) without the costs and
refusals of running its initialisers there."""
from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from tfcheck.model.build.deferred_torch import deferred_torch_imports

#: In-place ops that only set values (initialisers and the arithmetic they use): on a meta tensor there are no
#: values to set, and running them there goes through torch's meta decompositions (Python, slow). Skipped, they
#: leave the tensor's shape, dtype and device as they were.
_VALUE_ONLY_IN_PLACE = frozenset({
    "normal_", "uniform_", "fill_", "zero_", "random_", "bernoulli_", "exponential_", "geometric_", "log_normal_",
    "cauchy_", "erfinv_", "clamp_", "clamp_min_", "clamp_max_", "mul_", "add_", "sub_", "div_", "copy_", "abs_",
    "neg_", "exp_", "sqrt_", "fmod_", "masked_fill_", "index_fill_", "scatter_", "fill_diagonal_", "addcmul_",
})


class MetaBuild(TorchFunctionMode):
    """Building on the meta device without its costs and refusals: value-only in-place ops are skipped, and
    reading a value (``.item()``, ``.tolist()``), which a meta tensor cannot answer, gives 0 and marks the count
    an estimate (``invented``). The ops that still run (factories, arithmetic: a sinusoidal table) have Python
    meta kernels whose first calls would import torch._dynamo, symbolic_shapes and sympy (1.5 s together):
    inside the build those imports are deferred (tfcheck.model.build.deferred_torch), so the guard takes a small model
    milliseconds."""

    def __init__(self) -> None:
        super().__init__()
        self.invented = False
        self._deferred: list[contextlib.AbstractContextManager[None]] = []  # one per entry

    def __enter__(self) -> MetaBuild:
        deferred = deferred_torch_imports()
        deferred.__enter__()
        self._deferred.append(deferred)
        try:
            super().__enter__()
        except BaseException:
            self._deferred.pop().__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self._deferred.pop().__exit__(None, None, None)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        # nn.init passes its tensor by keyword (init.normal_(tensor=..., mean=..., std=...))
        first = args[0] if args else next(iter((kwargs or {}).values()), None)
        if isinstance(first, torch.Tensor) and first.is_meta:
            name = getattr(func, "__name__", "")
            if name in _VALUE_ONLY_IN_PLACE or getattr(func, "__module__", None) == "torch.nn.init":
                return first
            if name in ("item", "tolist", "__int__", "__float__", "__bool__", "__index__"):
                self.invented = True
                zero = torch.zeros(first.shape, device="cpu", dtype=first.dtype)
                return zero.tolist() if name == "tolist" else getattr(zero, name)()
        return func(*args, **(kwargs or {}))
