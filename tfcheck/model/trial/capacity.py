"""The model's capacity: the longest sequence it holds, the smallest of its position tables (found in the trial
forward: an embedding indexed by positions, a parameter or buffer cut to the length, a cached causal buffer) and
the lengths its user stated (a declaration, a config or model attribute, a constructor argument given or left at
its default). Probes never go beyond it.

A length tfcheck chose itself (an argument it filled, a default it shrank) is never a promise: a table shorter
than it is the model's capacity, not its defect. A length the user stated that a table contradicts (max_len=48
with a 32-row table) is a promise the model breaks: shape.contract probes it (``promised_length``).
"""
from __future__ import annotations

import inspect
import re
from typing import TYPE_CHECKING, Any

from tfcheck.model.build.names import MAX_LEN
from tfcheck.model.inputs import TARGET_LENGTH_DELTA
from tfcheck.model.trial.observed import Observed, Sighting
from tfcheck.report.report import Assumption

if TYPE_CHECKING:
    from tfcheck.model.build.loaded import Loaded
    from tfcheck.model.facts.under_test import ModelUnderTest

#: Longest probe tfcheck runs, whatever max_len a config claims (never 131072 because a config says so).
PROBE_LENGTH_CAP = 64


def probe_cap(subject: ModelUnderTest) -> int:
    """The longest probe before any capacity: PROBE_LENGTH_CAP, or the declared probe_len when longer."""
    return max(PROBE_LENGTH_CAP, subject.facts.probe_len or 0)


def adopt_capacity(subject: ModelUnderTest, observed: Observed) -> None:
    """Settle the capacity from the trial's position tables and the stated lengths; state it where it stops
    the probes short of where they would go."""
    tables = position_tables(subject, observed)
    stated = stated_lengths(subject)
    found: list[tuple[int, str]] = [(t.size, f"{t.what} ({t.where})") for t in tables if t.size is not None]
    found += stated
    if not found:
        return
    capacity, why = min(found, key=lambda f: f[0])
    subject.facts.set("capacity", capacity, why)
    before = min(subject.facts.max_len or probe_cap(subject), probe_cap(subject))
    if capacity < before:
        subject.assumptions.append(Assumption(
            "capacity", capacity, f"{why}: the longest sequence the model holds, so no probe is longer"))
    promised = promised_length(subject, observed)
    if promised is not None:
        length, said = promised
        subject.assumptions.append(Assumption(
            "capacity promised", length, f"{said}, but {why} holds {capacity}: shape.contract probes the stated "
            f"length {length} (build the table from the same value, or state the capacity the table has)"))


def position_tables(subject: ModelUnderTest, observed: Observed) -> list[Sighting]:
    """The trial's position tables made for the probe's own lengths (a slice that stops elsewhere is some other
    cut of a weight, a fused projection split, and says nothing about positions)."""
    length = subject.probe_length()
    lengths = {length, max(1, length + TARGET_LENGTH_DELTA)} if subject.takes_target else {length}
    return [s for s in observed.position_tables if s.length in lengths and s.size is not None]


def stated_lengths(subject: ModelUnderTest) -> list[tuple[int, str]]:
    """The capacities the user stated, each with where: the max_len fact (declared, or read from the config or
    the model) unless tfcheck chose its value, then the constructor's max_len-like arguments."""
    facts, loaded = subject.facts, subject.loaded
    out: list[tuple[int, str]] = []
    source = facts.sources.get("max_len", "")
    if facts.max_len is not None:
        attribute, value = stated_attribute(subject, source)
        user = user_value(loaded, attribute, value)
        if user is not None and user == value:
            user = facts.max_len  # what a rule derived from the stated value (an offset taken off) says
        if user is not None:
            out.append((user, f"max_len={user} ({source})"))
    if not getattr(loaded, "constructed", True):
        return out
    for name, value, how in constructor_lengths(subject):
        user = user_value(loaded, name, value)
        if user is not None and not any(v == user for v, _ in out):
            out.append((user, f"{name}={user} ({how})"))
    return out


def stated_attribute(subject: ModelUnderTest, source: str) -> tuple[str, int]:
    """The attribute a max_len source names (``config.max_position_embeddings``, also where a rule took an offset
    off it: ``config.max_position_embeddings - 0 - 1: ...``) and the value it holds."""
    found = re.search(r"config\.(\w+)", source)
    attribute = found.group(1) if found else source.rsplit(".", 1)[-1]
    held: Any = getattr(getattr(subject.model, "config", None), attribute, None) if found else None
    return attribute, held if _is_length(held) else int(subject.facts.max_len or 0)  # max_len is known here


def user_value(loaded: Loaded, name: str, value: int) -> int | None:
    """The length the user stated for ``name``: ``value`` unless tfcheck filled it (None: no promise) or shrank
    it (the user's default, which the shrunk build no longer shows)."""
    if name in loaded.shrunk and loaded.shrunk[name][1] == value:
        original = loaded.shrunk[name][0]
        return original if isinstance(original, int) and not isinstance(original, bool) else None
    filled = {**loaded.filled, **loaded.config_filled}
    if name in filled and filled[name] == value:
        return None
    return value


def constructor_lengths(subject: ModelUnderTest) -> list[tuple[str, int, str]]:
    """The constructor's max_len-like arguments the model was built with: (name, value, where)."""
    origin = subject.loaded.origin
    try:
        params = inspect.signature(origin).parameters
    except (TypeError, ValueError):
        return []
    given = subject.declared.get("kwargs")
    kwargs = given.value if given is not None and isinstance(given.value, dict) else {}
    owner = getattr(origin, "__qualname__", type(origin).__name__)
    out = []
    for name, param in params.items():
        if name not in MAX_LEN:
            continue
        if name in kwargs and _is_length(kwargs[name]):
            out.append((name, int(kwargs[name]), f"the kwargs declaration, {given.source}" if given else "given"))
        elif _is_length(param.default) and name not in getattr(subject.loaded, "filled", {}):
            out.append((name, int(param.default), f"the default of {owner}'s argument"))
    return out


def promised_length(subject: ModelUnderTest, observed: Observed | None = None) -> tuple[int, str] | None:
    """A length the user stated beyond the position tables of the trial (``observed``, by default the one the
    engine ran), capped like every probe, with where it was stated: the model breaks that promise, and
    shape.contract probes it. None when no table contradicts a stated length."""
    if observed is None:
        trial = subject.trial
        observed = trial.observed if trial is not None else None
    if observed is None:
        return None
    sizes = [t.size for t in position_tables(subject, observed) if t.size is not None]
    if not sizes:
        return None
    capacity = min(sizes)
    stated = [(v, why) for v, why in stated_lengths(subject) if v > capacity]
    if not stated:
        return None
    value, why = min(stated, key=lambda s: s[0])
    length = min(value, probe_cap(subject))
    return (length, why) if length > capacity else None


def _is_length(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
