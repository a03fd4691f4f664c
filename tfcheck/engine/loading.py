"""Loading a subject: the model built from a spec, a class, a factory or an instance (from a fixed seed, the
caller's generators untouched), with its declarations merged strongest first, refused early when it cannot be
checked (an unavailable device, lazy or meta parameters), and its facts settled without a forward."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tfcheck.engine.limits import COMPILED, COMPILED_WHY, uncompiled
from tfcheck.errors import DeclarationError, UsageError
from tfcheck.model.build.construction import BUILD_SEED, built_seeded, rebuild_at_defaults
from tfcheck.model.build.loaded import Loaded
from tfcheck.model.build.small_sizes import changes_text
from tfcheck.model.build.usable import refuse_unusable
from tfcheck.model.facts import declarations as decl
from tfcheck.model.subject import Subject, build_subject
from tfcheck.report.report import Assumption

__all__ = ["BUILD_SEED", "at_defaults", "construction_assumptions", "load_declared", "load_subject"]


def load_declared(model_or_spec: Any, declarations: dict[str, Any], source: str) -> Subject:
    """The subject with keyword declarations (``source`` names where they came from, e.g. "run_checks()
    argument") over the spec's [[tool.tfcheck.models]] entry in the working directory's pyproject.toml."""
    from tfcheck.model.facts.project_config import declarations_for, find_pyproject

    strong = decl.from_mapping(declarations, source)
    if isinstance(model_or_spec, str):
        strong = decl.merge(strong, declarations_for(model_or_spec, find_pyproject(Path.cwd())))
    return load_subject(model_or_spec, strong)


def load_subject(model_or_spec: Any, strong: dict[str, decl.Declared] | None = None,
                 base: Path | None = None, meta_ok: bool = False) -> Subject:
    """Build the subject from a spec string, a module class / factory, or an instance (``meta_ok``: one on
    the meta device is fine, as for a shape trace; the battery needs data).

    ``strong`` holds the declarations that outrank the model's own ``__tfcheck__`` (command line,
    pyproject, run_checks arguments), already merged strongest first.
    """
    import torch.nn as nn

    from tfcheck.model.build import spec as spec_mod

    strong = dict(strong or {})
    if isinstance(model_or_spec, str):
        target, attr = spec_mod.split_spec(model_or_spec)
        origin = spec_mod.resolve_attr(spec_mod.import_target(target, base), target, attr)
        label = model_or_spec
    else:
        origin = model_or_spec
        name = getattr(origin, "__name__", type(origin).__name__)
        label = f"<{name} instance>" if isinstance(origin, nn.Module) else name
    from_origin = _own_declarations(origin, label)
    merged = decl.merge(strong, from_origin)
    if "device" in merged:  # before a model is built for nothing
        _refuse_unavailable_device(merged["device"])
    loaded = built_seeded(origin, label, merged["kwargs"].value if "kwargs" in merged else {},
                          shrink=merged["shrink"].value if "shrink" in merged else True,
                          device=merged["device"].value if "device" in merged else None)
    loaded, compiled = _uncompiled(loaded)
    if loaded.model is not origin:
        # The instance may carry its own __tfcheck__ (one that follows its constructor arguments, e.g.
        # pad_id); it outranks the class's or factory's.
        merged = decl.merge(strong, _own_declarations(loaded.model, label), from_origin)
    if "device" in merged:
        _refuse_unavailable_device(merged["device"])
    refuse_unusable(loaded.model, loaded.spec, meta_ok=meta_ok)
    subject = build_subject(loaded, merged)
    subject.assumptions.extend(construction_assumptions(loaded))
    if compiled:
        subject.assumptions.append(Assumption(COMPILED, type(loaded.model).__name__, COMPILED_WHY))
    return subject


def _uncompiled(loaded: Loaded) -> tuple[Loaded, bool]:
    """The loaded model as its uncompiled module (torch.compile's wrapper given or returned by a factory): its
    checks run with dynamo off, which dynamo's own tracking of the model's mutations would break."""
    model, compiled = uncompiled(loaded.model)
    return (dataclasses.replace(loaded, model=model) if model is not loaded.model else loaded), compiled


def construction_assumptions(loaded: Loaded) -> list[Assumption]:
    """Where each config tfcheck built came from, and what the build changed of the model as written: the
    defaults it shrank, or the size constraint that made it build the defaults."""
    out = []
    for parameter, where in loaded.config_sources.items():
        filled = ", ".join(f"{k}={v}" for k, v in loaded.config_filled.items())
        out.append(Assumption(f"{parameter} built from", where,
                              "the config the constructor takes, found by tfcheck" +
                              (f"; fields tfcheck set: {filled}" if filled else "")))
    if loaded.shrunk:
        out.append(Assumption("constructor arguments shrunk", changes_text(loaded.shrunk),
                              "large defaults shrunk by tfcheck, their invariants kept (defaults kept with "
                              "shrink=false; a kwargs key keeps its value)"))
    if loaded.size_constraint:
        out.append(Assumption("size constraint", loaded.size_constraint,
                              "the constructor refused tfcheck's small sizes, so the model is checked as written"))
    return out


def _refuse_unavailable_device(declared: decl.Declared) -> None:
    """A declared device this machine does not have is a usage error before anything runs."""
    import torch

    device = torch.device(declared.value)
    where = f"device={declared.value} declared ({declared.source})"
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"{where} but torch.cuda.is_available() is False: this torch has no CUDA or sees no "
                             "GPU. Run on a machine with one, install a CUDA build of torch, or drop the "
                             "declaration (device=cpu).")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UsageError(f"{where} but only {torch.cuda.device_count()} CUDA device(s) are visible "
                             f"(cuda:0 to cuda:{torch.cuda.device_count() - 1}); declare one of them.")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise UsageError(f"{where} but torch.backends.mps.is_available() is False (MPS needs Apple silicon and "
                         "a torch built with it); declare device=cpu or drop the declaration.")


def _own_declarations(obj: Any, label: str) -> dict[str, decl.Declared]:
    mapping = getattr(obj, "__tfcheck__", None)
    if mapping is None:
        return {}
    if not isinstance(mapping, dict):
        raise DeclarationError(f"__tfcheck__ on {label} must be a dict of declarations, not {type(mapping).__name__}")
    return decl.from_mapping(mapping, f"__tfcheck__ on {getattr(obj, '__name__', type(obj).__name__)}")


def at_defaults(subject: Subject, small_error: str) -> Subject | None:
    """The subject rebuilt as written (shrink=false, the user's kwargs kept), for a model tfcheck shrank whose
    trial forward raised: a forward may need sizes a constructor does not check (a rotary table of at least 64
    dimensions). None when the defaults cannot be built (too large for the size guard, or they raise too)."""
    try:
        loaded, _ = _uncompiled(rebuild_at_defaults(subject.loaded))
        refuse_unusable(loaded.model, loaded.spec)
    except Exception:  # noqa: BLE001 - defaults that cannot be built leave the small model's error as the finding
        return None
    rebuilt = build_subject(loaded, subject.declared)
    rebuilt.assumptions.extend(construction_assumptions(loaded))
    rebuilt.assumptions.append(Assumption(
        "size constraint", small_error, f"the forward raised on tfcheck's small sizes "
        f"({changes_text(subject.loaded.shrunk)}), so the model is checked at its defaults, as written"))
    return rebuilt
