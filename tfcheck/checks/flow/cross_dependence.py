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

import torch
import torch.nn as nn

from tfcheck.checks.flow.cross_padding import source_padding
from tfcheck.checks.flow.cross_sites import (
    ID,
    REAL_LENGTHS,
    ROW_PAD,
    ROW_SOURCE,
    CrossCall,
    Sides,
    location_of,
    max_change,
    wiring_call,
)
from tfcheck.engine.registry import check
from tfcheck.frames import is_user_frame
from tfcheck.model.inputs import TARGET_LENGTH_DELTA
from tfcheck.model.trial import flat_outputs
from tfcheck.probe.flow import tolerance
from tfcheck.recording.hooks import Hook, hooked
from tfcheck.recording.recorder import user_line
from tfcheck.report.findings import Finding, Location, Related
from tfcheck.report.status import Status


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
    if attribution.evidence.get("unreadable"):
        return [attribution]  # neither half can read the decoder output per sample and position
    findings = [attribution, source_padding(ctx, source_length, target_length, sites)]
    return sorted(findings, key=lambda f: -f.status.severity)  # the worst first: it is the headline


# ----- per-layer attribution ------------------------------------------------------------------------

class _LayerHooks:
    """Pre/post hooks on every module: find the modules that receive both sides, give sample 1 sample 0's
    target-side inputs there, and measure how far their output rows 0 and 1 still differ."""

    def __init__(self, model: nn.Module, sides: Sides):
        self.model, self.sides = model, sides
        self.calls: list[CrossCall] = []
        self.stack: list[int] = []

    def __enter__(self):
        self.installed = hooked(hook for path, module in self.model.named_modules()
                                for hook in (Hook(module, self._pre(path), pre=True, with_kwargs=True),
                                             Hook(module, self._post(), with_kwargs=True)))
        self.installed.__enter__()
        return self

    def __exit__(self, *exc):
        self.installed.__exit__(None, None, None)

    def _pre(self, path: str):
        def hook(module, args, kwargs):
            found = {self.sides.side(v) for v in (*args, *kwargs.values())}
            both = {"target", "source"} <= found
            file, line = user_line()
            self.calls.append(CrossCall(path, type(module).__name__, self.stack[-1] if self.stack else None, both,
                                        module=module, file=file, line=line))
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
                call.change = max_change(out[0], out[1])
                call.tol = tolerance(out[0])
                call.has_output = True
        return hook

    def innermost(self) -> list[CrossCall]:
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


def _deaf_location(deaf: CrossCall, layers: list[CrossCall],
                   calls: list[CrossCall]) -> tuple[Location, tuple[Related, ...]]:
    """Where ``deaf`` should read the source: its call that stands where a layer like it calls the module that reads
    it (the line passing the decoder's own states as keys and values), that call's line in the reading layer as
    related; else the deaf module's forward, where it is the user's code."""
    reading = [c for c in layers if c.change > c.tol]
    found = wiring_call(deaf, reading, calls) if deaf.path else None
    if found is not None:
        wiring, model = found
        return Location(deaf.path, wiring.file, wiring.line), (
            Related("the same call where a layer reads the source", model.file, model.line, model.path),)
    fallback = location_of(deaf)
    if fallback.file and is_user_frame(fallback.file):
        return fallback, ()
    return Location(deaf.path, reason="no layer like it reads the source to show which of its calls should, and its "
                                      "forward is not the user's code"), ()


def _first_per_sample(output, batch: int) -> torch.Tensor | None:
    if isinstance(output, torch.Tensor):
        return output if (not output.is_nested and output.dim() >= 1 and output.shape[0] == batch
                          and output.is_floating_point()) else None
    values = output.values() if isinstance(output, dict) else output if isinstance(output, (tuple, list)) else \
        [getattr(output, k) for k in getattr(output, "__dataclass_fields__", ())]
    for v in values:
        found = _first_per_sample(v, batch) if isinstance(v, (torch.Tensor, tuple, list, dict)) else None
        if found is not None:
            return found
    return None


def _through_each_layer(ctx, source_length: int, target_length: int) -> tuple[Finding, list[CrossCall]]:
    subject = ctx.subject
    gen = torch.Generator().manual_seed(21)
    x, y = subject.random_primary(1, source_length, gen), subject.random_primary(1, source_length, gen)
    t, t2 = subject.random_primary(1, target_length, gen), subject.random_primary(1, target_length, gen)
    args, kwargs = subject.inputs_for(torch.cat([x, y, x, y, x]), torch.cat([t, t, t, t, t2]))
    hooks = _LayerHooks(subject.model, Sides(5, target_length, source_length))
    with hooks:
        probe = ctx.run(args, kwargs, f"a hooked forward at batch 5, source length {source_length}, target length "
                        f"{target_length}: two sources with one target (twice), and another target")
    out = probe.output
    unreadable = flat_outputs.unreadable(subject, out, 5, target_length)
    if unreadable is None and (out.dim() < 1 or out.shape[0] != 5):
        unreadable = f"the output {tuple(out.shape)} has no batch axis first, so samples cannot be compared"
    if unreadable is not None:
        return Finding(ID, Status.SKIP, f"inconclusive: {unreadable}",
                       evidence={"unreadable": True, "output_shape": tuple(out.shape)}), []
    tol = tolerance(out)
    overall, control = max_change(out[2], out[3]), max_change(out[2], out[4])
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
            "value=memory"), Location(module="", reason="no layer reads the source, so no call that does shows which "
            "call should pass it"), evidence, ROW_SOURCE), layers
    deaf = [c for c in layers if c.change <= c.tol]
    if deaf:
        first = deaf[0]
        location, related = _deaf_location(first, layers, hooks.calls)
        names = ", ".join(f"'{c.path}' ({c.cls}, change {c.change:.3g}, tolerance {c.tol:.3g})" for c in deaf)
        reading = [c.path for c in layers if c not in deaf]
        return Finding(ID, Status.FAIL, (
            f"{len(deaf)} of {len(layers)} modules that receive the encoder output ignore it: {names} — with their "
            "target-side inputs held equal, a different source did not change their output"
            + (f" (those that read it: {', '.join(reading)})" if reading else "")
            + ". Their cross-attention reads the decoder's own states: cross_attn(x, x, x) where "
            "cross_attn(x, memory, memory) was meant"), location, evidence, ROW_SOURCE, related), layers
    if not layers:
        return Finding(ID, Status.PASS, (
            f"the decoder output depends on the source (change {overall:.3g}, tolerance {tol:.3g}); no module "
            "receives both a target-length and a source-length tensor, so the dependence could not be attributed "
            "to layers"), Location(module=""), evidence), layers
    return Finding(ID, Status.PASS, (
        f"every one of the {len(layers)} modules that receive the encoder output reads it: with the target held "
        f"equal, a different source moved each ({', '.join(f'{c.path} {c.change:.3g}' for c in layers)}; "
        f"tolerance ≈ {max(c.tol for c in layers):.3g})"), Location(module=""), evidence), layers
