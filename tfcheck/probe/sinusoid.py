"""A sinusoidal position table compared with the standard one (Vaswani et al.): pair i turns at the frequency
base^(-2i/d) with base 10000, laid out interleaved (sin, cos, sin, cos, ...) or concatenated (all sines, then all
cosines). The frequencies are read off row 1 (position 1: the angle of each (sin, cos) pair), so a table of any
length is compared without rebuilding it."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

BASE = 10000.0
#: Relative difference of a frequency from the standard one that counts as another frequency.
TOLERANCE = 1e-3


@dataclass(frozen=True)
class Deviation:
    """Where a table first differs from the standard sinusoid, and the base its frequencies follow instead."""

    layout: str  # "interleaved" or "concatenated"
    column: int  # the table's first column (a sine) whose frequency differs
    frequency: float
    standard: float
    base: float | None  # the base of base^(-2i/d) its frequencies follow, None when they follow no such base

    def __str__(self) -> str:
        follows = f"its frequencies follow base {self.base:.4g} in the same form" if self.base is not None else \
            "its frequencies follow no base^(-2i/d) progression"
        return (f"the sinusoidal table ({self.layout} sin/cos) differs from the standard one (frequency "
                f"{BASE:g}^(-2i/d_model)) from column {self.column}: frequency {self.frequency:.4g} where the "
                f"standard is {self.standard:.4g}; {follows}")


def deviation(table: torch.Tensor) -> Deviation | None:
    """None for a standard table (in either layout); else where the layout closest to standard first differs."""
    rows = table.detach().double().reshape(-1, table.shape[-1])
    d = rows.shape[-1]
    standard = torch.tensor([BASE ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float64)
    found = []
    for layout, sin, cos, column in (("interleaved", rows[1, 0::2], rows[1, 1::2], lambda i: 2 * i),
                                     ("concatenated", rows[1, : d // 2], rows[1, d // 2:], lambda i: i)):
        freq = torch.atan2(sin, cos)
        off = ((freq - standard).abs() > TOLERANCE * standard).nonzero()
        if not len(off):
            return None
        first = int(off[0])
        found.append((first, Deviation(layout, column(first), float(freq[first]), float(standard[first]),
                                       _base(freq, d))))
    return max(found, key=lambda f: f[0])[1]  # the layout that agrees longest is the one written


def _base(freq: torch.Tensor, d: int) -> float | None:
    """The base b with freq_i = b^(-2i/d) for every pair, if there is one."""
    if len(freq) < 3 or not bool((freq > 0).all()) or abs(float(freq[0]) - 1) > 1e-6:
        return None
    base = float(freq[1]) ** (-d / 2)
    if not math.isfinite(base) or base <= 1:
        return None
    fitted = torch.tensor([base ** (-2 * i / d) for i in range(len(freq))], dtype=torch.float64)
    return base if bool(((freq - fitted).abs() <= TOLERANCE * fitted).all()) else None
