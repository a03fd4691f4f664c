"""Where the config a constructor takes comes from, and making a fresh small one for each build.

In order: a Hugging Face ``config_class``; the parameter's annotation; then, from what the constructor reads
(a recording pass with tfcheck.model.build.recording_config), a config class defined in or imported into the model's
module whose fields cover those names; the model's ``get_default_config()``; a module-level config dict or
instance that has them all; a config literal in the ``__main__`` block or a module-level function that has them
all, read without running it (script_configs.py); a config class taking ``**kwargs``; and last the recording
config itself, holding only the names read. Nothing here is keyed on a class, file or repository name: a candidate
is chosen by the names it has.

Every source makes a fresh config per call (``ConfigSource.make``): a constructor that mutates its config
(minGPT's merge_from_dict) gets its own for the size guard's meta build and for the real one.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any

from tfcheck.errors import SpecError
from tfcheck.model.build import names
from tfcheck.model.build.config_source import ConfigSource
from tfcheck.model.build.hf_configs import hugging_face_source
from tfcheck.model.build.name_rules import namespace_reads
from tfcheck.model.build.recording_config import AttrDict, RecordingConfig, to_config_object
from tfcheck.model.build.script_configs import script_configs
from tfcheck.model.build.small_sizes import SMALL_VALUES, is_unset, plan, quantity
from tfcheck.model.build.user_code import user_code

#: A required field (no default).
REQUIRED = inspect.Parameter.empty
#: Modules whose classes are never a model's config (an annotation ``cfg: dict`` says nothing of the fields).
_NOT_CONFIG_MODULES = ("builtins", "typing", "collections", "types", "argparse", "torch", "numpy")


#: ``record(recorder)`` builds the model once with the recording config (its other arguments filled) and
#: returns the exception it raised, or None.
Recorder = Callable[[RecordingConfig], BaseException | None]


def is_config_param(origin: Any, param: inspect.Parameter) -> bool:
    if param.name in names.CONFIG_PARAMS or dataclasses.is_dataclass(annotation_class(origin, param)):
        return True
    return param.annotation is param.empty and options_namespace(origin, param.name)


def options_namespace(origin: Any, param: str) -> bool:
    """Whether the constructor only reads attributes of ``param`` (``hp.d_model``, ``self.hp = hp``), two of them
    hyper-parameters at least, whatever its name: an options namespace, given a recording config like ``args``.
    One size read on an object (``tokenizer.vocab_size``) is no namespace: that object is the user's to give."""
    reads = namespace_reads(origin, param)
    return reads is not None and sum(quantity(r, reads) is not None for r in reads) >= 2


def config_for(origin: Any, param: inspect.Parameter, given: Mapping[str, Any] | None, shrink: bool,
               record: Recorder, spec: str) -> ConfigSource:
    """The config source for ``param`` (``given``: the dict the user gave for it in kwargs, merged over the
    small values). Raises SpecError naming the field and the declaration that supplies it when the constructor
    hard-reads a switch no config found has."""
    given = dict(given or {})
    hf_class = getattr(origin, "config_class", None)
    if inspect.isclass(hf_class):
        return hugging_face_source(origin, hf_class, given, shrink)
    annotated = annotation_class(origin, param)
    if annotated is not None:
        source = class_source(annotated, given, shrink, f"{annotated.__name__} (the annotation of {param.name})")
        if source is not None:
            return source
    recorder = RecordingConfig(given)
    error = record(recorder)
    missed = recorder.hard_miss(error) if error is not None else None
    needed = set(recorder.read) | ({missed} if missed else set())
    module = sys.modules.get(getattr(origin, "__module__", None) or "")
    if needed and module is not None:
        for source in (_covering_class(module, needed, given, shrink), _default_config(origin, given, shrink),
                       _module_level(module, needed, given, shrink), _script_level(module, needed, given, shrink),
                       _kwargs_class(module, needed, given, shrink)):
            if source is not None:
                return source
    elif needed:
        source = _default_config(origin, given, shrink)
        if source is not None:
            return source
    if missed is not None:
        raise SpecError(missing_field_message(origin, spec, param.name, missed, recorder, error, given))
    built = recorder.as_built()
    return ConfigSource(f"a config of the names {param.name} read (tfcheck's small values)",
                        lambda: copy.deepcopy(built), filled={k: v for k, v in recorder.read.items() if k not in given})


def annotation_class(origin: Any, param: inspect.Parameter) -> Any | None:
    """The class a config parameter is annotated with (a postponed string annotation looked up in the module
    that defines ``origin``); None for none, or for a builtin or typing annotation (``cfg: dict``)."""
    ann = param.annotation
    if ann is param.empty:  # inspect's marker class for "no annotation", never a config
        return None
    if isinstance(ann, str):
        module = sys.modules.get(getattr(origin, "__module__", None) or "")
        obj: Any = module
        for part in ann.split("."):
            obj = getattr(obj, part, None) if obj is not None else None
        ann = obj
    if not inspect.isclass(ann) or (ann.__module__ or "").split(".")[0] in _NOT_CONFIG_MODULES:
        return None
    return ann


def class_fields(cls: type) -> tuple[dict[str, Any], bool] | None:
    """A config class's fields (name -> default, REQUIRED when it has none) and whether it takes ``**kwargs``;
    class attributes count as fields with their value as default. None when its signature cannot be read."""
    fields: dict[str, Any] = {}
    takes_kwargs = False
    if dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if f.init:
                fields[f.name] = f.default if f.default is not dataclasses.MISSING else (
                    f.default_factory() if f.default_factory is not dataclasses.MISSING else REQUIRED)
    else:
        try:
            sig = inspect.signature(cls)
        except (TypeError, ValueError):
            return None
        for p in sig.parameters.values():
            if p.kind is p.VAR_KEYWORD:
                takes_kwargs = True
            elif p.kind is not p.VAR_POSITIONAL:
                fields[p.name] = p.default
    for attr in dir(cls):
        if attr.startswith("_") or attr in fields:
            continue
        value = inspect.getattr_static(cls, attr, None)
        if value is None or isinstance(value, (int, float, str, bool)):
            fields[attr] = value
    return fields, takes_kwargs


def class_source(cls: type, given: Mapping[str, Any], shrink: bool, where: str) -> ConfigSource | None:
    """A config class built with its hyper-parameter defaults shrunk (required ones filled) and the user's keys;
    None when it requires a field that is no hyper-parameter and the user did not give."""
    found = class_fields(cls)
    if found is None:
        return None
    fields, takes_kwargs = found
    required = [n for n, d in fields.items() if d is REQUIRED and n not in given]
    if any(quantity(n, fields) is None for n in required):
        return None
    values = {n: (None if d is REQUIRED else d) for n, d in fields.items() if quantity(n, fields) is not None}
    values.update({k: v for k, v in given.items() if quantity(k, fields) is not None})
    changes = plan(values, [n for n in values if n not in given], shrink)
    changes.update({n: SMALL_VALUES.get(n, changes.get(n)) for n in required if changes.get(n) is None})
    init_names = set(_init_params(cls))
    settings = {**changes, **{k: to_config_object(v) for k, v in given.items()}}
    at_init = {k: v for k, v in settings.items() if k in init_names or takes_kwargs}
    after = {k: v for k, v in settings.items() if k not in at_init}

    def make() -> Any:
        config = cls(**copy.deepcopy(at_init))
        apply(config, copy.deepcopy(after))
        return config

    return _source(where, make, values, changes, required)


def _init_params(cls: type) -> list[str]:
    try:
        return [p.name for p in inspect.signature(cls).parameters.values()
                if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    except (TypeError, ValueError):
        return []


def _source(where: str, make: Callable[[], Any], values: Mapping[str, Any], changes: Mapping[str, Any],
            required: list[str]) -> ConfigSource:
    filled = {n: v for n, v in changes.items() if n in required or is_unset(values.get(n), quantity(n, values))}
    shrunk = {n: (values[n], v) for n, v in changes.items() if n not in filled}
    return ConfigSource(where, make, filled, shrunk)


def apply(config: Any, settings: Mapping[str, Any]) -> None:
    """Set fields of a config: keys of a mapping, attributes of anything else."""
    for k, v in settings.items():
        if isinstance(config, Mapping):
            config[k] = v  # type: ignore[index]
        else:
            setattr(config, k, v)


def _covers(fields: Mapping[str, Any], takes_kwargs: bool, needed: set[str]) -> int:
    """How many of the names read are explicit fields (0 when one is neither a field nor, for a class taking
    **kwargs, a hyper-parameter it would be given)."""
    explicit = needed & set(fields)
    rest = needed - explicit
    if rest and not (takes_kwargs and all(quantity(n, needed) is not None for n in rest)):
        return 0
    return len(explicit)


def _module_classes(module: Any) -> list[type]:
    import torch.nn as nn

    out = []
    for name, value in vars(module).items():
        if name.startswith("_") or not inspect.isclass(value) or issubclass(value, nn.Module):
            continue
        if (value.__module__ or "").split(".")[0] in _NOT_CONFIG_MODULES:
            continue
        out.append(value)
    # Classes defined in the module first, then the imported ones, each in the order the module has them.
    return sorted(out, key=lambda c: c.__module__ != module.__name__)


def _covering_class(module: Any, needed: set[str], given: Mapping[str, Any], shrink: bool) -> ConfigSource | None:
    """The class whose explicit fields cover most of what the constructor reads (all of it, one field at least)."""
    scored = []
    for order, cls in enumerate(_module_classes(module)):
        found = class_fields(cls)
        score = _covers(*found, needed) if found is not None else 0
        if score:
            scored.append((-score, order, cls))
    for _, _, cls in sorted(scored, key=lambda s: s[:2]):
        source = class_source(cls, given, shrink, f"{cls.__name__} (a config class in {_module_label(module)} "
                              "with the fields the constructor reads)")
        if source is not None:
            return source
    return None


def _kwargs_class(module: Any, needed: set[str], given: Mapping[str, Any], shrink: bool) -> ConfigSource | None:
    """A config class taking only **kwargs (a CfgNode): given every hyper-parameter the constructor read."""
    if not all(quantity(n, needed) is not None for n in needed):
        return None
    for cls in _module_classes(module):
        found = class_fields(cls)
        if found is None or not found[1] or any(d is REQUIRED for d in found[0].values()):
            continue
        values = dict.fromkeys(needed)
        values.update({k: v for k, v in given.items()})
        changes = plan(values, [n for n in needed if n not in given], shrink)
        settings = {**changes, **{k: to_config_object(v) for k, v in given.items()}}

        def make(cls: type = cls, settings: dict[str, Any] = settings) -> Any:
            return cls(**copy.deepcopy(settings))

        return _source(f"{cls.__name__}(**kwargs) (a config class in {_module_label(module)})", make, values, changes,
                       list(needed))
    return None


def _default_config(origin: Any, given: Mapping[str, Any], shrink: bool) -> ConfigSource | None:
    """The model's own get_default_config(): unset sizes filled, large ones shrunk, and a size preset cleared
    when tfcheck states the sizes (minGPT asserts a model_type or the sizes, not both)."""
    getter = getattr(origin, "get_default_config", None) if inspect.isclass(origin) else None
    if not callable(getter):
        return None
    try:
        with user_code():  # a getter that calls sys.exit is the user's code stopping, caught as a failure
            probe = getter()
    except Exception:  # noqa: BLE001 - a getter that needs arguments or fails is no default config
        return None
    fields = _instance_fields(probe)
    if fields is None:
        return None
    values = {n: v for n, v in fields.items() if quantity(n, fields) is not None}
    values.update({k: v for k, v in given.items() if quantity(k, fields) is not None})
    changes = plan(values, [n for n in values if n not in given], shrink)
    settings = {**changes, **{k: to_config_object(v) for k, v in given.items()}}
    if any(quantity(n, fields) for n in settings):
        settings.update({p: None for p in names.SIZE_PRESETS if fields.get(p) is not None and p not in given})

    def make() -> Any:
        config = getter()
        apply(config, copy.deepcopy(settings))
        return config

    return _source(f"{getattr(origin, '__name__', origin)}.get_default_config()", make, values, changes, [])


def _instance_fields(obj: Any) -> dict[str, Any] | None:
    if isinstance(obj, Mapping):
        return {k: v for k, v in obj.items() if isinstance(k, str)}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    own = getattr(obj, "__dict__", None)
    if not isinstance(own, dict):
        return None
    cls_attrs = {a: inspect.getattr_static(type(obj), a) for a in dir(type(obj)) if not a.startswith("_")}
    return {**{a: v for a, v in cls_attrs.items() if v is None or isinstance(v, (int, float, str, bool))}, **own}


def _module_level(module: Any, needed: set[str], given: Mapping[str, Any], shrink: bool) -> ConfigSource | None:
    """A config dict or instance at module level with every name the constructor reads (a book's
    GPT_CONFIG_124M = {...}): copied per build, its sizes shrunk, its switches kept as written."""
    import torch.nn as nn

    for name, value in vars(module).items():
        if name.startswith("_") or inspect.isclass(value) or inspect.ismodule(value) or callable(value) or \
                isinstance(value, nn.Module):
            continue
        fields = _instance_fields(value)
        if fields and needed <= set(fields):
            return _instance_source(f"{name} (a module-level config in {_module_label(module)})",
                                    functools.partial(copy.deepcopy, value), fields, given, shrink)
    return None


def _script_level(module: Any, needed: set[str], given: Mapping[str, Any], shrink: bool) -> ConfigSource | None:
    """A config literal in the module's __main__ block or a module-level function with every name the constructor
    reads, read from the source without running it (tfcheck.model.build.script_configs), then as a module-level
    config: its sizes shrunk, its switches kept as written."""
    for found in script_configs(module):
        if needed <= set(found.fields):
            where = (f"{found.name} (a config in {found.scope} of {_module_label(module)}:{found.line}, read from "
                     "the source without running it)")
            return _instance_source(where, found.make, found.fields, given, shrink)
    return None


def _instance_source(where: str, fresh: Callable[[], Any], fields: Mapping[str, Any], given: Mapping[str, Any],
                     shrink: bool) -> ConfigSource:
    """A config instance (``fresh()`` makes a copy of it, ``fields`` are its fields) with its sizes shrunk, its
    unset ones filled and the user's keys set."""
    values = {n: v for n, v in fields.items() if quantity(n, fields) is not None}
    values.update({k: v for k, v in given.items() if quantity(k, fields) is not None})
    changes = plan(values, [n for n in values if n not in given], shrink)
    settings = {**changes, **{k: to_config_object(v) for k, v in given.items()}}

    def make() -> Any:
        config = fresh()
        apply(config, copy.deepcopy(settings))
        return config

    return _source(where, make, values, changes, [])


def _module_label(module: Any) -> str:
    file = getattr(module, "__file__", None)
    return str(file).replace("\\", "/").rsplit("/", 1)[-1] if file else str(module.__name__)


def missing_field_message(origin: Any, spec: str, param: str, missed: str, recorder: RecordingConfig,
                          error: BaseException | None, given: Mapping[str, Any]) -> str:
    """The constructor hard-read a field that is no hyper-parameter, and no config was found: name it, where,
    and the one declaration (or the factory) that supplies it."""
    from tfcheck.frames import innermost_user_frame, short_path

    frame = innermost_user_frame(error) if error is not None else None
    where = f" ({short_path(frame.filename)}:{frame.lineno})" if frame is not None else ""
    read = f'{param}["{missed}"]' if isinstance(error, KeyError) else f"{param}.{missed}"
    hint = {**given, missed: "VALUE"}
    hint_text = "{" + ", ".join(f'"{k}": {"VALUE" if k == missed else _json(v)}' for k, v in hint.items()) + "}"
    fields = {**recorder.read, **given, missed: "VALUE"}
    name = getattr(origin, "__name__", "Model")
    listed = ", ".join(f'"{k}": {"VALUE" if k == missed else repr(v)}' for k, v in fields.items())
    if isinstance(error, KeyError):  # read by key: a dict is the config
        factory = f"def make_model():\n        return {name}({{{listed}}})"
    else:
        keywords = ", ".join(f"{k}={'VALUE' if k == missed else repr(v)}" for k, v in fields.items())
        factory = (f"from types import SimpleNamespace\n    def make_model():\n        return "
                   f"{name}(SimpleNamespace({keywords}))")
    return (f"constructing {spec} reads {read}{where}, and no config tfcheck found has it (it looked for the "
            f"annotation of {param!r}, a config class in the module whose fields cover what the constructor reads, "
            "a get_default_config() method, a module-level config and a config literal in the __main__ block or a "
            "module-level function). tfcheck fills only sizes, counts, dropout rates and special ids, never a "
            "switch, so say its value with the 'kwargs' declaration (its keys are "
            f"merged over the small sizes): --set 'kwargs={{\"{param}\": {hint_text}}}' with VALUE the value the "
            f"model is meant to have (true / false, a number or a \"string\"); or point the spec at a factory:\n"
            f"    {factory}")


def _json(value: Any) -> str:
    import json

    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return json.dumps(repr(value))


__all__ = ["AttrDict", "ConfigSource", "REQUIRED", "annotation_class", "apply", "class_fields", "class_source",
           "config_for", "is_config_param", "missing_field_message", "options_namespace"]
