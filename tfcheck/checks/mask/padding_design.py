"""Designs that read padded positions by construction, told from the ops of one recorded forward.

A padding leak born in a convolution over the positions (ConvBERT's span convolution, Nystromformer's convolution
of the values, a causal conv1d in front of a recurrence) or in a shift of the sequence by whole positions (a
trigram embedding that concatenates the sequence shifted by one, RWKV's time shift) is the op doing what it is
for: its kernel, or its shift, reaches neighbouring positions and, at a real token beside a pad, the pad. Where the
padding mask does reach the attention scores of the same forward, such a leak is a design to report (WARN, with
the op and the line), not a mask to fix. Where the mask reaches no scores at all, the leak stays a failure: an
ignored mask is no design.

A strided mixer (Canine's convolution of characters into molecules, kernel and stride config.downsampling_rate)
reads the pads in every window that holds real tokens and pads, and the leak shows only where the resampled
sequence comes back to the padded length: that op is traced back, through tensors without the padded length, to
the mixer that made them from the padded sequence. It is a design only where the attention over the resampled
sequence masks it per sample too (Canine pools the mask with the sequence); else pads reach real tokens there.

Told from op names only (the torch functions a local mixer over positions is made of), never from a class name.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from tfcheck.checks.mask.resampled import ResampledSequence
from tfcheck.frames import short_path
from tfcheck.recording.recorder import OpEvent, tensors_in

#: torch functions whose output at a position reads a window of neighbouring positions (convolutions, unfold) or
#: another position outright (a pad or roll that shifts the sequence).
LOCAL_MIXERS = {
    "conv1d": "a convolution over the positions",
    "conv2d": "a convolution over the positions",
    "conv3d": "a convolution over the positions",
    "conv_transpose1d": "a transposed convolution over the positions",
    "unfold": "a window unfolded over the positions",
    "pad": "a shift of the sequence by whole positions (padded at one end)",
    "roll": "a shift of the sequence by whole positions (rolled)",
}


@dataclass(frozen=True)
class LocalMixing:
    """The op where pads first reach real outputs, when it is a local mixer over positions."""

    event: OpEvent
    op: str
    what: str
    where: str
    applied_at: str
    resampled: dict | None = None  # the resampled sequence the pads went through, where they did

    def explain(self) -> str:
        through = ("through the sequence it resamples (the padding mask, resampled with it, reaches that sequence's "
                   "attention too), a window that holds real tokens and pads reading the pads by construction"
                   if self.resampled else
                   "at a real token beside a pad its window (or shift) reading the pad by construction")
        reach = "are first read" if self.resampled else "first reach real outputs"
        return (f"padding read by design ({self.what}): the pads {reach} in '{self.op}' at "
                f"{self.where}, {through}; the padding mask does reach "
                f"the attention scores ({self.applied_at}), so this is the design of that op, not a missing mask. "
                "If padded batches must give the same real outputs as unpadded ones, zero the pads' hidden states "
                "before that op; if this design is meant, accept=mask.padding:REASON")

    def evidence(self) -> dict:
        found = {"op": self.op, "line": self.where, "mixes": self.what, "mask_applied_at": self.applied_at}
        return {**found, "resampled": self.resampled} if self.resampled else found


#: Ops that take a window of their input as it is: a leak first seen in one of them (a convolution padded on both
#: sides and cut back to the sequence's length, ``conv1d(x)[..., :n]``) was born in the op that made its input.
SELECTIONS = frozenset({"__getitem__", "narrow", "contiguous", "transpose", "permute", "view", "reshape"})



@dataclass
class MixerOutputs:
    """``on_op`` for a recorded forward: the outputs of local mixers (kept alive, so their ids stay theirs) and the
    input ids of every op, so that the mixer a selection was cut from can be found; with ``rows`` and ``length``
    (the rows of the pass, its padded length), also the sequence a strided mixer resamples (ResampledSequence)."""

    rows: int = 0
    length: int = 0
    made_by: dict[int, OpEvent] = field(default_factory=dict)
    inputs_of: dict[int, tuple[int, ...]] = field(default_factory=dict)
    resampled: ResampledSequence | None = None
    _alive: list[torch.Tensor] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.rows and self.length and self.resampled is None:
            self.resampled = ResampledSequence(self.rows, self.length)

    def on_op(self, event: OpEvent, args: tuple, kwargs: dict, out: Any) -> None:
        if not event.model_forward:
            return
        if event.short_name in SELECTIONS:
            self.inputs_of[event.index] = tuple(id(t) for t in tensors_in((args, kwargs)))
        if event.short_name.lower() in LOCAL_MIXERS:
            for t in tensors_in(out):
                self._alive.append(t)
                self.made_by[id(t)] = event
        if self.resampled is not None:
            self.resampled.on_op(event, args, kwargs, out)

    def mixer_behind(self, event: OpEvent) -> OpEvent | None:
        """The local mixer ``event`` is (or whose output ``event``, a selection, cut a window of)."""
        if event.short_name.lower() in LOCAL_MIXERS:
            return event
        return next((self.made_by[i] for i in self.inputs_of.get(event.index, ()) if i in self.made_by), None)


def local_mixing(born: OpEvent | None, applied: list, mixers: MixerOutputs) -> LocalMixing | None:
    """``born``: the first op whose real outputs moved with the pads (LeakOrigin); ``applied``: the ops that apply
    the padding mask to attention scores (PaddingTrace.applied). A LocalMixing where the leak is born in a local
    mixer over positions, or reaches the padded length again from the sequence such a mixer resampled (whose own
    attention masks it per sample), while the mask reaches some scores; None otherwise."""
    if born is None or not applied:
        return None
    mixer = mixers.mixer_behind(born)
    applied_at = _where(applied[0].event)
    if mixer is not None:
        name = mixer.short_name.lower()
        return LocalMixing(mixer, name, LOCAL_MIXERS[name], _where(mixer), applied_at)
    resampling = mixers.resampled.behind(born) if mixers.resampled is not None else None
    if resampling is None or not resampling.masked:
        return None
    name = resampling.mixer.short_name.lower()
    what = (f"{LOCAL_MIXERS[name]} that resamples the {mixers.length} positions to {resampling.to_length}, whose "
            f"output comes back to the padded length in '{born.short_name}' at {_where(born)}")
    return LocalMixing(resampling.mixer, name, what, _where(resampling.mixer), applied_at, resampling.evidence())


def _where(event: OpEvent) -> str:
    place = f"{short_path(event.file)}:{event.line}" if event.file else "an op outside the user's code"
    return f"{place} (module '{event.module or '<root>'}')"
