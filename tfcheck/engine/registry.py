"""The registry of checks. A check is a small function ``fn(ctx) -> list[Finding]`` registered with an id
(``family.name``), a title, the kinds of model it applies to and the troubleshooting rows it reports.

Adding a check: a new module in its family's folder ``tfcheck/checks/<family>/`` with one ``@check(...)``
function, and its rows in ``tfcheck/data/table/<family>.toml``; ``tfcheck/checks/__init__.py`` finds it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

ALL_KINDS = frozenset({"encoder", "decoder", "seq2seq", "attention", None})


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    kinds: frozenset
    rows: tuple[str, ...]
    func: Callable
    doc: str
    order: int = 100
    #: "probe" checks look at forwards; "training" checks take optimiser steps on a copy, with a budget
    #: of their own (the train_steps declaration), reported apart from the probe battery's cost.
    group: str = "probe"
    #: ``applies(subject) -> None`` when the check applies, else the reason it does not (e.g. "forward
    #: takes no cache argument"); a check that does not apply is no item and no finding, only a line
    #: among the report's assumptions.
    applies: Callable | None = None
    #: the check builds its own probe inputs (perturbed tokens, padding), which a declared ``inputs``
    #: factory does not allow
    builds_inputs: bool = False
    #: the check's minimal-example property (a ``tfcheck.explainers.shrinking.Property``), for checks whose
    #: failures the search shrinks to the smallest input that shows them; ``replay`` finds it here
    shrink: Any = None

    def applies_to(self, kind: str | None) -> bool:
        return kind in self.kinds

    def not_applicable(self, subject) -> str | None:
        """Why the check does not apply to this subject, or None when it does."""
        if not self.applies_to(subject.kind):
            return f"not for kind {subject.kind or 'unknown'}"
        if self.builds_inputs and subject.facts.inputs is not None:
            return ("it builds its own probe inputs (perturbed or padded tokens), and this model's inputs come from "
                    "the declared 'inputs' factory")
        return self.applies(subject) if self.applies is not None else None


_REGISTRY: dict[str, Check] = {}


def check(id: str, title: str, rows: tuple[str, ...], kinds=ALL_KINDS, order: int = 100,
          group: str = "probe", applies: Callable | None = None, builds_inputs: bool = False,
          shrink: Any = None) -> Callable:
    """Register a check function under ``id``. The battery runs in ``order`` (forward.smoke is 0, cheap
    shape checks come early), then by id."""
    def register(func: Callable) -> Callable:
        if id in _REGISTRY:
            raise ValueError(f"check id {id!r} registered twice ({_REGISTRY[id].func.__module__} and {func.__module__})")
        _REGISTRY[id] = Check(id, title, frozenset(kinds), tuple(rows), func, (func.__doc__ or "").strip(), order,
                              group, applies, builds_inputs, shrink=shrink)
        return func
    return register


def registered() -> list[Check]:
    """The checks registered so far, in battery order. The registry imports no check (each check imports the
    registry to register itself); ``tfcheck.engine.battery`` loads them all."""
    return sorted(_REGISTRY.values(), key=lambda c: (c.order, c.id))
