"""train.grad_flow: after one backward of a loss over every float output, every trainable parameter has a
finite gradient; those that get none (an unused sublayer, .detach() / .data / torch.no_grad in the path)
and those that get NaN / Inf are named.

The loss projects each float output on fixed random weights: a plain sum would be blind (a LayerNorm's
features sum to its bias). Gradients come from torch.autograd.grad, so no .grad field is touched.
"""
from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator

import torch

from tfcheck.engine.registry import NotApplicable, check
from tfcheck.model.construction_sites import model_line
from tfcheck.model.head import outside_forward
from tfcheck.model.subject import PROBE_BATCH
from tfcheck.probe.hooks import Hook, hooked
from tfcheck.probe.numerics import all_finite
from tfcheck.probe.recorder import Recorder, Recording, tensors_in
from tfcheck.probe.training import graph_cuts, last_cut, random_projection_loss
from tfcheck.report.findings import Finding, Location
from tfcheck.report.status import Status

ID = "train.grad_flow"
#: A gradient whose largest entry is below this share of the largest gradient anywhere counts as zero.
ZERO_SHARE = 1e-12


@check(ID, "one backward gives every trainable parameter a finite gradient",
       rows=("param-gets-no-gradient", "gradient-not-finite"), order=86,
       applies=lambda s: None if any(p.requires_grad for p in s.model.parameters()) else
       NotApplicable("every parameter is frozen (requires_grad=False): there is no gradient to flow"))
def train_grad_flow(ctx) -> list[Finding]:
    """One forward with the graph kept (the probe inputs) and one backward of sum_i <output_i, R_i> over
    the float outputs, R_i fixed random. A parameter with no gradient (autograd.grad gives None: not in
    the graph) fails, named by module; NaN / Inf gradients fail; an exactly zero gradient (a key bias,
    which softmax cancels, or a gate initialised at 0) and frozen parameters are information only."""
    subject = ctx.subject
    named = list(subject.model.named_parameters())
    trainable = [(n, p) for n, p in named if p.requires_grad]
    frozen = [n for n, p in named if not p.requires_grad]
    args, kwargs = subject.make_inputs(PROBE_BATCH, subject.probe_length())
    with _call_order(subject.model) as (order, called_at):
        probe = ctx.run(args, kwargs, "a forward with the graph kept, for one backward", grad=True)
    loss, outputs = random_projection_loss(probe.raw)
    base = {"trainable": len(trainable), "frozen": frozen[:20], "float_outputs_in_loss": outputs,
            "loss": "sum of each float output projected on fixed random weights"}
    if loss is None:
        return [Finding(ID, Status.FAIL, f"no output of the model requires grad: the whole forward is cut off from "
                        f"its {len(trainable)} trainable parameters (torch.no_grad, .detach() or .data around the "
                        "output)", last_cut(ctx, args, kwargs), base, row="param-gets-no-gradient")]
    grads = torch.autograd.grad(loss, [p for _, p in trainable], allow_unused=True)
    ctx.count_backward(probe.batch * probe.length)
    none = [n for (n, _), g in zip(trainable, grads) if g is None]
    # One pass over each gradient for finiteness and one for its peak: for a large model these reductions
    # cost more than the backward itself.
    got = [(n, g) for (n, _), g in zip(trainable, grads) if g is not None]
    finite = {n: all_finite(g) for n, g in got}
    bad = [(n, g) for n, g in got if not finite[n]]
    peak = {n: float(g.detach().abs().amax()) if g.numel() else 0.0 for n, g in got if finite[n]}
    largest = max(peak.values(), default=0.0)
    zero = [n for n, value in peak.items() if value <= largest * ZERO_SHARE]
    evidence = {**base, "no_gradient": none[:20], "non_finite": [n for n, _ in bad][:20], "zero_gradient": zero[:20],
                "largest_gradient": largest, "tolerance": "a gradient for every trainable parameter, all finite"}
    findings = []
    # A module that never ran has no gradient for another reason than one whose output was thrown away: an
    # optional branch (Longformer's global attention runs only with global_attention_mask) looks the same
    # as a layer defined and forgotten, so it is a warning that says both.
    ran = [n for n in none if _module(n) in order]
    recording = None
    if ran:
        # A parameter of a module that ran may still be read only on an optional path (XLNet's segment
        # biases need token_type_ids): one recorded forward, only now, tells unread from thrown away.
        unread, recording = _unread(ctx, args, kwargs, dict(trainable), ran)
        ran = [n for n in ran if n not in unread]
    idle = [n for n in none if n not in ran]
    # Heads forward never calls (its output is d_model wide): the loss applies them, so they are not unused.
    heads = outside_forward(subject)
    spare = [n for n in idle if any(n.startswith(h + ".") for h in heads)]
    idle = [n for n in idle if n not in spare]
    spare_heads = _whole_modules(subject.model, set(spare))
    if spare:
        evidence["heads_outside_forward"] = spare_heads
    if ran:
        culprits = _whole_modules(subject.model, set(ran))
        findings.append(Finding(
            ID, Status.FAIL,
            f"{len(ran)} of {len(trainable)} trainable parameters get no gradient, all of {_listed(culprits)}. "
            "Their module ran, but its output does not reach the model's output with a graph: computed and thrown "
            "away, or cut by .detach(), .data or torch.no_grad",
            _cut_or_call(recording, culprits[0], called_at), {**evidence, "modules": culprits[:20]},
            row="param-gets-no-gradient"))
    if idle:
        culprits = _whole_modules(subject.model, set(idle))
        untaken = _untaken_optional_inputs(subject.model, kwargs)
        if untaken:  # an optional path is a possible story: say both
            status = Status.WARN
            story = (f"Either an optional branch that needs an input tfcheck left at None (forward also takes "
                     f"{', '.join(untaken[:6])}), or a layer defined in __init__ and never used in forward; if it is "
                     "optional, accept=train.grad_flow:REASON")
        else:  # nothing optional is left out: the layer is defined and forgotten
            status = Status.FAIL
            story = "forward takes no optional input tfcheck left out, so the layer is defined and never used"
        findings.append(Finding(ID, status, f"{len(idle)} of {len(trainable)} trainable parameters get no gradient "
                                f"because no op read them in this forward: {_listed(culprits)}. {story}",
                                subject.construction_site(culprits[0]), {**evidence,
                                                                         "modules_never_called": culprits[:20],
                                                               "optional_inputs_left_out": untaken[:20]},
                                row="param-gets-no-gradient"))
    if bad:
        # A non-finite gradient spreads to everything upstream of where it is born: the bad parameter whose
        # module ran last in the forward is nearest its source.
        name, g = max(bad, key=lambda item: order.get(_module(item[0]), -1))
        findings.append(Finding(
            ID, Status.FAIL,
            f"{len(bad)} parameters get NaN/Inf gradients while the loss is {float(loss.detach()):.4g}; nearest "
            f"the output: '{name}' ({int(torch.isnan(g).sum())} NaN, {int(torch.isinf(g).sum())} Inf), so the op "
            f"that makes them sits in or after '{_module(name)}' (everything before it inherits the NaN). Usual "
            "cause: an op with an infinite derivative where it is evaluated (sqrt / log at 0, or in the discarded "
            "branch of torch.where)",
            Location(module=_module(name), reason="a NaN gradient is born in the backward of an op, which has no line "
                     "of its own (numerics.nan_source names the forward op)"), evidence, row="gradient-not-finite"))
    if findings:
        return findings
    notes = []
    if frozen:
        notes.append(f"{len(frozen)} frozen on purpose (requires_grad=False)")
    if spare:
        notes.append(f"{len(spare)} in {_listed(spare_heads)}, which map d_model to the "
                     "vocabulary and which forward never calls: heads the loss applies outside forward")
    if zero:
        notes.append(f"{len(zero)} with an exactly zero gradient, e.g. {zero[0]} (a key bias, which softmax "
                     "cancels, or a gate initialised at 0)")
    tail = f"; {'; '.join(notes)}" if notes else ""
    return [Finding(ID, Status.PASS, f"all {len(trainable)} trainable parameters get a finite gradient "
                    f"(largest {largest:.3g}){tail}", Location(module=""), evidence)]


def _untaken_optional_inputs(model, kwargs: dict) -> list[str]:
    """Forward arguments defaulting to None that the probe did not pass (an optional path may need them)."""
    from tfcheck.model.subject import forward_params

    return [name for name, p in forward_params(model).items()
            if p.default is None and name not in kwargs and p.kind is not p.VAR_KEYWORD]


def _unread(ctx, args: tuple, kwargs: dict, params: dict, names: list[str]) -> tuple[set[str], Recording]:
    """Which of ``names`` no op of a recorded forward took as an input, and that recording (tensor identities
    kept, so a cut applied to a module's output is found)."""

    wanted = {id(params[n]): n for n in names}
    read: set[str] = set()

    def on_op(event, op_args, op_kwargs, out) -> None:
        for t in tensors_in((op_args, op_kwargs)):
            if id(t) in wanted:
                read.add(wanted[id(t)])

    recorder = Recorder(ctx.subject.model, on_op=on_op, track_ids=True)
    with recorder:
        ctx.run(args, kwargs, "a recorded forward, to tell parameters no op read from outputs thrown away")
    return set(names) - read, recorder.recording


def _cut_or_call(recording: Recording | None, module: str, called_at: dict[str, tuple[str, int]]) -> Location:
    """Where a module that ran loses its gradient: the .detach() inside it or on its output, else the line that
    called it and dropped what it returned."""
    cut = next(iter(graph_cuts(recording, module)), None) if recording is not None else None
    if cut is not None and cut.file:
        return Location(module, cut.file, cut.line)
    file, line = called_at.get(module, (None, None))
    if file is not None:
        return Location(module, file, line)
    return Location(module, reason="no .detach() was recorded and no line of your code called the module "
                    "(torch.no_grad or .data cut it, which no op records)")


@contextlib.contextmanager
def _call_order(model) -> Iterator[tuple[dict[str, int], dict[str, tuple[str, int]]]]:
    """(module path -> index of its last call, module path -> the user's line of its first call) in the forward
    run inside the block (hooks removed after)."""
    order: dict[str, int] = {}
    called_at: dict[str, tuple[str, int]] = {}
    ticks = itertools.count()

    def pre(path: str) -> None:
        order[path] = next(ticks)
        if path not in called_at:
            found = model_line()
            if found is not None:
                called_at[path] = found

    with hooked(Hook(module, lambda mod, args, path=path: pre(path), pre=True)
                for path, module in model.named_modules()):
        yield order, called_at


def _whole_modules(model, names: set[str]) -> list[str]:
    """The largest modules all of whose trainable parameters are in ``names`` ('layers.0.self_attn', not its
    four Linears), in model order; a parameter outside any such module is named itself ('layers.0.attn.bias_s')."""
    full: list[str] = []
    for path, module in model.named_modules():
        own = [f"{path}.{n}" if path else n for n, p in module.named_parameters() if p.requires_grad]
        if own and all(n in names for n in own) and not any(path.startswith(f + ".") or f == "" for f in full):
            full.append(path)
    covered = {n for n in names if any(n.startswith(f + ".") or f == "" for f in full)}
    return full + sorted(names - covered)


def _listed(modules: list[str], n: int = 4) -> str:
    shown = ", ".join(f"'{m or '<root>'}'" for m in modules[:n])
    return shown + (f" and {len(modules) - n} more" if len(modules) > n else "")


def _module(param_name: str) -> str:
    return param_name.rpartition(".")[0]


def _modules(names: list[str], n: int = 4) -> str:
    mods = list(dict.fromkeys(_module(x) or "<root>" for x in names))
    return ", ".join(f"'{m}'" for m in mods[:n]) + (f" and {len(mods) - n} more modules" if len(mods) > n else "")
