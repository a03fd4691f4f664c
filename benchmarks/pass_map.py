"""Every forward of the probe battery and its call, and what a fused probe plan could share (run: python
benchmarks/pass_map.py [--quick]).

Issue 19 asks for a fused probe plan: probes of different checks with *the same length and the same call* (the
same arguments present, the same flags, a mask given or not) share one batched forward. Before building one, this
measures its ceiling. Each forward the battery runs is listed with its call:
- ``instrumented``: run under an op recorder (a TorchFunctionMode / TorchDispatchMode) or with forward hooks
  beyond tfcheck's own module tracking; its hooks read every row, so other checks' rows cannot join it unseen;
- ``grad`` (a backward follows), ``train`` (train mode), ``autocast``;
- the batch, the length(s) and the arguments: names, and for a tensor the shape after the batch axis.
Forwards whose call is the same (same signature, plain: not instrumented, eval mode, no grad, no autocast) could
run as one batched forward; each group of n such forwards saves n - 1 passes. That sum is what a fused plan could
save, at best (before its per-pass controls and fallbacks). The rest of the battery is listed by why it cannot
share: recorded or hooked, a backward, train mode, a call of its own (a cache, a padding mask, another length).
--quick leaves out the GPT-2-small shape.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn as nn
from battery_benchmark import gpt2_small

# torch has no public way to ask whether a mode is active: a recorded forward runs under one
from torch.overrides import _get_current_function_mode_stack
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

import tfcheck
from tfcheck.battery import all_checks
from tfcheck.engine import context

#: Plain forwards that stay apart by the issue's own rules, with why.
APART = {
    "forward.smoke": "the standard probe (memoised, every check's reference)",
    "batch.independence": "the gate: fusing rows is sound only once it has passed",
    "dropout.eval": "a second eval forward from another random state",
    "shape.contract": "the batch size and length are what it tests",
    # [x, x] then [permuted x, y]: in one batch the permuted copy would sit at another batch index, and a table
    # indexed by the batch row could pass for a positional signal
    "position.sensitivity": "the permuted sequence must sit at the original's batch index",
}


@dataclass(frozen=True)
class Pass:
    check: str
    what: str
    batch: int
    call: tuple  # (name, shape after the batch axis | value) per argument
    instrumented: bool
    grad: bool
    train: bool
    autocast: bool

    @property
    def plain(self) -> bool:
        return not (self.instrumented or self.grad or self.train or self.autocast)

    def why_alone(self) -> str:
        reasons = [w for w, on in (("recorded or hooked", self.instrumented), ("backward", self.grad),
                                   ("train mode", self.train), ("autocast", self.autocast)) if on]
        return ", ".join(reasons) or "a call no other forward makes"


def _argument(name: str, value) -> tuple:
    if isinstance(value, torch.Tensor):
        return name, tuple(value.shape[1:]), str(value.dtype)
    if value is None or isinstance(value, (bool, int, float, str)):
        return name, repr(value)
    return name, type(value).__name__


def _hooks(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


class PassLog:
    """Wraps CheckContext.call: every forward a check runs, with its call."""

    def __init__(self) -> None:
        self.passes: list[Pass] = []
        self.check = "forward.smoke"  # the trial's forwards come first
        self.baseline = 0
        self._original = context.CheckContext.call

    def __enter__(self) -> PassLog:
        log, original = self, self._original

        def call(ctx, args, kwargs, what, tokens, grad=False, model=None):
            target = ctx.subject.model if model is None else model
            batch = tokens // max(1, _length(args, kwargs))
            signature = tuple(_argument(f"arg{i}", a) for i, a in enumerate(args)) + \
                tuple(_argument(k, v) for k, v in sorted(kwargs.items()))
            modes = bool(_get_current_function_mode_stack()) or bool(_get_current_dispatch_mode_stack())
            log.passes.append(Pass(log.check, what, batch, signature, modes or _hooks(target) > log.baseline,
                                   grad, target.training, torch.is_autocast_enabled("cpu")))
            return original(ctx, args, kwargs, what, tokens, grad, model)

        context.CheckContext.call = call  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc) -> None:
        context.CheckContext.call = self._original  # type: ignore[method-assign]


def _length(args, kwargs) -> int:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor) and value.dim() >= 2:
            return int(value.shape[1])
    return 1


def measure(model_or_spec) -> list[Pass]:
    """The model's probe-battery forwards, each with its call and the check that ran it."""
    probe_checks = [c for c in all_checks() if c.group == "probe"]
    with PassLog() as log, _attributed(log, probe_checks):
        tfcheck.run_checks(model_or_spec, only=[c.id for c in probe_checks])
    return log.passes


def shareable(passes: list[Pass]) -> list[list[Pass]]:
    """The forwards grouped by call: a group of n plain forwards of one call could be one batched forward."""
    groups: dict[tuple, list[Pass]] = collections.defaultdict(list)
    for p in passes:
        groups[("plain", p.call) if p.plain and p.check not in APART else ("alone", id(p))].append(p)
    return list(groups.values())


def why(p: Pass) -> str:
    return p.why_alone() if not p.plain else APART.get(p.check) or "plain"


def ceiling_line(passes: list[Pass]) -> str:
    groups = shareable(passes)
    saved = sum(len(g) - 1 for g in groups)
    reasons = collections.Counter(("shareable" if len(g) > 1 else "a call of its own (a cache, another length)")
                                  if why(p) == "plain" else why(p) for g in groups for p in g)
    return (f"a fused plan could save at most {saved} of {len(passes)} forwards; by why they stay apart: "
            + "; ".join(f"{n} {reason}" for reason, n in reasons.most_common()))


def pass_map(name: str, model_or_spec) -> None:
    """Print the model's probe-battery forwards grouped by call, and the fused plan's ceiling."""
    passes = measure(model_or_spec)
    print(f"\n{name}: {len(passes)} forwards in the probe battery")
    print(f"{'check':24s} {'batch':>5s}  {'can share with':28s} call / why alone: what")
    for members in shareable(passes):
        for p in members:
            others = ", ".join(sorted({m.check for m in members if m is not p})) or "-"
            detail = _describe(p.call) if why(p) == "plain" else why(p)
            print(f"{p.check:24s} {p.batch:5d}  {others:28s} {detail}: {p.what[:70]}")
    print(ceiling_line(passes))


@contextlib.contextmanager
def _attributed(log: PassLog, checks: list) -> Iterator[None]:
    """Each check's forwards attributed to it; the hooks already on the model when it starts are not its own.
    The trial's forwards run before the first check's (forward.smoke) and are attributed to it."""
    originals = {c.id: c.func for c in checks}

    def wrapped(chk):
        def func(ctx):
            log.check, log.baseline = chk.id, _hooks(ctx.subject.model)
            return originals[chk.id](ctx)
        return func

    for c in checks:
        object.__setattr__(c, "func", wrapped(c))
    try:
        yield
    finally:
        for c in checks:
            object.__setattr__(c, "func", originals[c.id])


def _describe(call: tuple) -> str:
    return ", ".join(f"{a[0]}{list(a[1]) if isinstance(a[1], tuple) else '=' + str(a[1])}" for a in call)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="leave out the GPT-2-small shape")
    options = parser.parse_args()
    models = [("reference LM", "reference_model:TransformerLM"),
              ("reference seq2seq", "reference_model:Seq2SeqTransformer"),
              ("reference encoder", "reference_model:TransformerEncoder")]
    if not options.quick:
        models.append(("GPT-2 small shape", gpt2_small()))
    for name, model in models:
        pass_map(name, model)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
