"""position.sensitivity: the model knows where each token is.

Two measurements, chosen from the declared causality (never from outputs):
- bidirectional encoders (``causal=false``) and the source side of a seq2seq model: permuting the input
  tokens must not merely permute the outputs (or, through cross-attention, leave them unchanged);
- causal models and the decoder side: the permutation test is invalid there (the causal mask encodes
  order by itself), so the scores of the first attention are read instead: for an input of one token
  repeated, they must vary along each row. Absolute tables, rotary and relative biases all make them vary.

In both, two identical sequences sit at different batch indices; when their outputs differ while
positions carry no signal, the positional table is indexed by the batch axis (``pe[:x.size(0)]``).
"""
from __future__ import annotations

import math

import torch

from tfcheck.checks.flow import position_location
from tfcheck.engine.context import ModelRaised
from tfcheck.engine.registry import NotApplicable, check
from tfcheck.model.inputs import TARGET_LENGTH_DELTA
from tfcheck.probe import pooled_source
from tfcheck.probe.flow import ROUNDING, tolerance
from tfcheck.report.findings import Finding, Location
from tfcheck.report.status import Status

ID = "position.sensitivity"
ROW_NONE = "no-position-signal"
ROW_AXIS = "position-table-wrong-axis"
#: Scores below this are masked entries (-1e4 of old BERT, -1e9, finfo.min, -inf), not logits.
MASKED_SCORE = -1e3
_SOFTMAX = ("softmax", "_softmax", "_safe_softmax")
FEATURES_NOTE = ("the model takes features, so positions are the caller's to add (nn.Transformer and "
                 "nn.TransformerEncoder add none, by design); if yours adds them inside, this is a failure")

#: How far above the tolerance the positive control must be before "order changes nothing" is a failure.
FAIL_MARGIN = 10.0
#: Below tolerance / FAINT a change is reduction-order rounding (a model without positions: about 1e-7 of
#: the output's scale); between the two it is a real, faint signal (XLNet's relative positions at init).
FAINT = 50.0

def _applies(subject) -> NotApplicable | None:
    if subject.facts.takes_features:
        return NotApplicable(FEATURES_NOTE)
    if subject.probe_length() < 3:
        return NotApplicable("the model's max_len leaves no room to permute positions")
    return None


@check(ID, "the model has a positional signal (encoders are not permutation-equivariant)",
       rows=(ROW_NONE, ROW_AXIS, "does-not-converge"), kinds=("encoder", "decoder", "seq2seq", None), order=50,
       applies=_applies, builds_inputs=True)
def position_sensitivity(ctx) -> list[Finding]:
    """Encoders: two passes of batch 2, [x, x] and [permuted x, other tokens]. Causal models: one recorded
    pass of batch 3 (a repeated token twice, random tokens as the positive control) whose first attention
    scores are read. Seq2seq: both, on the source and on the target."""
    subject = ctx.subject
    length = subject.probe_length()
    if length < 3:
        return [Finding(ID, Status.SKIP, f"not applicable: the model's max_len ({length}) leaves no room "
                        "to permute positions")]
    if subject.kind == "seq2seq":
        findings = [_source_order(ctx, length), _attention_signal(ctx, length, target=True)]
        return sorted(findings, key=lambda f: -f.status.severity)  # the worst first: it is the headline
    if subject.facts.causal is False:
        return [_encoder_order(ctx, length)]
    return [_attention_signal(ctx, length, target=False)]


# ----- permutation test -----------------------------------------------------------------------------

def permutation(length: int, seed: int = 0) -> torch.Tensor:
    """A permutation with no fixed point that is neither a reversal nor a rotation: those keep |i - j| for
    most pairs, so a correct symmetric relative scheme could look position-free under them."""
    gen = torch.Generator().manual_seed(seed)
    reverse = torch.arange(length - 1, -1, -1)
    for _ in range(1000):
        perm = torch.randperm(length, generator=gen)
        shifts = (perm - torch.arange(length)) % length
        if bool((perm != torch.arange(length)).all()) and not torch.equal(perm, reverse) \
                and len(set(shifts.tolist())) > 1:
            return perm
    return torch.roll(torch.arange(length), 1)


def _encoder_order(ctx, length: int) -> Finding:
    subject = ctx.subject
    gen = torch.Generator().manual_seed(11)
    x, y = subject.random_primary(1, length, gen), subject.random_primary(1, length, gen)
    perm = permutation(length)
    outs, tol, source = _order_passes(ctx, [subject.inputs_for(torch.cat([x, x])),
                                            subject.inputs_for(torch.cat([x[:, perm], y]))], length)
    if outs is None:
        return Finding(ID, Status.SKIP, "inconclusive: the output is not (batch, length, ...), so permuted positions "
                       "cannot be compared, and no per-position states were found behind it (no op of the model "
                       "pools them); declare 'output' if another tensor is per position")
    same, moved = outs
    equivariance = float((moved[0] - same[0][perm]).abs().max())
    control = float((moved[1] - same[1]).abs().max())
    index = float((same[1] - same[0]).abs().max())
    measured = "the output" if source is None else source.name
    evidence = {"measured": f"permutation equivariance of {measured}", "permutation": perm.tolist(),
                "length": length, "largest_change_beyond_the_permutation": equivariance, "tolerance": tol,
                "positive_control_change": control, "same_sequence_other_batch_index_change": index,
                "causal": subject.facts.causal}
    if source is not None:
        evidence["pooled_output"] = {**source.evidence(), "why": "the output is pooled, (batch, C): the permutation "
                                     "is measured on the per-position states it is made from"}
    return _order_verdict(ctx, equivariance, control, index, tol, evidence, "encoder", (
        "permuting the input tokens only permuted the outputs" if source is None
        else f"permuting the input tokens only permuted {source.describe()}"))


def _order_passes(ctx, inputs: list, length: int, per_position: bool = True):
    """Run [x, x] and [permuted x, other tokens]: the permuted sequence sits at the same batch index and batch
    size as the original, so a batch-indexed table cannot pass for a positional signal. A pooled (batch, C) output
    is measured on the per-position states the model pools (tfcheck.probe.pooled_source), named as the third
    value; (None, None, None) when neither is laid out (batch, length, ...)."""
    what = (f"a forward at batch 2, length {length}: the same sequence twice",
            f"a forward at batch 2, length {length}: the sequence permuted, other tokens")
    probes = [ctx.run(*args_kwargs, w) for args_kwargs, w in zip(inputs, what)]
    outs = [p.output.detach().double() for p in probes]
    if not any(o.dim() < 1 or o.shape[0] != 2 or (per_position and (o.dim() < 2 or o.shape[1] != length))
               for o in outs):
        return outs, max(tolerance(p.output) for p in probes), None
    try:
        source = pooled_source.find(ctx) if per_position and all(o.dim() == 2 for o in outs) else None
    except ModelRaised:  # the recorded forward that finds the states: no states to measure
        source = None
    if source is None:
        return None, None, None
    states = []
    for args_kwargs, w in zip(inputs, what):
        capture = source.capture(2, length)
        ctx.record(*args_kwargs, f"{w}, recorded to read {source.name}", on_op=capture)
        if capture.states is None:
            return None, None, None
        states.append(capture.states.detach())
    return [s.double() for s in states], max(tolerance(s) for s in states), source


def _source_order(ctx, length: int) -> Finding:
    """Seq2seq source side: a permuted source must change the decoder's output (cross-attention is
    invariant to the order of its keys, so a position-free encoder makes the source a bag of words)."""
    subject = ctx.subject
    gen = torch.Generator().manual_seed(12)
    x, y = subject.random_primary(1, length, gen), subject.random_primary(1, length, gen)
    target = _repeat(subject.random_primary(1, max(1, length + TARGET_LENGTH_DELTA), gen), 2)
    perm = permutation(length)
    outs, tol, _ = _order_passes(ctx, [subject.inputs_for(torch.cat([x, x]), target),
                                       subject.inputs_for(torch.cat([x[:, perm], y]), target)], length,
                                 per_position=False)
    if outs is None:
        return Finding(ID, Status.SKIP, "inconclusive: the output has no batch axis first, so samples cannot be "
                       "compared; declare 'output' to pick the decoder's logits")
    same, moved = outs
    change = float((moved[0] - same[0]).abs().max())
    control = float((moved[1] - same[1]).abs().max())
    index = float((same[1] - same[0]).abs().max())
    evidence = {"measured": "change of the decoder output when the source is permuted", "permutation": perm.tolist(),
                "source_length": length, "change_when_source_permuted": change, "tolerance": tol,
                "positive_control_change": control, "same_sequence_other_batch_index_change": index}
    return _order_verdict(ctx, change, control, index, tol, evidence, "source", (
        "permuting the source tokens left the decoder output unchanged: the encoder treats the source as a bag "
        "of words"))


def _repeat(t: torch.Tensor, n: int) -> torch.Tensor:
    return t.expand(n, *t.shape[1:]).clone()


def _order_verdict(ctx, change: float, control: float, index: float, tol: float, evidence: dict,
                   side: str, symptom: str) -> Finding:
    subject = ctx.subject
    where = "the source side" if side == "source" else "the encoder"
    if control <= tol:
        return Finding(ID, Status.SKIP, f"inconclusive: changing the tokens did not change the output (largest "
                       f"change {control:.3g}, tolerance {tol:.3g}), so the probe did not reach it", evidence=evidence)
    if change > tol:
        how = "changed the decoder output by" if side == "source" else "changed the output beyond the permutation by"
        on = f" (measured on {evidence['pooled_output']['tensor']}: the output is pooled)" \
            if "pooled_output" in evidence else ""
        return Finding(ID, Status.PASS, f"{where} sees positions: permuting the tokens {how} {change:.3g} "
                       f"(tolerance {tol:.3g}){on}", Location(module=""), evidence)
    if index > tol:
        return _axis_finding(ctx, index, tol, evidence, f"{symptom}, and two identical sequences at batch index "
                             "0 and 1 got different outputs")
    if subject.facts.takes_features:
        return Finding(ID, Status.SKIP, f"not applicable: {symptom} — {FEATURES_NOTE}", evidence=evidence)
    if control <= FAIL_MARGIN * tol:
        # A control barely above rounding cannot show that order changes nothing: a freshly initialised
        # model whose source reaches the logits at 1e-4 (Pegasus) permutes to a change below tolerance too.
        return Finding(ID, Status.SKIP, f"inconclusive: permuting the tokens changed the output by {change:.3g} "
                       f"(tolerance {tol:.3g}), but changing them changed it by only {control:.3g}, less than "
                       f"{FAIL_MARGIN:g}x the tolerance: too faint a signal to call the model blind to order",
                       evidence=evidence)
    if change > tol / FAINT:
        return Finding(ID, Status.WARN, (
            f"{where} has only a faint positional signal: {symptom} but for a change of {change:.3g}, below the "
            f"tolerance {tol:.3g} yet {change / (tol / FAINT):.3g}x above rounding ({tol / FAINT:.3g}), while changing "
            f"the tokens changes it by {control:.3g}. Relative positions at random initialisation can be this faint "
            "(XLNet); a model with no positions changes by rounding only. If the model trains well, accept it: "
            "accept=position.sensitivity:REASON"), Location(module="", reason="a faint signal is the whole model's "
                                                            "at its initialisation, no one line's"),
            {**evidence, "rounding": tol / FAINT}, ROW_NONE)
    read = position_location.table_read_without_positions(ctx)
    location = read.location if read is not None else position_location.unplaced_positions(ctx)
    fix = ("add a positional encoding to the token embedding (x = embed(tokens) + pe[:, :length]) or use "
           "rotary/relative positions in the attention.")
    if read is not None:
        # A table is there and read, so the advice is about the read, not about adding positions.
        evidence = {**evidence, "table_read": {"table": read.table, "rows": read.rows, "result_shape": read.result}}
        fix = f"the model has a table for them, but {read.describe()}."
    elif location.line and not location.reason:
        fix += (f" '{location.module}', built at {location.file}:{location.line}, computes nothing on the way from "
                "the token embedding to the attention: is it where the positional encoding belongs?")
    return Finding(ID, Status.FAIL, (
        f"{where} has no positional signal: {symptom} (largest change {change:.3g}, tolerance {tol:.3g}), "
        f"while changing the tokens changes it by {control:.3g}. Self-attention and the feed-forward layers are "
        f"blind to order; {fix}"), location, evidence, ROW_NONE)


def _axis_finding(ctx, index: float, tol: float, evidence: dict, symptom: str) -> Finding:
    return Finding(ID, Status.FAIL, (
        f"positions repeat: {symptom} (change {index:.3g}, tolerance {tol:.3g}) — the output depends on where a "
        "sequence sits in the batch, not on where a token sits in the sequence. A positional table is indexed "
        "with the batch axis: pe[:x.size(0)] or pos_emb(arange(x.size(0))) on a batch-first (batch, length, d) "
        "tensor. Index it with the length, x.size(1) (or transpose to (length, batch, d) first)"),
        position_location.table_indexed_by_batch(ctx), evidence, ROW_AXIS)


# ----- first attention scores -----------------------------------------------------------------------

class ScoreSites:
    """Collects, during one recorded forward, the score matrix of every attention of the wanted size: the
    input of a softmax over (length_q, length_k), or q k^T * scale (+ the additive mask) of a
    scaled_dot_product_attention. Each site's row statistics are computed at once, so no tensor is kept."""

    def __init__(self, batch: int, length: int):
        self.batch, self.length = batch, length
        self.sites: dict[int, dict] = {}

    def __call__(self, event, args, kwargs, out) -> None:
        if event.phase != "forward" or event.index in self.sites:
            return
        scores = self.scores(event, args, kwargs)
        if scores is not None:
            self.sites[event.index] = {"op": event.name, "module": event.module, "file": event.file,
                                       "line": event.line, **row_statistics(scores, self.length)}

    def scores(self, event, args, kwargs) -> torch.Tensor | None:
        name = event.short_name
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if name in _SOFTMAX and tensors:
            x = tensors[0]
            dim = kwargs.get("dim", args[1] if len(args) > 1 and isinstance(args[1], int) else None)
            if self._square(x) and dim in (-1, x.dim() - 1):
                return x.detach().double()
        if "scaled_dot_product" in name and "backward" not in name and len(tensors) >= 2:
            q, k = tensors[0], tensors[1]
            if q.dim() >= 3 and q.shape[0] == self.batch and q.shape[-2] == self.length == k.shape[-2]:
                return _sdpa_scores(q, k, args, kwargs)
        return None

    def _square(self, x: torch.Tensor) -> bool:
        return x.dim() >= 3 and x.shape[0] == self.batch and tuple(x.shape[-2:]) == (self.length, self.length)

    def first(self) -> dict | None:
        return self.sites[min(self.sites)] if self.sites else None


def _sdpa_scores(q: torch.Tensor, k: torch.Tensor, args: tuple, kwargs: dict) -> torch.Tensor:
    q, k = q.detach().double(), k.detach().double()
    if q.dim() == k.dim() and q.dim() >= 3 and q.shape[-3] != k.shape[-3] and q.shape[-3] % k.shape[-3] == 0:
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)  # grouped-query attention
    scale = kwargs.get("scale")
    scale = scale if isinstance(scale, (int, float)) else 1 / math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1) * scale
    mask = kwargs.get("attn_mask", args[3] if len(args) > 3 and isinstance(args[3], torch.Tensor) else None)
    if isinstance(mask, torch.Tensor):
        try:
            scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool \
                else scores + mask.detach().double()
        except RuntimeError:  # a mask laid out for another shape: the bare scores still show positions
            pass
    return scores


def row_statistics(scores: torch.Tensor, length: int) -> dict:
    """Per sample, over rows i >= 1: how much the scores vary along the row, over keys j <= i (the entries
    every model computes, causal or not), ignoring masked entries."""
    lg = scores.reshape(scores.shape[0], -1, length, length)
    valid = torch.tril(torch.ones(length, length, dtype=torch.bool)) & torch.isfinite(lg) & (lg > MASKED_SCORE)
    high = torch.where(valid, lg, torch.tensor(float("-inf"), dtype=lg.dtype)).amax(-1)
    low = torch.where(valid, lg, torch.tensor(float("inf"), dtype=lg.dtype)).amin(-1)
    counted = valid.sum(-1) >= 2  # (batch, heads, rows)
    spread = torch.where(counted, high - low, torch.zeros((), dtype=lg.dtype)).amax(1)  # (batch, rows)
    rows = counted.any(1)  # (batch, rows)
    scale = torch.where(valid, lg.abs(), torch.zeros((), dtype=lg.dtype)).flatten(1).amax(-1)
    same = torch.where(valid[0] & valid[1], (lg[0] - lg[1]).abs(), torch.zeros((), dtype=lg.dtype))
    return {
        "row_spread": [[float(s) for s, r in zip(spread[b], rows[b]) if r] for b in range(lg.shape[0])],
        "scale": [float(s) for s in scale],
        "same_input_other_index": float(same.max()) if same.numel() else 0.0,
        "dtype": scores.dtype,
    }


def _attention_signal(ctx, length: int, target: bool) -> Finding:
    subject = ctx.subject
    gen = torch.Generator().manual_seed(13)
    q_len = max(1, length + TARGET_LENGTH_DELTA) if target else length
    if q_len < 2:
        return Finding(ID, Status.SKIP, f"not applicable: a query length of {q_len} has no row to vary along")
    constant = _constant_sequence(subject, q_len, gen)
    varied = subject.random_primary(1, q_len, gen)
    tokens = torch.cat([constant, constant, varied])
    if target:
        source = _repeat(subject.random_primary(1, length, gen), 3)
        args, kwargs = subject.inputs_for(source, tokens)
        what = f"a recorded forward at batch 3, target length {q_len}: one token repeated (twice), random tokens"
    else:
        args, kwargs = subject.inputs_for(tokens)
        what = f"a recorded forward at batch 3, length {q_len}: one token repeated (twice), random tokens"
    sites = ScoreSites(3, q_len)
    probe, _ = ctx.record(args, kwargs, what, on_op=sites)
    side = "decoder self-attention" if target else "attention"
    site = sites.first()
    if site is None:
        return Finding(ID, Status.SKIP, (
            f"inconclusive: no attention scores of ({q_len}, {q_len}) found among the recorded ops (neither a softmax "
            "over them nor F.scaled_dot_product_attention), so the first attention cannot be read"),
            evidence={"query_length": q_len})
    loc = Location(module=site["module"], file=site["file"], line=site["line"])
    dtype = probe.output.dtype if probe.output.is_floating_point() else torch.float32
    scale = max(site["scale"][:2])
    tol = ROUNDING.get(dtype, 1e-5) * 10 * max(scale, 1e-6)
    control_tol = ROUNDING.get(dtype, 1e-5) * 10 * max(site["scale"][2], 1e-6)
    signal = min(site["row_spread"][0], default=0.0)
    control = max(site["row_spread"][2], default=0.0)
    out = probe.output.detach().double()
    index = max(site["same_input_other_index"], float((out[1] - out[0]).abs().max()) if out.dim() else 0.0)
    evidence = {"measured": f"spread of the first {side}'s scores along each row (keys j <= i) for one token "
                "repeated", "site": f"{site['op']} in '{site['module']}'", "query_length": q_len,
                "smallest_row_spread": signal, "row_spreads": site["row_spread"][0], "tolerance": tol,
                "positive_control_row_spread": control, "same_input_other_batch_index_change": index,
                "causal": subject.facts.causal, "kind": subject.kind}
    if control <= control_tol:
        return Finding(ID, Status.SKIP, (
            f"inconclusive: the scores of '{site['module']}' do not vary along the rows even for random tokens "
            f"(largest spread {control:.3g}, tolerance {control_tol:.3g}), so they are not content attention scores"),
            loc, evidence)
    if signal > tol:
        return Finding(ID, Status.PASS, (
            f"the first {side} ('{site['module']}') sees positions: for one token repeated its scores vary along "
            f"every row by at least {signal:.3g} (tolerance {tol:.3g})"), loc, evidence)
    symptom = (f"for one token repeated, the first {side}'s scores ('{site['module']}') are constant along the rows "
               f"(smallest spread {signal:.3g}, tolerance {tol:.3g})")
    if index > ROUNDING.get(dtype, 1e-5) * 10 * max(scale, 1.0):
        return _axis_finding(ctx, index, tol, evidence, f"{symptom}, and the same input at batch index 0 and 1 "
                             "got different scores or outputs")
    if subject.facts.takes_features:
        return Finding(ID, Status.SKIP, f"not applicable: {symptom} — {FEATURES_NOTE}", loc, evidence)
    advice = ("add a positional encoding (a table added to the token embedding, rotary on q and k, or a relative "
              "bias on the scores)")
    if subject.facts.causal is True:
        return Finding(ID, Status.WARN, (
            f"no positional signal: {symptom}. A causal decoder can still infer positions from its mask (position-"
            "free 'NoPE' decoders exist and train), so this is a warning, not a failure; if positions were meant, "
            f"{advice}"), loc, evidence, ROW_NONE)
    return Finding(ID, Status.WARN, (
        f"no positional signal: {symptom}. Whether that is a bug depends on what the model is: declare "
        f"kind=encoder (or causal=false) and a position-free encoder fails; kind=decoder (causal=true) keeps it a "
        f"warning (position-free causal decoders exist). If positions were meant, {advice}"), loc, evidence, ROW_NONE)


def _constant_sequence(subject, length: int, gen: torch.Generator) -> torch.Tensor:
    """One real token (or one feature vector) repeated at every position."""
    one = subject.random_primary(1, 1, gen)
    return one.expand(1, length, *one.shape[2:]).clone()
