"""What a measured attention scale is: a named bug, the muP scale, or a constant written for another head size.

tfcheck builds models small (d_k = 8, tfcheck.model.build.small_sizes), and a constant written for the user's
head size can coincide with a named scale of the small one: ``scores / 8.0``, right for d_k = 64, measures
1/8 = 1/d_k at d_k = 8 and would pass for the muP scale (√64 = 8 = the small d_k, too). The shrunk sizes are
kept (every snapshot reads them); instead the constant is recognised in the source (tfcheck.probe.literal_scale)
and judged as hard-coded, at the model's own sizes where tfcheck knows them (the defaults it shrank).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tfcheck.model.build import small_sizes
from tfcheck.probe.literal_scale import Literal

#: Relative deviation from the expected scale that still counts as right (float rounding is ~1e-6;
#: the named wrong scales are a factor √heads ≥ √2 or more away).
TOLERANCE = 0.02
#: The row of a scale written as a constant: right for one head size only.
HARD_CODED_ROW = "attention-scale-hard-coded"
#: The size quantities a head size is derived from.
_SIZES = ("D_MODEL", "NUM_HEADS", "HEAD_DIM")


def close(x: float, y: float) -> bool:
    return abs(x / y - 1) <= TOLERANCE


def diagnose(measured: float, d_k: int, d_model: int | None) -> tuple[str, bool]:
    """(what the scale is, whether it is a known bug)."""
    root = math.sqrt(d_k)
    if close(measured, 1.0):
        return "not scaled (logits are the raw q·kᵀ)", True
    if close(measured, root):
        return f"multiplied by √d_k = {root:.3g} instead of divided", True
    if d_model and d_model != d_k and close(measured, 1 / math.sqrt(d_model)):
        return f"divided by √d_model = {math.sqrt(d_model):.3g} instead of √d_k = {root:.3g}", True
    if close(measured, 1 / d_k):
        return f"divided by d_k = {d_k} (the muP scale 1/d_k) instead of √d_k = {root:.3g}", False
    return f"scaled by {measured:.4g} (= 1/{1 / measured:.4g}) instead of 1/√d_k = 1/{root:.3g}", False


@dataclass(frozen=True)
class Written:
    """A scale the source writes as a constant: the literal, the factor it scales the scores by, and whether
    the op divides by it (``/ 8.0``) or multiplies (``* 0.125``, ``scale=0.125``). ``also``: the other constants
    that make up the factor (q and k each scaled by ``64 ** -0.25``)."""

    literal: Literal
    factor: float
    divides: bool
    also: tuple[Literal, ...] = ()


@dataclass(frozen=True)
class Sizes:
    """The model's own head size and width, and the defaults tfcheck shrank to build it (empty: built as is)."""

    d_k: int
    d_model: int | None
    shrunk: dict[str, tuple[Any, Any]] = field(default_factory=dict)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def own_sizes(loaded: Any, d_model: int | None, d_k: int) -> Sizes | None:
    """The sizes the model has as its author wrote it, from the sizes tfcheck built (``d_model``, the site's
    ``d_k``) and the defaults it shrank; None where tfcheck chose a size the model has no default for (then
    the model has no own size to judge a constant at)."""
    if loaded is None or not getattr(loaded, "constructed", False):
        return Sizes(d_k, d_model)  # the user's instance: built at its own sizes
    names = [*loaded.shrunk, *loaded.filled, *loaded.config_filled]
    if any(small_sizes.quantity(n, names) in _SIZES for n in (*loaded.filled, *loaded.config_filled)):
        return None
    shrunk = {n: c for n, c in loaded.shrunk.items() if small_sizes.quantity(n, names) in _SIZES and _int(c[0])}
    if not shrunk:
        return Sizes(d_k, d_model)
    default = {small_sizes.quantity(n, names): c[0] for n, c in shrunk.items()}
    width = default.get("D_MODEL", d_model)
    if "HEAD_DIM" in default:
        return Sizes(default["HEAD_DIM"], width, shrunk)
    heads = default.get("NUM_HEADS") or (d_model // d_k if d_model and d_model % d_k == 0 else None)
    if not isinstance(width, int) or not heads or width % heads:
        return None
    return Sizes(width // heads, width, shrunk)


def _number(x: float) -> str:
    return str(round(x)) if abs(x - round(x)) < 1e-6 * max(1.0, abs(x)) else f"{x:.4g}"


def _right_for(factor: float) -> str:
    """The head size a constant factor is 1/√d_k of."""
    d_k = 1 / factor ** 2 if factor > 0 else math.inf
    if d_k < 1 or not math.isfinite(d_k):
        return "which is 1/√d_k for no head size"
    if abs(d_k - round(d_k)) < 1e-3 * d_k:
        return f"which is 1/√d_k only for d_k = {round(d_k)}"
    return f"which is 1/√d_k for no whole head size (d_k = {d_k:.3g})"


def right_only_as_built(measured: float, d_k: int, own: Sizes | None) -> bool:
    """A constant scale that measures 1/√d_k at the head size tfcheck built but not at the model's own
    (``/ 2.828`` on a model of d_k = 64 that tfcheck shrank to d_k = 8): it would pass, though wrong as written."""
    return own is not None and own.d_k != d_k and close(measured, 1 / math.sqrt(d_k)) and \
        not close(measured, 1 / math.sqrt(own.d_k))


def coincidence(measured: float, d_k: int, d_model: int | None, own: Sizes | None = None) -> str | None:
    """The named scale of the built size a measured constant equals, said as a coincidence of that size (1/√d_k
    too, where the model's own head size is another)."""
    named = {"1/d_k": 1 / d_k, "√d_k": math.sqrt(d_k), "1/√d_model": 1 / math.sqrt(d_model) if d_model else None,
             "1/√d_k": 1 / math.sqrt(d_k) if own is not None and own.d_k != d_k else None}
    hit = next((name for name, value in named.items() if value and close(measured, value)), None)
    return None if hit is None else (f"the measured {measured:.4g} equals {hit} of the head size tfcheck built "
                                     f"(d_k = {d_k}) only by coincidence: the scale is a constant, it does not "
                                     "follow the head size")


def hard_coded(written: Written, measured: float, d_k: int, d_model: int | None,
               own: Sizes | None) -> tuple[str, bool, dict]:
    """(the diagnosis, whether it is a known bug at the model's own sizes, evidence) of a written constant."""
    literal, factor = written.literal, written.factor
    shown = f"1/{_number(1 / factor)}" if written.divides else \
        f"{_number(factor)}" + (f" (= 1/{_number(1 / factor)})" if 0 < factor < 1 else "")
    others = "".join(f" and `{o.shown}`, line {o.line}" for o in written.also)
    what = (f"scaled by the constant {shown} written in the source (`{literal.shown}`, line {literal.line}{others}), "
            f"{_right_for(factor)}; tfcheck built this model with d_k = {d_k}")
    evidence: dict[str, Any] = {"hard_coded": {"text": literal.text, "value": literal.value, "factor": factor,
                                               "file": literal.file, "line": literal.line}}
    if literal.name:
        evidence["hard_coded"]["name"] = literal.name
    if written.also:
        evidence["hard_coded"]["also"] = [{"text": o.shown, "line": o.line, "file": o.file} for o in written.also]
    if (note := coincidence(measured, d_k, d_model, own)) is not None:
        evidence["coincidence"] = note
    if own is None:
        return what + " (a size tfcheck chose: the model has no default for it)", False, evidence
    evidence["own_sizes"] = {"d_k": own.d_k, "d_model": own.d_model,
                             "shrunk": small_sizes.changes_text(own.shrunk) if own.shrunk else None}
    if own.shrunk:
        what += (f"; the model's own head size is d_k = {own.d_k} (tfcheck shrank "
                 f"{small_sizes.changes_text(own.shrunk)})")
    else:
        what += ", its own size"
    at_own, bug = diagnose(measured, own.d_k, own.d_model)
    if bug:
        return f"{what}, where it is {at_own}", True, evidence
    if own.shrunk and close(measured, 1 / math.sqrt(own.d_k)):
        what += ", so it is right at that size only"
    elif right_only_as_built(measured, d_k, own):
        what += f", where it is {at_own}: it is right at the head size tfcheck built only"
    return what, False, evidence


def hard_coded_message(module: str, what: str, measured: float, d_k: int, own: Sizes | None) -> str:
    """The warning of a scale written as a constant that is no named bug."""
    if own is not None and right_only_as_built(measured, d_k, own):
        sizes = (f"measured {measured:.4g}, 1/√d_k at the head size tfcheck built, d_k = {d_k}; at the model's own "
                 f"d_k = {own.d_k} 1/√{own.d_k} = {1 / math.sqrt(own.d_k):.4g} is expected")
    else:
        sizes = f"measured {measured:.4g}, expected 1/√{d_k} = {1 / math.sqrt(d_k):.4g}"
    return (f"attention in '{module}' is {what} ({sizes}). A scale written as a number is right for one head size "
            "only; compute it from the head size: scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) (or leave "
            "scale=None in F.scaled_dot_product_attention). If the constant is intended, declare "
            "accept={'attention.scale': 'why'}.")


def passing_note(written: Written, d_k: int, own: Sizes | None) -> str:
    """What a passing site's evidence and the check's message say of a scale written as a constant: right, at
    the head size it was measured at, which is the model's own (or one tfcheck chose)."""
    literal = written.literal
    whose = "the model's own" if own is not None else "the one tfcheck chose (the model has no default for it)"
    return (f"the scale is the constant `{literal.shown}` (line {literal.line}), 1/√d_k for d_k = {d_k}, {whose}: "
            "right as built, wrong if the model is built with another head size")


def shrunk_note(loaded: Any, d_model: int | None, d_k: int) -> str | None:
    """For a scale computed from the sizes (no constant in the source), that the size it was measured at is
    tfcheck's shrunk one: a muP 1/d_k computed from d_k follows it, so the measured coincidence is real."""
    own = own_sizes(loaded, d_model, d_k)
    if own is None or not own.shrunk:
        return None
    return (f"measured at the head size tfcheck built (d_k = {d_k}; it shrank "
            f"{small_sizes.changes_text(own.shrunk)}); the scale is not written as a constant in the source, so it "
            "is taken to follow the head size")
