"""numerics.nan_source: padded batches, as training makes them, give finite outputs and gradients.

One recorded forward and one backward (``torch.autograd.grad``) on a batch of three: a full sequence, a
half-padded one and a fully padded one. The loss reads only real positions, as a loss with
``ignore_index`` does. Every op's output is looked at; the first op producing a NaN (or an Inf not written
on purpose, e.g. ``masked_fill(mask, -inf)``) is named with its module path, source line and what its
inputs held (rows that were entirely −inf?).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn

from tfcheck.checks.numerics import value_origin
from tfcheck.engine.context import ModelRaised
from tfcheck.engine.registry import NotApplicable, check
from tfcheck.model.inputs import PROBE_LENGTH, TARGET_LENGTH_DELTA
from tfcheck.probe import padded_probe, pooled_source
from tfcheck.probe.numerics import FILLS, NonFiniteTracker, Producer, all_finite
from tfcheck.recording.recorder import OpEvent, Recorder
from tfcheck.report.findings import Finding, Location, Related
from tfcheck.report.status import Status

ID = "numerics.nan_source"
ROW = "nan-from-masked-row"
LENGTH = PROBE_LENGTH


def _not_applicable(subject) -> NotApplicable | None:
    if subject.kind == "attention":
        return NotApplicable("an attention module takes no padding mask tfcheck can build")
    mask = subject.facts.mask
    if mask is not None and mask.argument is not None:
        return None
    if mask is not None and mask.convention == "internal" and subject.facts.pad_id is not None \
            and not subject.facts.takes_features:
        return None
    return NotApplicable("the model takes no padding mask and its pad id is unknown, so tfcheck cannot build a "
                         "padded batch (declare mask=ARG:keep|pad|additive, or mask=internal with pad_id=INT)")


@check(ID, "padded batches (with a fully padded row) give finite outputs and gradients", rows=(ROW,), order=64,
       applies=_not_applicable, builds_inputs=True)
def nan_source(ctx) -> list[Finding]:
    """Forward and backward on [full, half padded, fully padded]: NaN or Inf in the real samples' outputs
    or in any gradient fails, naming the first op that produced it."""
    subject = ctx.subject
    args, kwargs, keep = _padded_batch(subject)
    params = [p for p in subject.model.parameters() if p.requires_grad and p.is_floating_point()]
    source: pooled_source.PooledSource | None = None
    for attempt in range(2):
        tracker, fills = NonFiniteTracker(), InfiniteFills()
        riders = padded_probe.start(subject.model)  # numerics.half reads the mask constants of this forward
        capture = source.capture(*keep.shape) if source is not None else None
        grads: Sequence[torch.Tensor | None] = []
        with Recorder(subject.model, on_op=both(tracker, fills, riders, *([capture] if capture else []))):
            probe = ctx.run(args, kwargs, "a forward and backward on a padded batch with a fully padded row"
                            + (f", recorded to read {source.name}" if source is not None else ""), grad=True)
            padded_probe.keep(subject, riders)
            out = measured = probe.output
            real = _real_positions(out, keep)
            if real is None and capture is not None and capture.states is not None:
                measured = capture.states
                real = _real_positions(measured, keep)
            if params and measured.requires_grad and real is not None:
                grads = _gradients(ctx, probe, out, measured, real, keep, params)
        # A pooled (batch, C) output has no positions to tell real from padded: once more, reading the states it is
        # pooled from (only then: the shared recorded forward that finds them is not every model's cost).
        if real is not None or attempt or subject.kind == "seq2seq" or (source := _pooled_states(ctx)) is None:
            break
    if real is None:
        return [Finding(ID, Status.SKIP, f"inconclusive: the output {tuple(out.shape)} is not laid out (batch, length, "
                        f"...) like the padded batch {tuple(keep.shape)}, so real and padded positions cannot be told "
                        "apart, and no per-position states were found behind it (no op of the model pools them)",
                        evidence={"output_shape": tuple(out.shape), "batch": tuple(keep.shape)})]
    on = ""
    if measured is not out and source is not None:
        on = f" Measured on {source.describe()}, and on the pooled output."
        out = torch.cat([measured.detach().flatten(1), out.detach().flatten(1).to(measured.dtype)], dim=1)
    per_sample = [bool((~torch.isfinite(out[i].detach())).any()) for i in range(out.shape[0])]
    bad_grads = [name for (name, p), g in zip(_named(subject.model, params), grads)
                 if g is not None and not all_finite(g)]
    evidence = {"batch": ["full", "half padded", "fully padded"], "length": probe.length,
                "non_finite_output_per_sample": per_sample, "parameters_with_non_finite_gradient": bad_grads[:8],
                "gradients_checked": sum(g is not None for g in grads), "ops_watched": tracker.ops,
                "padding_built_by": _how_padded(subject),
                "first_nan_producer": tracker.nan.to_dict() if tracker.nan else None,
                "first_inf_producer": tracker.inf.to_dict() if tracker.inf else None}
    if on and source is not None:
        evidence["measured"] = f"{source.name} and the pooled output"
        evidence["pooled_output"] = source.evidence()
    producer = tracker.nan or tracker.inf
    if any(per_sample[:2]) or bad_grads:
        spread = [w for w, bad in (("the outputs of real (not fully padded) samples", any(per_sample[:2])),
                                   (f"the gradients of {len(bad_grads)} parameters", bool(bad_grads))) if bad]
        location, related = _located(producer, fills)
        return [Finding(ID, Status.FAIL,
                        "on a padded batch with one fully padded row, non-finite values reached "
                        f"{' and '.join(spread)}. "
                        + _cause(producer) + " A row with every key masked must stay finite: fill with "
                        "torch.finfo(scores.dtype).min instead of -inf, or zero the probabilities of fully masked "
                        "rows." + on,
                        location, evidence, row=ROW, related=related)]
    if per_sample[2]:
        inside_torch_mha = producer is not None and _inside_torch_mha(subject.model, producer)
        message = ("the fully padded sample's output is NaN/Inf (the real samples and every gradient are finite). "
                   + _cause(producer))
        if inside_torch_mha:
            message += (" It comes from inside torch's own nn.MultiheadAttention, which behaves so on a sequence "
                        "with every key padded; drop empty sequences from the batch.")
        else:
            message += (" Harmless only while no loss or metric reads that row; drop empty sequences or fill masks "
                        "with finfo.min.")
        message += on
        location, related = _located(producer, fills)
        return [Finding(ID, Status.WARN, message, location, {**evidence, "warning": "fully padded row"},
                        row=ROW, related=related)]
    if not evidence["gradients_checked"]:
        return [Finding(ID, Status.SKIP, "inconclusive: no gradient reached a parameter, so the backward was not "
                        "checked", Location(module=""), evidence)]
    return [Finding(ID, Status.PASS, f"outputs and {evidence['gradients_checked']} gradients are finite on a padded "
                    f"batch with a fully padded row{'.' + on if on else ''}", Location(module=""), evidence)]


def _gradients(ctx, probe, out: torch.Tensor, measured: torch.Tensor, real: torch.Tensor, keep: torch.Tensor,
               params: list) -> Sequence[torch.Tensor | None]:
    """The parameters' gradients of a loss that reads the real positions of ``measured`` (the output, or the states
    a pooled output is made from, and then also the pooled outputs of the samples with a real token, as a
    classifier's loss reads them)."""
    gen = torch.Generator().manual_seed(5)
    weights = torch.randn(measured.shape[-1], generator=gen).to(measured.device, measured.dtype)
    loss = (measured[real] * weights).sum()
    if measured is not out and out.is_floating_point() and out.requires_grad:
        rows = keep.any(1).to(out.device)
        loss = loss + (out[rows] * torch.randn(out.shape[1:], generator=gen).to(out.device, out.dtype)).sum()
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    ctx.count_backward(probe.batch * probe.length)
    return grads


def _padded_batch(subject):
    gen = torch.Generator().manual_seed(13)
    length = subject.probe_length(LENGTH)
    tokens = subject.random_primary(3, length, gen)
    keep = torch.ones(3, length, dtype=torch.bool, device=tokens.device)
    keep[1, length // 2:] = False
    keep[2] = False
    target = None
    if subject.takes_target:
        target = subject.random_primary(3, max(1, length + TARGET_LENGTH_DELTA), gen)
    mask = subject.facts.mask
    if mask.argument is None:  # the model masks its pad ids itself
        tokens = tokens.masked_fill(~keep, subject.facts.pad_id)
        args, kwargs = subject.inputs_for(tokens, target)
    else:
        args, kwargs = subject.inputs_for(tokens, target, keep=keep)
    # A seq2seq output runs over the (unpadded) target: every target position is real.
    return args, kwargs, keep if target is None else torch.ones(3, target.shape[1], dtype=torch.bool)


def _how_padded(subject) -> str:
    mask = subject.facts.mask
    if mask.argument is None:
        return f"pad id {subject.facts.pad_id} in the tokens (the model masks internally)"
    return f"the mask argument {mask.argument} ({mask.convention} convention)"


def _real_positions(out: torch.Tensor, keep: torch.Tensor) -> torch.Tensor | None:
    if out.dim() < 2 or tuple(out.shape[:2]) != tuple(keep.shape) or not out.is_floating_point():
        return None
    return keep.to(out.device)


def _named(model: nn.Module, params: list) -> list:
    names = {id(p): n for n, p in model.named_parameters()}
    return [(names.get(id(p), "?"), p) for p in params]


def _cause(producer: Producer | None) -> str:
    if producer is None:
        return "No single op was caught producing it (it may come from an opaque kernel)."
    return f"The first producer: {producer.describe()}."


class InfiniteFills:
    """``on_op``: the fills that write ±inf into a tensor (``masked_fill(mask, -inf)``), with the user's frames,
    so a NaN from a row of -inf names the line that chose -inf."""

    def __init__(self) -> None:
        self.fills: list[tuple[OpEvent, float, tuple[value_origin.Frame, ...]]] = []

    def __call__(self, event: OpEvent, args: tuple, kwargs: dict, out) -> None:
        if event.level != "function" or event.phase != "forward" or event.short_name not in FILLS:
            return
        values = [*event.scalars.get("positional", {}).values(), event.scalars.get("value")]
        infinite = next((float(v) for v in values if isinstance(v, float) and v in (float("inf"), float("-inf"))), None)
        if infinite is not None:
            self.fills.append((event, infinite, value_origin.user_frames()))


def both(*observers):
    """One ``on_op`` calling each of ``observers``."""
    def on_op(event, args, kwargs, out) -> None:
        for observe in observers:
            observe(event, args, kwargs, out)
    return on_op


def _located(producer: Producer | None, fills: InfiniteFills) -> tuple[Location, tuple[Related, ...]]:
    """The line to change for a non-finite value: where a row of -inf that the producer turned into NaN was
    written (the latest infinite fill before it, followed out to the call that chose the value), the producer as
    related; else the producer itself."""
    if producer is None:
        return Location(module="", reason="no op was caught producing the non-finite value (an opaque kernel, or "
                        "the value came in with the inputs)"), ()
    e = producer.event
    here = Location(module=e.module, file=e.file, line=e.line)
    if not any(i.get("rows_all_minus_inf") for i in producer.inputs):
        return here, ()
    written = [f for f in fills.fills if f[0].index < e.index]
    if not written:
        return here, ()
    fill, value, frames = written[-1]
    found = value_origin.located(fill.module, frames, value, "the mask is filled with it here")
    if found is None:
        return here, ()
    location, used = found
    return location, (Related(f"{producer.what} first produced here ({e.short_name})", e.file, e.line, e.module),
                      *used)


def traced_non_finite(ctx, args: tuple, kwargs: dict, what: str) -> tuple[Location, tuple[Related, ...]]:
    """One recorded forward on inputs whose output holds NaN or Inf: the line to change (see ``_located``)."""
    tracker, fills = NonFiniteTracker(), InfiniteFills()
    with Recorder(ctx.subject.model, on_op=both(tracker, fills)):
        ctx.run(args, kwargs, what)
    return _located(tracker.nan or tracker.inf, fills)


def _inside_torch_mha(model: nn.Module, producer: Producer) -> bool:
    modules = dict(model.named_modules())
    path = producer.event.module
    while path:
        if isinstance(modules.get(path), nn.MultiheadAttention):
            return True
        path = path.rpartition(".")[0]
    return False


def _pooled_states(ctx) -> pooled_source.PooledSource | None:
    try:
        return pooled_source.find(ctx)
    except ModelRaised:  # the recorded forward that finds the states: none to measure, the output stays unreadable
        return None
