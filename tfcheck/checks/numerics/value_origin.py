"""Where a constant an op received was chosen. A scale, a fill value or a softmax axis is often passed down as
an argument (``_attention(q, k, v, mask, scale, fill, dim)``): the op that uses it sits in a helper every
attention shares, while the line to change is the call that passed the wrong value. So the user's frames are
captured while the op runs, and the value is followed outward through each frame whose own parameter holds it
and whose line names that parameter.

Only scalar parameters are kept from a frame (never a tensor), so capturing keeps nothing of the model alive.
"""
from __future__ import annotations

import linecache
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tfcheck.frames import is_user_frame
from tfcheck.probe import recorded_probe
from tfcheck.report.findings import Location, Related

#: How many of the user's frames a capture keeps (a value passed down further than this is rare).
DEPTH = 6


@dataclass(frozen=True)
class Frame:
    """One frame of the user's code as an op ran: where, and the numbers its function's parameters held."""

    file: str
    line: int
    params: dict[str, float] = field(default_factory=dict)

    def names(self, name: str) -> bool:
        """The frame's source line uses ``name`` itself (not as an attribute, ``self.name``)."""
        text = linecache.getline(self.file, self.line)
        return re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", text) is not None


def user_frames(depth: int = DEPTH) -> tuple[Frame, ...]:
    """The innermost ``depth`` frames of the user's code on the current stack, innermost first."""
    frames: list[Frame] = []
    frame: Any = sys._getframe(1)
    while frame is not None and len(frames) < depth:
        code = frame.f_code
        if is_user_frame(code.co_filename):
            frames.append(Frame(code.co_filename, frame.f_lineno, _scalar_params(frame)))
        frame = frame.f_back
    return tuple(frames)


def _scalar_params(frame: Any) -> dict[str, float]:
    code = frame.f_code
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    try:
        local = frame.f_locals
    except Exception:  # noqa: BLE001 - a frame whose locals cannot be read passes no value down
        return {}
    return {n: float(v) for n in names if isinstance(v := local.get(n), (int, float)) and not isinstance(v, bool)}


def _same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or math.isclose(a, b, rel_tol=1e-9)


def chosen_at(frames: tuple[Frame, ...], value: float) -> tuple[Frame, Frame | None] | None:
    """(the frame whose line wrote ``value``, the innermost frame that used it when they differ), following
    ``value`` outward while a frame received it as a parameter its line names; None without frames."""
    if not frames:
        return None
    for n, frame in enumerate(frames[:-1]):
        passed = any(_same(v, value) and frame.names(name) for name, v in frame.params.items())
        if not passed:
            return frame, (frames[0] if n else None)
    last = frames[-1]
    return last, (frames[0] if len(frames) > 1 else None)


def located(module: str, frames: tuple[Frame, ...] | None, value: float | None, used: str) -> \
        tuple[Location, tuple[Related, ...]] | None:
    """The location of the line that chose ``value`` for an op in ``module``, and the line that used it
    (role ``used``) as related when the two differ; None when nothing was captured."""
    if not frames or value is None:
        return None
    found = chosen_at(frames, value)
    if found is None:
        return None
    chose, user = found
    related = (Related(used, user.file, user.line, module),) if user is not None else ()
    return Location(module, chose.file, chose.line), related


class FrameCapture:
    """``on_op``: the user's frames of every function-level forward op ``wanted(event, args, kwargs)`` selects,
    by event index."""

    def __init__(self, wanted: Callable[[Any, tuple, dict], bool]):
        self.wanted = wanted
        self.frames: dict[int, tuple[Frame, ...]] = {}

    def __call__(self, event, args: tuple, kwargs: dict, out: Any) -> None:
        if event.level == "function" and event.phase == "forward" and self.wanted(event, args, kwargs):
            self.frames[event.index] = user_frames()


#: Products and quotients by a constant: how a scale is applied to the scores.
SCALINGS = frozenset({"mul", "__mul__", "__rmul__", "mul_", "__imul__", "div", "__truediv__", "true_divide", "div_",
                      "__itruediv__"})
#: Ops whose constant argument is a choice worth following: a scale, a softmax axis.
_CHOICES = frozenset({"softmax", "scaled_dot_product_attention"})
SCALARS = "scalar choices"


def scalar_of(args: tuple, kwargs: dict) -> float | None:
    """The one plain number among an op's arguments (a scale, a divisor), or None."""
    numbers = [v for v in (*args, *kwargs.values()) if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return float(numbers[0]) if len(numbers) == 1 else None


def _chooses(event, args: tuple, kwargs: dict) -> bool:
    name = event.short_name
    return name in _CHOICES or (name in SCALINGS and scalar_of(args, kwargs) is not None)


recorded_probe.observer(SCALARS)(lambda model: FrameCapture(_chooses))


def captured_frames(recorded) -> dict[int, tuple[Frame, ...]]:
    """The frames the shared recorded forward captured, by event index; none if capturing failed (the locations
    then stay at the ops' own lines)."""
    try:
        return recorded.observed(SCALARS).frames
    except Exception:  # noqa: BLE001 - a capture that broke costs precision, never the check
        return {}
