"""Turning a spec (``module:attr`` or ``path/to/file.py:attr``) into a model instance.

``attr`` may be an ``nn.Module`` subclass, a factory returning a module, or a module instance. Required
constructor arguments with the usual hyper-parameter names are filled with small values and reported.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfcheck.errors import SpecError
from tfcheck.model import names
from tfcheck.model.user_code import UserExit, is_control_flow, user_code
from tfcheck.probe.frames import innermost_user_frame

#: Small values for the usual hyper-parameter names (tfcheck.model.names): distinct from each other (d_model
#: 32 != d_ff 64 != vocab 101) so that no axis can be mistaken for another, and small enough to build in
#: milliseconds.
SMALL_VALUES: dict[str, Any] = {}
for _names, _value in [
    (names.VOCAB_SIZE + names.SOURCE_VOCAB_SIZE + names.TARGET_VOCAB_SIZE, 101),
    (names.D_MODEL + names.EMBED_DIM, 32),
    (names.NUM_HEADS + names.OTHER_HEAD_COUNTS, 4),
    (names.NUM_LAYERS, 2),
    (names.D_FF, 64),
    (names.MAX_LEN, 64),
    (names.DROPOUT, 0.1),
    (names.PAD_ID, 0),
    (names.HEAD_DIM, 8),
    # Rotary embedding on part of each head (GPT-J, CodeGen): at most the small head size, 32 / 4 = 8.
    (names.ROTARY_DIM, 4),
    # GPT-Neo's per-layer pattern must cover num_layers (its default describes 24 layers).
    (names.ATTENTION_TYPES, [[["global", "local"], 1]]),
    # Mixture-of-experts configs default to dozens of experts: a few small ones keep every path.
    (names.NUM_EXPERTS, 4),
    (names.EXPERT_D_FF, 64),
    # Special token ids inside the small vocabulary (Hugging Face configs default to ids like 50256).
    (names.BOS_TOKEN_ID, 1),
    (names.EOS_TOKEN_ID, 2),
]:
    SMALL_VALUES.update(dict.fromkeys(_names, _value))

CONFIG_PARAM_NAMES = names.CONFIG_PARAMS


@dataclass
class Loaded:
    """A model instance and how it came to be."""

    model: Any
    spec: str
    origin: Any  # the class, factory or instance the spec named
    filled: dict[str, Any] = field(default_factory=dict)  # arguments tfcheck filled in, and their values
    constructed: bool = True  # False when the spec named an instance (then it is the user's own object)


def split_spec(spec: str) -> tuple[str, str]:
    target, sep, attr = spec.rpartition(":")
    # A Windows drive letter ("C:\\m.py:Model") leaves the last colon as the separator, which is right.
    if not sep or not target or not attr:
        raise SpecError(
            f"cannot read the model spec {spec!r}: expected MODULE:ATTR (e.g. mymodel:Model) or "
            "path/to/file.py:ATTR (e.g. src/model.py:build_model)."
        )
    return target, attr


def is_file_target(target: str) -> bool:
    return target.endswith(".py") or os.sep in target or "/" in target


def file_module_name(path: Path) -> str:
    """The name a model file is imported under: from its full path, so that a/model.py and b/model.py are two
    modules (named by their stem alone, the second import replaced the first, and locations pointed at it)."""
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    stem = re.sub(r"\W", "_", path.stem)
    return f"_tfcheck_user_{stem}_{digest}"


def model_file(target: str, base: Path | None = None) -> Path:
    """The file a file target names, which must exist (checked without running it)."""
    path = (Path(base or os.getcwd()) / target).resolve()
    if not path.is_file():
        raise SpecError(f"model file {target!r} does not exist (looked for {path}).")
    return path


def import_target(target: str, base: Path | None = None) -> Any:
    """Import a module by dotted name (from ``base`` / the current directory first) or by file path."""
    base = Path(base or os.getcwd())
    if is_file_target(target):
        path = model_file(target, base)
        name = file_module_name(path)
        mod_spec = importlib.util.spec_from_file_location(name, path)
        if mod_spec is None or mod_spec.loader is None:
            raise SpecError(f"model file {target!r} cannot be imported as a Python module (looked for {path}).")
        module = importlib.util.module_from_spec(mod_spec)
        with _on_path(path.parent):
            sys.modules[name] = module
            try:
                mod_spec.loader.exec_module(module)
            except BaseException as exc:
                sys.modules.pop(name, None)
                if is_control_flow(exc):  # pytest.importorskip in the model file skips; Ctrl-C stops
                    raise
                raise _import_failed(target, exc) from None
        return module
    with _on_path(base):
        try:
            return importlib.import_module(target)
        except ModuleNotFoundError as exc:
            if exc.name and (target == exc.name or target.startswith(exc.name + ".")):
                raise SpecError(
                    f"cannot import module {target!r}: no such module on sys.path or in {base}. Run from the "
                    "directory that contains it, install it, or give a file path (path/to/file.py:ATTR)."
                ) from None
            raise _import_failed(target, exc) from None
        except BaseException as exc:  # a SystemExit or a syntax error in user code is still a usage error
            if is_control_flow(exc):
                raise
            raise _import_failed(target, exc) from None


def _import_failed(target: str, exc: BaseException) -> SpecError:
    where = _user_frame(exc)
    if isinstance(exc, SystemExit):
        return SpecError(
            f"importing {target!r} called sys.exit({exc.code!r}){where}: the module runs a script when imported. "
            'Put the script part under `if __name__ == "__main__":` so that importing it only defines the model.'
        )
    return SpecError(
        f"importing {target!r} raised {type(exc).__name__}: {exc}{where}. Fix the error in that module "
        "(tfcheck imports it as Python would), then run again."
    )


def _user_frame(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" ({exc.filename}:{exc.lineno})"
    frame = innermost_user_frame(exc)
    return f" ({frame.filename}:{frame.lineno})" if frame is not None else ""


@contextlib.contextmanager
def _on_path(directory: Path) -> Iterator[None]:
    entry = str(directory)
    added = entry not in sys.path
    if added:
        sys.path.insert(0, entry)
    try:
        yield
    finally:
        if added and entry in sys.path:
            sys.path.remove(entry)


def resolve_attr(module: Any, target: str, attr: str) -> Any:
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise SpecError(
                f"module {target!r} has no attribute {attr!r}. It defines these modules and factories: "
                f"{', '.join(_candidates(module)) or '(none found)'}."
            )
        obj = getattr(obj, part)
    return obj


def _candidates(module: Any) -> list[str]:
    import torch.nn as nn

    out = []
    for name, value in vars(module).items():
        if name.startswith("_"):
            continue
        defined_here = inspect.isclass(value) and (value.__module__ or "").startswith(module.__name__)
        if (defined_here and issubclass(value, nn.Module)) or isinstance(value, nn.Module):
            out.append(name)
    return sorted(out)


def load(spec: str, kwargs: dict[str, Any] | None = None, base: Path | None = None) -> Loaded:
    """Import and construct the model a spec names; every failure is a SpecError that says what to do."""
    target, attr = split_spec(spec)
    origin = resolve_attr(import_target(target, base), target, attr)
    return build(origin, spec, kwargs or {})


def build(origin: Any, spec: str, kwargs: dict[str, Any]) -> Loaded:
    import torch.nn as nn

    if isinstance(origin, nn.Module):
        if kwargs:
            raise SpecError(f"{spec} names a module instance; constructor arguments (kwargs) cannot apply to it.")
        return Loaded(origin, spec, origin, {}, constructed=False)
    if not callable(origin):
        raise SpecError(
            f"{spec} is a {type(origin).__name__}, not an nn.Module subclass, a factory returning one, or a "
            "module instance."
        )
    filled = fill_arguments(origin, kwargs, spec)
    _refuse_if_too_large(origin, {**filled, **kwargs}, spec)
    try:
        with user_code():
            model = origin(**{**filled, **kwargs})
    except UserExit as exc:
        raise SpecError(f"constructing {spec} stopped: {exc}") from None
    except Exception as exc:
        given = {**filled, **kwargs}
        raise SpecError(
            f"constructing {spec}({_fmt_args(given)}) raised {type(exc).__name__}: {exc}{_user_frame(exc)}. "
            "Give the constructor arguments it needs with the 'kwargs' declaration, e.g. "
            "kwargs='{\"vocab_size\": 1000}' (tfcheck check --set, pytest --tfcheck-set), or point the spec at "
            "a factory function that builds the model."
        ) from None
    if not isinstance(model, nn.Module):
        raise SpecError(
            f"{spec} returned a {type(model).__name__}, not an nn.Module. Point the spec at the model class "
            "or a factory that returns the model."
        )
    return Loaded(model, spec, origin, filled)


def _refuse_if_too_large(origin: Any, arguments: dict[str, Any], spec: str) -> None:
    """Count the parameters on the meta device first: a default config of billions is never allocated."""
    import torch

    from tfcheck.model.sizing import MEMORY_SHARE, available_bytes, human, meta_parameter_bytes

    if torch.get_default_device().type == "meta":
        return  # already building on meta: nothing will be allocated
    measured = meta_parameter_bytes(lambda: origin(**arguments))
    if measured is None:
        return
    count, size, estimate = measured
    budget = int(available_bytes() * MEMORY_SHARE)
    if size > budget:
        about = " (an estimate: the constructor read tensor values, which the count answers with 0)" if estimate else ""
        raise SpecError(
            f"building {spec}({_fmt_args(arguments)}) would allocate {human(size)} of parameters ({count:,}){about}; "
            f"tfcheck allows {human(budget)} ({int(MEMORY_SHARE * 100)}% of the memory available). Give smaller "
            "sizes with the 'kwargs' declaration (e.g. kwargs='{\"num_layers\": 2, \"d_model\": 64}'), or trace it "
            "without allocating: tfcheck trace SPEC --meta.")


def fill_arguments(origin: Any, kwargs: dict[str, Any], spec: str) -> dict[str, Any]:
    """Small values for the required parameters the user did not give; a SpecError for unknown ones."""
    try:
        sig = inspect.signature(origin)
    except (TypeError, ValueError):
        return {}
    filled: dict[str, Any] = {}
    missing = []
    for name, param in sig.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or name in kwargs:
            continue
        if param.default is not param.empty:
            continue
        if name in SMALL_VALUES:
            filled[name] = SMALL_VALUES[name]
        elif name in CONFIG_PARAM_NAMES and (config := small_config(origin, param)) is not None:
            filled[name] = config
        else:
            missing.append(name)
    if missing:
        raise SpecError(
            f"constructing {spec} needs argument(s) {', '.join(missing)} that tfcheck cannot guess (it fills "
            f"the usual hyper-parameter names such as vocab_size, d_model, num_heads). Give them with the "
            f"'kwargs' declaration, e.g. kwargs='{{\"{missing[0]}\": ...}}' (tfcheck check --set, pytest "
            "--tfcheck-set), or "
            "point the spec at a factory that takes no arguments."
        )
    return filled


def small_config(origin: Any, param: inspect.Parameter) -> Any | None:
    """Build the config object a constructor requires, shrunk to small sizes (a Hugging Face config
    class or a dataclass); None when its class is not known."""
    cls = getattr(origin, "config_class", None)
    ann = param.annotation
    if isinstance(ann, str):  # postponed annotations (from __future__ import annotations): look the name up
        ann = _annotation_class(origin, ann)
    if cls is None and inspect.isclass(ann):
        cls = ann
    if cls is None or not inspect.isclass(cls):
        return None
    try:
        names = set(inspect.signature(cls).parameters)
    except (TypeError, ValueError):
        return None
    if dataclasses.is_dataclass(cls):
        names = {f.name for f in dataclasses.fields(cls)}
    small = {n: v for n, v in SMALL_VALUES.items() if n in names}
    try:
        return cls(**small)
    except Exception as exc:  # noqa: BLE001 - the config's own validation, said as it is
        raise SpecError(
            f"tfcheck builds {getattr(origin, '__name__', origin)} from a small {cls.__name__} "
            f"({_brief_values(small)}), and the config refused it: {type(exc).__name__}: {exc}. Give tfcheck a "
            "factory that builds the model from a config you set up (spec path/to/file.py:make_model), or an "
            "instance"
        ) from None


def _brief_values(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(values.items()))


def _annotation_class(origin: Any, name: str) -> Any | None:
    """The class a string annotation names in the module that defines ``origin`` (a plain or dotted name)."""
    module = sys.modules.get(getattr(origin, "__module__", None) or "")
    obj: Any = module
    for part in name.split("."):
        obj = getattr(obj, part, None) if obj is not None else None
    return obj if inspect.isclass(obj) else None


def _fmt_args(args: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_short(v)}" for k, v in args.items())


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else type(v).__name__ + "(...)"
