"""dropout.eval: in eval mode two forwards on the same input are identical; in train mode a model with
dropout gives two different ones."""
from __future__ import annotations

import torch
import torch.nn as nn

from tfcheck.engine.registry import check
from tfcheck.model.inputs import PROBE_BATCH
from tfcheck.probe.flow import change_per_position, pick_rows, tolerance
from tfcheck.probe.training import train_mode
from tfcheck.report.findings import Finding, Location
from tfcheck.report.status import Status

ID = "dropout.eval"
#: Ops that draw random numbers: a dropout kernel, or a hand-written random mask.
RANDOM_OPS = frozenset({"native_dropout", "bernoulli", "bernoulli_", "rand", "rand_like", "randn", "randn_like",
                        "randint", "randint_like", "uniform_", "normal_", "multinomial", "randperm"})


@check(ID, "eval-mode forwards are deterministic; train-mode dropout is active",
       rows=("dropout-in-eval", "dropout-inactive-in-train"), order=87)
def dropout_eval(ctx) -> list[Finding]:
    """Eval mode: two forwards of the probe inputs must agree to float rounding; when they do not, a recorded
    forward names the module whose random op ran. Train mode (set on every module and restored after, buffers
    too): when the model holds dropout with p > 0, train-mode outputs of the same input must differ. Cost: 1
    forward (the memoised probe is the first), 1 more for a model with dropout (2 when a sample and its copy in
    one train-mode batch agree)."""
    subject = ctx.subject
    first = ctx.forward(PROBE_BATCH, subject.probe_length())
    # Every check starts from the same random state, so the memoised probe drew what a forward now would:
    # a seed drawn from that state (deterministic; the guard restores the RNG after the check) makes
    # random ops draw differently.
    seed = int(torch.randint(0, 2**31 - 1, (1,)))
    # Not torch.manual_seed: with CUDA not yet initialised it queues a seed that outlives the guard.
    torch.random.default_generator.manual_seed(seed)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)
    second = ctx.run(first.args, first.kwargs, "the probe's forward again, in eval mode, from another random state")
    tol = tolerance(first.output)
    eval_change = float(change_per_position(first.output, second.output).max())
    dropouts = _dropouts(subject.model)
    evidence = {"eval_change": eval_change, "tolerance": tol,
                "dropout_modules": [f"{n} (p={p})" for n, p in dropouts][:10]}
    if eval_change > tol:
        culprit = _random_op(ctx, first)
        file, line = culprit.pop("file", None), culprit.pop("line", None)
        evidence.update(culprit)
        where = culprit.get("random_op_module")
        return [Finding(ID, Status.FAIL, f"in eval mode two forwards on the same input differ by {eval_change:.3g} "
                        f"(tolerance {tol:.3g}): something random runs at inference"
                        + (f" — {culprit['random_op']} in '{where or '<root>'}' at {culprit['random_op_at']}" if
                           culprit else "") + ". Pass training=self.training to F.dropout, gate SDPA's dropout_p "
                        "on self.training, or use nn.Dropout modules", _random_op_location(where, file, line), evidence,
                        row="dropout-in-eval")]
    if not dropouts:
        return [Finding(ID, Status.PASS, f"eval-mode forwards agree (change {eval_change:.3g} <= {tol:.3g}); the "
                        "model has no dropout module with p > 0, so train mode is not compared", Location(module=""),
                        evidence)]
    train_change, evidence["train_compared"] = _train_change(ctx, first, tol)
    evidence["train_change"] = train_change
    if train_change <= tol:
        return [Finding(ID, Status.WARN, f"the model has {len(dropouts)} dropout modules with p > 0 (e.g. "
                        f"'{dropouts[0][0]}', p={dropouts[0][1]}) but two train-mode forwards are identical (change "
                        f"{train_change:.3g}): dropout never applies, so training runs without its regularisation. "
                        "If it is off on purpose, build it with p=0", subject.construction_site(dropouts[0][0]),
                        evidence, row="dropout-inactive-in-train")]
    return [Finding(ID, Status.PASS, f"eval-mode forwards agree (change {eval_change:.3g} <= {tol:.3g}) and train-mode "
                    f"ones differ ({train_change:.3g}): dropout is on in training only", Location(module=""), evidence)]


def _train_change(ctx, first, tol: float) -> tuple[float, str]:
    """How much train-mode outputs of the same input differ, and what was compared. One forward of the probe
    twice over (each sample beside its own copy): dropout draws per element, so the copies differ when it is on.
    When they do not, that is no verdict yet (a dropout over a tensor broadcast across the batch draws one mask for
    every sample): a second forward compares the two calls, as a model that keeps dropout off looks the same in
    both."""
    batch = first.batch
    twice = pick_rows([(first.args, first.kwargs)], [(0, r % batch) for r in range(2 * batch)], batch)
    with train_mode(ctx.subject.model):
        a = ctx.run(*twice, f"a forward in train mode of the probe twice over (batch {2 * batch})")
        out = a.output
        if out.dim() >= 1 and out.shape[0] == 2 * batch:
            within = float(change_per_position(out[:batch], out[batch:]).max())
            if within > tol:
                return within, f"each sample and its copy in one train-mode forward (batch {2 * batch})"
        b = ctx.run(*twice, "the same forward again, in train mode")
    return float(change_per_position(a.output, b.output).max()), "two train-mode forwards of the same input"


def _random_op_location(module: str | None, file: str | None, line: int | None) -> Location:
    if file and line:
        return Location(module if module is not None else "", file, line)
    return Location(module if module is not None else "", reason="no random op was recorded in the eval forward "
                    "(the forwards differ for another reason: a non-deterministic kernel or state kept between "
                    "calls), so no line is known")


def _dropouts(model: nn.Module) -> list[tuple[str, float]]:
    """Dropout modules with p > 0, and nn.MultiheadAttention with attention dropout."""
    out = []
    for name, m in model.named_modules():
        if isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0:
            out.append((name, m.p))
        elif isinstance(m, nn.MultiheadAttention) and m.dropout > 0:
            out.append((name, m.dropout))
    return out


def _random_op(ctx, probe) -> dict:
    """One recorded eval forward: the first dispatcher op that draws random numbers (a dropout kernel or a
    hand-written random mask), with its module and the user's line."""
    found: dict = {}

    def on_op(event, args, kwargs, out):
        if not found and event.level == "aten" and event.short_name in RANDOM_OPS:
            found.update(random_op=event.short_name, random_op_module=event.module,
                         random_op_at=f"{event.file}:{event.line}", file=event.file, line=event.line)

    ctx.record(probe.args, probe.kwargs, "a recorded eval forward, to find the random op", on_op=on_op)
    return found
