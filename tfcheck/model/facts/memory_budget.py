"""The memory one model's run may use: its declared ``memory_budget``, the declared accelerator's memory, else the
machine's limit (``tfcheck.model.build.memory_limits``)."""
from __future__ import annotations

from tfcheck.model.build.memory_limits import Limit, memory_limit
from tfcheck.model.facts.under_test import ModelUnderTest


def limit_for(subject: ModelUnderTest) -> Limit:
    """The declared memory_budget, else the declared accelerator's total memory (``torch.cuda.mem_get_info``'s
    total, not its free part: the same in every process), else the machine's limit."""
    declared = subject.facts.memory_budget
    if declared is not None:
        return Limit(declared, f"memory_budget ({subject.source_of('memory_budget')})")
    device = subject.facts.device
    if device is not None and device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            _, total = torch.cuda.mem_get_info(torch.device(device))
            return Limit(int(total), f"{device} memory")
    return memory_limit()
