"""shape.contract: for several batch sizes and lengths the output has the expected shape and dtype, and
is finite."""
from __future__ import annotations

import dataclasses
import functools

import torch

from tfcheck.checks.shape import pooled_contract
from tfcheck.checks.shape.declared_length import at_declared_length, pooled_note, size_text
from tfcheck.checks.shape.stream_width import as_streams, concatenated_streams
from tfcheck.engine.context import ModelRaised
from tfcheck.engine.registry import check
from tfcheck.model.facts.lengths import min_length
from tfcheck.model.inputs import PROBE_BATCH, TARGET_LENGTH_DELTA
from tfcheck.model.trial import flat_outputs
from tfcheck.model.trial.capacity import promised_length
from tfcheck.model.trial.head import head_choice, outside_forward
from tfcheck.probe import recorded_probe
from tfcheck.recording.recorder import Recorder, Recording
from tfcheck.report.findings import Finding, Location, Related
from tfcheck.report.status import Status

ID = "shape.contract"
#: Why an output of shape () cannot be judged: a correct training wrapper returns its loss, one number.
SINGLE_NUMBER = ("the forward returns a single number (shape ()), not an output per position: most likely a loss "
                 "it computes itself (a training wrapper), which no shape check can read. Point the spec at the "
                 "module that returns the logits (or a factory returning it), or declare output= if the return "
                 "also holds them")


@check(ID, "output shape, dtype and finiteness at several batch sizes and lengths",
       rows=("output-shape", "loss-nan", "tensor-size-mismatch", "mat1-mat2-shapes", "forward-fails", "out-of-memory"),
       order=10)
def shape_contract(ctx) -> list[Finding]:
    """Run batch 1 and batch 3 at length 1 (or the shortest the model accepts: tfcheck.model.facts.lengths.min_length),
    the probe length and the capped maximum, and compare each
    output with (batch, length, d_model) for an encoder or attention module, (batch, length, vocab_size)
    for a decoder, (batch, target length, vocab_size) for a seq2seq model; its dtype with the
    parameters' floating dtype; and require every value to be finite. An output of one vector per sample, where the
    recorded forward shows the model pool the sequence (tfcheck.checks.shape.pooled_contract), is judged as
    (batch, C) instead."""
    subject = ctx.subject
    allowed, why = subject.expected_last_dims()
    param_dtype = _param_dtype(subject.model)
    verdicts = []
    sizes = _probe_sizes(_accepted(subject, subject.probe_lengths()))
    promised = promised_length(subject)
    if promised is not None:  # a length the user stated and the position table does not hold: a broken promise
        sizes.append((1, promised[0]))
    unreadable: list[Finding] = []
    outputs = []
    for batch, length in sizes:
        try:
            probe = ctx.forward(batch, length)
        except ModelRaised as raised:
            return [_raised(ctx, raised, batch, length)]
        out_length = _output_length(subject, length)
        reason = SINGLE_NUMBER if probe.output.dim() == 0 else \
            flat_outputs.unreadable(subject, probe.output, batch, out_length)
        if reason is not None:
            unreadable.append(Finding(ID, Status.SKIP, f"inconclusive: {reason}", evidence={
                "batch": batch, "length": out_length, "output_shape": tuple(probe.output.shape)}))
            continue
        outputs.append((probe.output, batch, out_length))
        verdict = _judge(probe.output, batch, out_length, allowed, why, param_dtype)
        judge = functools.partial(_judge, probe.output, batch, allowed=allowed, why=why, param_dtype=param_dtype)
        verdicts.append(at_declared_length(subject, probe.output, out_length, verdict, judge))
    if unreadable:  # said at the standard probe where it shows there (length 1 may leave no row at all)
        return [next((f for f in unreadable if f.evidence["batch"] == PROBE_BATCH), unreadable[0])]
    design = pooled_contract.pooled_design(ctx) if any(map(pooled_contract.lost_length, verdicts)) else ""
    pooled = None if isinstance(design, str) else design
    if isinstance(design, str):  # no pooling: the failures stand, with what the recorded forward says
        verdicts = [dataclasses.replace(v, message=v.message + design) if pooled_contract.lost_length(v) else v
                    for v in verdicts]
    else:
        verdicts = [_judge(out, batch, n, (design.width,), pooled_contract.why_width(design), param_dtype, pooled=True)
                    for out, batch, n in outputs]
    return _with_head_choice(subject, _grouped(verdicts, lambda problem, f: _located(ctx, problem, f), pooled))


# ----- where to change it ------------------------------------------------------------------------------

def _located(ctx, problem: str, finding: Finding) -> Finding:
    """A failure pointed at the line to change: for a wrong last dimension, the construction of the module that
    made the output (the head sets the width); for a NaN or Inf, the line that wrote the -inf a softmax turned
    into NaN (or the op that produced it); for another layout, the last op that made the output."""
    if finding.status is not Status.FAIL:
        return finding
    if problem == "non-finite":
        from tfcheck.checks.numerics.numerics_nan_source import traced_non_finite

        batch, length = finding.evidence["batch"], finding.evidence["length"]
        args, kwargs = ctx.subject.make_inputs(batch, length)
        location, related = traced_non_finite(ctx, args, kwargs, f"a recorded forward at batch {batch}, length "
                                              f"{length}, to find the op that produced the NaN or Inf")
        return dataclasses.replace(finding, location=location, related=related)
    recording = recorded_probe.shared(ctx).recording
    if problem == "shape" and _last_dim_only(finding):
        located = dataclasses.replace(finding, **_made_by_module(ctx.subject, recording))
        width = int(finding.evidence["output_shape"][2])
        stated = _width_from_config(ctx.subject, recording, width)
        if stated is not None:
            return _stated_width(located, stated)
        streams = concatenated_streams(ctx.subject, recording, width, finding.evidence["expected_shape"][2])
        return located if streams is None else as_streams(located, streams)
    return dataclasses.replace(finding, **_made_by_op(recording))


def _width_from_config(subject, recording: Recording, width: int) -> str | None:
    """Where the model's config sets the output's width, when the module that made the output is a projection
    to ``width`` and a config field other than d_model holds that value (an embedding model's output dimension,
    a vocabulary projected inside the base model): "config.FIELD = width, Linear 'path'". None otherwise, and
    where the expected width was declared rather than read off the output's name."""
    config = getattr(subject.model, "config", None)
    if config is None or not hasattr(config, "to_dict") or {"d_model", "returns"} & set(subject.declared):
        return None
    out = _output_ids(recording)
    calls = [c for c in recording.calls if c.parent is not None and out & set(c.output_ids)]
    if not calls:
        return None
    path = max(calls, key=lambda c: c.index).path
    try:
        module = subject.model.get_submodule(path)
    except AttributeError:
        return None
    if getattr(module, "out_features", None) != width:
        return None
    d_model_field = subject.source_of("d_model").removeprefix("config.")
    fields = [k for k, v in config.to_dict().items()
              if type(v) is int and v == width and k != d_model_field]
    if not fields:
        return None
    named = " = ".join(f"config.{f}" for f in fields)
    return f"{named} = {width}, the out_features of {type(module).__name__} '{path}'"


def _stated_width(finding: Finding, stated: str) -> Finding:
    return dataclasses.replace(
        finding, status=Status.WARN,
        message=f"{finding.message}. The width is the config's ({stated}, which made the output): the model "
        "projects the states it names this way to a width its config sets, by design. If this output should "
        "be d_model wide, that projection is the line to change; else declare output= or returns= to say what "
        "the output is", evidence={**finding.evidence, "width_from": stated})


def _last_dim_only(finding: Finding) -> bool:
    shape, expected = finding.evidence.get("output_shape") or (), finding.evidence.get("expected_shape") or ()
    return len(shape) == len(expected) == 3 and tuple(shape[:2]) == tuple(expected[:2])


def _output_ids(recording: Recording) -> set[int]:
    root = next((c for c in recording.calls if c.parent is None), None)
    return set(root.output_ids) if root is not None else set()


def _made_by_module(subject, recording: Recording) -> dict:
    """The last module called that returned the model's output: the head, whose construction set its width
    (an nn.Identity put where the head belongs included)."""
    out = _output_ids(recording)
    calls = [c for c in recording.calls if c.parent is not None and out & set(c.output_ids)]
    if not calls:
        return _made_by_op(recording)
    last = max(calls, key=lambda c: c.index)
    built = subject.construction_site(last.path, last.path)
    op = _last_op(recording, out)
    related = (Related("the output is made here", op.file, op.line, op.module),) if op is not None and op.file else ()
    return {"location": built, "related": related}


def _last_op(recording: Recording, out: set[int]):
    return next((o for o in reversed(recording.ops) if o.level == "function" and o.phase == "forward"
                 and out & set(o.output_ids) and not out & set(o.input_ids)), None)


def _made_by_op(recording: Recording) -> dict:
    op = _last_op(recording, _output_ids(recording))
    if op is None or not op.file:
        return {"location": Location(module="", reason="no op of the user's code made the output tensor in the "
                                     "recorded forward (it is a model input, or made inside library code)")}
    return {"location": Location(op.module, op.file, op.line)}


def _raised(ctx, raised: ModelRaised, batch: int, length: int) -> Finding:
    """The model raised at one size: where it raised, or, when the failing op read a table of the model's
    (a buffer or parameter sliced to fewer rows than the input has), the line that built the module holding
    the table: its size was chosen there."""
    e = raised.explanation
    finding = Finding(ID, Status.FAIL, e.message + _shortest_that_runs(ctx, length), e.location, e.evidence, e.row)
    table = _table_read_by_raising_op(ctx, batch, length)
    if table is None:
        return finding
    owner = table.rpartition(".")[0]
    built = ctx.subject.construction_site(owner, owner)
    if not built.line:
        return finding
    related = (Related("it raises here", e.location.file, e.location.line, e.location.module),) \
        if e.location.file else ()
    return dataclasses.replace(finding, location=built, related=related,
                               message=f"{e.message} The op reads '{table}', which holds fewer rows than the input "
                               "has positions: it is sized where that module is built.")


def _shortest_that_runs(ctx, length: int) -> str:
    """Where the model raised below the probe length (which ran): the shortest length it runs at (batch 1, tried
    upwards) and the min_len declaration that says a design needs that many positions; "" when none is found."""
    subject = ctx.subject
    probe = subject.probe_length()
    for n in range(length + 1, probe):
        try:
            ctx.run(*subject.make_inputs(1, n), f"a forward at batch 1, length {n}, after length {length} raised")
        except ModelRaised:
            continue
        if subject.facts.causal is True:
            return (f" It runs from length {n} (batch 1). A causal model must run on a prompt that short to start "
                    "generating, so this is a bug of it (a top-k over fewer keys than k); if it is never given fewer "
                    f"than {n} tokens, declare min_len={n}.")
        return (f" It runs from length {n} (batch 1): if it needs {n} positions at least by design (a top-k over "
                f"the keys, a pooling), declare min_len={n}.")
    return ""


def _table_read_by_raising_op(ctx, batch: int, length: int) -> str | None:
    """The dotted name of a buffer or parameter a slice of which fed the op that raised, rerun under the
    recorder; None when the raising op read no table."""
    model = ctx.subject.model
    owned = {id(t): name for name, t in (*model.named_buffers(), *model.named_parameters())}
    recorder = Recorder(model, aten=False, track_ids=True)
    try:
        with recorder:
            ctx.run(*ctx.subject.make_inputs(batch, length), f"a recorded rerun of the failing forward at batch "
                    f"{batch}, length {length}")
    except ModelRaised:
        pass
    ops = recorder.recording.ops
    failed = next((o for o in reversed(ops) if o.raised and o.level == "function"), None)
    if failed is None:
        return None
    made_by = {t: o for o in ops if o.level == "function" for t in o.output_ids if t not in o.input_ids}
    for t in failed.input_ids:
        maker = made_by.get(t)
        names = [owned[i] for i in (maker.input_ids if maker is not None else ()) if i in owned]
        if names:
            return names[0]
    return None


def _with_head_choice(subject, findings: list[Finding]) -> list[Finding]:
    """A width failure of a model with several heads outside forward says which to declare."""
    heads = outside_forward(subject)
    if subject.facts.head is not None or len(heads) < 2 or subject.facts.d_model is None:
        return findings
    choice = head_choice(subject.facts.d_model, subject.facts.output_vocab_size or 0, heads)
    return [dataclasses.replace(f, message=f"{f.message}. {choice[0].upper()}{choice[1:]}")
            if f.status is Status.FAIL and f.evidence.get("problem", "shape") == "shape" else f for f in findings]


def _grouped(verdicts: list[Finding], locate, pooled=None) -> list[Finding]:
    """One finding per distinct problem (the first size that shows it, the other sizes in evidence, located by
    ``locate(problem, finding)``), or one pass that lists every size checked (a pooled output's, by ``pooled``)."""
    problems: dict[str, list[Finding]] = {}
    for v in verdicts:
        if v.status is not Status.PASS:
            problems.setdefault(v.evidence["problem"], []).append(v)
    if not problems:
        sizes = [size_text(v.evidence) for v in verdicts]
        if pooled is not None:
            return [pooled_contract.passed(ID, verdicts, pooled, sizes)]
        last = verdicts[-1]
        last_dim = last.evidence["output_shape"][2]
        pooled = pooled_note(verdicts)
        axes = "batch x input length->output length" if pooled else "output batch x length"
        return [Finding(ID, Status.PASS, f"output is (batch, {'pooled ' * bool(pooled)}length, {last_dim}), "
                        f"{last.evidence['dtype'].replace('torch.', '')} and finite at {axes} "
                        f"{', '.join(sizes)}{pooled}", last.location,
                        {"sizes": sizes, "last_dim_from": last.evidence["last_dim_from"],
                         "checked": [{k: x for k, x in v.evidence.items() if k != "problem"} for v in verdicts]})]
    out = []
    for problem, group in problems.items():
        first = group[0]
        sizes = [size_text(v.evidence) for v in group]
        evidence = {**{k: v for k, v in first.evidence.items() if k != "problem"}, "failing_sizes": sizes}
        also = f" (also at {', '.join(sizes[1:])})" if len(sizes) > 1 else ""
        out.append(locate(problem, Finding(ID, first.status, first.message + also, first.location, evidence,
                                           first.row)))
    return out


def _accepted(subject, lengths: tuple[int, ...]) -> tuple[int, ...]:
    """The probe lengths the model accepts: none below its shortest (a model that pools the sequence raises
    there by design; tfcheck.model.facts.lengths.min_length says what sets it)."""
    shortest, _ = min_length(subject)
    return tuple(sorted({max(n, shortest) for n in lengths}))


def _probe_sizes(lengths: tuple[int, ...]) -> list[tuple[int, int]]:
    """Batch 1 and batch 3 alternating over the lengths (so the standard probe, memoised, is one of
    them), and the longest at both batch sizes."""
    sizes = [(1 if i % 2 == 0 else PROBE_BATCH, n) for i, n in enumerate(lengths)]
    sizes.append((1 if sizes[-1][0] == PROBE_BATCH else PROBE_BATCH, lengths[-1]))
    return sizes


def _output_length(subject, length: int) -> int:
    return max(1, length + TARGET_LENGTH_DELTA) if subject.kind == "seq2seq" and subject.facts.inputs is None \
        else length


def _param_dtype(model) -> torch.dtype | None:
    for p in model.parameters():
        if p.is_floating_point():
            return p.dtype
    return None


def _judge(out: torch.Tensor, batch: int, length: int, allowed: tuple[int, ...], why: str,
           param_dtype: torch.dtype | None, pooled: bool = False) -> Finding:
    """One output against (batch, length, one of ``allowed``), or against (batch, ``allowed``) where ``pooled``."""
    shape = tuple(out.shape)
    last = allowed[0] if len(allowed) == 1 else (" or ".join(map(str, allowed)) if allowed else "*")
    expected = (batch, last) if pooled else (batch, length, last)
    evidence = {"batch": batch, "length": length, "output_shape": shape, "expected_shape": expected,
                "last_dim_from": why, "dtype": str(out.dtype), "problem": None}
    where = Location(module="")
    matches = len(shape) == len(expected) and shape[:-1] == expected[:-1] and (not allowed or shape[-1] in allowed)
    if not matches:
        evidence["problem"] = "shape"
        axes = "batch" if pooled else "batch, length"
        return Finding(ID, Status.FAIL, f"at batch {batch}, length {length} the output has shape {shape}; expected "
                       f"{expected} = ({axes}, {why})" + ("" if pooled else _shape_hint(shape, batch, length, last)),
                       where, evidence, row="output-shape")
    if not out.is_floating_point() or (param_dtype is not None and out.dtype != param_dtype):
        evidence["problem"] = "dtype"
        return Finding(ID, Status.FAIL, f"at batch {batch}, length {length} the output dtype is {out.dtype}; "
                       f"expected the parameters' dtype {param_dtype}", where, evidence, row="output-shape")
    bad = ~torch.isfinite(out)
    if bad.any():
        n_nan, n_inf = int(torch.isnan(out).sum()), int(torch.isinf(out).sum())
        first = tuple(int(i) for i in bad.nonzero()[0])
        evidence.update(problem="non-finite", nan=n_nan, inf=n_inf, first_non_finite_index=first,
                        tolerance="0 non-finite values")
        return Finding(ID, Status.FAIL, f"at batch {batch}, length {length} the output has {n_nan} NaN and {n_inf} Inf "
                       f"values of {out.numel()} (first at index {first}, i.e. sample {first[0]}"
                       + ("" if pooled else f", position {first[1]}") + ")", where, evidence, row="loss-nan")
    return Finding(ID, Status.PASS, f"batch {batch}, length {length}: {shape}", where, evidence)


def _shape_hint(shape: tuple, batch: int, length: int, last_dim) -> str:
    if len(shape) == 3 and batch != length and shape[:2] == (length, batch):
        return "; batch and length are swapped (batch_first mismatch, or a missing transpose)"
    if len(shape) == 2 and shape[0] == batch:
        return "; the length axis is gone (only one position returned, or pooled)"
    if len(shape) == 3 and shape[:2] == (batch, length) and last_dim != "*":
        return f"; last dim {shape[2]} where {last_dim} was expected"
    return ""
