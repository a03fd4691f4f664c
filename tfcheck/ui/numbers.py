"""Numbers as the text report shows them: three significant figures (the JSON keeps full precision)."""
from __future__ import annotations

import math
import re
from typing import Any

#: A decimal written with more digits than a reader can use (a raw float repr: 0.5118308663368225).
_LONG_DECIMAL = re.compile(r"(?<![\w.])-?\d+\.\d{5,}(?:e[-+]?\d+)?(?![\w.])")


def sig(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant figures: 0.000207, 4.78, 1.2e+04; integers as they are."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) or (math.isfinite(value) and value == int(value) and abs(value) < 1e6):
        return str(int(value))
    return f"{value:.{digits}g}" if math.isfinite(value) else str(value)


def seconds(value: float) -> str:
    """A duration for the cost column: 0.12 s, 3.4 s, 131 s."""
    return "<0.01 s" if value < 0.005 else f"{value:.2f} s" if value < 10 else f"{value:.1f} s" if value < 100 \
        else f"{value:.0f} s"


def shorten_reprs(text: str) -> str:
    """A text with raw float reprs cut to 3 significant figures; numbers a check already formatted are kept."""
    return _LONG_DECIMAL.sub(lambda m: sig(float(m.group())), text)


def brief(value: Any, limit: int = 60) -> str:
    """Evidence for a reader: floats to 3 figures, ``torch.float32`` as ``float32``, long values cut."""
    if isinstance(value, float):
        text = sig(value)
    elif isinstance(value, dict):
        text = "{" + ", ".join(f"{k}: {brief(v, limit)}" for k, v in value.items()) + "}"
    elif isinstance(value, (list, tuple)):
        inner = ", ".join(brief(v, limit) for v in value)
        text = f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    else:
        text = shorten_reprs(str(value)).replace("torch.", "")
    return text if len(text) <= limit else text[:limit - 1] + "…"
