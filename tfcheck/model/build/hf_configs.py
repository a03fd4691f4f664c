"""The config of a Hugging Face class (its ``config_class``) at tfcheck's small sizes: the sizes, what the family
needs beyond them (tfcheck.model.build.small_sizes), the relations its defaults hold
(tfcheck.model.build.small_invariants), and the same config with some of tfcheck's choices given up, for a
constructor that refuses them (tfcheck.model.build.small_retries).
"""
from __future__ import annotations

import ast
import contextlib
import copy
import dataclasses
import inspect
import re
from collections.abc import Mapping
from typing import Any

from tfcheck.errors import SpecError
from tfcheck.model.build.config_reads import is_sub_config
from tfcheck.model.build.config_source import ConfigSource
from tfcheck.model.build.recording_config import to_config_object
from tfcheck.model.build.small_invariants import hugging_face_invariants
from tfcheck.model.build.small_retries import hugging_face_retries
from tfcheck.model.build.small_sizes import SMALL_VALUES, hugging_face_layouts, hugging_face_values

#: How deep sub-configs are made small (a config's text_config's vision_config ...).
_DEPTH = 3
#: A config validation's message that names the value a field must have, and how many such fields are set.
_ASKS = re.compile(r"\b([a-z_][a-z0-9_]*) must be ([^,;]+?), got\b")
_ASKED_AT_MOST = 8


def hugging_face_source(origin: Any, cls: type, given: Mapping[str, Any], shrink: bool, depth: int = 0) -> ConfigSource:
    """A Hugging Face config class: every hyper-parameter its __init__ names gets tfcheck's small value (its
    defaults describe released checkpoints, the small config is what tfcheck has always checked them at), and
    each sub-config it holds (an encoder's, a decoder's, a text model's) is made small the same way, the user's
    keys for it merged in (kwargs={"config": {"text_config": {...}}})."""
    try:
        init_names = set(inspect.signature(cls).parameters)
    except (TypeError, ValueError):
        init_names = set()
    small = {n: v for n, v in SMALL_VALUES.items() if n in init_names} if shrink else {}
    # what the family needs beyond the sizes to build and run: top-k routing within the experts left, a causal-LM
    # head's is_decoder switch on (Reformer's LM head refuses to build without it, RoBERTa's runs bidirectional)
    small.update(hugging_face_values(getattr(origin, "__name__", ""), _defaults(cls), small, given))
    subs = _sub_configs(cls, init_names, given, depth) if shrink else {}
    small.update({n: sub.make() for n, sub in subs.items()})
    objects = {k: to_config_object(v) for k, v in given.items() if k not in subs}
    layout: dict[str, Any] = {}
    if shrink:  # the family's invariants, a hybrid model's every kind of layer, mrope sections within the small heads
        small.update(hugging_face_invariants(cls, init_names, {**small, **objects}, given))
        small.update(layout := hugging_face_layouts(cls, init_names, {**small, **objects}, given))
    arguments, name = {**small, **objects}, f"{cls.__name__} (its config_class)"

    def retries(layout: Mapping[str, Any]) -> list[ConfigSource]:
        return [_hf_source(cls, f"{name}; {r.what}", r.arguments, given, subs)
                for r in hugging_face_retries(cls, arguments, layout, subs, given)] if shrink and not depth else []

    try:
        cls(**copy.deepcopy(arguments))
    except Exception as exc:  # noqa: BLE001 - the config's own validation, said as it is
        refused = f"{type(exc).__name__}: {exc}"
        # the config may refuse one of tfcheck's choices: its layout (mrope sections in a per-layer rope dict)
        for retry in retries(layout):
            with contextlib.suppress(Exception):
                retry.make()
                return dataclasses.replace(retry, where=f"{retry.where} (the config refused tfcheck's first "
                                           f"choice: {refused.splitlines()[-1].strip()})")
        asked = _as_asked(cls, arguments, exc, given)
        if asked is not None:  # the retries then start from what the validation asked for
            arguments, name = asked[0], f"{name}; as its validation asked: {asked[1]}"
            return _hf_source(cls, name, arguments, given, subs, retries({}))
        raise SpecError(
            f"tfcheck builds {getattr(origin, '__name__', origin)} from a small {cls.__name__} "
            f"({', '.join(f'{k}={_short(v)}' for k, v in sorted(arguments.items()))}), and the config refused "
            f"it: {refused}. Give tfcheck a factory that builds the model from a config you set up "
            "(spec path/to/file.py:make_model), or an instance") from None
    # A constructor refusing tfcheck's layout keeps it: a stack without a kind of layer is not the model (Qwen4-Exp's
    # linear-attention layers alone cannot run), and the error names the fields that kind needs.
    return _hf_source(cls, name, arguments, given, subs, retries({}))


def _hf_source(cls: type, where: str, arguments: dict[str, Any], given: Mapping[str, Any],
               subs: Mapping[str, ConfigSource], retries: list[ConfigSource] | None = None) -> ConfigSource:
    """The source of ``cls(**arguments)``: the fields tfcheck set are its own and its sub-configs' (text_config.
    hidden_size), never a whole sub-config object."""
    filled = {k: v for k, v in arguments.items() if k not in given and k not in subs}
    filled.update({f"{n}.{k}": v for n, sub in subs.items() for k, v in sub.filled.items()})
    return ConfigSource(where, lambda: cls(**copy.deepcopy(arguments)), filled=filled, retries=retries or [])


def _sub_configs(cls: type, init_names: set[str], given: Mapping[str, Any], depth: int) -> dict[str, ConfigSource]:
    """The sub-configs ``cls`` holds at its defaults (objects of a config class that shares a base class with it),
    each at the small sizes, the user's dict for it as its own kwargs; one that refuses them keeps its default."""
    default = _default_instance(cls) if depth < _DEPTH else None
    if default is None:
        return {}
    out = {}
    for n in sorted(init_names):
        value = vars(default).get(n)  # not getattr: a heterogeneous config refuses global reads
        mine = given.get(n, {})
        if is_sub_config(value, default) and isinstance(mine, Mapping):
            with contextlib.suppress(SpecError):
                out[n] = hugging_face_source(type(value), type(value), mine, True, depth + 1)
    return {n: _with_followers(n, source, default, out, given) for n, source in out.items()}


def _with_followers(name: str, source: ConfigSource, default: Any, subs: Mapping[str, ConfigSource],
                    given: Mapping[str, Any]) -> ConfigSource:
    """A sub-config whose <prefix>_<size> fields (a decoder's cross_hidden_size) follow the size they equal at the
    defaults in a sibling sub-config or in itself (the encoder's hidden_size, which the cross-attention reads)."""
    small = {n: s.make() for n, s in subs.items()}
    mine, follow = vars(default)[name], {}
    for field, was in vars(mine).items():
        base = field.split("_", 1)[-1]
        if base == field or base not in SMALL_VALUES or field in SMALL_VALUES or _given(given, (name, field)):
            continue
        for other in [n for n in subs if n != name] + [name]:
            if _int(was) and vars(vars(default)[other]).get(base) == was and _int(now := vars(small[other]).get(base)):
                follow[field] = now
                break
    if not follow:
        return source

    def make() -> Any:
        config = source.make()
        for field, value in follow.items():
            setattr(config, field, value)
        return config

    return dataclasses.replace(source, make=make, filled={**source.filled, **follow})


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _as_asked(cls: type, arguments: Mapping[str, Any], exc: BaseException,
              given: Mapping[str, Any]) -> tuple[dict[str, Any], str] | None:
    """The arguments the config accepts where its validation names the value a field must have ("X must be 0,
    got 256": Gemma 4 Assistant's text_config without per-layer inputs), each such field set in the config or in
    the sub-config that has it, and what was set; None when a message names none, or one the user gave."""
    changed: dict[str, Any] = copy.deepcopy(dict(arguments))
    asked: dict[str, Any] = {}
    for _ in range(_ASKED_AT_MOST):
        found = _ASKS.search(str(exc))
        try:
            value = ast.literal_eval(found.group(2).strip()) if found else None
        except (ValueError, SyntaxError):
            return None
        path = _field_path(changed, found.group(1)) if found else None
        if path is None or ".".join(path) in asked or _given(given, path):
            return None
        if len(path) == 1:
            changed[path[0]] = value
        else:
            setattr(changed[path[0]], path[1], value)
        asked[".".join(path)] = value
        try:
            cls(**copy.deepcopy(changed))
        except Exception as again:  # noqa: BLE001 - the next field its validation names
            exc = again
            continue
        return changed, ", ".join(f"{k}={v!r}" for k, v in asked.items())
    return None


def _field_path(arguments: Mapping[str, Any], field: str) -> tuple[str, ...] | None:
    subs = {n: v for n, v in arguments.items() if hasattr(v, "__dict__") and not isinstance(v, Mapping)}
    if field in arguments and field not in subs:
        return (field,)
    return next(((n, field) for n, v in subs.items() if field in vars(v)), None)


def _given(given: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    level: Any = given
    for part in path:
        if not isinstance(level, Mapping) or part not in level:
            return False
        level = level[part]
    return True


def _short(value: Any) -> str:
    return type(value).__name__ + "(...)" if hasattr(value, "__dict__") else repr(value)


def _default_instance(cls: type) -> Any:
    """``cls()``; for a config whose validation refuses its own defaults (Gemma 4 Assistant's text_config), the
    instance it had built when its validator raised; None when there is none."""
    try:
        return cls()
    except Exception as exc:  # noqa: BLE001 - the frames of the refusing validator hold the instance
        tb = exc.__traceback__
        while tb is not None:
            found = next((v for v in tb.tb_frame.f_locals.values() if type(v) is cls), None)
            if found is not None:
                return found
            tb = tb.tb_next
    return None


def _defaults(cls: type) -> dict[str, Any]:
    try:
        return {n: p.default for n, p in inspect.signature(cls).parameters.items() if p.default is not p.empty}
    except (TypeError, ValueError):
        return {}


__all__ = ["hugging_face_source"]
