"""cross.dependence, its second half: the decoder never reads the source's padding. Where the mask is passed
in, the source tokens at padded positions change (mask unchanged); where it is built inside from pad_id, padded
and unpadded sources are compared. The memory entering cross-attention says whether a leak is in the encoder
or in cross-attention. On a leak, one recorded forward of the padded batch follows the padding mask to name the line
that leaves it out (tfcheck.probe.padding_trace)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn

from tfcheck.checks.flow.cross_sites import ID, REAL_LENGTHS, ROW_PAD, CrossCall, Sides, max_change
from tfcheck.engine.context import ModelRaised
from tfcheck.model.inputs import with_memory_padding_mask
from tfcheck.probe.flow import Judgement, replace_tokens, tolerance
from tfcheck.probe.padding_trace import PaddingTrace, blame
from tfcheck.recording.hooks import Hook, hooked
from tfcheck.report.findings import Finding, Location, Related
from tfcheck.report.status import Status


@dataclass
class _MemoryTap:
    """Captures the source-side input of the first cross-attention module, pass by pass."""

    modules: list[nn.Module]
    batch: int = 0
    source_length: int = 0
    captured: list = field(default_factory=list)

    def __enter__(self):
        self.installed = hooked(Hook(m, self._hook, pre=True, with_kwargs=True) for m in self.modules)
        self.installed.__enter__()
        return self

    def __exit__(self, *exc):
        self.installed.__exit__(None, None, None)

    def begin(self, batch: int, source_length: int) -> None:
        self.batch, self.source_length = batch, source_length
        self.captured.append(None)

    def _hook(self, module, args, kwargs):
        if self.captured and self.captured[-1] is None:
            sides = Sides(self.batch, -1, self.source_length)
            self.captured[-1] = next((v.detach() for v in (*args, *kwargs.values()) if sides.side(v) == "source"),
                                     None)


def source_padding(ctx, source_length: int, target_length: int, sites: list[CrossCall]) -> Finding:
    subject = ctx.subject
    mask = subject.facts.mask
    pad = subject.facts.pad_id
    features = bool(subject.facts.takes_features)
    tap = _MemoryTap([c.module for c in sites if c.module is not None])
    with tap:
        if mask.argument is not None:
            measured = _pad_content(ctx, source_length, target_length, tap)
        elif features or pad is None:
            return Finding(ID, Status.SKIP, (
                f"not applicable: the model takes no padding mask argument (mask={mask}) and "
                f"{'takes features' if features else 'no pad_id is known'}, so source padding cannot be built; "
                "declare mask=ARGUMENT:CONVENTION, or pad_id=INT and mask=internal if it masks pads inside"))
        else:
            measured = _padded_vs_unpadded(ctx, source_length, target_length, tap)
    judged, evidence, memory_change, memory_tol, padded = measured
    evidence = {**evidence, **judged.evidence(), "mask": str(mask)}
    if not judged.conclusive:
        return Finding(ID, Status.SKIP, (
            f"inconclusive: changing a real source token did not change the decoder output (change "
            f"{judged.control:.3g}, tolerance {judged.tolerance:.3g}), so the probe did not reach it"),
            evidence=evidence)
    if not judged.leaked:
        return Finding(ID, Status.PASS, (
            f"source padding does not reach the decoder output: {evidence['compared']} moved it by "
            f"{judged.largest:.3g} (tolerance {judged.tolerance:.3g}); a real source token moved it by "
            f"{judged.control:.3g}"), Location(module=""), evidence)
    where = _leak_site(sites, memory_change, memory_tol)
    evidence["memory_change_at_real_positions"] = memory_change
    message = (f"source padding leaks into the decoder output: {evidence['compared']} moved it by {judged.largest:.3g} "
               f"(tolerance {judged.tolerance:.3g}). {where}")
    related: tuple[Related, ...] = ()
    if memory_change is not None and memory_change > memory_tol:
        location = Location("", reason="the leak is in the encoder (its output at real positions moved), not in "
                                       "cross-attention: mask.padding names the encoder's line")
    else:
        location, related = _where_the_mask_stops(ctx, source_length, padded, sites[0].path if sites else "")
    if mask.convention == "none":
        return Finding(ID, Status.WARN, (
            f"{message}. The model declares no padding mask (mask=none), so it may never be given padded sources; "
            "declare mask=internal (pads masked inside from pad_id) to make this a failure, or pass the mask"),
            location, evidence, ROW_PAD, related)
    return Finding(ID, Status.FAIL, message, location, evidence, ROW_PAD, related)


def _where_the_mask_stops(ctx, source_length: int, padded: tuple[tuple, dict, int],
                          cross_attention: str) -> tuple[Location, tuple[Related, ...]]:
    """One recorded forward of the padded batch follows the padding mask: the line that leaves it out of
    ``cross_attention`` (the call that passes no mask on, or the scores computed without one)."""
    args, kwargs, batch = padded
    trace = PaddingTrace(ctx.subject.model, batch, source_length)
    try:
        with trace.hooks():
            ctx.record(args, kwargs, f"a recorded forward of the {batch} padded sources (where the padding mask "
                       "goes)", on_op=trace.on_op)
    except ModelRaised as raised:
        return Location(cross_attention, reason=f"the recorded forward that follows the padding mask raised "
                                                f"({type(raised.__cause__).__name__})"), ()
    found = blame(trace, cross_attention)
    return found.location, found.related


def _leak_site(sites: list[CrossCall], memory_change: float | None, memory_tol: float) -> str:
    if memory_change is None:
        return ("Pass the source padding mask to every cross-attention (and to the encoder), e.g. "
                "memory_key_padding_mask for nn.Transformer")
    if memory_change > memory_tol:
        return (f"The encoder output at real positions already changed (by {memory_change:.3g}, tolerance "
                f"{memory_tol:.3g}): the encoder self-attention attends to pads; see mask.padding")
    return (f"The encoder output at real positions did not change (by {memory_change:.3g}), so the leak is in "
            f"cross-attention: '{sites[0].path}' attends to padded memory positions. Pass the source padding mask "
            "to every cross-attention (memory_mask / memory_key_padding_mask)")


def _pad_content(ctx, source_length: int, target_length: int, tap: _MemoryTap):
    """Mask passed in: same real tokens, other content at padded positions, mask unchanged. Two padding
    amounts in one batch, and a real token changed as the positive control."""
    subject = ctx.subject
    gen = torch.Generator().manual_seed(22)
    real = subject.random_primary(2, source_length, gen)
    keep = torch.arange(source_length)[None, :] < torch.tensor(REAL_LENGTHS)[:, None]  # (2, s)
    base = _fill_padding(subject, real, keep, gen)
    other = _other_padding(subject, base, keep, gen)
    control = _change_last_real(subject, base[:1], REAL_LENGTHS[0], gen)
    source = torch.cat([base[:1], other[:1], base[1:], other[1:], control])
    keep5 = torch.cat([keep[:1], keep[:1], keep[1:], keep[1:], keep[:1]]).to(source.device)
    target = _repeat(subject.random_primary(1, target_length, gen), 5)
    args, kwargs = subject.inputs_for(source, target, keep5)
    kwargs = with_memory_padding_mask(subject, kwargs, keep5)
    tap.begin(5, source_length)
    # grad=True keeps nn.TransformerEncoder off its nested-tensor fast path, whose tensors have no shape for
    # the hooks that describe module inputs; the outputs are the same.
    probe = ctx.run(args, kwargs, f"a forward at batch 5, source length {source_length}: real lengths "
                    f"{REAL_LENGTHS}, padded content changed (mask unchanged), a real token changed", grad=True)
    out = probe.output
    leak = max(max_change(out[0], out[1]), max_change(out[2], out[3]))
    judged = Judgement(leak, tolerance(out), max_change(out[0], out[4]))
    memory = tap.captured[-1]
    memory_change = memory_tol = None
    if memory is not None:
        memory_change = max(max_change(memory[0, :REAL_LENGTHS[0]], memory[1, :REAL_LENGTHS[0]]),
                            max_change(memory[2, :REAL_LENGTHS[1]], memory[3, :REAL_LENGTHS[1]]))
        memory_tol = tolerance(memory)
    compared = "changing the source content at padded positions (mask unchanged)"
    return judged, {"compared": compared, "real_lengths": list(REAL_LENGTHS), "source_length": source_length,
                    "memory_key_padding_mask_given": "memory_key_padding_mask" in kwargs}, \
        memory_change, memory_tol or 0.0, (args, kwargs, 5)


def _padded_vs_unpadded(ctx, source_length: int, target_length: int, tap: _MemoryTap):
    """Mask built inside from pad_id: right-padded sources vs the same sources unpadded (real positions keep
    their absolute positions), two padding amounts, and a real token changed as the positive control."""
    subject = ctx.subject
    gen = torch.Generator().manual_seed(23)
    pad = subject.facts.pad_id
    real = subject.random_tokens(2, source_length, gen)
    keep = (torch.arange(source_length, device=real.device)[None, :]
            < torch.tensor(REAL_LENGTHS, device=real.device)[:, None])
    padded = real.masked_fill(~keep, pad)
    control = _change_last_real(subject, padded[:1], REAL_LENGTHS[0], gen)
    target = subject.random_tokens(1, target_length, gen)
    tap.begin(3, source_length)
    padded_inputs = subject.inputs_for(torch.cat([padded, control]), _repeat(target, 3))
    padded_out = ctx.run(*padded_inputs,
                         f"a forward at batch 3, source length {source_length}: right-padded to real lengths "
                         f"{REAL_LENGTHS}, and a real token changed", grad=True).output  # grad: see _pad_content
    padded_memory = tap.captured[-1]
    leak, memory_change = 0.0, None
    for i, n in enumerate(REAL_LENGTHS):
        tap.begin(1, n)
        alone = ctx.run(*subject.inputs_for(real[i:i + 1, :n], target), f"a forward at batch 1, source length {n}: "
                        "the same source unpadded").output
        leak = max(leak, max_change(padded_out[i], alone[0]))
        memory = tap.captured[-1]
        if memory is not None and padded_memory is not None:
            memory_change = max(memory_change or 0.0, max_change(padded_memory[i, :n], memory[0, :n]))
    judged = Judgement(leak, tolerance(padded_out), max_change(padded_out[0], padded_out[2]))
    memory_tol = tolerance(padded_memory) if padded_memory is not None else 0.0
    compared = f"right-padding the source (pad_id={pad}, mask built inside) against the same source unpadded"
    return judged, {"compared": compared, "real_lengths": list(REAL_LENGTHS), "source_length": source_length}, \
        memory_change, memory_tol, (*padded_inputs, 3)


def _fill_padding(subject, real: torch.Tensor, keep: torch.Tensor, gen) -> torch.Tensor:
    keep = keep.to(real.device)
    if real.is_floating_point():
        return torch.where(keep[..., None], real, torch.zeros((), dtype=real.dtype, device=real.device))
    pad = subject.facts.pad_id
    return real.masked_fill(~keep, pad) if pad is not None else real


def _other_padding(subject, base: torch.Tensor, keep: torch.Tensor, gen) -> torch.Tensor:
    keep = keep.to(base.device)
    if base.is_floating_point():
        fresh = torch.randn(base.shape, generator=gen).to(base.device, base.dtype)
        return torch.where(keep[..., None], base, fresh)
    return replace_tokens(subject, base, ~keep, seed=24)


def _change_last_real(subject, seq: torch.Tensor, real_length: int, gen) -> torch.Tensor:
    where = torch.zeros(seq.shape[:2], dtype=torch.bool, device=seq.device)
    where[:, real_length - 1] = True
    if seq.is_floating_point():
        fresh = torch.randn(seq.shape, generator=gen).to(seq.device, seq.dtype)
        return torch.where(where[..., None], fresh, seq)
    return replace_tokens(subject, seq, where, seed=25)


def _repeat(t: torch.Tensor, n: int) -> torch.Tensor:
    return t.expand(n, *t.shape[1:]).clone()
