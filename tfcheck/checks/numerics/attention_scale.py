"""attention.scale: every attention scales its logits by 1/√d_k, d_k the per-head size.

One recorded forward (batch 2, all real tokens). At each attention site the effective scale is measured
against the projections, not the product: the logits the softmax normalised over (q_proj · k_projᵀ),
where q_proj / k_proj are the projection outputs the query and key operands were made from (matched
exactly, up to one scalar, by their per-head vector norms, which a head split, a transpose, a repeat of
key heads and a rotary embedding all keep). So a model that scales q before the product
(nn.MultiheadAttention), both q and k by d_k^-¼ (Whisper), or passes ``alpha=`` to ``baddbmm`` measures
right. For ``F.scaled_dot_product_attention`` the logits are never materialised: its ``scale`` argument
(default 1/√q.size(-1)) times the operand scalars is the measurement. The score entries a mask constant wrote
(recognised by the op that wrote them, whatever the constant's size: -1e4 as well as finfo.min) are left out.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from tfcheck.checks.numerics import value_origin
from tfcheck.checks.numerics.projection_match import relative_to_projection
from tfcheck.checks.numerics.scale_diagnosis import (
    HARD_CODED_ROW,
    TOLERANCE,
    Written,
    close,
    diagnose,
    hard_coded,
    hard_coded_message,
    own_sizes,
    passing_note,
    right_only_as_built,
    shrunk_note,
)
from tfcheck.checks.numerics.scale_source import at_constant, scaling, written_scale
from tfcheck.engine.registry import check
from tfcheck.model.inputs import PROBE_BATCH
from tfcheck.probe import recorded_probe
from tfcheck.probe.attention_sites import PROJECTIONS, AttentionSite, CapturedOp
from tfcheck.probe.operand_path import OperandPath, operand_ids, path_to_projection
from tfcheck.probe.score_flow import MaskUse, written_into
from tfcheck.recording.recorder import Recording
from tfcheck.report.findings import Finding, Location, Related
from tfcheck.report.status import Status

ID = "attention.scale"
ROW = "attention-scale-wrong"
#: The shared recorded probe's batch: several samples, so a bias shared by all of them (position bias,
#: causal mask) can be told apart from the scale.
BATCH = PROBE_BATCH
#: model_type values of the families that fold 1/√d_k into the initialisation of the query projection
#: and run unscaled attention by design (Raffel et al. 2020, Mesh TensorFlow).
UNSCALED_FAMILIES = ("t5", "mt5", "umt5", "longt5", "switch_transformers", "pop2piano", "udop")
#: model_type values of families that run unscaled attention as released (their weights were trained so).
UNSCALED_AS_RELEASED = ("gpt_neo",)


@dataclass
class Measured:
    scale: float
    how: str  # what the scale was read from
    traced: dict  # operand -> scalar relative to its projection, or None where it was not traced
    written: torch.Tensor | None = None  # the score entries a mask constant wrote, left out of the fit
    mask_constants: tuple = ()  # what wrote them: value, op, entries, whether the constant masks
    norms: dict = field(default_factory=dict)  # operand -> the normalising ops between it and its projection
    scalings: tuple = ()  # the ops that scale q or k by a number between their projection and the product


@check(ID, "attention logits are scaled by 1/√d_k (the per-head size)", rows=(ROW, HARD_CODED_ROW), order=62)
def attention_scale(ctx) -> list[Finding]:
    """One recorded forward: at every attention site, the logits over q_proj·k_projᵀ must be 1/√d_k."""
    subject = ctx.subject
    recorded = recorded_probe.shared(ctx)
    collector, sites = recorded.observed("attention sites"), recorded.attention_sites()
    if not sites:
        return [Finding(ID, Status.SKIP, "inconclusive: no attention found in the recorded ops (tfcheck recognises a "
                        "product of two activations followed by softmax and a product with the values, "
                        "F.scaled_dot_product_attention and nn.MultiheadAttention)")]
    known = known_scale(subject)
    findings: list[Finding] = []
    measured: list[dict] = []
    frames = value_origin.captured_frames(recorded)
    for site in sites:
        m = measure(site, collector.captured, collector.flow.masks, recorded.recording, collector.scalar_values)
        if m is None:
            continue
        d_k = site.contracted
        expected = known[0] if known else 1 / math.sqrt(d_k)
        entry = {"module": site.module, "line": site.line, "d_k": d_k, "measured": m.scale, "expected": expected,
                 "read_from": m.how, "operand_scalars": m.traced, "mask_constants": list(m.mask_constants)}
        measured.append(entry)
        # Every site's constant is read, passing ones too: at a shrunk head size a wrong one can measure 1/√d_k.
        written = written_scale(site, recorded.recording, frames, m.scalings, m.scale)
        own = own_sizes(subject.loaded, subject.facts.d_model, d_k) if written is not None else None
        wrong = abs(m.scale / expected - 1) > TOLERANCE or (
            not known and written is not None and right_only_as_built(m.scale, d_k, own))
        if wrong and not any(f.location is not None and f.location.module == site.module for f in findings):
            findings.append(_judge(subject, site, m, expected, known, entry,
                                   {c.event.index: c for c in collector.captured},
                                   scale_location(site, recorded.recording, frames), written))
        elif written is not None and not wrong:
            entry["hard_coded"] = passing_note(written, d_k, own)
    if not measured:
        return [Finding(ID, Status.SKIP, "inconclusive: attention was found but no site's logits could be measured "
                        "(the scores varied too little across the batch)", evidence={"sites": len(sites)})]
    evidence = {"sites": measured, "tolerance": TOLERANCE,
                "expected_from": known[1] if known else "1/√d_k, d_k the size the score product sums over"}
    if findings:
        return [_with(f, evidence) for f in findings[:3]]
    where = f" ({known[1]})" if known else ""
    notes = [e["hard_coded"] for e in measured if "hard_coded" in e]
    noted = f"; {notes[0]}" + (f" (at {len(notes)} sites)" if len(notes) > 1 else "") if notes and not known else ""
    if known and known[1].startswith("config.model_type"):
        # By design, yet it looks like the "not scaled" bug; say why instead of passing silently.
        finding = Finding(ID, Status.WARN, f"{len(measured)} attention sites are not scaled by 1/√d_k ({known[1]}): "
                          "correct for this family by design; a model of it initialised or trained otherwise gets a "
                          "too-peaked softmax. accept=attention.scale:REASON silences this", Location(module=""),
                          evidence, row=ROW)
        reason = subject.accepted.get(ID)
        if reason:  # the engine accepts failures only; this check's own warning honours accept too
            finding = finding.with_status(Status.ACCEPTED, f"{finding.message} (accepted: {reason})")
        return [finding]
    return [Finding(ID, Status.PASS, f"{len(measured)} attention sites scale their logits by "
                    f"{measured[0]['expected']:.4g}{where}, within {TOLERANCE:.0%}{noted}", Location(module=""),
                    evidence)]


def _with(finding: Finding, evidence: dict) -> Finding:
    return Finding(finding.check, finding.status, finding.message, finding.location,
                   {**finding.evidence, **evidence}, finding.row, finding.related)


def scale_location(site: AttentionSite, recording: Recording, frames: dict) -> tuple[Location, tuple[Related, ...]]:
    """Where the site's scale was chosen: the line that wrote the constant the scores are multiplied or divided
    by (followed out of a shared helper to the call that passed it), the scores' line as related; the scores'
    line itself where no constant scales them (nothing scales them: that is the line to change)."""
    scores = Location(site.module, site.file, site.line)
    op, value = scaling(site, recording)
    found = value_origin.located(site.module, frames.get(op.index) if op else None, value,
                                 "the scale is applied here")
    if found is None or (found[0].file, found[0].line) == (site.file, site.line):
        return scores, ()
    location, used = found
    applied = tuple(r for r in used if (r.file, r.line) != (site.file, site.line))
    return location, (Related("the scores are computed here", site.file, site.line, site.module), *applied)


def known_scale(subject) -> tuple[float, str] | None:
    """A scale the model's config states or implies: (scale, source), or None for the standard 1/√d_k."""
    cfg = getattr(subject.model, "config", None)
    if cfg is None:
        return None
    model_type = getattr(cfg, "model_type", None)
    if model_type in UNSCALED_FAMILIES:
        return 1.0, (f"config.model_type = {model_type!r}: the T5 family runs unscaled attention and folds "
                     "1/√d_k into the query projection's initialisation")
    if model_type in UNSCALED_AS_RELEASED:
        return 1.0, (f"config.model_type = {model_type!r}: this family runs unscaled attention as released "
                     "(its Mesh TensorFlow origin); its weights were trained that way")
    if getattr(cfg, "scale_attn_weights", True) is False:
        return 1.0, "config.scale_attn_weights = False"
    scalar = getattr(cfg, "query_pre_attn_scalar", None)
    if isinstance(scalar, (int, float)) and scalar > 0:
        return scalar ** -0.5, f"config.query_pre_attn_scalar = {scalar}"
    multiplier = getattr(cfg, "attention_multiplier", None)
    if isinstance(multiplier, (int, float)) and multiplier > 0:
        return float(multiplier), f"config.attention_multiplier = {multiplier}"
    return None


# ----- measuring -------------------------------------------------------------------------------------

def measure(site: AttentionSite, captured: list[CapturedOp], masks: Sequence[MaskUse] = (),
            recording: Recording | None = None, scalar_values: dict[int, float] | None = None) -> Measured | None:
    by_index = {c.event.index: c for c in captured}
    q_axis, k_axis = _contracted_axes(site, by_index.get(site.score_op.index))
    if q_axis is None or k_axis is None:  # both None or neither
        return None
    before = [c for c in captured if c.event.index < site.score_op.index and c.event.short_name in PROJECTIONS
              and not c.extra.get("no_parameter") and c.out is not None]
    traced = {"q": relative_to_projection(site.query.tensor, q_axis, before),
              "k": relative_to_projection(site.key.tensor, k_axis, before)}
    paths = _paths(site, recording, before, scalar_values) if recording is not None else {}
    for name, path in paths.items():  # ops the norms cannot see through: a bias added, a tensor-valued scale
        if traced[name] is None and path.projection is not None and path.factor is not None:
            traced[name] = path.factor
    norms = {name: path.norms for name, path in paths.items() if path.norms}
    scalings = tuple(op for path in paths.values() for op in path.scalings)
    operands = math.prod(v for v in traced.values() if v is not None)
    if site.form == "sdpa":
        scale = site.options.get("scale")
        how = "the scale= argument of scaled_dot_product_attention" if scale is not None else \
            "scaled_dot_product_attention's default 1/√q.size(-1)"
        base = float(scale) if scale is not None else 1 / math.sqrt(site.query.tensor.shape[-1])
        return Measured(base * operands, how, traced, norms=norms, scalings=scalings)
    raw, logits = _raw_product(site, by_index), _softmax_input(site, by_index)
    written, constants = written_into(masks, site.score_op, site.softmax_op, logits)
    fitted = _fitted_scale(raw, logits, written)
    if fitted is None:
        return None
    return Measured(fitted * operands, f"the softmax input over the product of its operands ({site.score_op.name})",
                    traced, written, constants, norms, scalings)


def _paths(site: AttentionSite, recording: Recording, before: list[CapturedOp],
           scalar_values: dict[int, float] | None) -> dict[str, OperandPath]:
    """What the recorded ops between each operand and its projection do (see probe/operand_path.py)."""
    projections = {i: c.event for c in before for i in c.event.output_ids}
    q_id, k_id = operand_ids(site.score_op)
    return {name: path_to_projection(recording, i, site.score_op.index, projections, scalar_values or {})
            for name, i in (("q", q_id), ("k", k_id))}


def _equation(op: CapturedOp | None) -> tuple[str, str, str] | None:
    equation = op.extra.get("equation") if op is not None else None
    if not equation or "->" not in equation or "..." in equation:
        return None
    inputs, out = equation.replace(" ", "").split("->")
    parts = inputs.split(",")
    return (parts[0], parts[1], out) if len(parts) == 2 else None


def _contracted_axes(site: AttentionSite, score: CapturedOp | None) -> tuple[int | None, int | None]:
    if site.form == "sdpa":
        return -1, -1
    if site.score_op.short_name == "einsum":
        parsed = _equation(score)
        if parsed is None:
            return None, None
        sa, sb, so = parsed
        summed = [c for c in sa if c in sb and c not in so]
        return (sa.index(summed[0]), sb.index(summed[0])) if len(summed) == 1 else (None, None)
    return -1, -2  # q @ kᵀ: q's features last, kᵀ's features second to last


def _raw_product(site: AttentionSite, by_index: dict) -> torch.Tensor | None:
    """q·kᵀ recomputed from the operands, without the alpha, beta or bias of baddbmm."""
    q, k = site.query.tensor.double(), site.key.tensor.double()
    try:
        if site.score_op.short_name == "einsum":
            parsed = _equation(by_index.get(site.score_op.index))
            if parsed is None:  # as the TypeError of unpacking None
                return None
            sa, sb, so = parsed
            return torch.einsum(f"{sa},{sb}->{so}", q, k)
        return q @ k
    except (RuntimeError, TypeError, ValueError):
        return None


def _softmax_input(site: AttentionSite, by_index: dict) -> torch.Tensor | None:
    """What the softmax normalised: the scaled, masked, biased logits."""
    soft = by_index.get(site.softmax_op.index) if site.softmax_op is not None else None
    return soft.operands[0] if soft is not None and soft.operands else None


def _valid(raw: torch.Tensor, logits: torch.Tensor, written: torch.Tensor | None) -> torch.Tensor:
    """The (query, key) entries that hold a logit in every sample: not written by a mask constant, and (where
    no op was seen writing one) neither non-finite nor huge."""
    scale = float(raw.abs().max()) + 1.0
    valid = torch.isfinite(logits) & (logits.abs() < 1e4 * scale)
    if written is not None and written.numel() == logits.numel():
        valid &= ~written.reshape(BATCH, -1)
    return valid.all(0)


def _fitted_scale(raw: torch.Tensor | None, logits: torch.Tensor | None,
                  written: torch.Tensor | None = None) -> float | None:
    """s in logits = s · (q·kᵀ) + b, b any bias that is the same for every sample (a relative
    position bias, a causal mask, ALiBi); masked entries are left out."""
    if raw is None or logits is None or raw.numel() != logits.numel():
        return None
    raw = raw.double().reshape(BATCH, -1)  # batch outermost, also where heads are merged into it
    logits = logits.double().reshape(BATCH, -1)
    valid = _valid(raw, logits, written)
    if int(valid.sum()) < 2:
        return None
    d_raw = (raw - raw.mean(0))[:, valid]
    d_logits = (logits - logits.mean(0))[:, valid]
    denominator = float((d_raw * d_raw).sum())
    if denominator <= 1e-12 * max(float((raw * raw).sum()), 1e-30):
        return None
    return float((d_raw * d_logits).sum()) / denominator


# ----- judging ---------------------------------------------------------------------------------------

def _judge(subject, site: AttentionSite, m: Measured, expected: float, known, entry: dict, by_index: dict,
           where: tuple[Location, tuple[Related, ...]], written: Written | None = None) -> Finding:
    d_k = site.contracted
    assert d_k is not None  # every site records the size its score product sums over
    d_model = subject.facts.d_model
    if close(m.scale, 1.0):
        written = None  # not scaled at all, at every head size: the constant tells nothing the measure does not
    noted: dict = {}
    own = own_sizes(subject.loaded, d_model, d_k) if written is not None else None
    if written is not None:
        # A constant is judged at the model's own sizes: at tfcheck's shrunk ones it can equal a named scale.
        what, bug, noted = hard_coded(written, m.scale, d_k, d_model, own)
    else:
        what, bug = diagnose(m.scale, d_k, d_model)
        # A 1/d_k computed from the head size follows tfcheck's shrink; the evidence says it was measured there.
        if close(m.scale, 1 / d_k) and (note := shrunk_note(subject.loaded, d_model, d_k)):
            noted = {"built_sizes": note}
    module = site.module or "<root>"
    location, related = at_constant(site, written, where)
    untraced = [name for name, c in m.traced.items() if c is None]
    evidence = {**entry, "diagnosis": what, **noted,
                "normalised": {name: [f"{op.short_name} at {op.module}:{op.line}" for op in ops]
                               for name, ops in m.norms.items()}}
    if known:
        return Finding(ID, Status.WARN, f"attention in '{module}' is {what}, but {known[1]} implies {expected:.4g}: "
                       "the config and the code disagree.", location, evidence, related=related)
    if bias := _position_bias(site, by_index, m.written):
        bug = False
        what += f"; the logits also get an added position bias ({bias})"
    if bug and set(m.norms) == {"q", "k"}:
        bug = False  # qk-norm: the norms' learned gains set the temperature, whatever the constant scale
        what += (f"; q and k are each normalised between their projection and the product "
                 f"({_norm_ops(m.norms)}), so the norms' learned gains set the softmax temperature and this scale "
                 "is a qk-norm design, not a missing 1/√d_k")
    elif untraced and not bug:
        what += f" ({' and '.join(untraced)} not traced to a projection: a qk-norm or a learned temperature?)"
    if bug:
        return Finding(ID, Status.FAIL,
                       f"attention in '{module}' is {what} (d_k = {d_k}, measured scale {m.scale:.4g}, expected "
                       f"{expected:.4g}). Too large a scale saturates the softmax (vanishing gradients); too small "
                       "flattens it. Use scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), or leave "
                       "scale=None in F.scaled_dot_product_attention.", location, evidence, row=ROW,
                       related=related)
    if written is not None:
        status, message = Status.WARN, hard_coded_message(module, what, m.scale, d_k, own)
    else:
        status, message = Status.WARN, (
            f"attention in '{module}' is {what} (d_k = {d_k}, measured {m.scale:.4g}, expected {expected:.4g}). "
            "Some designs do this on purpose (T5 folds 1/√d_k into its initialisation, muP uses 1/d_k, qk-norm and "
            "learned temperatures rescale); if yours does, declare accept={'attention.scale': 'why'}.")
    reason = subject.accepted.get(ID)
    if reason:
        status, message = Status.ACCEPTED, f"{message} (accepted: {reason})"
    return Finding(ID, status, message, location, evidence, row=HARD_CODED_ROW if written else ROW, related=related)


def _norm_ops(norms: dict) -> str:
    return "; ".join(f"{name}: {norms[name][0].short_name} in '{norms[name][0].module}'" for name in sorted(norms))


def _position_bias(site: AttentionSite, by_index: dict, written: torch.Tensor | None) -> str | None:
    """A finite bias added to the logits that differs across (query, key) pairs the same way in every
    sample (T5's relative position buckets, ALiBi): a sign of a relative-position design. The entries a mask
    constant wrote are no bias."""
    logits, raw = _softmax_input(site, by_index), _raw_product(site, by_index)
    fitted = _fitted_scale(raw, logits, written)
    if fitted is None or logits is None or raw is None:  # fitted is None where either is
        return None
    logits, raw = logits.double().reshape(BATCH, -1), raw.double().reshape(BATCH, -1)
    bias = (logits - fitted * raw).mean(0)
    finite = bias[_valid(raw, logits, written)]
    if finite.numel() < 2 or float(finite.std()) < 1e-3:
        return None
    return f"spread {float(finite.std()):.3g} across query-key pairs"
