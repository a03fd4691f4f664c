"""mask.padding: real tokens' outputs do not depend on what sits at padded positions.

One batched pass of three padded samples, each padded differently (left, in the middle, right: a mask
laid out for the wrong sample only shows then), in three groups of rows:
A the padded samples; B the same with other content at the pads (other token ids where the mask is
passed in, and a random vector added to the pads' embeddings, which also works where the mask is built
inside from pad_id and the pad ids must stay); C a real token changed (the positive control: real
outputs must move). The layer modules' outputs are captured in the same pass, so the first layer where the
pads reach real outputs is named; on a leak, one recorded pass of A shows where the mask meets that layer's
scores (or where it stops short of them), the line the finding points at.
Where the mask is built inside, one more pass compares the right-padded sample with the same sequence
unpadded (right-padding equivalence: positions are unchanged). A pooled output, one vector per sample, is judged
per sample (mask_padding_pooled.py).
"""
from __future__ import annotations

import torch

from tfcheck.checks.mask import mask_padding_pooled as pooled_out
from tfcheck.checks.mask.mask_padding_equivalence import right_padding_equivalence
from tfcheck.checks.mask.padding_design import MixerOutputs, local_mixing
from tfcheck.checks.mask.padding_examples import SHRINK, layout, mask_axes, pad_comparison, padded_inputs
from tfcheck.checks.mask.unused_mask import said_unused
from tfcheck.engine.registry import Inconclusive, NotApplicable, check
from tfcheck.model.facts.lengths import sequence_pooling
from tfcheck.probe import flow, layer_capture
from tfcheck.probe.leak_origin import LeakOrigin, Perturbation
from tfcheck.probe.padding_trace import PaddingTrace, blame
from tfcheck.report import leak_map
from tfcheck.report.findings import Finding, Location, Related
from tfcheck.report.status import Status
from tfcheck.tools import shrinking

ID = "mask.padding"
LENGTH = 10
SAMPLES = 3
ROWS = ("padding-mask-inverted", "padding-mask-query-axis", "padding-mask-ignored", "padding-mask-cross-attention",
        "padding-leak")

PATTERNS = {
    "inverted convention": ("padding-mask-inverted",
                            "pads attend, real tokens are masked: real outputs follow the pads, and a changed real "
                            "token reaches no other real token"),
    "mask on the query axis": ("padding-mask-query-axis",
                               "the padding mask is laid out on the query axis ((b, 1, s, 1)) instead of the key "
                               "axis ((b, 1, 1, s)), so real tokens still attend to the pads"),
    "mask ignored": ("padding-mask-ignored", "the padding mask does not reach the attention: pads are attended "
                                             "like real tokens"),
    "mask not reaching cross-attention": ("padding-mask-cross-attention",
                                          "the encoder masks the padding, but the decoder's cross-attention "
                                          "attends to the padded source positions"),
    "padding leak": ("padding-leak", "some real tokens depend on pad content, in no shape tfcheck recognises"),
}
#: What is wrong with a mask that does reach the scores, by pattern: its values (the line that builds it is the one to
#: change) or its layout (the line that shapes it); any other leak points where the mask is applied.
WRONG = {"inverted convention": "values", "mask on the query axis": "layout"}


def _applies(subject) -> NotApplicable | None:
    mode = _mode(subject)
    return mode if isinstance(mode, NotApplicable) else None


@check(ID, "real tokens' outputs do not depend on padded positions", rows=ROWS,
       kinds=("encoder", "decoder", "seq2seq", None), order=41, applies=_applies,
       shrink=SHRINK)
def mask_padding(ctx) -> list[Finding]:
    """Pad three samples differently and change only what sits at the pads (mask unchanged): real
    positions' outputs must stay within float rounding, while changing a real token must change them.
    Where the mask is built inside from pad_id, the right-padded sample must also match itself unpadded.
    A seq2seq model is padded on the source side; its decoder output is judged."""
    subject = ctx.subject
    mode = _mode(subject)
    if isinstance(mode, (NotApplicable, Inconclusive)):
        return [mode.finding(ID, evidence={"mask": str(subject.facts.mask), "pad_id": subject.facts.pad_id})]
    n = subject.probe_length(LENGTH)
    if n < 8:
        return [Finding(ID, Status.SKIP, f"inconclusive: max_len={n} is too short to pad three samples "
                        "differently (8 positions needed)", evidence={"max_len": n})]
    measured = _measure(ctx, mode, n)
    finding = _judge(ctx, measured)
    pooled = isinstance(measured, _Measured) and measured.pooled is not None  # the search draws left pads too
    return [finding if pooled else shrinking.with_minimal_example(ctx, finding, SHRINK)]


def _mode(subject) -> str | NotApplicable | Inconclusive:
    """argument | internal | undeclared (pad_id known, no mask declared), or why the check cannot run."""
    mask = subject.facts.mask
    if subject.facts.inputs is not None:
        return NotApplicable("the inputs come from the declared 'inputs' factory, so tfcheck cannot place padding "
                             "in them")
    unused = said_unused(subject.model, mask.argument) if mask.argument and "mask" not in subject.declared else None
    if unused is not None:
        return NotApplicable(f"forward says its '{mask.argument}' is unused ({unused}), so the model takes no padding "
                             f"mask; declare mask={mask.argument}:CONVENTION if it does")
    if mask.argument is not None:
        return "argument"
    if subject.facts.takes_features:
        return NotApplicable("the model takes features and no padding mask; declare mask=ARG:CONVENTION if a "
                             "forward argument takes one")
    if mask.convention == "internal":
        if subject.facts.pad_id is None:
            return Inconclusive("mask=internal but pad_id is unknown; declare pad_id")
        return "internal"
    if subject.facts.pad_id is not None and "mask" not in subject.declared:
        return "undeclared"
    return NotApplicable("the model takes no padding mask; declare mask=ARG:CONVENTION or pad_id")


def _layout(n: int) -> torch.Tensor:
    """(3, n) keep mask, True = real: left padding, padding in the middle, right padding, of different
    amounts (pads before real tokens matter for causal models; after them, for the others)."""
    keep = torch.ones(SAMPLES, n, dtype=torch.bool)
    keep[0, :3] = False
    keep[1, 4:6] = False
    keep[2, n - 4:] = False
    return keep


class _Measured:
    """The outputs of one measurement, split by row group, and what is needed to judge them."""

    def __init__(self, mode: str, n: int, keep: torch.Tensor, control_at: list[int], groups: dict,
                 layers: list, equivalence: float | None, seq2seq: bool, tolerance: float, perturbed: list[str],
                 ids_changed: bool = True, first_layer: str | None = None,
                 pooled: pooled_out.PooledStates | None = None):
        self.mode, self.n, self.keep, self.control_at, self.ids_changed = mode, n, keep, control_at, ids_changed
        self.groups, self.layers, self.equivalence, self.seq2seq = groups, layers, equivalence, seq2seq
        self.tolerance, self.perturbed, self.first_layer, self.pooled = tolerance, perturbed, first_layer, pooled


def _measure(ctx, mode: str, n: int, change_ids: bool = False):
    subject = ctx.subject
    seed = 17
    gen = torch.Generator().manual_seed(seed)
    device = subject.device
    keep = _layout(n).to(device)
    pads = ~keep
    features = bool(subject.facts.takes_features)
    real = subject.random_primary(SAMPLES, n, gen)
    pad_id = subject.facts.pad_id
    if features or pad_id is None:
        base = real
    else:
        base = torch.where(pads, torch.full_like(real, pad_id), real)
    # the positive control: the first real position of each sample changes
    control_at = [int(keep[i].nonzero()[0]) for i in range(SAMPLES)]
    control_where = torch.zeros_like(keep)
    control_where[torch.arange(SAMPLES), control_at] = True
    ids_changed = mode == "argument" and (features or pad_id is None or change_ids)
    if ids_changed:
        other_pads = _other_content(subject, base, pads, seed + 1, gen)
    else:  # the pads hold pad_id, which must stay (a mask or positions may be built from it): only embeddings move
        other_pads = base
    control = _other_content(subject, base, control_where, seed + 2, gen)
    primary = torch.cat([base, other_pads, control])
    masks = torch.cat([keep, keep, keep])
    rows = primary.shape[0]
    embedding_where = torch.zeros_like(masks)
    embedding_where[SAMPLES:2 * SAMPLES] = pads
    target = _target(subject, n, rows, gen)
    args, kwargs = padded_inputs(subject, primary, target, masks)
    with layer_capture.captured_layers(subject.model, rows, seq_first=subject.facts.batch_first is False) as layers, \
            layer_capture.perturbed_embedding(subject.model, primary, embedding_where, seed) as perturbed:
        probe = ctx.run(args, kwargs, f"{SAMPLES} padded samples of length {n}, their pads changed, a real token "
                                      "changed")
    out = probe.output
    out_len = target.shape[1] if target is not None else n
    axis = None if target is not None or out.dim() != 2 else pooled_out.pooling(ctx, out, rows)
    pooled = None if axis is None else pooled_out.states(  # what the pooling ops return: one more, recorded, pass
        ctx, args, kwargs, axis, "the padded samples again",
        lambda: layer_capture.perturbed_embedding(subject.model, primary, embedding_where, seed))
    if pooled is not None:
        out = pooled.values
    elif out.dim() < 2 or tuple(out.shape[:2]) != (rows, out_len):
        return Finding(ID, Status.SKIP, f"inconclusive: the output has shape {tuple(out.shape)}, not one entry per "
                       f"position (batch {rows}, length {out_len}), so real positions cannot be compared",
                       evidence={"output_shape": tuple(out.shape)})
    if not ids_changed and not perturbed and mode == "argument":
        # No embedding received the token ids, so keeping pad_id in the pads changed nothing at all: change
        # the pad ids themselves (one more pass) rather than pass on a probe that perturbed nothing, unless the
        # model reads the pad id itself (RoBERTa's positions count the ids != pad): other ids there would move
        # what it derives from them, a change of the real tokens' positions, not of the pads' content.
        compared = pad_comparison(ctx, args, kwargs, pad_id)
        if compared is not None:
            return Inconclusive(f"no nn.Embedding received the token ids, so the pads' embedding could not be "
                                f"perturbed, and the model compares its ids with pad_id={pad_id} ({compared}), so "
                                "other ids at the pads would change more than the pads' content").finding(
                ID, evidence={"pad_comparison": compared, "embeddings_perturbed": []})
        return _measure(ctx, mode, n, change_ids=True)
    groups = {name: out[i * SAMPLES:(i + 1) * SAMPLES] for i, name in enumerate("ABC")}
    equivalence, first_layer = None, _first_leaking_layer(layers, keep, out_len if target is not None else None)
    if mode != "argument":
        equivalence, unequal_layer = right_padding_equivalence(ctx, base, keep, target, groups["A"], layers, axis)
        first_layer = first_layer or unequal_layer
    encoder = [(p, v) for p, v in layers if v.dim() >= 2 and v.shape[1] == n] if target is not None else []
    return _Measured(mode, n, keep, control_at, groups, encoder[-1:], equivalence, target is not None,
                     flow.tolerance(groups["A"]), list(dict.fromkeys(perturbed)), ids_changed, first_layer, pooled)


def _first_leaking_layer(layers: list, keep: torch.Tensor, target_length: int | None) -> str | None:
    """The first layer (in call order) whose real outputs moved when only the pads changed: on the padded side
    the real positions, on a seq2seq decoder's side (``target_length``) every position."""
    n = keep.shape[1]
    for path, value in layers:
        if value.dim() < 2 or value.shape[1] not in (n, target_length):
            continue
        a, b = value[:SAMPLES], value[SAMPLES:2 * SAMPLES]
        change = flow.change_per_position(a, b)
        real = keep.to(change.device) if value.shape[1] == n else torch.ones_like(change, dtype=torch.bool)
        if float(change[real].max()) > flow.tolerance(a):
            return path
    return None


def _other_content(subject, base: torch.Tensor, where: torch.Tensor, seed: int, gen) -> torch.Tensor:
    if base.is_floating_point():
        return torch.where(where[..., None], torch.randn(base.shape, generator=gen).to(base.device), base)
    return flow.replace_tokens(subject, base, where, seed)


def _target(subject, n: int, rows: int, gen) -> torch.Tensor | None:
    """The decoder input of a seq2seq model: fixed, real, and shorter than the source (so the encoder's
    layers are told from the decoder's by length)."""
    if not subject.takes_target:
        return None
    target = subject.random_primary(1, n - 2, gen)
    return target.expand(rows, *target.shape[1:])


# ----- judging --------------------------------------------------------------------------------------

def _real_outputs(m: _Measured) -> torch.Tensor:
    a = m.groups["A"]
    if m.pooled is not None:
        return pooled_out.judged(m.keep)
    return torch.ones(a.shape[:2], dtype=torch.bool, device=a.device) if m.seq2seq else m.keep


def _judge(ctx, m) -> Finding:
    if isinstance(m, Finding):
        return m
    real = _real_outputs(m)
    a, b, c = m.groups["A"], m.groups["B"], m.groups["C"]
    leak_change = flow.change_per_position(a, b)
    leak = float(leak_change[real].max())
    control_change = flow.change_per_position(a, c)
    others = real.clone()
    if not m.seq2seq and m.pooled is None:  # the changed token's own output moves by itself: the control is about
        others[torch.arange(SAMPLES), m.control_at] = False  # the others (a pooled output is one per sample)
    control = min(float(control_change[i][others[i]].max()) for i in range(SAMPLES) if others[i].any())
    judgement = flow.Judgement(max(leak, m.equivalence or 0.0), m.tolerance, control)
    evidence = _evidence(m, judgement, leak, leak_change)
    if judgement.leaked:
        return _leak_finding(ctx, m, judgement, evidence, leak_change)
    if not judgement.conclusive:
        return Finding(ID, Status.SKIP, "inconclusive: changing a real token changed no "
                       f"{'other real' if m.pooled is None else 'pooled'} output "
                       f"(largest change {control:.3g} <= tolerance {m.tolerance:.3g}), so the probe did not reach "
                       "the output", evidence=evidence)
    how = ("pad-content invariance with the mask passed in" if m.mode == "argument"
           else "pad-embedding invariance and right-padding equivalence with the mask built from pad_id")
    what, moved, note = ("real tokens' outputs do", "the others", "") if m.pooled is None else \
        ("each sample's pooled output does", "it", f". Pooled by design: {pooled_out.where(m.pooled)}; "
         f"{pooled_out.NOT_JUDGED}")
    return Finding(ID, Status.PASS, f"{what} not depend on padding ({how}; largest change {judgement.largest:.3g} "
                   f"<= tolerance {m.tolerance:.3g}; a changed real token moved {moved} by at least {control:.3g})"
                   f"{note}", Location(module=""), evidence)


def _evidence(m: _Measured, judgement: flow.Judgement, leak: float, leak_change: torch.Tensor) -> dict:
    ev = {**judgement.evidence(), "pad_content_change": leak, "right_padding_equivalence_change": m.equivalence,
          "length": m.n, "layout": [layout(row.tolist()) for row in m.keep], "mask_from": m.mode,
          "perturbation": ("other token ids at the pads and a random vector added to their embedding"
                           if m.ids_changed else "a random vector added to the pads' embedding (ids stay pad_id)"),
          "embeddings_perturbed": m.perturbed}
    if m.seq2seq:
        ev["side"] = "the source is padded; every position of the decoder output is judged"
    return ev if m.pooled is None else {**ev, **pooled_out.evidence(m.pooled)}


def _leak_map(m: _Measured, leak_change: torch.Tensor) -> leak_map.LeakMap:
    roles = [["real" if r else "pad" for r in row] for row in _real_outputs(m).tolist()]
    title = ("decoder output position per sample (source padded as shown in 'layout')" if m.seq2seq
             else "pooled output (p) per sample, _ = not judged" if m.pooled is not None
             else "output position per sample")
    columns = ["p"] if m.pooled is not None else [f"p{j}" for j in range(leak_change.shape[1])]
    return leak_map.LeakMap("padding", title, [f"sample {i}" for i in range(SAMPLES)], columns, leak_change.tolist(),
                            roles, m.tolerance)


def _pattern(m: _Measured, judgement: flow.Judgement, axis: str | None) -> tuple[str, str]:
    """The named pattern and the measurement that names it."""
    if m.seq2seq and m.layers:
        path, value = m.layers[0]
        enc = flow.change_per_position(value[:SAMPLES], value[SAMPLES:2 * SAMPLES])
        enc_tol = flow.tolerance(value[:SAMPLES])
        if float(enc[m.keep].max()) <= enc_tol:
            return "mask not reaching cross-attention", (f"the encoder output ('{path}') at real source positions is "
                                                         f"unchanged (<= {enc_tol:.3g}), the decoder output is not")
    if judgement.control <= judgement.tolerance:
        return "inverted convention", (f"a changed real token moved the other real outputs by only "
                                       f"{judgement.control:.3g} (tolerance {judgement.tolerance:.3g})")
    if axis == "query":
        return "mask on the query axis", "a per-sample mask shaped (b, ..., s, 1) is applied to the (s, s) scores"
    if axis is None:
        return "mask ignored", "no per-sample mask is applied to the attention scores in the recorded ops"
    return "padding leak", "the pad content reaches real positions"


def _recorded(ctx, m: _Measured) -> tuple[str | None, PaddingTrace, LeakOrigin, MixerOutputs]:
    """Record one forward of the padded samples and, after them, the same samples with only their pads changed (their
    embeddings, and their ids where the measurement changed them): the mask's axis ('key' when a per-sample mask is
    applied to square (s, s) scores on the key axis, 'query' when only on the query axis, None when none is), the
    trace of the padding mask through it (which line the finding points at), the first op whose real positions
    moved with the pads (where the leak is born), and the local mixers over positions the forward ran."""
    subject = ctx.subject
    n = m.n
    gen = torch.Generator().manual_seed(23)
    real = subject.random_primary(SAMPLES, n, gen)
    pad_id = subject.facts.pad_id
    tokens = (real if pad_id is None or real.is_floating_point()
              else torch.where(m.keep, real, torch.full_like(real, pad_id)))
    rows = torch.cat([tokens, tokens])
    keep = torch.cat([m.keep, m.keep])
    pads_of_copies = torch.zeros_like(keep)
    pads_of_copies[SAMPLES:] = ~m.keep
    if tokens.is_floating_point() or m.ids_changed:  # other features or ids at the copies' pads, as measured
        rows = _other_content(subject, rows, pads_of_copies, 24, gen)
    target = _target(subject, n, 2 * SAMPLES, gen)
    args, kwargs = padded_inputs(subject, rows, target, keep)
    seen, on_op = mask_axes(n, SAMPLES)
    trace = PaddingTrace(subject.model, 2 * SAMPLES, n)
    origin, mixers = LeakOrigin(Perturbation.paired(m.keep)), MixerOutputs(2 * SAMPLES, n)

    def all_three(event, op_args, op_kwargs, out):
        for observe in (on_op, trace.on_op, origin, mixers.on_op):
            observe(event, op_args, op_kwargs, out)

    with trace.hooks(), layer_capture.perturbed_embedding(subject.model, rows, pads_of_copies, 25):
        ctx.record(args, kwargs, f"a recorded forward of {SAMPLES} padded samples and their copies with other pads",
                   on_op=all_three)
    # a mask on both axes (pads neither attend nor are attended) is no query-axis mistake
    return "key" if "key" in seen else ("query" if seen else None), trace, origin, mixers


def _leak_finding(ctx, m: _Measured, judgement: flow.Judgement, evidence: dict, leak_change) -> Finding:
    subject = ctx.subject
    axis, trace, origin, mixers = _recorded(ctx, m)
    pattern, basis = _pattern(m, judgement, axis)
    row, meaning = PATTERNS[pattern]
    lm = _leak_map(m, leak_change)
    real = _real_outputs(m)
    masked = torch.where(real, leak_change, torch.full_like(leak_change, -1.0))
    sample, position = divmod(int(masked.argmax()), masked.shape[1])
    what = f"sample {sample}'s " + (f"output at position {position}" if m.pooled is None else
                                    f"pooled output (pooled at {m.pooled.axis.main.where})") + \
        f" changed by {float(masked.max()):.3g}"
    if m.equivalence is not None and m.equivalence > m.tolerance and evidence["pad_content_change"] <= m.tolerance:
        what = (f"the right-padded sample's real outputs differ from the same sequence unpadded by "
                f"{m.equivalence:.3g}")
    message = (f"padding leak ({pattern}): {meaning}. When only padded positions changed, {what} (tolerance "
               f"{m.tolerance:.3g}); {lm.leaks} {'pooled' if m.pooled is not None else 'real'} outputs changed. Why "
               f"this pattern: {basis}.")
    evidence = {**evidence, "pattern": pattern, "pattern_basis": basis, "first_leaking_layer": m.first_layer,
                **leak_map.evidence_of(lm)}
    found = blame(trace, m.first_layer or "", WRONG.get(pattern))
    location, related = found.location, found.related
    born = origin.first
    if born is not None and (born.file, born.line) != (location.file, location.line):
        related = (*related, Related("leak first appears", born.file, born.line, born.module))
    if m.first_layer:
        message += f" The pads first reach real outputs in layer '{m.first_layer}'."
    step = pooled_out.leaking_pool(m.pooled, m.groups["A"], m.groups["B"], m.keep) \
        if m.pooled is not None and not m.first_layer else None
    if step is not None:  # no layer's real outputs moved: the pooling itself reads the pads
        location, message = Location(step.module, step.file, step.line), message + pooled_out.through(step)
    mixing = local_mixing(born, trace.applied, mixers)
    if mixing is not None:  # a convolution or shift over positions reads the pads by design; the mask reaches scores
        return Finding(ID, Status.WARN, f"{mixing.explain()}. Measured: {message}",
                       Location(m.first_layer or "", mixing.event.file, mixing.event.line),
                       {**evidence, "local_mixing": mixing.evidence()}, row, related)
    pooling = sequence_pooling(subject) if pattern == "padding leak" else None
    if pooling is not None:
        # The mask reaches the scores; what mixes pads into real positions is the model's own pooling of the
        # sequence (a mean over neighbouring positions, pads included), which its config states.
        message = (f"the model pools the sequence ({pooling[2]}): a pooled position averages neighbouring "
                   "positions, pads included, so pad content reaches real outputs by the design of the pooling, "
                   f"not through a missing mask. Measured: {message}")
        return Finding(ID, Status.WARN, message, location, {**evidence, "pooling": pooling[2]}, row, related)
    if m.mode == "undeclared":
        message = (f"pad_id={subject.facts.pad_id} is known but no padding mask is declared: if the model masks "
                   "padding from pad_id, declare mask=internal and this is a failure; if it takes no padding, declare "
                   f"mask=none. Measured: {message}")
        return Finding(ID, Status.WARN, message, location, evidence, row, related)
    return Finding(ID, Status.FAIL, message, location, evidence, row, related)
