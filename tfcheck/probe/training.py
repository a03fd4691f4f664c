"""Helpers shared by the training sanity checks: copies of the model to train, a bounded and counted
optimiser loop, and a loss over the model's output (or the model's own loss). Schedules and their curves are
in ``tfcheck.probe.schedules``.

Every optimiser step here runs on a copy (``tfcheck.probe.training_copy``): the checked model is never stepped. The
copy's passes are not ``ctx.run`` passes, so they are counted on ``ctx.cost`` here, one forward, one
backward and batch x length token-passes per step.
"""
from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._pytree import tree_flatten

from tfcheck import progress
from tfcheck.model.facts.call_plan import roles_by_parameter
from tfcheck.model.facts.label_convention import LABEL_ARGS
from tfcheck.model.inputs import batch_length
from tfcheck.recording.tensor_storage import put_back_values, same_values
from tfcheck.report.findings import Location

#: Step budget of a training check when ``train_steps`` is not declared.
DEFAULT_TRAIN_STEPS = 30
#: The one small batch the training checks use (batch x length), capped by max_len.
TRAIN_BATCH, TRAIN_LENGTH = 4, 8
#: Adam's rate in the training checks: high enough that a few dozen steps memorise one small batch, low
#: enough to stay stable on tiny models. The checks test the wiring, not the user's rate (lr.warmup does).
CHECK_LR = 1e-2


def budget(subject) -> tuple[int, str]:
    """The step budget of the training checks and where it comes from."""
    declared = subject.facts.train_steps
    if declared:
        return int(declared), "train_steps declaration"
    return DEFAULT_TRAIN_STEPS, f"default {DEFAULT_TRAIN_STEPS} (declare train_steps=INT to change it)"


def batch_size(subject) -> tuple[int, int]:
    cap = subject.probe_lengths()[-1]
    return TRAIN_BATCH, subject.accepted_length(max(2, min(TRAIN_LENGTH, cap)))


def call_copy(ctx, model: nn.Module, args: tuple, kwargs: dict, what: str, grad: bool = True) -> Any:
    """One forward of a training copy, counted on ``ctx.cost``; a raise is explained like ctx.run's."""
    batch, length = batch_length(args, kwargs)
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


def loss_outputs(raw: Any) -> list[torch.Tensor]:
    """The outputs random_projection_loss reads: every float tensor of the return value that requires grad."""
    return [t for t in tree_flatten(_as_tree(raw))[0]
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]


def random_projection_loss(raw: Any, seed: int = 0) -> tuple[torch.Tensor | None, int]:
    """A scalar that depends on every float output: each projected on fixed random weights. A plain sum
    would not do: the features of a LayerNorm output sum to its bias, so nothing before it gets a gradient."""
    gen = torch.Generator().manual_seed(seed)
    total, used = None, 0
    for t in loss_outputs(raw):
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
    #: where who shifts was stated (a declaration, the forward's docstring); None: read from the argument's name
    stated_by: str | None = None

    def describe(self, subject=None) -> str:
        if subject is not None and takes_target(subject):
            return (f"'{self.name}' given as the next tokens of the decoder input tfcheck passes (nothing left to "
                    "shift)")
        if self.stated_by is not None:
            given = "the input tokens, shifted inside the model" if self.shifted_by == "inside" else \
                "the next tokens (label t = token t + 1), which the model does not shift"
            return f"'{self.name}' given as {given} (label_shift={self.shifted_by}: {self.stated_by})"
        if self.shifted_by == "inside":
            return (f"'{self.name}' taken as Hugging Face labels: the same tokens as the input, shifted inside "
                    "the model")
        return f"'{self.name}' taken as nanoGPT/minGPT targets: the next tokens, shifted by the caller"


def label_argument(subject) -> LabelArgument | None:
    """The forward argument through which the model computes its own loss, by its name, and who shifts it: as
    declared or documented (facts.label_shift), else as the argument's name says."""
    if subject.facts.inputs is not None or subject.kind == "attention" or subject.facts.takes_features:
        return None
    try:
        names = inspect.signature(subject.model.forward).parameters
    except (TypeError, ValueError):
        return None
    stated = subject.facts.label_shift
    decoder_inputs = {n for n, role in roles_by_parameter(subject).items() if role.startswith("target")}
    for name, shifted_by in LABEL_ARGS.items():
        if name in names and name not in decoder_inputs:  # forward(src, targets): the decoder input, not labels
            if stated is None:
                return LabelArgument(name, shifted_by)
            return LabelArgument(name, stated, subject.facts.sources.get("label_shift"))
    return None


def takes_target(subject) -> bool:
    """Whether the forward takes a decoder input (an encoder-decoder)."""
    return subject.takes_target


def labelled_inputs(subject, label: LabelArgument, batch: int, length: int,
                    gen: torch.Generator) -> tuple[tuple, dict]:
    """Inputs with labels for a model that computes its own loss, in the convention of its argument."""
    args, kwargs, _, _ = labelled_batch(subject, label, batch, length, gen)
    return args, kwargs


def labelled_batch(subject, label: LabelArgument, batch: int, length: int,
                   gen: torch.Generator) -> tuple[tuple, dict, torch.Tensor, torch.Tensor]:
    """labelled_inputs, with the (batch, length) tokens each position of the output is fed (``fed``) and the next
    tokens it must learn to predict (``following``; -1 where the batch does not hold one)."""
    if takes_target(subject):
        # The decoder input is given, so nothing is left to shift: a Hugging Face encoder-decoder shifts its
        # labels only to build a decoder input it was not given.
        source = subject.random_tokens(batch, length, gen)
        seq = subject.random_tokens(batch, length + 1, gen)
        args, kwargs = subject.inputs_for(source, seq[:, :-1])
        return args, {**kwargs, label.name: seq[:, 1:].contiguous()}, seq[:, :-1], seq[:, 1:]
    if label.shifted_by == "caller":
        seq = subject.random_tokens(batch, length + 1, gen)
        tokens, labels = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
        following = labels
    else:
        tokens = subject.random_tokens(batch, length, gen)
        labels = tokens
        following = torch.cat([tokens[:, 1:], torch.full_like(tokens[:, :1], -1)], dim=1)
    args, kwargs = subject.inputs_for(tokens)
    return args, {**kwargs, label.name: labels}, tokens, following


def leaking_inputs(subject, label: LabelArgument, batch: int, length: int,
                   gen: torch.Generator) -> tuple[tuple, dict]:
    """Inputs whose labels give the answer away in the argument's convention: a loss that keeps it scores
    position t's logits against token t itself (for a decoder-only model; an encoder-decoder's labels are the
    decoder input's next tokens whatever the convention)."""
    tokens = subject.random_tokens(batch, length, gen)
    labels = tokens.clone()
    if label.shifted_by == "inside":  # the model scores logits[t] against labels[t + 1]: put token t there
        labels[:, 1:] = tokens[:, :-1]
    args, kwargs = subject.inputs_for(tokens)
    return args, {**kwargs, label.name: labels}


# ----- where the graph is cut ----------------------------------------------------------------------------

#: Ops that return their input cut from the autograd graph (``.data`` is an attribute read, which no op records).
CUT_OPS = frozenset({"detach", "detach_"})


@dataclass(frozen=True)
class Cut:
    """A ``.detach()`` a recorded forward ran: its module and the user's line."""

    module: str
    file: str | None
    line: int | None


def graph_cuts(recording: Any, module: str | None = None) -> list[Cut]:
    """The function-level graph cuts of a recorded forward, in order: all of them, or those run inside
    ``module`` (a dotted path) or applied to one of its outputs (``ffn(x).detach()`` in its parent)."""
    outputs: set[int] = set()
    if module is not None:
        outputs = {i for c in recording.calls if c.path == module for i in c.output_ids}
    inside = (lambda path: True) if module is None else (
        lambda path: path == module or path.startswith(module + ".") or module == "")
    return [Cut(op.module, op.file, op.line) for op in recording.ops
            if op.level == "function" and op.short_name in CUT_OPS
            and (inside(op.module) or outputs.intersection(op.input_ids))]


def recorded_cuts(ctx, args: tuple, kwargs: dict) -> tuple[list[Cut], str | None]:
    """The graph cuts of one recorded forward of the model (tensor identities kept), or why none could be read."""
    from tfcheck.recording.recorder import Recorder

    recorder = Recorder(ctx.subject.model, track_ids=True)
    try:
        with recorder:
            ctx.run(args, kwargs, "a recorded forward, to find the line that cuts the graph")
    except Exception as exc:  # noqa: BLE001 - the finding stands without its line
        return [], f"the recorded forward that looks for the cut raised {type(exc).__name__}"
    return graph_cuts(recorder.recording), None


def last_cut(ctx, args: tuple, kwargs: dict) -> Location:
    """Where the whole output is cut off from the weights: the last .detach() of a recorded forward (the one
    nearest the output), or why no line is known."""
    cuts, why = recorded_cuts(ctx, args, kwargs)
    if cuts and cuts[-1].file:
        return Location(cuts[-1].module, cuts[-1].file, cuts[-1].line)
    return Location("", reason=why or "no .detach() was recorded: torch.no_grad, .data or .item() cut the output, "
                    "which no op records")


# ----- the optimiser loop -----------------------------------------------------------------------------

@dataclass
class Descent:
    losses: list[float] = field(default_factory=list)
    trainable: int = 0
    frozen: int = 0
    changed: bool = False  # whether any parameter moved
    no_grad: list[str] = field(default_factory=list)  # trainable parameters the loss never reached
    stopped: str | None = None  # why the loop ended early
    #: the loss reached no trainable parameter: the graph is cut between them and the output
    cut_off: bool = False
    #: the forwards after which ``settled`` ended the loop (None: it ran every step, or stopped)
    settled: int | None = None


def descend(ctx, model: nn.Module, loss_of: Callable[[nn.Module, int], tuple[torch.Tensor, int]], steps: int,
            lr: float = CHECK_LR, settled: Callable[[list[float]], bool] | None = None) -> Descent:
    """At most ``steps`` Adam steps on ``model`` (a copy). ``loss_of(model, step)`` returns the loss and the
    token count of its forward; each step is counted as one forward and one backward. ``settled(losses)``, when
    given, ends the loop as soon as the losses so far decide the caller's verdict (``Descent.settled``)."""
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
        if settled is not None and settled(result.losses):
            result.settled = step + 1
            break
        if not loss.requires_grad:
            result.stopped = "the loss does not require grad: it is not computed from any trainable parameter"
            result.cut_off = True
            break
        grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
        ctx.count_backward(tokens)
        if step == 0:
            result.no_grad = [n for (n, _), g in zip(named, grads) if g is None]
            result.cut_off = len(result.no_grad) == len(named)
        for (_, p), g in zip(named, grads):
            p.grad = None if g is None else g.detach()
        optimizer.step()
        progress.step(step + 1, steps)
    with torch.no_grad():
        result.changed = any(not same_values(b, p) for b, (_, p) in zip(before, named))
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
                put_back_values(b, saved)
