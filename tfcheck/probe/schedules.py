"""Learning-rate schedules for the training checks: where the schedule comes from (a declared factory or
the model's own ``configure_optimizers``), its curve stepped on a throwaway optimizer, and the curve shown
as a sparkline or an SVG."""
from __future__ import annotations

import copy
import functools
import inspect
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tfcheck.frames import innermost_user_frame, is_user_frame
from tfcheck.model.build import names
from tfcheck.model.build.recording_config import AttrDict
from tfcheck.model.build.user_code import user_code

#: Base rate given to a ``fn(optimizer) -> scheduler`` factory when ``lr`` is not declared: with 1.0 a
#: LambdaLR that returns absolute rates (the Noam formula) yields those rates, and a multiplier schedule
#: yields its multiplier.
DEFAULT_BASE_LR = 1.0
#: Steps a schedule is stepped over when ``total_steps`` is not declared (3 x warmup_steps if larger).
DEFAULT_PLANNED_STEPS = 10_000
#: Most steps a schedule is ever stepped over (a scheduler step costs microseconds, not a model pass).
MAX_PLANNED_STEPS = 100_000
SPARK_BLOCKS = "▁▂▃▄▅▆▇█"


# ----- learning-rate schedules ------------------------------------------------------------------------

@dataclass
class Schedule:
    """Where the schedule comes from and how to build (optimizer, scheduler) from it."""

    build: Callable[[], tuple[Any, Any]]
    source: str
    #: the base rate is the user's own (declared lr, or an optimizer the user built): rates are absolute
    absolute: bool
    base_lr: float | None
    base_source: str
    #: the user's function that makes the schedule (the factory, or configure_optimizers)
    function: Callable | None = None


@dataclass
class Curve:
    rates: list[float]
    schedule: Schedule
    planned: int
    planned_source: str
    error: str | None = None  # the exception that ended stepping
    error_step: int | None = None
    limitation: str | None = None  # why tfcheck could not build the schedule (its own limit, not the model's bug)
    error_at: tuple[str, int] | None = None  # the user's innermost line in the exception's traceback
    rate_function: Callable | None = None  # the function giving each step's rate (a LambdaLR's lambda)

    @property
    def peak_step(self) -> int:
        top = max(self.rates)
        return next(i for i, r in enumerate(self.rates) if r >= top * (1 - 1e-9))


DECLARE_SCHEDULE = ("declare the schedule: schedule=mytrain:make_scheduler, a factory fn(optimizer) -> scheduler "
                    "or fn(params) -> (optimizer, scheduler) (tfcheck check --set, pytest --tfcheck-set, "
                    "__tfcheck__ or pyproject)")


def find_schedule(subject) -> Schedule | None:
    """The declared schedule, or the model's configure_optimizers method; None when there is neither."""
    factory = subject.facts.schedule
    if callable(factory):
        return _from_factory(subject, factory)
    method = getattr(subject.model, "configure_optimizers", None)
    if callable(method):
        return _from_configure_optimizers(subject)
    return None


def _from_factory(subject, factory: Callable) -> Schedule:
    takes = _first_parameter(factory)
    declared_lr = subject.facts.lr
    if takes in ("model", "module", "net"):
        return Schedule(lambda: _unpack(factory(copy.deepcopy(subject.model))), f"schedule {_name(factory)}(model)",
                        True, None, "the optimizer the factory builds", factory)
    if takes is not None and "param" in takes:
        return Schedule(lambda: _unpack(factory([torch.zeros(1, requires_grad=True)])),
                        f"schedule {_name(factory)}(params)", True, None, "the optimizer the factory builds", factory)
    base = declared_lr if declared_lr is not None else DEFAULT_BASE_LR
    where = "lr declaration" if declared_lr is not None else (
        f"default {DEFAULT_BASE_LR} for fn(optimizer) factories (declare lr=FLOAT for the real base rate)")

    def build():
        optimizer = torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=base)
        return optimizer, factory(optimizer)
    return Schedule(build, f"schedule {_name(factory)}(optimizer)", declared_lr is not None, base, where, factory)


class CannotCall(Exception):
    """tfcheck cannot call the model's schedule factory as it is written: a limitation of tfcheck, never the
    model's bug (the check that needs it is inconclusive and says what to declare)."""


def _is_config_parameter(name: str) -> bool:
    """minGPT's configure_optimizers(train_config), Lightning-style (config / cfg / args / hparams)."""
    return name in names.CONFIG_PARAMS or name.endswith(("config", "cfg", "_args", "hparams"))


def _from_configure_optimizers(subject) -> Schedule:
    def build():
        clone = copy.deepcopy(subject.model)
        method = clone.configure_optimizers
        fill: dict[str, Any] = {"weight_decay": 0.0, "learning_rate": subject.facts.lr or 1e-3,
                                "lr": subject.facts.lr or 1e-3, "betas": (0.9, 0.95),
                                "device_type": subject.device.type, "device": subject.device}
        params = inspect.signature(method).parameters
        # A training config gets the same settings by attribute or key (minGPT reads train_config.learning_rate,
        # .betas, .weight_decay); any other field it reads raises, as a config lacking it would.
        fill.update({n: AttrDict(fill) for n in params if n not in fill and _is_config_parameter(n)})
        missing = [n for n, p in params.items() if p.default is p.empty and n not in fill
                   and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if missing:
            raise CannotCall(f"configure_optimizers needs {', '.join(missing)}, which tfcheck cannot fill; "
                             + DECLARE_SCHEDULE)
        return _unpack(method(**{n: fill[n] for n in params if n in fill}))
    return Schedule(build, "the model's configure_optimizers()", True, None, "the optimizer it builds",
                    getattr(type(subject.model), "configure_optimizers", None))


def _unpack(result: Any) -> tuple[Any, Any]:
    """(optimizer, scheduler) from the shapes factories return: a scheduler, (optimizer, scheduler), a
    Lightning-style dict or ([optimizers], [schedulers]), or an optimizer alone (a constant rate)."""
    if isinstance(result, dict):
        sched = result.get("lr_scheduler") or result.get("scheduler")
        sched = sched.get("scheduler") if isinstance(sched, dict) else sched
        return result.get("optimizer") or getattr(sched, "optimizer", None), sched
    if isinstance(result, (tuple, list)) and len(result) == 2:
        opt, sched = result
        opt = opt[0] if isinstance(opt, (list, tuple)) else opt
        sched = sched[0] if isinstance(sched, (list, tuple)) and sched else sched
        return opt, (sched.get("scheduler") if isinstance(sched, dict) else sched)
    if isinstance(result, torch.optim.Optimizer):
        return result, None
    return getattr(result, "optimizer", None), result


def planned_steps(subject) -> tuple[int, str]:
    total = subject.facts.total_steps
    if total:
        return min(int(total), MAX_PLANNED_STEPS), "total_steps declaration"
    warmup = subject.facts.warmup_steps or 0
    steps = min(max(DEFAULT_PLANNED_STEPS, 3 * warmup), MAX_PLANNED_STEPS)
    return steps, f"default {steps} (declare total_steps=INT for the planned run)"


def lr_curve(subject, schedule: Schedule, steps: int | None = None) -> Curve:
    """The rate each optimizer step would use, over the planned steps: the scheduler stepped alone (no
    model, no optimizer step), so the cost is microseconds a step. An exception ends the curve there."""
    planned, source = (steps, "given") if steps is not None else planned_steps(subject)
    curve = Curve([], schedule, planned, source)
    with warnings.catch_warnings():
        # "lr_scheduler.step() before optimizer.step()": no optimizer step is taken here on purpose.
        warnings.simplefilter("ignore")
        try:
            with user_code():
                optimizer, scheduler = schedule.build()
            if optimizer is None:
                raise TypeError(f"the schedule returned {type(scheduler).__name__}, with no optimizer in it")
        except CannotCall as exc:
            curve.limitation = str(exc)
            return curve
        except Exception as exc:
            curve.error, curve.error_step, curve.error_at = f"{type(exc).__name__}: {exc}", 0, _raised_at(exc)
            return curve
        curve.rate_function = next(iter(getattr(scheduler, "lr_lambdas", None) or ()), None)
        if schedule.base_lr is None:
            schedule.base_lr = float(optimizer.param_groups[0].get("initial_lr", optimizer.param_groups[0]["lr"]))
        if planned > 0:
            curve.rates.append(float(optimizer.param_groups[0]["lr"]))
        rate_at = _rate_at(optimizer, scheduler)
        step = 0
        try:
            with user_code():
                for step in range(1, planned):
                    curve.rates.append(rate_at(step))
        except Exception as exc:
            curve.error, curve.error_step = f"{type(exc).__name__}: {exc}", step
            curve.error_at = _raised_at(exc)
    return curve


def _rate_at(optimizer: Any, scheduler: Any) -> Callable[[int], float]:
    """The rate of optimizer step ``step`` (>= 1, asked in order). A plain LambdaLR's step sets base_lr *
    lr_lambda(step): read off its lambda (ten times faster than stepping it, and a curve is thousands of steps);
    any other scheduler is stepped."""
    from torch.optim.lr_scheduler import LambdaLR

    if type(scheduler) is LambdaLR and len(optimizer.param_groups) == 1:
        base, rate_function = scheduler.base_lrs[0], scheduler.lr_lambdas[0]
        return lambda step: float(base * rate_function(step))

    def stepped(step: int) -> float:
        if scheduler is not None:
            scheduler.step()
        return float(optimizer.param_groups[0]["lr"])
    return stepped


def _raised_at(exc: BaseException) -> tuple[str, int] | None:
    frame = innermost_user_frame(exc)
    return (frame.filename, frame.lineno) if frame is not None and frame.lineno else None


def code_line(fn: Any) -> tuple[str, int] | None:
    """The user's file and first line of a function (a lambda, a def, a method, a partial or a callable
    object's __call__); None for one that is not the user's (torch's own schedulers) or has no source."""
    if isinstance(fn, functools.partial):
        fn = fn.func
    fn = getattr(fn, "__func__", fn)  # a bound method
    code = getattr(fn, "__code__", None)
    if code is None and not inspect.isroutine(fn):  # a callable object: its class's __call__
        code = getattr(vars(type(fn)).get("__call__"), "__code__", None)
    if code is None or not is_user_frame(code.co_filename):
        return None
    return code.co_filename, code.co_firstlineno


@dataclass(frozen=True)
class ScheduleLines:
    """The lines of a schedule's story: where to point (``at``: the exception's line, else the rate
    function, else the factory) and the factory's own line."""

    at: tuple[str, int] | None
    function: tuple[str, int] | None
    reason: str | None


def schedule_lines(curve: Curve) -> ScheduleLines:
    function = code_line(curve.schedule.function) if curve.schedule.function is not None else None
    at = curve.error_at or code_line(curve.rate_function) or function
    reason = None if at else ("the schedule is built by library code with no function of yours to point at "
                              "(its source is not a file)")
    return ScheduleLines(at, function, reason)


def schedule_rates(factory: Callable, steps: int, lr: float = DEFAULT_BASE_LR) -> list[float]:
    """The rates a ``fn(optimizer) -> scheduler`` factory gives over ``steps`` steps at base rate ``lr``
    (for a plot: ``curve_svg(schedule_rates(make_scheduler, 10000), "lr.svg")``). Raises what it raises."""
    def build():
        optimizer = torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=lr)
        return optimizer, factory(optimizer)
    curve = lr_curve(None, Schedule(build, _name(factory), True, lr, "given"), steps)
    if curve.error is not None:
        raise RuntimeError(f"the schedule raised at step {curve.error_step}: {curve.error}")
    return curve.rates


def noam_rates(steps: int, d_model: int, warmup: int, offset: int) -> list[float]:
    """The paper's d_model^-0.5 * min(n^-0.5, n * warmup^-1.5), n = step + offset (inf at n = 0)."""
    out = []
    for step in range(steps):
        n = step + offset
        out.append(math.inf if n == 0 else d_model ** -0.5 * min(n ** -0.5, n * warmup ** -1.5))
    return out


def _first_parameter(fn: Callable) -> str | None:
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return None
    return params[0].name if params else None


def _name(fn: Callable) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


# ----- showing a curve --------------------------------------------------------------------------------

def sparkline(values: list[float], width: int = 48) -> str:
    """The curve in block characters, each the mean of its stretch of steps (linear scale, 0 at the bottom)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return ""
    width = max(1, min(width, len(values)))
    top = max(max(finite), 0.0)
    out = []
    for i in range(width):
        chunk = values[i * len(values) // width:(i + 1) * len(values) // width] or values[-1:]
        mean = sum(chunk) / len(chunk)
        if not math.isfinite(mean):
            out.append("!")
        elif top <= 0:
            out.append(SPARK_BLOCKS[0])
        else:
            out.append(SPARK_BLOCKS[min(len(SPARK_BLOCKS) - 1,
                                        max(0, int(mean / top * (len(SPARK_BLOCKS) - 1) + 0.5)))])
    return "".join(out)


def sparkline_text(values: list[float], width: int = 48):
    """The sparkline as a rich Text, for a console or a report rendered with rich."""
    from rich.text import Text

    return Text(sparkline(values, width), style="cyan")


def curve_svg(values: list[float], path: str | Path, width: int = 480, height: int = 160) -> Path:
    """The curve as an SVG image (the picture asked for in a report or a notebook); returns the path."""
    path = Path(path)
    finite = [(v, i) for i, v in enumerate(values) if math.isfinite(v)] or [(0.0, 0)]
    (top, peak), n = max(finite), max(len(values) - 1, 1)
    top = max(top, 1e-30)
    points = " ".join(f"{i / n * width:.1f},{height - (v / top * height if math.isfinite(v) else height):.1f}"
                      for i, v in enumerate(values))
    path.write_text(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 20}">'
        f'<polyline fill="none" stroke="steelblue" stroke-width="1.5" points="{points}"/>'
        f'<text x="2" y="{height + 16}" font-size="12">peak {top:.3g} at step {peak}, '
        f'{len(values)} steps</text></svg>\n', "utf-8")
    return path
