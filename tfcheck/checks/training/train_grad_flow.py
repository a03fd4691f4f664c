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
from dataclasses import dataclass

import torch

from tfcheck.checks.training.inference_only import inference_only_design
from tfcheck.engine.registry import NotApplicable, check
from tfcheck.model.build.construction_sites import model_line
from tfcheck.model.inputs import PROBE_BATCH
from tfcheck.model.trial.head import outside_forward
from tfcheck.probe.numerics import all_finite
from tfcheck.probe.param_flow import Flow, GradWatch, trace
from tfcheck.probe.training import graph_cuts, last_cut, loss_outputs, random_projection_loss
from tfcheck.recording.hooks import Hook, hooked
from tfcheck.recording.recorder import Recorder, Recording, tensors_in
from tfcheck.report.findings import Finding, Location
from tfcheck.report.status import Status

ID = "train.grad_flow"
#: A gradient whose largest entry is below this share of the largest gradient anywhere counts as zero.
ZERO_SHARE = 1e-12


@check(ID, "one backward gives every trainable parameter a finite gradient",
       rows=("param-gets-no-gradient", "gradient-only-through-indices", "gradient-not-finite"), order=86,
       applies=lambda s: inference_only_design(s) or (None if any(p.requires_grad for p in s.model.parameters()) else
       NotApplicable("every parameter is frozen (requires_grad=False): there is no gradient to flow")))
def train_grad_flow(ctx) -> list[Finding]:
    """One forward with the graph kept (the probe inputs) and one backward of sum_i <output_i, R_i> over
    the float outputs, R_i fixed random. A parameter with no gradient (autograd.grad gives None: not in
    the graph) fails, named by module, unless where its module's values went (tfcheck.probe.param_flow) shows a
    correct design: then it warns and says which; NaN / Inf gradients fail; an exactly zero gradient (a key bias,
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
    recorded = None
    if ran:
        # A parameter of a module that ran may still be read only on an optional path (XLNet's segment
        # biases need token_type_ids): one recorded forward, only now, tells unread from thrown away.
        unread, recorded = _unread(ctx, args, kwargs, dict(trainable), ran)
        ran = [n for n in ran if n not in unread]
    idle = [n for n in none if n not in ran]
    # Heads forward never calls (its output is d_model wide): the loss applies them, so they are not unused.
    heads = outside_forward(subject)
    spare = [n for n in idle if any(n.startswith(h + ".") for h in heads)]
    idle = [n for n in idle if n not in spare]
    spare_heads = _whole_modules(subject.model, set(spare))
    if spare:
        evidence["heads_outside_forward"] = spare_heads
    if ran and recorded is not None:
        findings += _ran_findings(recorded, subject, ran, len(trainable), evidence, called_at)
    if idle:
        culprits = _whole_modules(subject.model, set(idle))
        untaken = _untaken_optional_inputs(subject.model, kwargs)
        if untaken:  # an optional path is a possible story: say both
            status = Status.WARN
            story = ("Either an optional branch that needs an input or a switch tfcheck left at its default (forward "
                     f"also takes {', '.join(untaken[:6])}), or a layer defined in __init__ and never used in forward; "
                     "if it is optional, accept=train.grad_flow:REASON")
        else:  # nothing optional is left out: the layer is defined and forgotten
            status = Status.FAIL
            story = ("forward takes no optional input or switch tfcheck left out, so the layer is defined and never "
                     "used")
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
    """Forward arguments the probe did not pass that may open an optional path: an input defaulting to None, or a
    switch defaulting to False (``return_loss=False``: a hierarchical LM trains its latent predictors only in the
    loss branch), named with that default."""
    from tfcheck.model.facts.structure import forward_params

    params = [(name, p) for name, p in forward_params(model).items()
              if name not in kwargs and p.kind is not p.VAR_KEYWORD]
    return [name for name, p in params if p.default is None] + \
        [f"{name}=False" for name, p in params if p.default is False]


@dataclass
class Recorded:
    """The recorded forward that tells unread parameters from thrown-away outputs, and what the flow of a
    module's values is judged on: which tensors required grad at each op, and the outputs the loss reads."""

    recording: Recording
    watch: GradWatch
    loss: set[int]


def _unread(ctx, args: tuple, kwargs: dict, params: dict, names: list[str]) -> tuple[set[str], Recorded]:
    """Which of ``names`` no op of a recorded forward took as an input, and that forward (tensor identities
    kept, so a cut applied to a module's output is found; the graph kept, so where it is cut is seen)."""

    wanted = {id(params[n]): n for n in names}
    read: set[str] = set()
    watch = GradWatch()

    def on_op(event, op_args, op_kwargs, out) -> None:
        watch.on_op(event, op_args, op_kwargs, out)
        for t in tensors_in((op_args, op_kwargs)):
            if id(t) in wanted:
                read.add(wanted[id(t)])

    recorder = Recorder(ctx.subject.model, on_op=on_op, track_ids=True)
    with recorder:
        probe = ctx.run(args, kwargs, "a recorded forward, to tell parameters no op read from outputs thrown away",
                        grad=True)
    # The outputs stay alive in probe.raw, so their identities are still those the recording saw.
    loss = {id(t) for t in loss_outputs(probe.raw)}
    return set(names) - read, Recorded(recorder.recording, watch, loss)


def _flows(recorded: Recorded, modules: list[str], params: dict) -> dict[str, Flow]:
    """Where the values computed from each module's trainable parameters went in the recorded forward (a
    parameter named alone is followed from its module's calls)."""
    return {m: trace(recorded.recording, recorded.watch,
                     {id(p) for n, p in params.items() if p.requires_grad and _under(n, [m])}, recorded.loss,
                     _module(m) if m in params else m)
            for m in modules}


def _ran_findings(recorded: Recorded, subject, ran: list[str], trainable: int, evidence: dict,
                  called_at: dict[str, tuple[str, int]]) -> list[Finding]:
    """The findings for parameters whose module ran and read them, yet got no gradient: each module judged by
    where its values went."""
    params = dict(subject.model.named_parameters())
    flows = _flows(recorded, _whole_modules(subject.model, set(ran)), params)
    findings = []
    cut = [m for m, flow in flows.items() if _fate(flow) == "cut"]
    if cut:
        names = [n for n in ran if _under(n, cut)]
        where, cut_by = _cut_or_call(recorded, cut[0], flows[cut[0]], called_at)
        findings.append(Finding(
            ID, Status.FAIL,
            f"{len(names)} of {trainable} trainable parameters get no gradient, all of {_listed(cut)}. Their module "
            "ran, but its output does not reach the model's output with a graph: computed and thrown away, or cut by "
            ".detach(), .data or torch.no_grad"
            + (f". The graph is cut by {cut_by['graph_cut_by']}: what it gives has no graph back to what it took"
               if cut_by else ""),
            where, {**evidence, "modules": cut[:20], **cut_by}, row="param-gets-no-gradient"))
    findings += _design_findings(recorded.recording, flows, ran, trainable, evidence, called_at)
    return findings + _empty_findings(flows, ran, trainable, evidence, subject.probe_length())


def _fate(flow: Flow) -> str:
    """'cut' (a bug: the values reach the output without a graph, or the code that computed them dropped them),
    or a correct design: 'indices' (read only as the positions a selection picked), 'empty' (nothing computed
    from them at this input's size), 'unread' (a module's return value its caller did not need)."""
    if flow.as_values:
        return "cut"
    if flow.only_as_indices:
        return "indices"
    if flow.only_as_empty:
        return "empty"
    if not flow.selections and flow.returned_by is not None:
        return "unread"
    return "cut"


def _design_findings(recording: Recording, flows: dict[str, Flow], ran: list[str], trainable: int, evidence: dict,
                     called_at: dict[str, tuple[str, int]]) -> list[Finding]:
    """The warnings for modules that get no gradient by a correct design: a return value its caller does not
    read, and a selector read only through the indices it picks."""
    findings = []
    unread = [m for m, flow in flows.items() if _fate(flow) == "unread"]
    holders = list(dict.fromkeys(recording.calls[i].path for m in unread if (i := flows[m].returned_by) is not None))
    if holders:
        holder = holders[0]
        file, line = called_at.get(holder, (None, None))
        names = [n for n in ran if _under(n, unread)]
        findings.append(Finding(
            ID, Status.WARN,
            f"{len(names)} of {trainable} trainable parameters get no gradient, all of {_listed(unread)}: computed "
            f"and never read. The module ran and its result is part of what '{holder}' returns, but no later op "
            f"uses it: the code that called '{holder}' does not need that output. Those parameters never train, "
            "which is waste, not a training bug; if this model never needs that output, build it without the module "
            "or freeze it (requires_grad=False), or accept=train.grad_flow:REASON",
            Location(holder, file, line) if file else Location(holder, reason="no line of your code called it"),
            {**evidence, "modules": unread[:20], "returned_by": holders[0] if len(holders) == 1 else holders[:20]},
            row="param-gets-no-gradient"))
    selectors = [m for m, flow in flows.items() if _fate(flow) == "indices"]
    if selectors:
        picks = list(dict.fromkeys(str(s) for m in selectors for s in flows[m].selections))
        first = flows[selectors[0]].selections[0]
        names = [n for n in ran if _under(n, selectors)]
        findings.append(Finding(
            ID, Status.WARN,
            f"{len(names)} of {trainable} trainable parameters get no gradient, all of {_listed(selectors)}: their "
            f"output reaches the model's output only through the indices of {picks[0]}"
            f"{f' (and {len(picks) - 1} more selections)' if len(picks) > 1 else ''}. Indices carry no gradient, so "
            "this loss never trains them; if the module is trained by a loss of its own (a sparse-attention "
            "indexer usually is), this is expected: accept=train.grad_flow:REASON",
            Location(first.module, first.file, first.line) if first.file else Location(first.module),
            {**evidence, "modules": selectors[:20], "selections": picks[:20]}, row="gradient-only-through-indices"))
    return findings


def _empty_findings(flows: dict[str, Flow], ran: list[str], trainable: int, evidence: dict,
                    length: int) -> list[Finding]:
    """A warning for modules whose values reach the output only through tensors with no elements: at this
    length nothing is computed from them, so whether they train cannot be judged here."""
    empty = [m for m, flow in flows.items() if _fate(flow) == "empty"]
    if not empty:
        return []
    site = flows[empty[0]].emptied
    if site is None:  # an 'empty' fate always names where its tensor was emptied
        return []
    names = [n for n in ran if _under(n, empty)]
    return [Finding(
        ID, Status.WARN,
        f"{len(names)} of {trainable} trainable parameters get no gradient, all of {_listed(empty)}: what they "
        f"compute becomes a tensor with no elements ({site}) on its way to the model's output, so at length "
        f"{length} nothing is computed from them, as in a module that works on whole windows of a sequence "
        "shorter than one window. Whether they train cannot be judged at this length: declare probe_len=INT at "
        "least one window long (and max_len=INT where it caps the probe) to judge them, or "
        "accept=train.grad_flow:REASON",
        Location(site.module, site.file, site.line) if site.file else Location(site.module),
        {**evidence, "modules": empty[:20], "emptied_by": str(site), "probe_length": length},
        row="param-gets-no-gradient")]


def _under(name: str, modules: list[str]) -> bool:
    return any(name == m or name.startswith(m + ".") or m == "" for m in modules)


def _cut_or_call(recorded: Recorded, module: str, flow: Flow,
                 called_at: dict[str, tuple[str, int]]) -> tuple[Location, dict]:
    """Where a module that ran loses its gradient: the .detach() inside it or on its output, else the op that
    took its values with a graph and gave them without one on their way to the output (torch.no_grad, an op
    with no derivative such as zeros_like(x)), named in the evidence, else the line that called it and dropped
    what it returned."""
    cut = next(iter(graph_cuts(recorded.recording, module)), None)
    if cut is not None and cut.file:
        return Location(module, cut.file, cut.line), {}
    if flow.as_values and flow.cut is not None and flow.cut.file:
        return Location(module, flow.cut.file, flow.cut.line), {"graph_cut_by": str(flow.cut)}
    file, line = called_at.get(module, (None, None))
    if file is not None:
        return Location(module, file, line), {}
    return Location(module, reason="no .detach() was recorded and no line of your code called the module "
                    "(torch.no_grad or .data cut it, which no op records)"), {}


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
