"""numerics.exp_overflow: a softmax written by hand subtracts its row's maximum before exponentiating.

``exp(x) / exp(x).sum(-1)`` is the textbook formula and a NaN waiting for training: exp overflows to inf once a
logit passes 88.7 in float32 (11.1 in float16), and inf / inf is NaN. At initialisation the logits are small and
every check passes; they grow as the model learns, so the loss turns NaN late, after the training checks have
stopped looking. ``torch.softmax`` and ``F.log_softmax`` subtract the maximum, so ``exp(x - max)`` never exceeds
1; a hand-written one must too.

Read off the shared recorded forward: an ``exp`` whose result is divided by its own sum is a softmax written by
hand, and the largest value it exponentiated tells whether the maximum was subtracted (then it is at most 0).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from tfcheck.engine.registry import check
from tfcheck.probe import recorded_probe
from tfcheck.report.findings import Finding, Location
from tfcheck.report.status import Status

ID = "numerics.exp_overflow"
ROW = "softmax-overflow"
EXPS = frozenset({"exp", "exp_"})
DIVS = frozenset({"div", "div_", "true_divide", "__truediv__", "__itruediv__"})
#: The largest finite exp argument of each dtype: exp overflows to inf past it.
OVERFLOW_AT = {torch.float16: 11.09, torch.bfloat16: 88.72, torch.float32: 88.72, torch.float64: 709.78}


@dataclass
class Exponential:
    """One exp of the recorded forward: the largest value it exponentiated, where, and whether its result was
    then divided by its own sum (a softmax written by hand)."""

    peak: float
    dtype: torch.dtype
    module: str
    file: str | None
    line: int | None
    normalised: bool = False


class _Observer:
    """The exps of the model's forward, their sums, and the divisions of one by the other."""

    def __init__(self, model) -> None:
        self.exps: dict[int, Exponential] = {}  # by the id of the exp's result
        self._sums: dict[int, int] = {}  # id of a sum's result -> id of the exp result it summed

    def __call__(self, event, args, kwargs, out) -> None:
        if not event.model_forward or not event.output_ids:
            return
        name, inputs = event.short_name, event.input_ids
        if name in EXPS and args and isinstance(args[0], torch.Tensor) and args[0].is_floating_point() \
                and args[0].numel():
            self.exps[event.output_ids[0]] = Exponential(float(args[0].detach().amax()), args[0].dtype,
                                                         event.module, event.file, event.line)
        elif name == "sum" and inputs and inputs[0] in self.exps:
            self._sums[event.output_ids[0]] = inputs[0]
        elif name in DIVS and len(inputs) >= 2 and inputs[0] in self.exps and self._sums.get(inputs[1]) == inputs[0]:
            self.exps[inputs[0]].normalised = True


recorded_probe.observer(ID)(_Observer)


@check(ID, "a softmax written by hand subtracts the row maximum before exponentiating", rows=(ROW,), order=67)
def exp_overflow(ctx) -> list[Finding]:
    """One recorded forward (shared): every exp whose result is divided by its own sum must exponentiate values
    of at most 0, i.e. logits minus their maximum."""
    softmaxes = [e for e in recorded_probe.shared(ctx).observed(ID).exps.values() if e.normalised]
    if not softmaxes:
        return [Finding(ID, Status.PASS, "no softmax written by hand (an exp divided by its own sum) in the recorded "
                        "forward: torch's softmax subtracts the maximum itself", Location(module=""),
                        {"softmaxes": 0})]
    evidence = {"softmaxes": [{"module": e.module, "line": f"{e.file}:{e.line}", "largest_exponent": e.peak,
                               "dtype": str(e.dtype).removeprefix("torch.")} for e in softmaxes],
                "tolerance": "largest exponent <= 0 (the row maximum subtracted)"}
    unsafe = [e for e in softmaxes if e.peak > 0]
    if not unsafe:
        many = f"{len(softmaxes)} softmaxes written by hand exponentiate" if len(softmaxes) > 1 else \
            "the softmax written by hand exponentiates"
        return [Finding(ID, Status.PASS, f"{many} values <= 0 (the row maximum is subtracted): exp cannot overflow",
                        Location(module=""), evidence)]
    first = unsafe[0]
    limit = OVERFLOW_AT.get(first.dtype, OVERFLOW_AT[torch.float32])
    half = "" if first.dtype is torch.float16 else f"; {OVERFLOW_AT[torch.float16]:g} in float16"
    return [Finding(ID, Status.FAIL, (
        f"a softmax written by hand (exp divided by its own sum) exponentiates logits without subtracting their "
        f"maximum: the largest was {first.peak:.3g} at initialisation; exp overflows to inf once one passes "
        f"{limit:g} ({str(first.dtype).removeprefix('torch.')}{half}), and inf / inf = NaN. Logits grow "
        "as the model learns, so the loss turns NaN late in training"
        + (f" ({len(unsafe)} such softmaxes)" if len(unsafe) > 1 else "")),
        Location(module=first.module, file=first.file, line=first.line), evidence, row=ROW)]
