"""The memory a run may use, read from the machine's limits (never from the memory free at the moment, so that
every process of a run decides alike): physical memory, the cgroup's limit and RLIMIT_AS, or a declared
``memory_budget``. The probes (tfcheck.engine.memory) and the training copies (tfcheck.probe.training) are
sized against it."""
from __future__ import annotations

import os
import resource
from dataclasses import dataclass

#: Address space a process with torch imported takes before any model (about 0.7 GiB measured; kept wider).
PROCESS_ADDRESS_SPACE = 2 << 30


@dataclass(frozen=True)
class Limit:
    bytes: int
    source: str


def memory_limit() -> Limit:
    """The smallest of the machine's memory limits: physical memory, the cgroup's (v2 or v1) and RLIMIT_AS
    (less the address space the process itself takes)."""
    found = [Limit(_physical(), "physical memory")]
    for path, what in (("/sys/fs/cgroup/memory.max", "cgroup memory.max"),
                       ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "cgroup memory.limit_in_bytes")):
        value = _read_int(path)
        if value is not None and 0 < value < found[0].bytes:
            found.append(Limit(value, what))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        found.append(Limit(max(soft - PROCESS_ADDRESS_SPACE, 0), "RLIMIT_AS less the process's own address space"))
    return min(found, key=lambda limit: limit.bytes)


def _physical() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
