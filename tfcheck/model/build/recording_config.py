"""The config tfcheck hands a constructor when no config exists: it answers only hyper-parameters (sizes,
counts, dropout rates, special ids: the tables of tfcheck.model.build.names) with small values, and records which
names the constructor read.

Any other name is missing, as it is from a config that lacks the field: ``getattr(cfg, "x", default)``,
``cfg.get("x")``, ``"x" in cfg`` and ``hasattr`` take the branches they take on a real config, and a hard read
raises AttributeError / KeyError. tfcheck never invents a switch (causal, bias, is_decoder, an activation's
name). The constructor is then built for real from an ``AttrDict`` of the names read: a dict with attribute
access, so copy, deepcopy, ``**cfg``, ``in`` and iteration behave as on a dict.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfcheck.model.build.small_sizes import quantity, small_value


class AttrDict(dict):
    """A dict whose keys are also attributes (``cfg.n_embd`` and ``cfg["n_embd"]``); setting an attribute sets
    the key, as a config a constructor mutates expects."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"config has no attribute {name!r}", name=name, obj=self) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self[name]
        except KeyError:
            raise AttributeError(name) from None


def to_config_object(value: Any) -> Any:
    """A dict (nested dicts too, inside lists as well) as AttrDicts: what a constructor reading attributes or keys
    expects of a config given as JSON."""
    if isinstance(value, Mapping):
        return AttrDict({k: to_config_object(v) for k, v in value.items()})
    if isinstance(value, list):
        return [to_config_object(v) for v in value]
    return value


class RecordingConfig(dict):
    """The recording pass's config: the user's keys, then small values for hyper-parameter names, each read
    recorded in ``read`` (name -> value answered); other names asked for go to ``missing``."""

    def __init__(self, given: Mapping[str, Any] | None = None):
        super().__init__(to_config_object(dict(given or {})))
        object.__setattr__(self, "read", {})
        object.__setattr__(self, "missing", [])
        object.__setattr__(self, "refusals", [])

    def _answer(self, name: Any) -> tuple[bool, Any]:
        if dict.__contains__(self, name):
            value = dict.__getitem__(self, name)
        elif isinstance(name, str) and quantity(name, [*self.read, *dict.keys(self)]) is not None:
            value = small_value(name, [*self.read, *dict.keys(self)])
            dict.__setitem__(self, name, value)
        else:
            if name not in self.missing:
                self.missing.append(name)
            return False, None
        self.read[name] = value
        return True, value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy, pickle and friends probe dunders: a config has none of them
            raise AttributeError(name)
        found, value = self._answer(name)
        if not found:
            exc = AttributeError(f"config has no attribute {name!r}", name=name, obj=self)
            self.refusals.append(exc)
            raise exc
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __getitem__(self, key: Any) -> Any:
        found, value = self._answer(key)
        if not found:
            exc = KeyError(key)
            self.refusals.append(exc)
            raise exc
        return value

    def get(self, key: Any, default: Any = None) -> Any:
        found, value = self._answer(key)
        return value if found else default

    def __contains__(self, key: object) -> bool:
        return self._answer(key)[0]

    def hard_miss(self, exc: BaseException) -> str | None:
        """The name whose read made the constructor fail (``exc`` is its exception), if a missing name did."""
        if any(exc is refused for refused in self.refusals):
            return str(exc.name if isinstance(exc, AttributeError) else exc.args[0])
        name = getattr(exc, "name", None) if isinstance(exc, AttributeError) else \
            (exc.args[0] if isinstance(exc, KeyError) and exc.args else None)
        return str(name) if name is not None and name in self.missing else None

    def as_built(self) -> AttrDict:
        """The config of the real build: the names read (and the user's keys), nothing else."""
        built: AttrDict = to_config_object({**self.read, **{k: v for k, v in dict.items(self) if k not in self.read}})
        return built
