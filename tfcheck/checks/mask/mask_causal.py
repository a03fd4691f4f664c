"""mask.causal: the output at position t does not depend on inputs at t' > t (the decoder side of a
seq2seq model: the target tokens, with the source held fixed).

One batched pass per length: row 0 is a random sequence, row k+1 the same sequence with position k
changed (another token id, plus a random vector added to its embedding so small dependences show). The
change of output q in row k+1 is the leak map entry (q, k); k > q is forbidden. The layer modules'
outputs are captured in the same pass, so the first layer that leaks is named, and its one-hop map
names the pattern. On a leak one more pass of the same batch runs under the op recorder
(causal_patterns.CausalTrace): it finds the op where the leak first appears, and, for the first leaking layer's
attention, the mask that reaches its scores (where it is built, where it is applied, what it blocks), so the
finding names the line to change and the pattern the mask shows.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from tfcheck.checks.mask.causal_examples import SHRINK
from tfcheck.checks.mask.causal_masks import MaskReader
from tfcheck.checks.mask.causal_patterns import (
    Diagnosis,
    describe,
    diagnose,
    largest_change,
    leak_counts,
    shape_pattern,
)
from tfcheck.checks.mask.causal_trace import CausalTrace
from tfcheck.engine.context import ModelRaised
from tfcheck.engine.registry import Inconclusive, NotApplicable, check
from tfcheck.frames import short_path
from tfcheck.model.facts.structure import takes_torch_tgt_mask
from tfcheck.model.inputs import PROBE_LENGTH, with_torch_causal_mask
from tfcheck.probe import flow, layer_capture
from tfcheck.probe.attention_view import visible_attention
from tfcheck.probe.forward_caches import forward_caches, unset
from tfcheck.report import leak_map
from tfcheck.report.findings import Finding, Location, Related
from tfcheck.report.status import Status
from tfcheck.tools import shrinking

ID = "mask.causal"
#: Lengths of the verdict: the standard probe length, and 16, whose leak map is the one shown (at most 16 rows, so
#: it stays readable).
LENGTHS = (PROBE_LENGTH, 16)
#: Positions perturbed per length: all of them up to this many (the default lengths 7 and 16 are covered
#: whole), else this many spread from first to last, so the batch stays constant however long the probe
#: (``probe_len``).
MAX_PERTURBED = 16
ROWS = ("inference-worse-than-training", "causal-mask-misaligned", "causal-mask-ineffective",
        "sequence-statistics-leak", "causal-leak")

@dataclass
class Measurement:
    length: int
    output_map: torch.Tensor  # (n, n): [q, k] = change of output q when position k changed
    tolerance: float
    judgement: flow.Judgement
    layers: list[dict] = field(default_factory=list)  # path, largest forbidden change, tolerance
    first_layer: str | None = None
    first_layer_map: torch.Tensor | None = None
    first_layer_tolerance: float = 0.0
    non_finite_positions: list[int] = field(default_factory=list)


def _applies(subject) -> NotApplicable | None:
    why_not = _cannot_judge(subject)
    return why_not if isinstance(why_not, NotApplicable) else None


@check(ID, "the output at t does not depend on later positions", rows=ROWS, kinds=("decoder", "seq2seq", None),
       order=40, applies=_applies, shrink=SHRINK)
def mask_causal(ctx) -> list[Finding]:
    """Perturb positions of a random sequence one at a time (token and embedding; every one up to 16, else
    16 spread from first to last) in one batched pass at lengths 7 and 16, and require the outputs at earlier
    positions to stay within float rounding; perturbing the
    past must change them (positive control). On a leak: the leak map, the largest change, the first layer
    that shows it, the named pattern and the line to change (with the lines where the mask that reaches the
    scores is built and applied, and the scores computed)."""
    subject = ctx.subject
    why_not = _cannot_judge(subject)
    if why_not is not None:
        return [why_not.finding(ID, evidence={"causal": subject.facts.causal, "kind": subject.kind})]
    lengths = _lengths(subject)
    if not lengths:
        return [Finding(ID, Status.SKIP, f"inconclusive: max_len={subject.facts.max_len} leaves no sequence of "
                        "3 or more positions to probe", evidence={"max_len": subject.facts.max_len})]
    measures = []
    for n in lengths:
        m = _measure(ctx, n, seed=n)
        if isinstance(m, Finding):  # the output cannot be read per position
            return [m]
        measures.append(m)
    leaking = [m for m in measures if m.judgement.leaked]
    if leaking:
        return [shrinking.with_minimal_example(ctx, _leak_finding(ctx, leaking[-1], measures), SHRINK)]
    hidden = next((m for m in reversed(measures) if m.non_finite_positions), None)
    if hidden is not None:  # outputs that are not finite hide what they depend on: does the mask explain them?
        masked = _diagonal_masked(ctx, hidden, measures)
        if masked is not None:
            return [masked]
    if not all(m.judgement.conclusive for m in measures):
        weak = next(m for m in measures if not m.judgement.conclusive)
        return [Finding(ID, Status.SKIP, f"inconclusive: at length {weak.length} perturbing earlier positions "
                        f"changed no output (largest change {weak.judgement.control:.3g} <= tolerance "
                        f"{weak.tolerance:.3g}), so the probe did not reach the output",
                        evidence=_evidence(subject, measures))]
    return [_pass_finding(subject, measures)]


def _cannot_judge(subject) -> NotApplicable | Inconclusive | None:
    """Why the check cannot judge this model, read from its facts before any forward: not applicable (no item),
    or inconclusive (an item that reports why)."""
    if subject.facts.inputs is not None:
        return NotApplicable("the inputs come from the declared 'inputs' factory, so tfcheck cannot perturb single "
                             "positions")
    if subject.facts.causal is False:
        return NotApplicable(f"causal=false ({subject.source_of('causal') or 'declared'}); a model of kind "
                             f"{subject.kind} that is not causal may see the whole sequence")
    if subject.kind is None and subject.facts.takes_features is False and subject.facts.vocab_size is None:
        return Inconclusive("vocab_size is unknown, so tfcheck cannot draw other tokens; declare vocab_size")
    return None


def _lengths(subject) -> tuple[int, ...]:
    return tuple(sorted({n for n in subject.scaled_lengths(*LENGTHS) if n >= 3}))


def perturbed_positions(n: int) -> list[int]:
    """The positions changed one at a time: every one, or MAX_PERTURBED spread evenly (first and last
    included) when the sequence is longer; each leak into the position just before one is still seen."""
    if n <= MAX_PERTURBED:
        return list(range(n))
    return sorted({round(i * (n - 1) / (MAX_PERTURBED - 1)) for i in range(MAX_PERTURBED)})


# ----- the measurement ------------------------------------------------------------------------------

def _perturbed_sequence(ctx, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, n) sequences: row 0 random, row j + 1 with the j-th perturbed position replaced; and where
    it was replaced."""
    subject = ctx.subject
    gen = torch.Generator().manual_seed(seed)
    positions = perturbed_positions(n)
    rows = len(positions) + 1
    where = torch.zeros(rows, n, dtype=torch.bool)
    where[torch.arange(1, rows), torch.tensor(positions)] = True
    where = where.to(subject.device)
    if subject.facts.takes_features:
        d = subject.facts.d_model
        base = torch.randn(1, n, d, generator=gen).to(subject.device)
        other = torch.randn(rows, n, d, generator=gen).to(subject.device)
        return torch.where(where[..., None], other, base.expand(rows, n, d)), where
    base = subject.random_tokens(1, n, gen)
    return flow.replace_tokens(subject, base.expand(rows, n).clone(), where, seed), where


def _inputs(subject, sequence: torch.Tensor, seed: int) -> tuple[tuple, dict]:
    """Forward arguments with ``sequence`` as the decoder input (the only input of a decoder)."""
    if subject.kind != "seq2seq":
        return subject.inputs_for(sequence)
    rows, n = sequence.shape[:2]
    gen = torch.Generator().manual_seed(seed + 1)
    # The source is fixed, and of a length distinct from the target's, so encoder layers never pass for
    # decoder layers in the captured outputs.
    source = subject.random_primary(1, n - 2, gen)
    source = source.expand(rows, *source.shape[1:])
    args, kwargs = subject.inputs_for(source, sequence)
    return args, with_torch_causal_mask(subject, kwargs, n)


def _dependence(outputs: torch.Tensor, n: int) -> torch.Tensor:
    """(n, n) map from (rows, n, ...) outputs: [q, k] = change of position q when position k changed;
    NaN in the columns of positions not perturbed and in the rows of positions whose unperturbed output
    is not finite (nothing can be measured there)."""
    change = flow.change_per_position(outputs[:1].expand_as(outputs), outputs)  # (rows, n)
    dep = torch.full((n, n), float("nan"))
    dep[:, perturbed_positions(n)] = change[1:].T.float().cpu()
    finite = torch.isfinite(outputs[0].detach()).reshape(n, -1).all(-1).cpu()
    dep[~finite] = float("nan")
    return dep


def _tolerance(reference: torch.Tensor) -> float:
    return flow.tolerance(torch.where(torch.isfinite(reference), reference, torch.zeros_like(reference)))


def _measure(ctx, n: int, seed: int) -> Measurement | Finding:
    subject = ctx.subject
    sequence, where = _perturbed_sequence(ctx, n, seed)
    rows = sequence.shape[0]
    args, kwargs = _inputs(subject, sequence, seed)
    with layer_capture.captured_layers(subject.model, rows, seq_first=subject.facts.batch_first is False) as layers, \
            layer_capture.perturbed_embedding(subject.model, sequence, where, seed):
        probe = ctx.run(args, kwargs, f"a length-{n} sequence and {rows - 1} copies with one position changed")
    out = probe.output
    if out.dim() < 2 or tuple(out.shape[:2]) != (rows, n):
        return Finding(ID, Status.SKIP, f"inconclusive: the output has shape {tuple(out.shape)}, not one entry per "
                       f"position (batch {rows}, length {n}), so dependence on later positions cannot be read",
                       evidence={"output_shape": tuple(out.shape)})
    forbidden = torch.ones(n, n, dtype=torch.bool).triu(1)
    past = torch.ones(n, n, dtype=torch.bool).tril(-1)
    dep = _dependence(out, n)
    tol = _tolerance(out[0])
    m = Measurement(n, dep, tol, flow.Judgement(largest_change(dep, forbidden), tol, largest_change(dep, past)))
    m.non_finite_positions = [int(q) for q in dep[:, 0].isnan().nonzero().flatten()]
    for path, value in layers:
        if tuple(value.shape[:2]) != (rows, n):
            continue  # an encoder layer (source length), or a layer laid out otherwise
        layer_dep = _dependence(value, n)
        layer_tol = _tolerance(value[0])
        largest = largest_change(layer_dep, forbidden)
        m.layers.append({"layer": path, "largest_forbidden_change": largest, "tolerance": layer_tol})
        if m.first_layer is None and largest > layer_tol:
            m.first_layer, m.first_layer_map, m.first_layer_tolerance = path, layer_dep, layer_tol
    if m.first_layer is not None and m.first_layer_map is not None and not m.judgement.leaked:  # set together
        # Every layer of a causal stack is causal itself: a leak inside one is a leak, even where the
        # output cannot show it (a NaN born in a fully masked row hides every later change).
        m.judgement = flow.Judgement(max(m.judgement.largest, largest_change(m.first_layer_map, forbidden)),
                                     m.first_layer_tolerance, m.judgement.control)
    return m


def _forbidden(n: int) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool).triu(1)


# ----- naming the pattern and the line ------------------------------------------------------------

def _trace(ctx, m: Measurement) -> CausalTrace:
    """One more pass of the measured batch (the same sequences, the same perturbation) under the op recorder. A
    tensor an earlier forward cached on the model (a mask built on first use) is built again in it, so the line
    that builds it is seen; a model that cannot run so is recorded as it is."""
    subject = ctx.subject
    n = m.length
    sequence, where = _perturbed_sequence(ctx, n, seed=n)
    args, kwargs = _inputs(subject, sequence, n)
    given = {id(v): f"argument '{k}'" for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
    caches = forward_caches(subject.model, getattr(subject.loaded.sites, "attributes", None))

    def recorded(rebuilt: list) -> CausalTrace:
        trace = CausalTrace(subject.model, n, perturbed_positions(n), m.first_layer, MaskReader(n), given)
        with visible_attention(), layer_capture.perturbed_embedding(subject.model, sequence, where, n), unset(rebuilt):
            ctx.record(args, kwargs, f"a recorded forward of the length-{n} probe (where the leak first appears, "
                                     "and the mask that reaches the scores)", on_op=trace.on_op)
        return trace

    try:
        return recorded(caches)
    except ModelRaised:
        if not caches:
            raise
        return recorded([])


def _diagnosis(ctx, m: Measurement) -> tuple[str, Diagnosis]:
    """The named pattern of a leak and what the recorded forward says about its line."""
    if m.first_layer_map is not None:
        dep, tol = m.first_layer_map, m.first_layer_tolerance
    else:
        dep, tol = m.output_map, m.tolerance
    found = diagnose(_trace(ctx, m), m.first_layer, m.first_layer_map, tol)
    return found.pattern or shape_pattern(dep, tol), found


# ----- findings -------------------------------------------------------------------------------------

def _leak_map(m: Measurement) -> leak_map.LeakMap:
    """The map over the perturbed positions (columns) and the outputs at them and just before them (rows)."""
    n = m.length
    columns = perturbed_positions(n)
    rows = sorted({q for k in columns for q in (k - 1, k) if q >= 0}) if n > MAX_PERTURBED else list(range(n))
    roles = [["forbidden" if k > q else "allowed" for k in columns] for q in rows]
    values = m.output_map[rows][:, columns].tolist()
    return leak_map.LeakMap("causal", f"output position (row) x perturbed position (column), length {n}",
                           [f"q{q}" for q in rows], [f"k{k}" for k in columns], values, roles, m.tolerance)


def _evidence(subject, measures: list[Measurement]) -> dict:
    notes = []
    if subject.kind == "seq2seq":
        notes.append("the target tokens are perturbed; the source is fixed")
    if subject.kind == "seq2seq" and takes_torch_tgt_mask(subject.model):
        notes.append("tgt_mask = nn.Transformer.generate_square_subsequent_mask(t) is passed, as torch documents")
    return {
        "lengths": [m.length for m in measures],
        "per_length": [{"length": m.length, **m.judgement.evidence()} for m in measures],
        "causal": subject.facts.causal, "causal_from": subject.source_of("causal") or "declared",
        "perturbation": "each position in turn: another token id, plus a random vector of the embedding's "
                        "scale added to its embedding" if not subject.facts.takes_features else
                        "each position in turn: other random features",
        "perturbed_positions": {m.length: perturbed_positions(m.length) for m in measures},
        "assumptions": notes,
    }


def _pass_finding(subject, measures: list[Measurement]) -> Finding:
    worst = max(measures, key=lambda m: m.judgement.largest / m.tolerance)
    lengths = " and ".join(str(m.length) for m in measures)
    message = (f"no output depends on a later position at lengths {lengths} (largest change "
               f"{worst.judgement.largest:.3g} <= tolerance {worst.tolerance:.3g}; perturbing the past changed the "
               f"output by up to {worst.judgement.control:.3g})")
    if subject.kind is None and subject.facts.causal is not True:
        message += "; the kind is unknown, so this only says the model is causal as measured"
    return Finding(ID, Status.PASS, message, Location(module=""),
                   {**worst.judgement.evidence(), **_evidence(subject, measures)})


def _location(m: Measurement, found: Diagnosis, layer_list: list) -> tuple[Location, tuple[Related, ...], str]:
    """The finding's location (the first leaking layer, the line to change or why there is none), its related
    lines, and the sentence of the message that names the line."""
    primary = found.primary
    module = m.first_layer
    if module is None and found.site_module is not None:  # the layer of the attention it is about, else that module
        module = next((path for path, _ in layer_list if found.site_module == path
                       or found.site_module.startswith(path + ".")), found.site_module)
    if module is None:
        module = primary.module if primary is not None and primary.module is not None else ""
    related, seen = [], set()
    for p in found.related:
        key = (p.role, p.file, p.line)
        if p.file and p.line and key not in seen:
            seen.add(key)
            related.append(Related(p.role, p.file, p.line, p.module))
    if primary is None or not (primary.file and primary.line):
        reason = found.reason or ("the op runs in torch's own modules, with no line of the model's code on its stack"
                                  if primary is not None else "the recorded forward shows no line that explains the "
                                                              "leak")
        return Location(module, reason=reason), tuple(related), f" No line to point at: {reason}."
    sentence = f" The line to change: {short_path(primary.file)}:{primary.line} ({primary.role})"
    sentence += f"; {found.reason}." if found.reason else "."
    return Location(module, primary.file, primary.line, found.reason), tuple(related), sentence


def _leak_finding(ctx, m: Measurement, measures: list[Measurement]) -> Finding:
    subject = ctx.subject
    pattern, found = _diagnosis(ctx, m)
    row, meaning = describe(pattern)
    lm = _leak_map(m)
    in_output = m.judgement.largest == largest_change(m.output_map, _forbidden(m.length))
    dep = m.output_map if in_output else m.first_layer_map
    assert dep is not None  # a leak not in the output was measured in a layer
    scored = torch.where(_forbidden(m.length), dep.nan_to_num(nan=-1.0), torch.full_like(dep, -1.0))
    q, k = divmod(int(scored.argmax()), m.length)
    leaks, measured = leak_counts(m.output_map, m.tolerance)
    counted = f"{leaks} of {measured} (query, later key) pairs measured leak at the output"
    if m.first_layer is not None and m.first_layer_map is not None:
        in_layer, of = leak_counts(m.first_layer_map, m.first_layer_tolerance)
        counted += f", {in_layer} of {of} in layer '{m.first_layer}', where it first appears"
    where = ""
    if m.non_finite_positions:
        where += (f" The output is not finite at positions {m.non_finite_positions} (marked ?), which hides "
                  "changes there.")
    location, related, line_sentence = _location(m, found, layer_capture.layer_modules(subject.model))
    if found.op is not None:
        op = found.op
        elsewhere = op["file"] and (op["file"], op["line"]) != (location.file, location.line)
        where += f" The op: {op['detail']}" + (f" at {short_path(op['file'])}:{op['line']}" if elsewhere else "") + "."
    message = (f"causal leak ({pattern}): {meaning}. At length {m.length} output position {q} changed by "
               f"{m.judgement.largest:.3g} when position {k} changed (tolerance {m.tolerance:.3g}); {counted}."
               f"{where}{line_sentence}")
    evidence = {**m.judgement.evidence(), **_evidence(subject, measures), "pattern": pattern,
                "first_leaking_layer": m.first_layer, "layers": m.layers, "largest_leak_at": {"query": q, "key": k},
                **leak_map.evidence_of(lm)}
    if found.op is not None:
        evidence["op"] = dict(found.op)
    if found.mask is not None:
        evidence["mask_reaching_scores"] = found.mask
    return _problem(subject, message, location, evidence, row, related)


def _problem(subject, message: str, location: Location, evidence: dict, row: str,
             related: tuple[Related, ...]) -> Finding:
    """A FAIL, or a WARN that names the declarations when the kind is unknown (the model may be an encoder)."""
    if subject.kind is None and subject.facts.causal is not True:
        message = (f"the kind is unknown: if this model is causal, declare causal=true (or kind=decoder) and this "
                   f"is a failure; if it is an encoder, declare kind=encoder (or causal=false). Measured: {message}")
        return Finding(ID, Status.WARN, message, location, evidence, row, related)
    return Finding(ID, Status.FAIL, message, location, evidence, row, related)


def _diagonal_masked(ctx, m: Measurement, measures: list[Measurement]) -> Finding | None:
    """A FAIL when outputs that are not finite come from a mask that blocks the diagonal: with a -inf fill,
    position 0 has no key left and its output is NaN (what a finite fill would leak), so no map can show the
    leak. None when the recorded forward does not show such a mask."""
    found = diagnose(_trace(ctx, m), m.first_layer, None, m.tolerance)
    if found.pattern != "diagonal masked":
        return None
    row, meaning = describe(found.pattern)
    location, related, line_sentence = _location(m, found, layer_capture.layer_modules(ctx.subject.model))
    message = (f"causal mask wrong ({found.pattern}): {meaning}. At length {m.length} the output is not finite at "
               f"positions {m.non_finite_positions}, so what they depend on cannot be measured, and the mask that "
               f"reaches the attention scores blocks every position's own key.{line_sentence}")
    evidence = {**m.judgement.evidence(), **_evidence(ctx.subject, measures), "pattern": found.pattern,
                "non_finite_positions": m.non_finite_positions, "first_leaking_layer": m.first_layer}
    if found.mask is not None:
        evidence["mask_reaching_scores"] = found.mask
    return _problem(ctx.subject, message, location, evidence, row, related)
