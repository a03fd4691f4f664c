"""Which op a look-ahead mask the caller gives reaches in the trial forward, and how that op reads it.

The trial forward gives such an argument a recognisable probe: a bool keep mask, True on and below the diagonal.
The follower tracks it through the model's own conversions (``unsqueeze``, ``== 0``, ``~``, ``&`` with a padding
mask, ``float()``, torch's own bool-to-float conversion) to the first op that applies it to attention scores, and
reads there what the op blocks: ``masked_fill(scores, m, -inf)`` blocks where m is True, ``where(m, scores, -inf)``
where m is False, ``F.scaled_dot_product_attention`` where a bool m is False, torch's multi-head attention where a
bool m is True or a float m is -inf. Comparing the positions blocked with the probe says whether the model reads
True as "may attend" or as "blocked". This is the structure of the call (which op, which positions it blocks),
never the output a check measures.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

#: Ops that take attention scores and a mask to apply to them: (op, index of the mask among the positional
#: arguments, whether True in a bool mask means blocked).
APPLIERS = {"masked_fill": (1, True), "masked_fill_": (1, True), "where": (0, False)}
#: Score additions: a mask added to the scores (as it is, the float 0 / -inf mask; or scaled, mask * -1e9).
ADDS = frozenset({"add", "__add__", "__radd__", "add_", "__iadd__"})
#: torch's attention functions: (op, True when torch's multi-head attention, which reads a bool True as blocked;
#: scaled_dot_product_attention reads it as may attend).
ATTENTION = {"scaled_dot_product_attention": False, "multi_head_attention_forward": True}
#: A float mask value at or below this blocks (-inf, -1e9, torch.finfo.min, -1e4).
BLOCKING = -1e4


@dataclass(frozen=True)
class MaskUse:
    """The first op a caller's look-ahead mask reached that applies it to attention scores."""

    argument: str  # the forward argument the probe mask was given to
    op: str  # the consuming op
    where: str  # the user's line (path:line) or the module it ran in
    #: how the op read the probe: "keep" (it blocks where the probe is False: True = may attend), "blocked" (it
    #: blocks where the probe is True), "additive" (the mask is added to the scores), "" (neither)
    reads: str
    torch_attention: bool  # consumed by torch's multi-head attention (nn.MultiheadAttention, nn.Transformer*)

    def __str__(self) -> str:
        return f"{self.op} ({self.where})"


class MaskFollower:
    """Follows the probe masks given to the forward's look-ahead-mask arguments (``given``: tensor identity ->
    (argument, the probe's (length, length) keep pattern)) to their first consumer."""

    def __init__(self, given: dict[int, tuple[str, torch.Tensor]], lengths: frozenset[int]):
        self.tracked = dict(given)
        self.lengths = lengths
        self.uses: list[MaskUse] = []
        self.alive: list[torch.Tensor] = []

    def on_op(self, name: str, args: tuple, kwargs: dict, inputs: list, outs: list, where: str) -> None:
        marked = [t for t in inputs if id(t) in self.tracked]
        if not marked:
            return
        argument, keep = self.tracked[id(marked[0])]
        if argument in {u.argument for u in self.uses}:
            return
        found = self.consumer(name, args, kwargs, inputs)
        if found is not None:
            reads, torch_attention = found
            self.uses.append(MaskUse(argument, name, where, reads, torch_attention))
            return
        if still_the_mask(name, all(id(t) in self.tracked for t in inputs), outs):
            for o in outs:
                self.alive.append(o)
                self.tracked[id(o)] = (argument, keep)

    def consumer(self, name: str, args: tuple, kwargs: dict, inputs: list) -> tuple[str, bool] | None:
        """(how the op reads the mask, whether it is torch's multi-head attention) when this op applies a
        followed mask to attention scores; None otherwise."""
        if name in ATTENTION:
            mask = kwargs.get("attn_mask", args[3] if name == "scaled_dot_product_attention" and len(args) > 3
                              else None)
            if not isinstance(mask, torch.Tensor) or id(mask) not in self.tracked:
                return None
            true_blocks = ATTENTION[name]
            blocked = (mask if true_blocks else ~mask) if mask.dtype == torch.bool else mask <= BLOCKING
            return self.relation(blocked, self.tracked[id(mask)][1]), ATTENTION[name]
        others = [t for t in inputs if id(t) not in self.tracked]
        if not any(self.scores(t) for t in others):
            return None
        if name in APPLIERS:
            index, true_blocks = APPLIERS[name]
            mask = args[index] if index < len(args) else None
            if not isinstance(mask, torch.Tensor) or id(mask) not in self.tracked:
                return None
            blocked = mask.bool() if true_blocks else ~mask.bool()
            return self.relation(blocked, self.tracked[id(mask)][1]), False
        if name in ADDS:
            # mask * -1e9 added (1 = blocked, the TensorFlow tutorials' convention) blocks where it is True; a
            # mask added as it is must already be the float 0 / -inf one.
            mask = next(t for t in inputs if id(t) in self.tracked)
            blocked = mask <= BLOCKING if mask.dtype != torch.bool else torch.zeros_like(mask)
            return self.relation(blocked, self.tracked[id(mask)][1]) or "additive", False
        return None

    def scores(self, t: torch.Tensor) -> bool:
        return is_scores(t, self.lengths)

    @staticmethod
    def relation(blocked: torch.Tensor, keep: torch.Tensor) -> str:
        """"keep" when the op blocks exactly where the probe keep mask is False, "blocked" when exactly where it
        is True, "" otherwise (a mask combined with something the probe does not show). A padding probe's pattern
        is one row of keys, the same for every sample and query (tfcheck.model.trial.optional_mask), so it is
        compared along the key axis whatever layout the mask took on its way."""
        if keep.dim() == 1:
            if blocked.dim() < 1 or blocked.shape[-1] != keep.shape[0]:
                return ""
            keys = keep.to(blocked.device)
            return "keep" if bool((blocked == ~keys).all()) else "blocked" if bool((blocked == keys).all()) else ""
        if blocked.dim() < 2 or tuple(blocked.shape[-2:]) != tuple(keep.shape):
            return ""
        first = blocked.reshape(-1, *blocked.shape[-2:])[0].to(keep.device)
        if bool((first == ~keep).all()):
            return "keep"
        if bool((first == keep).all()):
            return "blocked"
        return ""


def is_scores(t: torch.Tensor, lengths: frozenset[int]) -> bool:
    """Attention scores: a float tensor with batch (or heads) and query axes before a key axis of a probe
    length. A (length, length) float is a mask being built (torch's own bool-to-float conversion)."""
    return t.is_floating_point() and t.dim() >= 3 and int(t.shape[-1]) in lengths


def still_the_mask(name: str, only_masks_in: bool, outs: list) -> bool:
    """Whether an op's outputs are still the mask followed into it: the mask reshaped, combined with another
    mask, compared or converted (``only_masks_in``: every tensor input is a followed mask), applied to a
    tensor (``zeros.masked_fill(mask, -inf)``), or a bool / integer result (uint8 where it met a ByteTensor).
    An op that mixes it into hidden states does not carry it on."""
    return only_masks_in or name in APPLIERS or any(not o.is_floating_point() for o in outs)


def keep_pattern(value: Any) -> torch.Tensor | None:
    """The (length, length) keep pattern of a probe mask (its first (length, length) slice), or None."""
    if not isinstance(value, torch.Tensor) or value.dim() < 2 or value.shape[-1] != value.shape[-2]:
        return None
    first = value.reshape(-1, *value.shape[-2:])[0]
    return first.bool() if first.dtype == torch.bool else first > BLOCKING
