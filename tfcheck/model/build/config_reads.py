"""The config fields a constructor that raised was reading where its config leaves them unset (issue 15): a field
a Hugging Face config's defaults leave None for the checkpoint to state (Dots1's n_shared_experts, Lfm2-MoE's
layer_types), a per-layer-type dict left empty (the model looks up rope_parameters['full_attention'] in {}), or
a sub-config without an attribute the model reads (DBRX's attn_config.rope_theta). tfcheck cannot guess such a
field: the error names it and the declaration that gives it.

Read from the traceback: the frames' own variables and their functions' source (the attribute reads whose base
is the config or one of its sub-configs), the failing line's reads first. Nothing here is keyed on a class name.
"""
from __future__ import annotations

import ast
import inspect
import json
import linecache
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any

from tfcheck.model.build import names

#: How deep sub-configs are looked for below a constructor's config argument (a config's text_config's ...).
_DEPTH = 3
_MISSING = object()


@dataclass(frozen=True)
class UnsetRead:
    """A config field the constructor read and its config leaves unset: its path from the constructor's argument
    (("config", "attn_config", "rope_theta")), what it is ("None", "missing", "{} without key 'full_attention'")
    and where it was read (file:line)."""

    path: tuple[str, ...]
    state: str
    where: str
    #: the key looked up in a mapping the field holds (rope_parameters['full_attention']), or None
    key: Any = None

    @property
    def dotted(self) -> str:
        return ".".join(self.path) + (f"[{self.key!r}]" if self.key is not None else "")


def unset_reads(exc: BaseException, arguments: Mapping[str, Any]) -> list[UnsetRead]:
    """The unset config fields ``exc`` came from reading (none when it is no such error or none is found)."""
    configs = _configs(arguments)
    if not configs or not isinstance(exc, (TypeError, AttributeError, KeyError, IndexError)):
        return []
    if isinstance(exc, AttributeError) and id(getattr(exc, "obj", None)) in configs and exc.name:
        frame, line = _reading(exc, f".{exc.name}")
        return [UnsetRead((*configs[id(exc.obj)], exc.name), "missing", _where(frame, line))]
    key = exc.args[0] if isinstance(exc, KeyError) and exc.args else _MISSING
    for frame, line in reversed(list(_frames(exc))):
        reads = _reads(frame, line, configs, key)
        if reads:
            return reads
    return []


def declaration_hint(reads: list[UnsetRead]) -> str:
    """The sentence that names the unset fields and the kwargs declaration that gives them."""
    if not reads:
        return ""
    listed = ", ".join(f"{r.dotted} ({r.state}, read at {r.where})" for r in reads)
    nested: dict[str, Any] = {}
    for r in reads:
        level = nested
        parts = (*r.path, r.key) if r.key is not None else r.path
        for part in parts[:-1]:
            level = level.setdefault(str(part), {})
        level[str(parts[-1])] = "VALUE"
    declared = json.dumps(nested).replace('"VALUE"', "VALUE")
    return (f" The constructor reads config fields its config leaves unset at its defaults: {listed}. tfcheck "
            f"cannot guess them (the checkpoint's config states them): declare them, --set 'kwargs={declared}' "
            "with each VALUE the model is meant to have (merged over tfcheck's small sizes), or point the spec "
            "at a factory that builds the model from a config you set up.")


def _configs(arguments: Mapping[str, Any]) -> dict[int, tuple[str, ...]]:
    """id -> path of every config object among the arguments and their sub-configs (attributes of a class that
    shares a base class with the config, other than object)."""
    out: dict[int, tuple[str, ...]] = {}

    def visit(obj: Any, path: tuple[str, ...], root: Any) -> None:
        if id(obj) in out or len(path) > _DEPTH:
            return
        out[id(obj)] = path
        for name, value in _attributes(obj):
            if is_sub_config(value, root):
                visit(value, (*path, name), root)

    for name, value in arguments.items():
        if hasattr(value, "__dict__") and not inspect.isclass(value) and not _is_module(value):
            visit(value, (name,), value)
    return out


def _attributes(obj: Any) -> Iterator[tuple[str, Any]]:
    own = getattr(obj, "__dict__", None)
    return iter(own.items()) if isinstance(own, dict) else iter(())


def is_sub_config(value: Any, root: Any) -> bool:
    """A config object held by ``root``: an instance of a class sharing a base class with it (other than object)."""
    if not hasattr(value, "__dict__") or inspect.isclass(value):
        return False
    return bool((set(type(value).__mro__) & set(type(root).__mro__)) - {object})


def _is_module(value: Any) -> bool:
    return any(c.__name__ == "Module" and c.__module__.startswith("torch.nn") for c in type(value).__mro__)


def _frames(exc: BaseException) -> Iterator[tuple[FrameType, int]]:
    tb = exc.__traceback__
    while tb is not None:
        yield tb.tb_frame, tb.tb_lineno
        tb = tb.tb_next


def _reading(exc: BaseException, text: str) -> tuple[FrameType | None, int]:
    """The innermost frame whose failing line has ``text`` (the model's read, not the config's __getattribute__)."""
    frames = list(_frames(exc))
    for frame, line in reversed(frames):
        if text in linecache.getline(frame.f_code.co_filename, line):
            return frame, line
    return frames[-1] if frames else (None, 0)


def _where(frame: FrameType | None, line: int) -> str:
    if frame is None:
        return "?"
    return f"{frame.f_code.co_filename.replace(chr(92), '/').rsplit('/', 1)[-1]}:{line}"


def _reads(frame: FrameType, line: int, configs: Mapping[int, tuple[str, ...]], key: Any) -> list[UnsetRead]:
    """The unset config reads of the frame's function: those on the failing line, or else all of them."""
    try:
        source = textwrap.dedent(inspect.getsource(frame.f_code))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return []
    first = frame.f_code.co_firstlineno
    found: dict[tuple[str, ...], tuple[int, UnsetRead]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        base = _resolve(node.value, frame.f_locals)
        if id(base) not in configs:
            continue
        value = getattr(base, node.attr, _MISSING) if _readable(base, node.attr) else _MISSING
        state = _unset(value, key)
        if state == "None" and node.attr in names.LAYER_PATTERNS:
            layers = next((v for n in names.NUM_LAYERS if isinstance(v := vars(base).get(n), int)), None)
            state += f", a list of one kind per layer: {layers} layers in this config" if layers else ""
        if state is not None:
            at = node.lineno + first - 1
            path = (*configs[id(base)], node.attr)
            keyed = key if isinstance(value, Mapping) else None
            found.setdefault(path, (at, UnsetRead(path, state, _where(frame, at), keyed)))
    on_line = [r for at, r in found.values() if at == line]
    return on_line or [r for _, r in found.values()]


def _readable(base: Any, name: str) -> bool:
    try:
        getattr(base, name)
    except Exception:  # noqa: BLE001 - a heterogeneous config refuses a global read
        return False
    return True


def _unset(value: Any, key: Any) -> str | None:
    if value is None:
        return "None"
    if key is not _MISSING and isinstance(value, Mapping) and key not in value:
        return f"{dict(value)!r}, without the key"
    return None


def _resolve(node: ast.expr, local: Mapping[str, Any]) -> Any:
    """The object a chain of names and attributes (config, self.config) stands for in the frame, or _MISSING."""
    if isinstance(node, ast.Name):
        return local.get(node.id, _MISSING)
    if isinstance(node, ast.Attribute):
        base = _resolve(node.value, local)
        if base is _MISSING or not _readable(base, node.attr):
            return _MISSING
        return getattr(base, node.attr)
    return _MISSING


__all__ = ["UnsetRead", "declaration_hint", "is_sub_config", "unset_reads"]
