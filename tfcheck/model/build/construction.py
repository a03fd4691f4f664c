"""Constructing the model a spec names: its arguments filled (hyper-parameter names, a config from wherever the
model keeps one, the run's device), large defaults shrunk with their invariants kept, a build too large for
memory refused, and a constructor that refuses the small config retried without tfcheck's own choices in it
(tfcheck.model.build.small_retries: its dropout rates, a width beside the small d_model, a sub-config made small), then
built at its defaults. Its error names the config fields it read that the config leaves unset
(tfcheck.model.build.config_reads).

Every build draws fresh arguments (``Arguments.make``): a constructor that mutates its config gets its own for
the size guard's meta build and for the real one. Models are built from a fixed seed (``built_seeded``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tfcheck.errors import SpecError
from tfcheck.frames import innermost_user_frame
from tfcheck.model.build.config_reads import declaration_hint, unset_reads
from tfcheck.model.build.configs import ConfigSource, config_for, is_config_param
from tfcheck.model.build.construction_sites import ConstructionSites, watched_build
from tfcheck.model.build.loaded import Loaded
from tfcheck.model.build.recording_config import RecordingConfig
from tfcheck.model.build.sizing import AllocationOverBudget, allocation_limit
from tfcheck.model.build.small_sizes import SMALL_VALUES, changes_text, plan, quantity, small_value
from tfcheck.model.build.user_code import UserExit, user_code

#: The seed of every model tfcheck builds itself (from a spec, a class or a factory).
BUILD_SEED = 0
#: Constructor parameters that take the device to build on: given the run's device, so that plain tensor
#: attributes (which ``.to()`` does not move) are made there.
DEVICE_PARAMS = ("device",)


@dataclass
class Arguments:
    """The constructor arguments tfcheck gives: plain values, and a config source per config parameter."""

    values: dict[str, Any] = field(default_factory=dict)
    configs: dict[str, ConfigSource] = field(default_factory=dict)
    filled: dict[str, Any] = field(default_factory=dict)
    shrunk: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    def make(self) -> dict[str, Any]:
        """Fresh arguments for one build (a new config object each time)."""
        return {**self.values, **{name: source.make() for name, source in self.configs.items()}}

    @property
    def all_shrunk(self) -> dict[str, tuple[Any, Any]]:
        return {**self.shrunk, **{k: v for s in self.configs.values() for k, v in s.shrunk.items()}}

    @property
    def config_filled(self) -> dict[str, Any]:
        return {k: v for s in self.configs.values() for k, v in s.filled.items()}


def plan_arguments(origin: Any, kwargs: Mapping[str, Any], spec: str, shrink: bool = True,
                   device: str | None = None) -> Arguments:
    """The arguments to build ``origin`` with: the user's ``kwargs`` kept as given; required hyper-parameters
    filled; large hyper-parameter defaults shrunk (``shrink``); configs sourced; a SpecError naming what
    cannot be guessed."""
    out = Arguments()
    try:
        sig = inspect.signature(origin)
    except (TypeError, ValueError):
        out.values = dict(kwargs)
        return out
    params = [p for p in sig.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    every = [p.name for p in params]
    values: dict[str, Any] = {}
    changeable, required, missing, config_params = [], [], [], []
    for p in params:
        q = quantity(p.name, every)
        if p.name in kwargs:
            if q is not None:
                values[p.name] = kwargs[p.name]
            elif isinstance(kwargs[p.name], Mapping) and is_config_param(origin, p):
                config_params.append(p)  # a dict for a config becomes the config object the model expects
            continue
        if p.default is p.empty:
            if p.name in DEVICE_PARAMS:
                out.values[p.name] = out.filled[p.name] = device or "cpu"
            elif q is not None:
                values[p.name] = None
                changeable.append(p.name)
                required.append(p.name)
            elif is_config_param(origin, p):
                config_params.append(p)
            else:
                missing.append(p.name)
        elif q is not None and (isinstance(p.default, int) and not isinstance(p.default, bool)):
            values[p.name] = p.default
            changeable.append(p.name)
    if missing:
        raise SpecError(_missing_message(spec, missing))
    changes = plan(values, changeable, shrink)
    for name in required:  # e.g. a required kv-head count, which plan leaves as written when unset
        changes.setdefault(name, SMALL_VALUES.get(name, small_value(name, every)))
    for name, value in changes.items():
        out.values[name] = value
        if name in required:
            out.filled[name] = value
        else:
            out.shrunk[name] = (values[name], value)
    given = {k: v for k, v in kwargs.items() if not any(k == p.name for p in config_params) or
             not isinstance(v, Mapping)}
    out.values.update(given)
    for p in config_params:
        user = kwargs.get(p.name)
        if user is not None and not isinstance(user, Mapping):
            out.values[p.name] = user
            continue

        def record(recorder: RecordingConfig, p: inspect.Parameter = p) -> BaseException | None:
            return _recording_pass(origin, {**out.make(), p.name: recorder})

        out.configs[p.name] = config_for(origin, p, user, shrink, record, spec)
        out.filled[p.name] = None  # the config object of the last build (set by build)
    return out


def _recording_pass(origin: Any, arguments: dict[str, Any]) -> BaseException | None:
    """Build once with the recording config: on the meta device first (nothing allocated); again on the CPU when
    the meta build failed for another reason than a missing field (some constructors cannot run on meta)."""
    import torch

    from tfcheck.model.build.meta_build import MetaBuild

    recorder = next(v for v in arguments.values() if isinstance(v, RecordingConfig))
    for on_meta in (True, False):
        try:
            with (torch.device("meta") if on_meta else torch.device("cpu")), \
                    (MetaBuild() if on_meta else contextlib.nullcontext()), user_code():
                origin(**arguments)
        except Exception as exc:  # noqa: BLE001 - what it raised is what the recording found
            if recorder.hard_miss(exc) is not None or not on_meta:
                return exc
            continue
        return None
    return None


def build(origin: Any, spec: str, kwargs: Mapping[str, Any], shrink: bool = True, device: str | None = None) -> Loaded:
    """Construct the model; every failure is a SpecError that says what to do."""
    import torch.nn as nn

    kwargs = dict(kwargs)
    if isinstance(origin, nn.Module):
        if kwargs:
            raise SpecError(f"{spec} names a module instance; constructor arguments (kwargs) cannot apply to it.")
        return Loaded(origin, spec, origin, {}, constructed=False)
    if not callable(origin):
        raise SpecError(
            f"{spec} is a {type(origin).__name__}, not an nn.Module subclass, a factory returning one, or a "
            "module instance."
        )
    arguments = plan_arguments(origin, kwargs, spec, shrink, device)
    constraint = None
    try:
        model, given, sites = _construct(origin, arguments, spec)
    except _Refused as refused:
        retried = _retried(origin, arguments, spec, refused)
        if retried is not None:
            model, given, sites, arguments = retried
        elif not arguments.all_shrunk:
            raise refused.error from None
        else:
            # The constructor refused the shrunk sizes: a size constraint of the model, so build it as written.
            defaults = plan_arguments(origin, kwargs, spec, False, device)
            try:
                model, given, sites = _construct(origin, defaults, spec)
            except _Refused:
                raise refused.error from None
            constraint = (f"{changes_text(arguments.all_shrunk)} refused: {refused.what}{refused.where}; built at "
                          "the defaults")
            arguments = defaults
    filled = {k: given[k] if k in arguments.configs else v for k, v in arguments.filled.items()}
    return Loaded(model, spec, origin, filled, shrunk=arguments.all_shrunk, config_filled=arguments.config_filled,
                  config_sources={k: s.where for k, s in arguments.configs.items()}, kwargs=kwargs, shrink=shrink,
                  device=device, size_constraint=constraint, sites=sites, rebuild=_rebuilder(origin, arguments))


def _rebuilder(origin: Any, arguments: Arguments) -> Callable[[], Any]:
    def rebuild() -> Any:
        with user_code():
            return origin(**arguments.make())
    return rebuild


def _retried(origin: Any, arguments: Arguments, spec: str,
             refused: _Refused) -> tuple[Any, dict[str, Any], ConstructionSites, Arguments] | None:
    """The model built from a config with some of tfcheck's choices given up (ConfigSource.retries), its source
    saying what and why; None when every retry is refused too."""
    for name, source in arguments.configs.items():
        for retry in source.retries:
            why = f" (the constructor refused tfcheck's first choice: {refused.what}{refused.where}{refused.hint})"
            configs = {**arguments.configs, name: dataclasses.replace(retry, where=retry.where + why)}
            candidate = dataclasses.replace(arguments, configs=configs)
            try:
                model, given, sites = _construct(origin, candidate, spec)
            except (_Refused, SpecError):
                continue
            return model, given, sites, candidate
    return None


class _Refused(Exception):
    """The constructor raised: the SpecError to report, and what raised where (for a size constraint)."""

    def __init__(self, error: SpecError, what: str, where: str, hint: str = ""):
        super().__init__(str(error))
        self.error, self.what, self.where, self.hint = error, what, where, hint


def _construct(origin: Any, arguments: Arguments, spec: str) -> tuple[Any, dict[str, Any], ConstructionSites]:
    import torch.nn as nn

    def make() -> dict[str, Any]:
        # A config class's own __init__ / __post_init__ runs here: it may refuse the small sizes too.
        try:
            with user_code():
                return arguments.make()
        except UserExit as exc:
            raise SpecError(f"building the config for {spec} stopped: {exc}") from None
        except Exception as exc:
            where = user_frame(exc)
            error = SpecError(f"building the config for {spec} raised {type(exc).__name__}: {exc}{where}. Give its "
                              "fields with the 'kwargs' declaration (e.g. kwargs='{\"config\": {\"n_embd\": 64}}'), "
                              "or point the spec at a factory function that builds the model.")
            raise _Refused(error, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__, where) from None

    unmeasured_budget = refuse_if_too_large(origin, make, spec)
    given = make()
    try:
        with user_code(), _counted(unmeasured_budget), watched_build() as sites_of:
            model = origin(**given)
    except AllocationOverBudget as over:
        raise SpecError(
            f"building {spec}({fmt_args(given)}) was stopped before it allocated more than tfcheck allows: {over} "
            "(its constructor cannot run on the meta device, so its allocations were counted as it built). Give "
            "smaller sizes with the 'kwargs' declaration (e.g. kwargs='{\"num_layers\": 2, \"d_model\": 64}')."
        ) from None
    except UserExit as exc:
        raise SpecError(f"constructing {spec} stopped: {exc}") from None
    except Exception as exc:
        where = user_frame(exc)
        hint = declaration_hint(unset_reads(exc, given)) or refused_choice_hint(exc, arguments)
        error = SpecError(
            f"constructing {spec}({fmt_args(given)}) raised {type(exc).__name__}: {exc}{where}." + (hint or
            " Give the constructor arguments it needs with the 'kwargs' declaration, e.g. "
            "kwargs='{\"vocab_size\": 1000}' (tfcheck check --set, pytest --tfcheck-set), or point the spec at "
            "a factory function that builds the model."))
        raise _Refused(error, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__, where,
                       hint) from None
    if not isinstance(model, nn.Module):
        raise SpecError(
            f"{spec} returned a {type(model).__name__}, not an nn.Module. Point the spec at the model class "
            "or a factory that returns the model."
        )
    return model, given, sites_of(model)


def refused_choice_hint(exc: BaseException, arguments: Arguments) -> str:
    """The sentence that names the values tfcheck chose (filled or shrunk) which the error message names, in the
    order it names them (a type check refusing ``depth=2`` where a tuple is wanted, ``dim`` not divisible by
    ``heads``), and the kwargs declaration that overrides them; "" when it names none."""
    import re

    chosen = {**arguments.filled, **{k: small for k, (_, small) in arguments.shrunk.items()}}
    text = str(exc)
    named = sorted((m.start(), name) for name in chosen if (m := re.search(rf"\b{re.escape(name)}\b", text)))
    if not named:
        return ""
    names = [name for _, name in named[:3]]
    declared = ", ".join(f'"{name}": VALUE' for name in names)
    return (f" tfcheck chose {', '.join(f'{n}={chosen[n]!r}' for n in names)} and the constructor refused "
            f"{'it' if len(names) == 1 else 'them'}: give the values it takes with --set 'kwargs={{{declared}}}' "
            "(tfcheck check; pytest --tfcheck-set), or point the spec at a factory function that builds the model.")


def _counted(budget: int | None) -> Any:
    """The allocation counter of a build the meta count could not measure, or nothing."""
    import contextlib

    return contextlib.nullcontext() if budget is None else allocation_limit(budget)


def refuse_if_too_large(origin: Any, make_arguments: Callable[[], dict[str, Any]], spec: str) -> int | None:
    """Count the parameters on the meta device first: a default config of billions is never allocated. When the
    constructor cannot run on meta, the budget its real build must be counted against (None: nothing to count)."""
    import torch

    from tfcheck.model.build.memory_limits import memory_limit
    from tfcheck.model.build.sizing import MEMORY_SHARE, human, meta_parameter_bytes

    if torch.get_default_device().type == "meta":
        return None  # already building on meta: nothing will be allocated
    # The machine's limits, not the memory free now: the same model is refused or built in every process.
    limit = memory_limit()
    budget = int(limit.bytes * MEMORY_SHARE)
    arguments = make_arguments()
    measured = meta_parameter_bytes(lambda: origin(**arguments))
    if measured is None:
        return budget
    count, size, estimate = measured
    if size <= budget:
        return None
    about = " (an estimate: the constructor read tensor values, which the count answers with 0)" if estimate else ""
    raise SpecError(
        f"building {spec}({fmt_args(arguments)}) would allocate {human(size)} of parameters ({count:,}){about}; "
        f"tfcheck allows {human(budget)} ({int(MEMORY_SHARE * 100)}% of the {limit.source}). Give smaller "
        "sizes with the 'kwargs' declaration (e.g. kwargs='{\"num_layers\": 2, \"d_model\": 64}'), or trace it "
        "without allocating: tfcheck trace SPEC --meta.")


def built_seeded(origin: Any, spec: str, kwargs: Mapping[str, Any], shrink: bool = True,
                 device: str | None = None) -> Loaded:
    """Build the model from a fixed seed, in a fork of the random generators: every process (each pytest-xdist
    worker, a rerun) checks the same weights, and the caller's generators are left as they were."""
    import random

    import numpy as np
    import torch

    # Constructors draw from Python's and NumPy's generators too: fork and seed those as well.
    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        random.seed(BUILD_SEED)
        np.random.seed(BUILD_SEED)
        with torch.random.fork_rng(devices=[]):
            torch.random.default_generator.manual_seed(BUILD_SEED)  # the CPU's only: see the engine's seeding
            return build(origin, spec, kwargs, shrink, device)
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def rebuild_at_defaults(loaded: Loaded) -> Loaded:
    """The same model built as written (shrink=false, the user's kwargs kept), from the same seed: the fallback
    when the shrunk model fails where the default-size one would not."""
    if not loaded.constructed:
        return loaded
    return built_seeded(loaded.origin, loaded.spec, loaded.kwargs, shrink=False, device=loaded.device)


def _missing_message(spec: str, missing: list[str]) -> str:
    return (f"constructing {spec} needs argument(s) {', '.join(missing)} that tfcheck cannot guess (it fills the "
            f"usual hyper-parameter names such as vocab_size, d_model, num_heads, and names like n_src_vocab, "
            f"ffn_hidden, drop_prob, trg_pad_idx). Give them with the 'kwargs' declaration, e.g. "
            f"--set 'kwargs={{\"{missing[0]}\": ...}}' (tfcheck check --set, pytest --tfcheck-set), or point the "
            f"spec at a factory that takes no arguments, e.g.\n    def make_model():\n        return "
            f"{spec.rpartition(':')[2]}({', '.join(f'{m}=...' for m in missing)})")


def user_frame(exc: BaseException) -> str:
    """`` (file:line)`` of the user's innermost frame in ``exc``'s traceback, or ``""``."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" ({exc.filename}:{exc.lineno})"
    frame = innermost_user_frame(exc)
    return f" ({frame.filename}:{frame.lineno})" if frame is not None else ""


def fmt_args(args: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={_short(v)}" for k, v in args.items())


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else type(v).__name__ + "(...)"


__all__ = ["Arguments", "BUILD_SEED", "DEVICE_PARAMS", "build", "built_seeded", "fmt_args", "plan_arguments",
           "rebuild_at_defaults", "refuse_if_too_large", "user_frame"]
