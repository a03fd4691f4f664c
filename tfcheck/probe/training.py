"""Helpers shared by the training sanity checks: copies of the model to train, a bounded and counted
optimiser loop, a loss over the model's output (or the model's own loss), the learning-rate curve of a
declared schedule, and its sparkline.

Every optimiser step here runs on a copy (``copy.deepcopy``): the checked model is never stepped. The
copy's passes are not ``ctx.run`` passes, so they are counted on ``ctx.cost`` here, one forward, one
backward and batch x length token-passes per step.
"""
from __future__ import annotations

import contextlib
import copy
import inspect
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._pytree import tree_flatten

#: Step budget of a training check when ``train_steps`` is not declared.
DEFAULT_TRAIN_STEPS = 30
#: The one small batch the training checks use (batch x length), capped by max_len.
TRAIN_BATCH, TRAIN_LENGTH = 4, 8
#: Adam's rate in the training checks: high enough that a few dozen steps memorise one small batch, low
#: enough to stay stable on tiny models. The checks test the wiring, not the user's rate (lr.warmup does).
CHECK_LR = 1e-2
#: Base rate given to a ``fn(optimizer) -> scheduler`` factory when ``lr`` is not declared: with 1.0 a
#: LambdaLR that returns absolute rates (the Noam formula) yields those rates, and a multiplier schedule
#: yields its multiplier.
DEFAULT_BASE_LR = 1.0
#: Steps a schedule is stepped over when ``total_steps`` is not declared (3 x warmup_steps if larger).
DEFAULT_PLANNED_STEPS = 10_000
#: Most steps a schedule is ever stepped over (a scheduler step costs microseconds, not a model pass).
MAX_PLANNED_STEPS = 100_000
#: Forward arguments through which a model computes its own loss, and who shifts the targets: Hugging
#: Face ``labels`` are aligned with the inputs and shifted inside the model; nanoGPT / minGPT ``targets``
#: are the next tokens, shifted by the caller.
LABEL_ARGS = {"labels": "inside", "lm_labels": "inside", "targets": "caller"}
SPARK_BLOCKS = "▁▂▃▄▅▆▇█"


class CannotCopy(Exception):
    """The model cannot be deep-copied, so tfcheck will not train it (it trains copies only)."""


def copy_model(model: nn.Module) -> nn.Module:
    """A deep copy of the model in eval mode (dropout off, so a descent measures the wiring, not noise)."""
    try:
        clone = copy.deepcopy(model)
    except Exception as exc:  # a model holding a file handle, a lock, a C++ object ...
        raise CannotCopy(f"copy.deepcopy of the model raised {type(exc).__name__}: {exc}") from None
    return clone.eval()


def budget(subject) -> tuple[int, str]:
    """The step budget of the training checks and where it comes from."""
    declared = subject.facts.train_steps
    if declared:
        return int(declared), "train_steps declaration"
    return DEFAULT_TRAIN_STEPS, f"default {DEFAULT_TRAIN_STEPS} (declare train_steps=INT to change it)"


def batch_size(subject) -> tuple[int, int]:
    cap = subject.probe_lengths()[-1]
    return TRAIN_BATCH, max(2, min(TRAIN_LENGTH, cap))


def call_copy(ctx, model: nn.Module, args: tuple, kwargs: dict, what: str, grad: bool = True) -> Any:
    """One forward of a training copy, counted on ``ctx.cost``; a raise is explained like ctx.run's."""
    from tfcheck.engine.context import _batch_length

    batch, length = _batch_length(args, kwargs)
    return ctx.call(args, kwargs, what, tokens=batch * length, grad=grad, model=model)


# ----- losses -----------------------------------------------------------------------------------------

def lm_logits(subject, output: torch.Tensor) -> tuple[bool, str]:
    """Whether the output is a language-model head's logits, from declarations and names, and why."""
    vocab = subject.facts.output_vocab_size
    if vocab is None or output.dim() < 2 or output.shape[-1] != vocab or not output.is_floating_point():
        return False, f"the output's last dim {tuple(output.shape)[-1:]} is not vocab_size={vocab}"
    named = subject.facts.output
    if named in ("logits", "lm_logits", "prediction_logits"):
        return True, f"the output is named {named!r} and has vocab_size={vocab} classes"
    if subject.kind in ("decoder", "seq2seq"):
        return True, f"kind={subject.kind} and the output has vocab_size={vocab} classes"
    if vocab != subject.facts.d_model:
        return True, f"the output has vocab_size={vocab} classes (not d_model={subject.facts.d_model})"
    return False, "the output width is both vocab_size and d_model; declare kind=decoder (or output=logits)"


def fixed_target(output: torch.Tensor, is_logits: bool, gen: torch.Generator) -> torch.Tensor:
    """A target to memorise: random classes for logits, a random regression target for hidden states."""
    if is_logits:
        return torch.randint(0, output.shape[-1], output.shape[:-1], generator=gen).to(output.device)
    return torch.randn(output.shape, generator=gen).to(output.device, output.dtype)


def output_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    if target.dtype == torch.long:
        return F.cross_entropy(output.reshape(-1, output.shape[-1]).float(), target.reshape(-1))
    return F.mse_loss(output.float(), target.float())


def random_projection_loss(raw: Any, seed: int = 0) -> tuple[torch.Tensor | None, int]:
    """A scalar that depends on every float output: each projected on fixed random weights. A plain sum
    would not do: the features of a LayerNorm output sum to its bias, so nothing before it gets a gradient."""
    gen = torch.Generator().manual_seed(seed)
    total, used = None, 0
    for t in tree_flatten(_as_tree(raw))[0]:
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad:
            weights = torch.randn(t.shape, generator=gen).to(t.device, t.dtype)
            term = (t * weights).sum() / max(t.numel() ** 0.5, 1.0)
            total = term if total is None else total + term
            used += 1
    return total, used


def _as_tree(raw: Any) -> Any:
    """Output objects (Hugging Face ModelOutput, dataclasses) as dicts, so pytree sees their tensors."""
    fields = getattr(raw, "__dataclass_fields__", None)
    if fields is not None and not isinstance(raw, dict):
        return {k: _as_tree(getattr(raw, k, None)) for k in fields}
    if isinstance(raw, dict):
        return {k: _as_tree(v) for k, v in raw.items()}
    if isinstance(raw, (tuple, list)):
        return [_as_tree(v) for v in raw]
    return raw


def own_loss(raw: Any) -> torch.Tensor | None:
    """The loss a model computed itself: ``.loss`` / ``["loss"]``, or the 0-dim tensor of a tuple."""
    loss = raw.get("loss") if isinstance(raw, dict) else getattr(raw, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        return loss.reshape(())
    if isinstance(raw, (tuple, list)):
        for v in raw:
            if isinstance(v, torch.Tensor) and v.dim() == 0 and v.is_floating_point():
                return v
    return None


@dataclass(frozen=True)
class LabelArgument:
    name: str
    shifted_by: str  # "inside" (Hugging Face labels) or "caller" (nanoGPT targets)

    def describe(self, subject=None) -> str:
        if subject is not None and takes_target(subject):
            return (f"'{self.name}' given as the next tokens of the decoder input tfcheck passes (nothing left to "
                    "shift)")
        if self.shifted_by == "inside":
            return (f"'{self.name}' taken as Hugging Face labels: the same tokens as the input, shifted inside "
                    "the model")
        return f"'{self.name}' taken as nanoGPT/minGPT targets: the next tokens, shifted by the caller"


def label_argument(subject) -> LabelArgument | None:
    """The forward argument through which the model computes its own loss, by its name."""
    if subject.facts.inputs is not None or subject.kind == "attention" or subject.facts.takes_features:
        return None
    try:
        names = inspect.signature(subject.model.forward).parameters
    except (TypeError, ValueError):
        return None
    for name, shifted_by in LABEL_ARGS.items():
        if name in names:
            return LabelArgument(name, shifted_by)
    return None


def takes_target(subject) -> bool:
    """Whether the forward takes a decoder input (an encoder-decoder)."""
    return subject.takes_target


def labelled_inputs(subject, label: LabelArgument, batch: int, length: int,
                    gen: torch.Generator) -> tuple[tuple, dict]:
    """Inputs with labels for a model that computes its own loss, in the convention of its argument."""
    if takes_target(subject):
        # The decoder input is given, so nothing is left to shift: a Hugging Face encoder-decoder shifts its
        # labels only to build a decoder input it was not given.
        source = subject.random_tokens(batch, length, gen)
        seq = subject.random_tokens(batch, length + 1, gen)
        args, kwargs = subject.inputs_for(source, seq[:, :-1])
        return args, {**kwargs, label.name: seq[:, 1:].contiguous()}
    if label.shifted_by == "caller":
        seq = subject.random_tokens(batch, length + 1, gen)
        tokens, labels = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
    else:
        tokens = subject.random_tokens(batch, length, gen)
        labels = tokens
    args, kwargs = subject.inputs_for(tokens)
    return args, {**kwargs, label.name: labels}


# ----- the optimiser loop -----------------------------------------------------------------------------

@dataclass
class Descent:
    losses: list[float] = field(default_factory=list)
    trainable: int = 0
    frozen: int = 0
    changed: bool = False  # whether any parameter moved
    no_grad: list[str] = field(default_factory=list)  # trainable parameters the loss never reached
    stopped: str | None = None  # why the loop ended early


def descend(ctx, model: nn.Module, loss_of: Callable[[nn.Module, int], tuple[torch.Tensor, int]], steps: int,
            lr: float = CHECK_LR) -> Descent:
    """At most ``steps`` Adam steps on ``model`` (a copy). ``loss_of(model, step)`` returns the loss and the
    token count of its forward; each step is counted as one forward and one backward."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    result = Descent(trainable=len(named), frozen=sum(1 for p in model.parameters() if not p.requires_grad))
    if not named:
        result.stopped = "no trainable parameter (every requires_grad is False)"
        return result
    before = [p.detach().clone() for _, p in named]
    optimizer = torch.optim.Adam([p for _, p in named], lr=lr)
    for step in range(steps):
        loss, tokens = loss_of(model, step)
        result.losses.append(float(loss.detach()))
        if not math.isfinite(result.losses[-1]):
            result.stopped = f"the loss became {result.losses[-1]} at step {step}"
            break
        if not loss.requires_grad:
            result.stopped = "the loss does not require grad: it is not computed from any trainable parameter"
            break
        grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
        ctx.count_backward(tokens)
        if step == 0:
            result.no_grad = [n for (n, _), g in zip(named, grads) if g is None]
        for (_, p), g in zip(named, grads):
            p.grad = None if g is None else g.detach()
        optimizer.step()
    with torch.no_grad():
        result.changed = any(not torch.equal(b, p) for b, (_, p) in zip(before, named))
    return result


@contextlib.contextmanager
def train_mode(model: nn.Module) -> Iterator[None]:
    """The model in train mode for the block; every module's mode and every buffer (BatchNorm statistics
    a train-mode forward updates) restored after, also when the model raises."""
    modes = [(m, m.training) for m in model.modules()]
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    try:
        for m, _ in modes:
            m.training = True
        yield
    finally:
        for m, mode in modes:
            m.training = mode
        with torch.no_grad():
            for b, saved in buffers:
                if b.shape == saved.shape and not torch.equal(b, saved):
                    b.copy_(saved)


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


@dataclass
class Curve:
    rates: list[float]
    schedule: Schedule
    planned: int
    planned_source: str
    error: str | None = None  # the exception that ended stepping
    error_step: int | None = None

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
                        True, None, "the optimizer the factory builds")
    if takes is not None and "param" in takes:
        return Schedule(lambda: _unpack(factory([torch.zeros(1, requires_grad=True)])),
                        f"schedule {_name(factory)}(params)", True, None, "the optimizer the factory builds")
    base = declared_lr if declared_lr is not None else DEFAULT_BASE_LR
    where = "lr declaration" if declared_lr is not None else (
        f"default {DEFAULT_BASE_LR} for fn(optimizer) factories (declare lr=FLOAT for the real base rate)")

    def build():
        optimizer = torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=base)
        return optimizer, factory(optimizer)
    return Schedule(build, f"schedule {_name(factory)}(optimizer)", declared_lr is not None, base, where)


def _from_configure_optimizers(subject) -> Schedule:
    def build():
        clone = copy.deepcopy(subject.model)
        method = clone.configure_optimizers
        fill = {"weight_decay": 0.0, "learning_rate": subject.facts.lr or 1e-3, "lr": subject.facts.lr or 1e-3,
                "betas": (0.9, 0.95), "device_type": subject.device.type, "device": subject.device}
        params = inspect.signature(method).parameters
        missing = [n for n, p in params.items() if p.default is p.empty and n not in fill
                   and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if missing:
            raise TypeError(f"configure_optimizers needs {', '.join(missing)}, which tfcheck cannot fill; "
                            + DECLARE_SCHEDULE)
        return _unpack(method(**{n: fill[n] for n in params if n in fill}))
    return Schedule(build, "the model's configure_optimizers()", True, None, "the optimizer it builds")


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
            optimizer, scheduler = schedule.build()
            if optimizer is None:
                raise TypeError(f"the schedule returned {type(scheduler).__name__}, with no optimizer in it")
        except Exception as exc:
            curve.error, curve.error_step = f"{type(exc).__name__}: {exc}", 0
            return curve
        if schedule.base_lr is None:
            schedule.base_lr = float(optimizer.param_groups[0].get("initial_lr", optimizer.param_groups[0]["lr"]))
        for step in range(planned):
            curve.rates.append(float(optimizer.param_groups[0]["lr"]))
            if scheduler is None or step == planned - 1:
                continue
            try:
                scheduler.step()
            except Exception as exc:
                curve.error, curve.error_step = f"{type(exc).__name__}: {exc}", step + 1
                break
    return curve


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
            out.append(SPARK_BLOCKS[min(len(SPARK_BLOCKS) - 1, max(0, int(mean / top * (len(SPARK_BLOCKS) - 1) + 0.5)))])
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
