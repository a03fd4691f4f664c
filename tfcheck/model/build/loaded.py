"""``Loaded``: a model instance and how it came to be (what tfcheck filled, what it shrank, what the user gave),
so that the report can say it and the capacity rules can tell a size tfcheck chose from one the user stated."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Loaded:
    """A model instance and how it came to be."""

    model: Any
    spec: str
    origin: Any  # the class, factory or instance the spec named
    filled: dict[str, Any] = field(default_factory=dict)  # arguments tfcheck filled in, and their values
    constructed: bool = True  # False when the spec named an instance (then it is the user's own object)
    #: defaults tfcheck shrank, arguments and config fields alike: name -> (default, small value)
    shrunk: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    #: config fields tfcheck filled (unset, required, or answered by the recording config): name -> value
    config_filled: dict[str, Any] = field(default_factory=dict)
    #: where each config came from: parameter -> a phrase (e.g. "GPTConfig (a config class in model.py ...)")
    config_sources: dict[str, str] = field(default_factory=dict)
    #: the constructor arguments the user gave (the kwargs declaration), kept as given
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: whether tfcheck was to shrink large defaults (the shrink declaration) and the device it built for
    shrink: bool = True
    device: str | None = None
    #: the constructor refused the shrunk sizes and the defaults were built instead: what raised, and where
    size_constraint: str | None = None
    #: where the user's code registered, wrote and froze each part (tfcheck.model.build.construction_sites); None
    #: for an instance, which tfcheck did not build
    sites: Any = None
    #: a fresh build from the same constructor and arguments (a training copy of a model deepcopy refuses); None
    #: for an instance
    rebuild: Any = None

    def set_by_tfcheck(self, name: str) -> str:
        """' (set by tfcheck)' when ``name`` is a config field tfcheck filled, for the source of a fact read from it
        (a causal-LM head's is_decoder switch), else ''."""
        return " (set by tfcheck for this model class)" if name in self.config_filled else ""
