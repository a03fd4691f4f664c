"""numerics.half: mask constants must fit the half precision a model may train in.

A recorded forward on a padded batch (where the model can be padded: numerics.nan_source's, which this check's
observer rides along in, or one of its own when that did not run) reads every constant written into a float tensor
(``masked_fill`` / ``where`` / ``full`` values) and the extreme of every additive mask. A constant is judged
relative to the dtype of the tensor it fills: ``torch.finfo(x.dtype).min`` follows the dtype under autocast and is
always right; a hard-coded −1e9 or −1e10 becomes −inf in float16 (|v| > 65504), so a fully masked row turns into NaN
there. With ``precision=fp16|bf16`` declared, one more forward runs under CPU autocast in that dtype (the model is
never changed): a constant that overflows the dtype it actually fills, or a NaN/Inf in the output, fails.
"""
from __future__ import annotations

import torch

from tfcheck.checks.numerics import value_origin
from tfcheck.engine.registry import check
from tfcheck.model.inputs import TARGET_LENGTH_DELTA
from tfcheck.probe import padded_probe
from tfcheck.probe.numerics import FILLS, Fill, FillRecorder, NonFiniteTracker
from tfcheck.recording.recorder import Recorder
from tfcheck.report.findings import Finding, Location, Related
from tfcheck.report.status import Status

ID = "numerics.half"
ROW = "mask-fill-overflows-half"
_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@check(ID, "mask fill constants fit float16 / bfloat16", rows=(ROW,), order=65)
def numerics_half(ctx) -> list[Finding]:
    """One recorded forward reading mask constants (plus one under autocast when precision=fp16|bf16 is
    declared): a constant overflowing float16 warns, and fails when the model declares it trains in fp16."""
    subject = ctx.subject
    precision = subject.facts.precision
    args, kwargs = _inputs(subject)
    seen: MaskConstants | None = padded_probe.observed(ctx, ID)
    read_from = "numerics.nan_source's padded forward (reused)"
    if seen is None:
        seen, read_from = MaskConstants(subject.model), "a recorded forward of its own"
        with Recorder(subject.model, aten=False, on_op=seen):
            ctx.run(args, kwargs, "a recorded forward reading mask fill constants")
    fills, frames = seen.fills, seen.frames
    overflowing = [f for f in fills.fills if f.overflows()]
    evidence = {"constants": [f.to_dict() for f in fills.fills[:12]], "constants_seen": len(fills.fills),
                "float16_max": 65504.0, "bfloat16_max": float(torch.finfo(torch.bfloat16).max),
                "precision": precision or "not declared", "read_from": read_from}
    findings = []
    if overflowing:
        first = overflowing[0]
        fp16 = precision == "fp16" and "float16" in first.overflows()
        status = Status.FAIL if fp16 or (precision == "bf16" and "bfloat16" in first.overflows()) else Status.WARN
        e = first.event
        location, related = _where(first, frames.frames)
        declared = (f"the model declares precision={precision}" if precision else
                    "declare precision=fp16 if it trains in float16 (this then fails), or precision=fp32")
        findings.append(Finding(
            ID, status,
            f"'{e.module or '<root>'}' writes the {first.how} {first.value:g} into a "
            f"{str(first.dtype).replace('torch.', '')} tensor ({e.short_name}): it does not fit "
            f"{' or '.join(first.overflows())} (|v| > "
            f"{65504 if 'float16' in first.overflows() else evidence['bfloat16_max']:g}) and becomes -inf there, so a "
            f"fully masked row gives NaN. Use torch.finfo(scores.dtype).min, which follows the dtype. ({declared}; "
            f"{len(overflowing)} such constants.)",
            location, evidence, row=ROW, related=related))
    if precision in _DTYPES:
        findings += _autocast_run(ctx, args, kwargs, _DTYPES[precision], evidence)
    if findings:
        return findings
    if not fills.fills:
        return [Finding(ID, Status.PASS, "no mask constant in the recorded forward (a boolean mask or "
                        "scaled_dot_product_attention's own): nothing can overflow float16", Location(module=""),
                        evidence)]
    return [Finding(ID, Status.PASS, f"{len(fills.fills)} mask constants, each fits float16 and bfloat16 or follows "
                    "the dtype it fills (torch.finfo(dtype).min)", Location(module=""), evidence)]


@padded_probe.observer(ID)
class MaskConstants:
    """``on_op``: the constants a forward writes into float tensors, and the user's frames of each fill. It rides
    along in numerics.nan_source's padded forward, which writes the same constants as a padded batch of its own."""

    def __init__(self, model: torch.nn.Module):
        self.fills = FillRecorder(model)
        self.frames = value_origin.FrameCapture(lambda event, a, k: event.short_name in FILLS)

    def __call__(self, event, args: tuple, kwargs: dict, out) -> None:
        self.fills(event, args, kwargs, out)
        self.frames(event, args, kwargs, out)


def _where(fill: Fill, frames: dict) -> tuple[Location, tuple[Related, ...]]:
    """The line that wrote the constant (the call that passed it into a shared fill), the fill as related."""
    e = fill.event
    found = value_origin.located(e.module, frames.get(e.index), fill.value, "the mask is filled here")
    return found if found is not None else (Location(module=e.module, file=e.file, line=e.line), ())


def _inputs(subject):
    """A padded batch where the model can be padded, so the masking code runs; else the plain probe."""
    mask = subject.facts.mask
    length = subject.probe_length(6)
    args, kwargs = subject.make_inputs(2, length, seed=14)
    if subject.facts.inputs is not None or subject.kind == "attention" or mask is None:
        return args, kwargs
    gen = torch.Generator().manual_seed(14)
    tokens = subject.random_primary(2, length, gen)
    keep = torch.ones(2, length, dtype=torch.bool, device=tokens.device)
    keep[1, length // 2:] = False
    target = subject.random_primary(2, max(1, length + TARGET_LENGTH_DELTA), gen) if subject.takes_target \
        else None
    if mask.argument is not None:
        return subject.inputs_for(tokens, target, keep=keep)
    if mask.convention == "internal" and subject.facts.pad_id is not None and not subject.facts.takes_features:
        return subject.inputs_for(tokens.masked_fill(~keep, subject.facts.pad_id), target)
    return args, kwargs


def _autocast_run(ctx, args, kwargs, dtype: torch.dtype, evidence: dict) -> list[Finding]:
    """One forward under CPU autocast: autocast casts per op and leaves the parameters as they are."""
    subject = ctx.subject
    fills, tracker = FillRecorder(subject.model), NonFiniteTracker()
    device = subject.device.type

    def both(event, a, k, out):
        fills(event, a, k, out)
        tracker(event, a, k, out)

    name = str(dtype).replace("torch.", "")
    try:
        with torch.autocast(device_type=device, dtype=dtype), Recorder(subject.model, on_op=both):
            probe = ctx.run(args, kwargs, f"a forward under {name} autocast")
    except RuntimeError as exc:  # a half kernel missing on this device
        return [Finding(ID, Status.SKIP, f"inconclusive: the {name} autocast run raised ({exc}); the constants were "
                        "still checked", Location(module=""), evidence)]
    overflow = [f for f in fills.fills if f.overflows() and f.dtype == dtype]
    finite = bool(torch.isfinite(probe.output.detach()).all()) if probe.output.is_floating_point() else True
    evidence.update({"autocast": name, "autocast_output_finite": finite,
                     "autocast_first_nan": tracker.nan.to_dict() if tracker.nan else None,
                     "autocast_first_inf": tracker.inf.to_dict() if tracker.inf else None})
    out: list[Finding] = []
    if finite and not overflow:
        return out
    producer = tracker.nan or tracker.inf
    where = producer.event if producer else (overflow[0].event if overflow else None)
    what = (f"the output holds NaN/Inf; first producer: {producer.describe()}" if not finite and producer
            else "the output holds NaN/Inf" if not finite else
            f"the constant {overflow[0].value:g} is written into a {name} tensor and becomes -inf")
    out.append(Finding(ID, Status.FAIL, f"under {name} autocast (precision={name[:1]}{name[-2:]} declared) {what}. "
                       "Fill masks with torch.finfo(scores.dtype).min and keep softmax inputs in range.",
                       Location(module=where.module, file=where.file, line=where.line) if where
                       else Location(module=""),
                       evidence, row=ROW))
    return out
