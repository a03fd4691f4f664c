"""attention.heads: splitting the width into heads and merging them back must keep positions apart.

One batched, recorded forward per probe length: sample 0 is a random input, each further sample the
same input with ONE position changed (for a seq2seq model one sample changes a source position, one a
target position). At every attention site the ops are read with their real tensors:
- the score tensor's (query, key) axes must have the probe lengths (at two distinct lengths, so a
  head size that happens to equal one length cannot pass for it);
- at the first site a perturbation reaches, q, k and v must change at the changed position only
  (a projection and a per-position norm or rotation keep positions apart; a wrong split does not);
- the activation entering the output projection must be the context rearranged per position: it may
  change only where the context changed, and a plain ``view`` of (b, h, s, d_k) as (b, s, d) is named at
  that reshape's line (the projection, which only consumes the mixed tensor, is shown beside it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from tfcheck.engine.registry import Inconclusive, check
from tfcheck.model.inputs import TARGET_LENGTH_DELTA
from tfcheck.probe.attention_sites import AttentionSite
from tfcheck.probe.flow import change_per_position, replace_tokens, tolerance
from tfcheck.probe.head_merge import merging_op
from tfcheck.probe.projection_inputs import by_position as projection_input_by_position
from tfcheck.probe.projection_inputs import record_sites
from tfcheck.report.findings import Finding, Location, Related
from tfcheck.report.status import Status

ID = "attention.heads"
SPLIT_ROW, MERGE_ROW, SCORES_ROW = (
    "head-split-mixes-positions", "head-merge-mixes-positions", "attention-scores-wrong-axes")
#: Probe lengths: distinct from each other, from the probe batch and from usual head counts and sizes.
LENGTHS = (5, 9)


@dataclass
class Perturbation:
    sample: int  # the batch row holding the changed input
    stream: str  # "source" or "target"
    position: int
    length: int


@check(ID, "head split and merge keep positions apart; scores are (length_q, length_k)",
       rows=(SPLIT_ROW, MERGE_ROW, SCORES_ROW), order=60, builds_inputs=True)
def attention_heads(ctx) -> list[Finding]:
    """At two probe lengths, one recorded forward each on a batch of the input and copies with one
    position changed: the score axes must be the probe lengths; q, k and v at the first attention the
    change reaches must change at that position only; the merged context before the output projection
    may change only where the heads' output changed, and must not be a plain view of (b, h, s, d_k)."""
    subject = ctx.subject
    lengths = _lengths(subject)
    if lengths is None:
        if (subject.facts.length_multiple or 1) > 1:
            return [_skip(f"not applicable: one probe length of at least 3 fits (length_multiple="
                          f"{subject.facts.length_multiple}, longest {subject.length_cap()}), where two are needed to "
                          "tell a head size from a length")]
        return [_skip("not applicable: the model takes fewer than 3 positions (max_len), too few to tell "
                      "one position from another")]
    problems: dict[str, Finding] = {}
    notes: list[str | Inconclusive] = []
    checked = []
    for n, length in enumerate(lengths):
        args, kwargs, perturbations, stream_lengths = _probe_inputs(subject, length, seed=n)
        _, sites, recording = record_sites(ctx, args, kwargs, f"a recorded forward at length {length} with one "
                                                              "position changed per sample")
        if not sites:
            return [_skip("inconclusive: no attention found in the recorded ops (tfcheck recognises a product "
                          "of two activations followed by softmax and a product with the values, "
                          "F.scaled_dot_product_attention and nn.MultiheadAttention; a custom kernel is opaque "
                          "to it)", {"length": length})]
        batch = 1 + len(perturbations)
        merges = 0
        for site in sites:
            _keep_first(problems, _judge_scores(site, set(stream_lengths.values()), length))
            finding, verified = _judge_merge(site, batch, perturbations, recording)
            _keep_first(problems, finding)
            merges += verified
        for p in perturbations:
            finding, note = _judge_split(sites, batch, p, problems, subject.takes_target,
                                         carries_forward=subject.facts.causal is True and not subject.takes_target)
            _keep_first(problems, finding)
            if note:
                notes.append(note)
        checked.append({"length": length, "stream_lengths": stream_lengths, "sites": len(sites),
                        "merges_verified": merges, "site_modules": sorted({s.module for s in sites}),
                        "perturbed": [f"{p.stream} position {p.position}" for p in perturbations]})
    if problems:
        return list(problems.values())
    if notes and all(isinstance(n, Inconclusive) for n in notes):
        return [_skip(str(notes[0]), {"checked": checked})]
    sites_text = ", ".join(f"{c['sites']} sites at length {c['length']}" for c in checked)
    return [Finding(ID, Status.PASS, f"heads keep positions apart and scores are (length_q, length_k) ({sites_text})",
                    Location(module=""), {"checked": checked, "notes": [str(n) for n in notes]})]


def _skip(message: str, evidence: dict | None = None) -> Finding:
    return Finding(ID, Status.SKIP, message, evidence=evidence or {})


def _keep_first(problems: dict[str, Finding], finding: Finding | None) -> None:
    """One finding per row: the first site that shows it (the earliest layer)."""
    if finding is not None and finding.status is not Status.PASS:
        problems.setdefault(finding.row or finding.evidence.get("warning", finding.message), finding)


def _lengths(subject) -> tuple[int, ...] | None:
    chosen = tuple(sorted(set(subject.scaled_lengths(*LENGTHS))))
    if len(chosen) < 2:
        cap, step = subject.length_cap(), subject.facts.length_multiple or 1
        chosen = tuple(n for n in (cap - step, cap) if n >= 3)
    return chosen if len(chosen) == 2 else None


# ----- inputs ----------------------------------------------------------------------------------------

def _probe_inputs(subject, length: int, seed: int):
    """A batch of the input and copies with one position changed: (args, kwargs, perturbations,
    {stream: length})."""
    gen = torch.Generator().manual_seed(1000 + seed)
    seq2seq = subject.takes_target
    source = subject.random_primary(1, length, gen)
    streams = {"source": length}
    perturbations = [Perturbation(1, "source", length - 2, length)]
    target = None
    if seq2seq:
        t_len = max(3, length + TARGET_LENGTH_DELTA)
        target = subject.random_primary(1, t_len, gen)
        streams["target"] = t_len
        perturbations.append(Perturbation(2, "target", t_len - 2, t_len))
    batch = 1 + len(perturbations)
    sources, targets = source.repeat(batch, *[1] * (source.dim() - 1)), None
    if target is not None:
        targets = target.repeat(batch, *[1] * (target.dim() - 1))
    for p in perturbations:
        if p.stream == "source":
            sources = _changed(subject, sources, p, seed)
        else:
            assert targets is not None  # a target perturbation comes with a target
            targets = _changed(subject, targets, p, seed)
    args, kwargs = subject.inputs_for(sources, targets)
    return args, kwargs, perturbations, streams


def _changed(subject, x: torch.Tensor, p: Perturbation, seed: int) -> torch.Tensor:
    where = torch.zeros(x.shape[:2], dtype=torch.bool)
    where[p.sample, p.position] = True
    if not x.is_floating_point():
        return replace_tokens(subject, x, where, seed)
    gen = torch.Generator().manual_seed(2000 + seed)
    noise = torch.randn(x.shape, generator=gen).to(x.device, x.dtype) * float(x.std())
    return torch.where(where.to(x.device)[..., None], x + noise, x)


# ----- judgements ------------------------------------------------------------------------------------

def _location(site: AttentionSite, op=None) -> Location:
    module, file, line = site.where(op)
    return Location(module=module, file=file, line=line)


def _name(module: str) -> str:
    return module or "<root>"


def _judge_scores(site: AttentionSite, lengths: set[int], probe_length: int) -> Finding | None:
    """Scores whose query and key axes are both not probe lengths while the product sums over a probe
    length: positions were summed away and features compared. (Scores with one probe-length axis, or
    summing over a head size, are learned queries or latents: not judged.)"""
    lq, lk = site.score_lengths
    if lq in lengths or lk in lengths or site.contracted not in lengths:
        return None
    shape = tuple(site.scores.shape) if site.scores is not None else None
    what = f"the score tensor {shape}" if shape else "q·kᵀ"
    return Finding(
        ID, Status.FAIL,
        f"in '{_name(site.module)}' {what} has (query, key) axes of sizes ({lq}, {lk}) where the probe lengths are "
        f"{sorted(lengths)}, and the product sums over {site.contracted} = the length: the scores are not "
        "(length_q, length_k), so softmax mixes features instead of positions (a transpose on the wrong operand "
        "or the wrong axes, e.g. q.transpose(-2, -1) @ k). Use "
        "scores = q @ k.transpose(-2, -1) with q, k of shape (b, h, s, d_k).",
        _location(site), {"score_shape": shape, "query_key_sizes": (lq, lk), "probe_lengths": sorted(lengths),
                          "summed_axis_size": site.contracted,
                          "probe_length": probe_length, "op": site.score_op.name},
        row=SCORES_ROW)


def _changed_positions(before: torch.Tensor, after: torch.Tensor, tol: float) -> torch.Tensor:
    """(position, group) bool: where ``after`` differs from ``before`` by more than ``tol``."""
    diff = (after.double() - before.double()).abs()
    diff = torch.nan_to_num(diff, nan=float("inf"))
    return diff.amax(-1) > tol


def _first_reached(sites: list[AttentionSite], batch: int, p: Perturbation,
                   seq2seq: bool) -> tuple[AttentionSite, dict] | None:
    """The first site (in execution order) whose q, k or v changed under the perturbation, with those tensors
    laid out (batch, position, head, features); never a seq2seq decoder's cross-attention."""
    for site in sites:
        if _reads_encoder_output(site, seq2seq) or site.routed_by:
            continue
        laid = {name: t for name, op in (("q", site.query), ("k", site.key), ("v", site.value))
                if (t := op.by_position(batch)) is not None}
        if len(laid) < 3:  # q, k or v not laid out by position
            continue
        reached = {n: t for n, t in laid.items()
                   if bool(_changed_positions(t[0], t[p.sample], tolerance(t[0])).any())}
        if reached:
            return site, {n: laid[n] for n in reached if laid[n].shape[1] == p.length}
    return None


def _reads_encoder_output(site: AttentionSite, seq2seq: bool) -> bool:
    """A seq2seq decoder's cross-attention, told by its lengths: the probe gives a seq2seq model a target shorter
    than its source (TARGET_LENGTH_DELTA), so there queries (the decoder's) and keys (the encoder's output, mixed
    across positions by its bidirectional layers) differ in length. Mixed keys there say nothing of a split.
    (Within one stack, queries of another length read the stack's own states: a Perceiver's latents.)"""
    return seq2seq and site.query.length != site.key.length


def _judge_split(sites: list[AttentionSite], batch: int, p: Perturbation, problems, seq2seq: bool = False,
                 carries_forward: bool = False) -> tuple[Finding | None, str | Inconclusive | None]:
    """q, k, v at the first attention reached must change at the changed position only, except where the input
    of their projections changed, and (``carries_forward``: a causal model) at later positions, which a causal
    convolution, shift or recurrence between the input and the attention may reach by design."""
    first = _first_reached(sites, batch, p, seq2seq)
    if first is None:
        routed = next((s for s in sites if s.routed_by), None)
        if routed is not None:
            gather = next(iter(routed.routed_by.values()))
            return None, Inconclusive(
                f"the attention in '{_name(routed.module)}' reads tokens regrouped by content ({gather.short_name} "
                f"at {gather.file}:{gather.line} picks them by indices ranked from activations: a routing or "
                "clustering attention), so its q and k are in the routing's order, not the sequence's, and no other "
                "attention was reached: the split could not be judged by position")
        return None, Inconclusive(f"changing {p.stream} position {p.position} changed q, k and v at no attention "
                                  "site, so the split could not be judged")
    site, tensors = first
    if not tensors:
        return None, (f"the first attention reached by the {p.stream} ('{_name(site.module)}') has no q/k/v of "
                      "that length")
    evidence: dict[str, dict[str, Any]] = {}
    mixed: list[str] = []
    spread = False
    inherited = _changed_in_input(site, batch, p)
    for name, t in tensors.items():
        tol = tolerance(t[0])
        changed = _changed_positions(t[0], t[p.sample], tol)  # (position, head)
        allowed = inherited.get(name, torch.zeros(changed.shape[0], dtype=torch.bool)).clone()
        allowed[p.position + 1:] |= carries_forward
        excused = changed & allowed[:, None]
        others = torch.cat([(changed & ~excused)[:p.position], (changed & ~excused)[p.position + 1:]])
        per_head = [sorted(int(i) for i in changed[:, h].nonzero().flatten()) for h in range(changed.shape[1])]
        change = change_per_position(t[0:1], t[p.sample:p.sample + 1])[0]
        evidence[name] = {"changed_positions_per_head": per_head, "tolerance": tol,
                          "positive_control_change": float(change[p.position]),
                          "largest_change_elsewhere":
                              float(torch.cat([change[:p.position], change[p.position + 1:]]).max())
                              if change.numel() > 1 else 0.0}
        if name in inherited:
            evidence[name]["changed_positions_in_projection_input"] = inherited[name].nonzero().flatten().tolist()
        if bool(others.any()):
            mixed.append(name)
            spread |= len({tuple(h) for h in per_head}) > 1
    base = {"perturbed": f"{p.stream} position {p.position} of {p.length}", "site": site.module, **evidence}
    moved_later = sorted(n for n, t in tensors.items() if bool(_changed_positions(
        t[0], t[p.sample], tolerance(t[0]))[p.position + 1:].any()))
    if not mixed and moved_later:
        return _mixed_input(site, p, moved_later, base, carries_forward), None
    if not mixed:
        control = max(e["positive_control_change"] for e in evidence.values())
        if control <= min(e["tolerance"] for e in evidence.values()):
            return None, Inconclusive(f"q, k, v at '{_name(site.module)}' did not change at {p.stream} position "
                                      f"{p.position}")
        return None, f"q, k, v at '{_name(site.module)}' changed at {p.stream} position {p.position} only"
    if spread:
        return Finding(
            ID, Status.FAIL,
            f"at the first attention ('{_name(site.module)}') changing {p.stream} position {p.position} changed "
            f"{', '.join(mixed)} at other positions, differently in each head "
            f"({mixed[0]}: positions per head {evidence[mixed[0]]['changed_positions_per_head']}): the head split "
            "mixes positions. Split with x.view(b, s, h, d_k).transpose(1, 2), not x.view(b, h, s, d_k).",
            _location(site, site.shaped_by.get(mixed[0])), base, row=SPLIT_ROW), None
    return Finding(
        ID, Status.WARN,
        f"at the first attention ('{_name(site.module)}') changing {p.stream} position {p.position} changed "
        f"{', '.join(mixed)} at other positions too, the same in every head: the input of that attention already "
        "mixes positions (a convolution or token shift before attention, or statistics over the sequence). "
        "Not a head-split bug; if the model has no such layer, look for a norm or mean over the length axis.",
        _location(site), {**base, "warning": "input of the first attention mixes positions"}), None


def _changed_in_input(site: AttentionSite, batch: int, p: Perturbation) -> dict[str, torch.Tensor]:
    """{"q"|"k"|"v": (position,) bool, where the activation its projection read changed}: a position changed
    there was mixed in before the attention (a recurrent, state-space or convolution layer), not by its split."""
    found = {}
    for name, t in site.projected_from.items():
        laid = projection_input_by_position(t, batch, p.length)
        if laid is not None:
            found[name] = _changed_positions(laid[0][:, None], laid[p.sample][:, None], tolerance(laid[0]))[:, 0]
    return found


def _mixed_input(site: AttentionSite, p: Perturbation, names: list[str], base: dict, causal: bool) -> Finding:
    where = {n: base[n]["changed_positions_in_projection_input"] for n in names
             if "changed_positions_in_projection_input" in base[n]}
    why = [f"the activation their projections read had already changed there ({where})"] if where else []
    if causal:
        why.append("the model is causal (assumed causal=True), so a causal convolution, shift or recurrence "
                   "between the projection and the attention may carry a position forward")
    return Finding(
        ID, Status.WARN,
        f"at the first attention ('{_name(site.module)}') changing {p.stream} position {p.position} changed "
        f"{', '.join(names)} at later positions too, per head differently, and nowhere else: "
        f"{'; and '.join(why)}. A layer that mixes positions before the attention does this by design (a "
        "state-space, recurrent or convolution layer, a token shift); a head split that mixes positions would "
        "also change earlier positions. Judged against that input, the split keeps positions apart.",
        _location(site), {**base, "warning": "input of the first attention mixes positions", "causal": causal})


def _judge_merge(site: AttentionSite, batch: int, perturbations: list[Perturbation],
                 recording=None) -> tuple[Finding | None, bool]:
    """(finding or None, whether the merge was verified as a per-position rearrangement)."""
    merged, context = site.merged, site.context
    if merged is None or site.routed_by:  # a routed context is in the routing's order until scattered back
        return None, False
    laid = context.by_position(batch)  # (b, s, h, d)
    if laid is None:
        return None, False
    heads = laid.shape[2]
    flat = merged.flatten()
    tol = tolerance(laid)
    kept_apart = (laid.flatten(), laid.transpose(0, 1).flatten())  # batch-first and length-first merges
    if any(_same(flat, c, tol) for c in kept_apart):
        return None, True
    own_order = context.tensor.flatten()
    evidence = {"context_shape": tuple(context.tensor.shape), "merged_shape": tuple(merged.shape), "heads": heads,
                "difference_from_per_position_merge": min(_difference(flat, c) for c in kept_apart),
                "difference_from_plain_view": _difference(flat, own_order),
                "tolerance": tol, "merge_op": site.merge_op.name if site.merge_op else None}
    if heads > 1 and laid.shape[1] > 1 and _same(flat, own_order, tol):
        location, related = _merge_places(site, recording)
        return Finding(
            ID, Status.FAIL,
            f"in '{_name(site.module)}' the heads' output {tuple(context.tensor.shape)} enters the output projection "
            "as "
            f"{tuple(merged.shape)} read in its own memory order, without moving the heads next to the features: "
            "each merged position holds pieces of several positions. Merge with "
            "out.transpose(1, 2).contiguous().view(b, s, d_model).",
            location, evidence, row=MERGE_ROW, related=related), False
    return _merge_by_perturbation(site, laid, batch, perturbations, evidence), False


def _merge_places(site: AttentionSite, recording) -> tuple[Location, tuple[Related, ...]]:
    """(location, related) of a merge in memory order: the reshape that folded the heads, the line to change,
    with the projection that reads its result beside it; the projection alone where no reshape is found."""
    fold = merging_op(recording, site.value_op, site.merge_op) if recording is not None and site.merge_op else None
    if fold is None:
        return _location(site, site.merge_op), ()
    projection = site.merge_op
    assert projection is not None  # a fold is only looked for before a projection
    return (Location(module=fold.module, file=fold.file, line=fold.line),
            (Related("the output projection reads the merged heads here", projection.file, projection.line,
                     projection.module),))


def _difference(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max()) if a.shape == b.shape else float("inf")


def _same(a: torch.Tensor, b: torch.Tensor, tol: float) -> bool:
    return a.shape == b.shape and bool(((a.double() - b.double()).abs() <= tol).all())


def _merge_by_perturbation(site, laid, batch, perturbations, evidence) -> Finding | None:
    """Where the merged tensor is not a plain rearrangement (extra ops in between), it may still change
    only at positions where the heads' output changed."""
    merged = site.merged
    if merged.dim() < 3 or merged.shape[0] != batch or merged.shape[1] != laid.shape[1]:
        return None
    tol = evidence["tolerance"]
    for p in perturbations:
        allowed = _changed_positions(laid[0], laid[p.sample], tol).any(-1)
        now = change_per_position(merged[0:1], merged[p.sample:p.sample + 1])[0] > tolerance(merged)
        extra = now & ~allowed
        if bool(extra.any()):
            return Finding(
                ID, Status.WARN,
                f"in '{_name(site.module)}' the tensor entering the output projection changed at positions "
                f"{extra.nonzero().flatten().tolist()} where no head's output changed (after changing "
                f"{p.stream} position {p.position}); the merge may mix positions, or an op between the attention "
                "and the projection mixes them by design. Check the reshape before the output projection.",
                _location(site, site.merge_op), {**evidence, "allowed_positions": allowed.nonzero().flatten().tolist(),
                                                 "warning": "merged context changed where the heads did not"})
    return None
