"""mask.padding's right-padding equivalence, where the model builds its mask inside from pad_id: the right-padded
sample's real outputs must match the same sequence unpadded (its positions are unchanged), and where they differ,
the first layer that already differs is named.

Apart from mask_padding.py so that the check fits one screenful; the check calls ``right_padding_equivalence``.
"""
from __future__ import annotations

import torch

from tfcheck.checks.mask import mask_padding_pooled as pooled_out
from tfcheck.probe import flow, layer_capture
from tfcheck.probe.pooled_output import LengthAxis

#: The row of the right-padded sample in mask.padding's layout (left, middle, right).
RIGHT_PADDED = 2


def right_padding_equivalence(ctx, base: torch.Tensor, keep: torch.Tensor, target: torch.Tensor | None,
                              padded_out: torch.Tensor, padded_layers: list,
                              pooled: LengthAxis | None) -> tuple[float | None, str | None]:
    """Largest change of the right-padded sample's real outputs (its pooled states and output, for a pooled output)
    against the same sequence unpadded, and the first layer (in call order) whose real outputs already differ."""
    subject = ctx.subject
    length = int(keep[RIGHT_PADDED].sum())
    row = slice(RIGHT_PADDED, RIGHT_PADDED + 1)
    args, kwargs = subject.inputs_for(base[row, :length], None if target is None else target[:1])
    what = f"the right-padded sample unpadded (length {length})"
    with layer_capture.captured_layers(subject.model, 1, seq_first=subject.facts.batch_first is False) as layers:
        out = pooled_out.states(ctx, args, kwargs, pooled, what).values if pooled is not None else \
            ctx.run(args, kwargs, what).output
    reference = padded_out[row] if target is not None or pooled is not None else padded_out[row, :length]
    if tuple(out.shape) != tuple(reference.shape):
        return None, None
    return float(flow.change_per_position(reference, out).max()), _first_unequal_layer(padded_layers, layers, length)


def _first_unequal_layer(padded: list, unpadded: list, length: int) -> str | None:
    """The first layer whose output for the right-padded sample (its row of ``padded``) differs at its ``length``
    real positions from the same layer's output for the sequence unpadded; the layers are paired in call order."""
    for (path, value), (other_path, alone) in zip(padded, unpadded):
        if path != other_path or value.dim() < 2 or alone.dim() < 2 or alone.shape[1] > value.shape[1]:
            return None  # the calls no longer pair up: nothing more can be told
        positions = min(length, alone.shape[1])
        own = value[RIGHT_PADDED:RIGHT_PADDED + 1, :positions]
        if own.shape != alone[:, :positions].shape:
            continue
        if float(flow.change_per_position(own, alone[:, :positions]).max()) > flow.tolerance(own):
            return path
    return None
