"""``ConfigSource``: a config to build a model from, a fresh one per build, and what tfcheck set in it."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ConfigSource:
    """A config to build the model from: where it came from, a fresh one per ``make()``, and which of its
    fields tfcheck filled (unset, required or recorded) or shrank (name -> (default, small))."""

    where: str
    make: Callable[[], Any]
    filled: dict[str, Any] = field(default_factory=dict)
    shrunk: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    #: the same config with some of tfcheck's choices given up, to build when the constructor refuses this one
    retries: list[ConfigSource] = field(default_factory=list)


__all__ = ["ConfigSource"]
