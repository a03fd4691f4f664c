"""Byte counts as people write them ("8GiB", "512 MB") and as tfcheck prints them."""
from __future__ import annotations

import re

from tfcheck.errors import UsageError

UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_bytes(value: int | str | None) -> int | None:
    """Bytes from an int or a text such as '8GiB', '512 MB', '1.5GB'; None stays None."""
    if value is None or isinstance(value, int):
        return value
    found = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]?I?B)?\s*", str(value).upper())
    if not found:
        raise UsageError(f"cannot read the memory budget {value!r}; give bytes or a size such as 8GiB or 512MB")
    return int(float(found.group(1)) * UNITS[found.group(2) or "B"])


def bytes_in(text: str, pattern: str) -> int | None:
    found = re.search(pattern, text)
    return parse_bytes(found.group(1).replace(" ", "")) if found else None


def format_bytes(n: int) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"
