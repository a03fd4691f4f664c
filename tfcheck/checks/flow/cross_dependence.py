"""cross.dependence: a seq2seq decoder reads the source through every cross-attention layer, and never
reads the source's padding.

Per layer: one pass of batch 5 — (x, t), (y, t), then (x, t), (y, t), (x, t2) untouched — with a pre-hook
on every module that receives both a target-length and a source-length tensor (a decoder layer, its
cross-attention). The hook gives sample 1 sample 0's target-side inputs, so what still differs at that
module's output can only come from the source side: a module whose output does not move ignores the
memory (cross-attention wired to the decoder's own states). Samples 2 and 3 measure the whole decoder's
dependence on the source; sample 4 (another target) is the positive control.

Padding: where the mask is passed in, change the source tokens at padded positions (mask unchanged);
where it is built inside from pad_id, compare padded with unpadded sources. The decoder output must not
move; the memory entering cross-attention says whether the leak is in the encoder or in cross-attention.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from tfcheck.report.findings import Finding, Location
from tfcheck.probe.flow import Judgement, replace_tokens, tolerance
from tfcheck.engine.registry import check
from tfcheck.report.status import Status
from tfcheck.model.subject import TARGET_LENGTH_DELTA

ID = "cross.dependence"
ROW_SOURCE = "cross-attention-ignores-source"
ROW_PAD = "source-padding-reaches-cross-attention"
#: Real source lengths of the padded samples: distinct from the target length, the head count and each other.
REAL_LENGTHS = (3, 6)


@check(ID, "the decoder reads the source through every cross-attention layer, and not the source's padding",
       rows=(ROW_SOURCE, ROW_PAD), kinds=("seq2seq",), order=55, builds_inputs=True)
def cross_dependence(ctx) -> list[Finding]:
    """One hooked pass of batch 5 attributes the source dependence to each cross-attention; one pass of
    batch 5 (pad content changed, mask unchanged) or three small ones (padded vs unpadded) test padding."""
    subject = ctx.subject
    source_length = max(subject.probe_length(), max(REAL_LENGTHS) + 1)
    target_length = max(1, subject.probe_length() + TARGET_LENGTH_DELTA)
    if source_length == target_length:
        target_length = max(1, source_length - 2)
    attribution, sites = _through_each_layer(ctx, source_length, target_length)
    findings = [attribution, _source_padding(ctx, source_length, target_length, sites)]
    return sorted(findings, key=lambda f: -f.status.severity)  # the worst first: it is the headline


# ----- per-layer attribution ------------------------------------------------------------------------

@dataclass
class _Call:
    path: str
    cls: str
    parent: int | None
    both: bool  # receives a target-length and a source-length tensor
    change: float = 0.0
    tol: float = 0.0
    has_output: bool = False
    module: nn.Module | None = None


@dataclass
class _Sides:
    """Which per-sample tensors are target-side and which source-side, by their length axis."""

    batch: int
    target_length: int
    source_length: int

    def side(self, value) -> str | None:
        if isinstance(value, torch.Tensor) and not value.is_nested and value.dim() >= 2 and value.shape[0] == self.batch:
            if value.shape[1] == self.target_length:
                return "target"
            if value.shape[1] == self.source_length:
                return "source"
        return None


class _LayerHooks:
    """Pre/post hooks on every module: find the modules that receive both sides, give sample 1 sample 0's
    target-side inputs there, and measure how far their output rows 0 and 1 still differ."""

    def __init__(self, model: nn.Module, sides: _Sides):
        self.model, self.sides = model, sides
        self.calls: list[_Call] = []
        self.stack: list[int] = []
        self.handles: list = []

    def __enter__(self):
        try:
            for path, module in self.model.named_modules():
                self.handles.append(module.register_forward_pre_hook(self._pre(path), with_kwargs=True))
                self.handles.append(module.register_forward_hook(self._post(), with_kwargs=True))
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def _pre(self, path: str):
        def hook(module, args, kwargs):
            found = {self.sides.side(v) for v in (*args, *kwargs.values())}
            both = {"target", "source"} <= found
            self.calls.append(_Call(path, type(module).__name__, self.stack[-1] if self.stack else None, both,
                                    module=module))
            self.stack.append(len(self.calls) - 1)
            if not both:
                return None
            return tuple(self._same_target(a) for a in args), {k: self._same_target(v) for k, v in kwargs.items()}
        return hook

    def _same_target(self, value):
        if self.sides.side(value) != "target":
            return value
        value = value.clone()
        value[1] = value[0]
        return value

    def _post(self):
        def hook(module, args, kwargs, output):
            if not self.stack:
                return
            call = self.calls[self.stack.pop()]
            out = _first_per_sample(output, self.sides.batch)
            if call.both and out is not None:
                call.change = _change(out[0], out[1])
                call.tol = tolerance(out[0])
                call.has_output = True
        return hook

    def innermost(self) -> list[_Call]:
        """Modules receiving both sides none of whose descendants does: the cross-attentions themselves, or
        the decoder layer whose cross-attention was given no memory."""
        covered = set()
        for call in self.calls:
            if call.both:
                parent = call.parent
                while parent is not None:
                    covered.add(parent)
                    parent = self.calls[parent].parent
        return [c for i, c in enumerate(self.calls) if c.both and i not in covered and c.has_output]


def _first_per_sample(output, batch: int) -> torch.Tensor | None:
    if isinstance(output, torch.Tensor):
        return output if not output.is_nested and output.dim() >= 1 and output.shape[0] == batch and output.is_floating_point() else None
    values = output.values() if isinstance(output, dict) else output if isinstance(output, (tuple, list)) else \
        [getattr(output, k) for k in getattr(output, "__dataclass_fields__", ())]
    for v in values:
        found = _first_per_sample(v, batch) if isinstance(v, (torch.Tensor, tuple, list, dict)) else None
        if found is not None:
            return found
    return None


def _change(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    diff = torch.nan_to_num((a.detach().double() - b.detach().double()).abs(), nan=float("inf"))
    return float(diff.max()) if diff.numel() else 0.0


def _through_each_layer(ctx, source_length: int, target_length: int) -> tuple[Finding, list[_Call]]:
    subject = ctx.subject
    gen = torch.Generator().manual_seed(21)
    x, y = subject.random_primary(1, source_length, gen), subject.random_primary(1, source_length, gen)
    t, t2 = subject.random_primary(1, target_length, gen), subject.random_primary(1, target_length, gen)
    args, kwargs = subject.inputs_for(torch.cat([x, y, x, y, x]), torch.cat([t, t, t, t, t2]))
    hooks = _LayerHooks(subject.model, _Sides(5, target_length, source_length))
    with hooks:
        probe = ctx.run(args, kwargs, f"a hooked forward at batch 5, source length {source_length}, target length "
                        f"{target_length}: two sources with one target (twice), and another target")
    out = probe.output
    tol = tolerance(out)
    overall, control = _change(out[2], out[3]), _change(out[2], out[4])
    layers = hooks.innermost()
    evidence = {"source_length": source_length, "target_length": target_length,
                "decoder_output_change_when_the_source_changes": overall, "tolerance": tol,
                "positive_control_change": control,
                "per_module_change_from_the_source_alone": {c.path or "<root>": {"change": c.change, "tolerance": c.tol}
                                                           for c in layers}}
    if control <= tol:
        return Finding(ID, Status.SKIP, f"inconclusive: changing the target did not change the output (change "
                       f"{control:.3g}, tolerance {tol:.3g}), so the probe did not reach it", evidence=evidence), layers
    if overall <= tol:
        return Finding(ID, Status.FAIL, (
            f"the decoder output does not depend on the source at all: a completely different source changed it by "
            f"{overall:.3g} (tolerance {tol:.3g}), while another target changed it by {control:.3g}. The encoder "
            "output (memory) never reaches the decoder: give each decoder layer's cross-attention key=memory, "
            "value=memory"), Location(module=""), evidence, ROW_SOURCE), layers
    deaf = [c for c in layers if c.change <= c.tol]
    if deaf:
        first = deaf[0]
        names = ", ".join(f"'{c.path}' ({c.cls}, change {c.change:.3g}, tolerance {c.tol:.3g})" for c in deaf)
        reading = [c.path for c in layers if c not in deaf]
        return Finding(ID, Status.FAIL, (
            f"{len(deaf)} of {len(layers)} modules that receive the encoder output ignore it: {names} — with their "
            "target-side inputs held equal, a different source did not change their output"
            + (f" (those that read it: {', '.join(reading)})" if reading else "")
            + ". Their cross-attention reads the decoder's own states: cross_attn(x, x, x) where "
            "cross_attn(x, memory, memory) was meant"), _location(first), evidence, ROW_SOURCE), layers
    if not layers:
        return Finding(ID, Status.PASS, (
            f"the decoder output depends on the source (change {overall:.3g}, tolerance {tol:.3g}); no module "
            "receives both a target-length and a source-length tensor, so the dependence could not be attributed "
            "to layers"), Location(module=""), evidence), layers
    return Finding(ID, Status.PASS, (
        f"every one of the {len(layers)} modules that receive the encoder output reads it: with the target held "
        f"equal, a different source moved each ({', '.join(f'{c.path} {c.change:.3g}' for c in layers)}; "
        f"tolerance ≈ {max(c.tol for c in layers):.3g})"), Location(module=""), evidence), layers


def _location(call: _Call) -> Location:
    try:
        cls = type(call.module)
        return Location(module=call.path, file=inspect.getsourcefile(cls), line=inspect.getsourcelines(cls.forward)[1])
    except (TypeError, OSError, AttributeError):
        return Location(module=call.path)


# ----- source padding -------------------------------------------------------------------------------

@dataclass
class _MemoryTap:
    """Captures the source-side input of the first cross-attention module, pass by pass."""

    modules: list[nn.Module]
    batch: int = 0
    source_length: int = 0
    captured: list = field(default_factory=list)

    def __enter__(self):
        self.handles = [m.register_forward_pre_hook(self._hook, with_kwargs=True) for m in self.modules]
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()

    def begin(self, batch: int, source_length: int) -> None:
        self.batch, self.source_length = batch, source_length
        self.captured.append(None)

    def _hook(self, module, args, kwargs):
        if self.captured and self.captured[-1] is None:
            sides = _Sides(self.batch, -1, self.source_length)
            self.captured[-1] = next((v.detach() for v in (*args, *kwargs.values()) if sides.side(v) == "source"),
                                     None)


def _source_padding(ctx, source_length: int, target_length: int, sites: list[_Call]) -> Finding:
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
    judged, evidence, memory_change, memory_tol = measured
    evidence = {**evidence, **judged.evidence(), "mask": str(mask)}
    if not judged.conclusive:
        return Finding(ID, Status.SKIP, (
            f"inconclusive: changing a real source token did not change the decoder output (change "
            f"{judged.control:.3g}, tolerance {judged.tolerance:.3g}), so the probe did not reach it"), evidence=evidence)
    if not judged.leaked:
        return Finding(ID, Status.PASS, (
            f"source padding does not reach the decoder output: {evidence['compared']} moved it by "
            f"{judged.largest:.3g} (tolerance {judged.tolerance:.3g}); a real source token moved it by "
            f"{judged.control:.3g}"), Location(module=""), evidence)
    where = _leak_site(sites, memory_change, memory_tol)
    evidence["memory_change_at_real_positions"] = memory_change
    message = (f"source padding leaks into the decoder output: {evidence['compared']} moved it by {judged.largest:.3g} "
               f"(tolerance {judged.tolerance:.3g}). {where}")
    if mask.convention == "none":
        return Finding(ID, Status.WARN, (
            f"{message}. The model declares no padding mask (mask=none), so it may never be given padded sources; "
            "declare mask=internal (pads masked inside from pad_id) to make this a failure, or pass the mask"),
            Location(module=""), evidence, ROW_PAD)
    location = Location(module=sites[0].path) if sites and memory_change is not None and memory_change <= memory_tol \
        else Location(module="")
    return Finding(ID, Status.FAIL, message, location, evidence, ROW_PAD)


def _leak_site(sites: list[_Call], memory_change: float | None, memory_tol: float) -> str:
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
    kwargs = _with_memory_mask(subject, args, kwargs, keep5)
    tap.begin(5, source_length)
    # grad=True keeps nn.TransformerEncoder off its nested-tensor fast path, whose tensors have no shape for
    # the hooks that describe module inputs; the outputs are the same.
    probe = ctx.run(args, kwargs, f"a forward at batch 5, source length {source_length}: real lengths "
                    f"{REAL_LENGTHS}, padded content changed (mask unchanged), a real token changed", grad=True)
    out = probe.output
    leak = max(_change(out[0], out[1]), _change(out[2], out[3]))
    judged = Judgement(leak, tolerance(out), _change(out[0], out[4]))
    memory = tap.captured[-1]
    memory_change = memory_tol = None
    if memory is not None:
        memory_change = max(_change(memory[0, :REAL_LENGTHS[0]], memory[1, :REAL_LENGTHS[0]]),
                            _change(memory[2, :REAL_LENGTHS[1]], memory[3, :REAL_LENGTHS[1]]))
        memory_tol = tolerance(memory)
    compared = "changing the source content at padded positions (mask unchanged)"
    return judged, {"compared": compared, "real_lengths": list(REAL_LENGTHS), "source_length": source_length,
                    "memory_key_padding_mask_given": "memory_key_padding_mask" in kwargs}, \
        memory_change, memory_tol or 0.0


def _padded_vs_unpadded(ctx, source_length: int, target_length: int, tap: _MemoryTap):
    """Mask built inside from pad_id: right-padded sources vs the same sources unpadded (real positions keep
    their absolute positions), two padding amounts, and a real token changed as the positive control."""
    subject = ctx.subject
    gen = torch.Generator().manual_seed(23)
    pad = subject.facts.pad_id
    real = subject.random_tokens(2, source_length, gen)
    keep = torch.arange(source_length, device=real.device)[None, :] < torch.tensor(REAL_LENGTHS, device=real.device)[:, None]
    padded = real.masked_fill(~keep, pad)
    control = _change_last_real(subject, padded[:1], REAL_LENGTHS[0], gen)
    target = subject.random_tokens(1, target_length, gen)
    tap.begin(3, source_length)
    padded_out = ctx.run(*subject.inputs_for(torch.cat([padded, control]), _repeat(target, 3)),
                         f"a forward at batch 3, source length {source_length}: right-padded to real lengths "
                         f"{REAL_LENGTHS}, and a real token changed", grad=True).output  # grad: see _pad_content
    padded_memory = tap.captured[-1]
    leak, memory_change = 0.0, None
    for i, n in enumerate(REAL_LENGTHS):
        tap.begin(1, n)
        alone = ctx.run(*subject.inputs_for(real[i:i + 1, :n], target), f"a forward at batch 1, source length {n}: "
                        "the same source unpadded").output
        leak = max(leak, _change(padded_out[i], alone[0]))
        memory = tap.captured[-1]
        if memory is not None and padded_memory is not None:
            memory_change = max(memory_change or 0.0, _change(padded_memory[i, :n], memory[0, :n]))
    judged = Judgement(leak, tolerance(padded_out), _change(padded_out[0], padded_out[2]))
    memory_tol = tolerance(padded_memory) if padded_memory is not None else 0.0
    compared = f"right-padding the source (pad_id={pad}, mask built inside) against the same source unpadded"
    return judged, {"compared": compared, "real_lengths": list(REAL_LENGTHS), "source_length": source_length}, \
        memory_change, memory_tol


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


def _with_memory_mask(subject, args: tuple, kwargs: dict, keep: torch.Tensor) -> dict:
    """nn.Transformer takes the source padding twice: src_key_padding_mask for the encoder and
    memory_key_padding_mask for cross-attention, as documented. Give both when the forward has both."""
    try:
        params = inspect.signature(subject.model.forward).parameters
    except (TypeError, ValueError):
        return kwargs
    mask = subject.facts.mask
    if "memory_key_padding_mask" in params and mask.argument in kwargs and "memory_key_padding_mask" not in kwargs:
        return {**kwargs, "memory_key_padding_mask": kwargs[mask.argument]}
    return kwargs


def _repeat(t: torch.Tensor, n: int) -> torch.Tensor:
    return t.expand(n, *t.shape[1:]).clone()
