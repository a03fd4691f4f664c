"""Size safety: before tfcheck allocates a model it builds, count its parameters on the meta device and
refuse a build that would not fit, with a message that says how to shrink it."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Share of the memory limit (tfcheck.model.build.memory_limits) a model tfcheck builds may take (the probes and copies
#: need the rest).
MEMORY_SHARE = 0.25


def meta_parameter_bytes(build: Callable[[], Any]) -> tuple[int, int, bool] | None:
    """(parameter count, bytes, whether it is an estimate) of the module ``build()`` makes, built on the meta
    device (nothing is allocated); None when the constructor cannot run there (or is not a module). An
    estimate: the constructor read tensor values, which the build answered with 0."""
    import torch
    import torch.nn as nn

    from tfcheck.model.build.meta_build import MetaBuild
    from tfcheck.model.build.user_code import user_code

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


class AllocationOverBudget(BaseException):
    """A build passed its allocation budget. A BaseException, so that a constructor's own ``except Exception``
    does not swallow it: it goes straight to the size guard."""

    def __init__(self, allocated: int, budget: int, op: str):
        super().__init__(f"{op} would bring the build to {human(allocated)}, over {human(budget)}")
        self.allocated, self.budget, self.op = allocated, budget, op


#: Ops that allocate a new tensor whose size their arguments say: factories (the size is the first list of
#: ints among the arguments) and copies (the size of the tensor copied).
_FACTORIES = frozenset({"empty", "empty_strided", "zeros", "ones", "full", "rand", "randn", "randint", "normal",
                        "randperm", "eye"})
_COPIES = frozenset({"_to_copy", "clone", "empty_like", "zeros_like", "ones_like", "full_like", "rand_like",
                     "randn_like", "copy"})


def allocation_limit(budget: int) -> Any:
    """A dispatch mode that counts the bytes the build allocates, before each allocation, and raises
    AllocationOverBudget instead of the one that would pass ``budget``: the size guard for constructors the
    meta count cannot run (the real build is the count)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class AllocationLimit(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.allocated = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            need = _bytes_needed(func.overloadpacket.__name__, args, kwargs)
            if need and self.allocated + need > budget:
                raise AllocationOverBudget(self.allocated + need, budget, str(func.overloadpacket.__name__))
            self.allocated += need
            return func(*args, **kwargs)

    def _bytes_needed(name: str, args: tuple, kwargs: dict) -> int:
        if name in _FACTORIES:
            size = next((a for a in args if isinstance(a, (list, tuple)) and all(isinstance(n, int) for n in a)), None)
            if size is None:
                return 0
            dtype = kwargs.get("dtype") or torch.get_default_dtype()
            numel = 1
            for n in size:
                numel *= n
            return numel * torch.empty((), dtype=dtype, device="meta").element_size()
        if name in _COPIES and args and isinstance(args[0], torch.Tensor):
            dtype = kwargs.get("dtype") or args[0].dtype
            return args[0].numel() * torch.empty((), dtype=dtype, device="meta").element_size()
        return 0

    return AllocationLimit()
