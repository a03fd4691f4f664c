"""Naming a causal leak: the troubleshooting pattern a leak map shows, and the clues the recorded ops of
one forward give where the map alone cannot tell the causes apart (mask.causal).

Apart from mask_causal.py so that the check reads as measure, judge, report; this module only reads a
map or an op stream, and runs nothing.
"""
from __future__ import annotations

import torch

#: pattern -> (troubleshooting row, what it means)
PATTERNS = {
    "no mask at all": ("inference-worse-than-training",
                       "every position depends on every later one: no causal mask reaches the attention"),
    "diagonal off by one": ("causal-mask-misaligned",
                            "position t depends on t+1 only: the mask's diagonal is shifted by one "
                            "(tril(..., diagonal=1), or triu(..., diagonal=2) for a may-not-attend mask)"),
    "inverted": ("causal-mask-misaligned",
                 "the past does not matter but the future does: the mask is inverted (attends only to "
                 "the future; tril where triu was meant, or a keep mask given where a may-not-attend mask is "
                 "expected)"),
    "normalisation leak": ("causal-mask-ineffective",
                           "the mask is applied after the softmax, so the future still enters the "
                           "normalising sum"),
    "float 0/1 mask added": ("causal-mask-ineffective",
                             "a float 0/1 mask is given to an API that ADDS float masks "
                             "(F.scaled_dot_product_attention, nn.MultiheadAttention), so it shifts scores by "
                             "0 or 1 and masks nothing"),
    "fill value too small": ("causal-mask-ineffective",
                             "masked scores are filled with a value too small to mask (e.g. -1e-12)"),
    "statistics over the sequence": ("sequence-statistics-leak",
                                     "a normalisation or statistic is taken over the sequence axis (e.g. "
                                     "layer_norm over (s, d)), so every position sees the others"),
    "partial leak": ("causal-leak", "some positions depend on later ones, in no shape tfcheck recognises"),
}


def largest_change(dep: torch.Tensor, where: torch.Tensor) -> float:
    """The largest measured entry of the leak map ``dep`` where ``where`` is True (NaN entries were not
    measured); 0 when none was."""
    values = dep[where & ~dep.isnan()]
    return float(values.max()) if values.numel() else 0.0


def shape_pattern(dep: torch.Tensor, tol: float) -> str:
    """The pattern a one-hop leak map shows (the first leaking layer's, else the output's)."""
    n = dep.shape[0]
    forbidden = torch.ones(n, n, dtype=torch.bool).triu(1)
    past = torch.ones(n, n, dtype=torch.bool).tril(-1)
    measured = forbidden & ~dep.isnan()  # rows of non-finite outputs say nothing
    leaked = (dep > tol) & measured
    offsets = {int(k - q) for q, k in leaked.nonzero().tolist()}
    fraction = float(leaked.sum()) / max(int(measured.sum()), 1)
    if offsets == {1}:
        return "diagonal off by one"
    if fraction >= 0.5 and largest_change(dep, past) <= tol:
        return "inverted"
    if fraction >= 0.9:
        return "no mask at all"
    return "partial leak"


class OpClues:
    """What the recorded ops of one forward say about a leak (see ``on_op``)."""

    def __init__(self, n: int):
        self.n = n
        self.found: dict[str, tuple[str, str | None, int | None, str]] = {}  # pattern -> (op, file, line, detail)
        self._softmax_calls: set = set()
        self._masked_before_softmax: set = set()

    def note(self, pattern: str, event, detail: str) -> None:
        self.found.setdefault(pattern, (event.short_name, event.file, event.line, detail))

    def _square(self, t) -> bool:
        return isinstance(t, torch.Tensor) and t.dim() >= 2 and tuple(t.shape[-2:]) == (self.n, self.n)

    def on_op(self, event, args, kwargs, out) -> None:
        name = event.short_name.lower()
        tensors = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
        if event.level == "function":
            self._statistics(event, name, args, kwargs)
            if "softmax" in name and tensors and self._square(tensors[0]):
                self._softmax_calls.add(event.call)
            elif "masked_fill" in name or name in ("where", "mul", "__mul__", "mul_"):
                if any(self._square(t) for t in tensors):
                    if event.call in self._softmax_calls and event.call not in self._masked_before_softmax:
                        self.note("normalisation leak", event, "a mask is applied to the attention weights after "
                                  "the softmax, and none before it")
                    elif "masked_fill" in name:
                        self._masked_before_softmax.add(event.call)
        if "masked_fill" in name:
            value = kwargs.get("value", args[2] if len(args) > 2 else None)
            if isinstance(value, torch.Tensor) and value.numel() == 1:
                value = float(value)
            if isinstance(value, float) and -50 < value < 0 and any(self._square(t) for t in tensors):
                self.note("fill value too small", event, f"masked_fill with value {value:g}")
        if any(k in name for k in ("add", "scaled_dot_product_attention", "multi_head_attention_forward", "baddbmm")):
            for t in tensors:
                if self._square(t) and t.is_floating_point() and _zero_one(t):
                    self.note("float 0/1 mask added", event, f"a float 0/1 tensor of shape {tuple(t.shape)} "
                              f"given to {event.short_name}, which adds it to the scores")
                    break

    def _statistics(self, event, name: str, args, kwargs) -> None:
        x = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if x is None or x.dim() != 3 or x.shape[1] != self.n or x.shape[2] == self.n:
            return
        if name in ("layer_norm", "group_norm"):
            shape = kwargs.get("normalized_shape", args[1] if len(args) > 1 else None)
            if isinstance(shape, (tuple, list, torch.Size)) and len(shape) >= 2:
                self.note("statistics over the sequence", event, f"layer_norm over {tuple(shape)}, which includes "
                          "the sequence axis")
        elif name in ("mean", "var", "std", "sum", "amax", "max", "norm", "var_mean", "std_mean"):
            dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
            dims = dim if isinstance(dim, (tuple, list)) else (dim,)
            if any(isinstance(d, int) and d in (1, -2) for d in dims):
                self.note("statistics over the sequence", event, f"{event.short_name} over dim {dim} of a "
                          f"{tuple(x.shape)} tensor (the sequence axis)")


def _zero_one(t: torch.Tensor) -> bool:
    values = t.detach()
    zero, one = values == 0, values == 1
    return bool((zero | one).all()) and bool(zero.any()) and bool(one.any())
