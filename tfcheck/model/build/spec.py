"""Turning a spec (``module:attr`` or ``path/to/file.py:attr``) into what it names, and that into a model.

``attr`` may be an ``nn.Module`` subclass, a factory returning a module, or a module instance. Importing is
here (a model file that runs a script when imported is stopped by tfcheck.model.build.import_limit); constructing is
tfcheck.model.build.construction (filled and shrunk arguments, configs from tfcheck.model.build.configs), whose names
are re-exported so that ``tfcheck.model.build.spec.load`` / ``build`` / ``Loaded`` / ``SMALL_VALUES`` keep working.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tfcheck.errors import SpecError
from tfcheck.frames import innermost_user_frame, short_path
from tfcheck.model.build import import_limit, names
from tfcheck.model.build.construction import build, user_frame
from tfcheck.model.build.loaded import Loaded
from tfcheck.model.build.small_sizes import SMALL_VALUES
from tfcheck.model.build.user_code import is_control_flow

CONFIG_PARAM_NAMES = names.CONFIG_PARAMS

__all__ = ["CONFIG_PARAM_NAMES", "Loaded", "SMALL_VALUES", "build", "file_module_name", "import_target",
           "is_file_target", "load", "model_file", "resolve_attr", "split_spec"]


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
                with import_limit.import_time_limit():
                    mod_spec.loader.exec_module(module)
            except BaseException as exc:
                sys.modules.pop(name, None)
                if is_control_flow(exc):  # pytest.importorskip in the model file skips; Ctrl-C stops
                    raise
                raise _import_failed(target, exc) from None
        return module
    with _on_path(base):
        try:
            with import_limit.import_time_limit():
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
    where = user_frame(exc)
    if isinstance(exc, import_limit.ImportTimedOut):
        frame = innermost_user_frame(exc)
        at = f" (it was at {short_path(frame.filename)}:{frame.lineno})" if frame is not None else ""
        return SpecError(
            f"importing {target!r} did not finish within {exc.limit_s:g} s{at}: the module runs a script when "
            "imported (training, reading data). Put the script part under `if __name__ == \"__main__\":` so that "
            "importing it only defines the model.")
    if isinstance(exc, SystemExit):
        return SpecError(
            f"importing {target!r} called sys.exit({exc.code!r}){where}: the module runs a script when imported. "
            'Put the script part under `if __name__ == "__main__":` so that importing it only defines the model.'
        )
    return SpecError(
        f"importing {target!r} raised {type(exc).__name__}: {exc}{where}. Fix the error in that module "
        "(tfcheck imports it as Python would), then run again."
    )


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


def load(spec: str, kwargs: dict[str, Any] | None = None, base: Path | None = None, shrink: bool = True) -> Loaded:
    """Import and construct the model a spec names; every failure is a SpecError that says what to do."""
    target, attr = split_spec(spec)
    origin = resolve_attr(import_target(target, base), target, attr)
    return build(origin, spec, kwargs or {}, shrink)
