"""The activations an attention's q, k and v were projected from: the input of the projection the recorded ops
lead back to from each operand (see probe/operand_path.py). attention.heads compares q, k and v with them, so a
position already changed in the attention's input is not blamed on its head split."""
from __future__ import annotations

import torch

from tfcheck.probe.attention_sites import AttentionSite, CapturedOp, SiteCollector
from tfcheck.probe.attention_view import visible_attention
from tfcheck.probe.operand_path import operand_ids, path_to_projection, routed_by_content
from tfcheck.recording.recorder import OpEvent, Recorder, Recording


def value_id(site: AttentionSite) -> int | None:
    """The tensor identity of the values: the second operand of the value product, sdpa's third argument."""
    op = site.score_op if site.form == "sdpa" else site.value_op
    ids = op.input_ids
    if site.form == "sdpa":
        return ids[2] if len(ids) > 2 else None
    if op.short_name == "__rmatmul__":
        return ids[0] if ids else None
    return ids[-1] if len(ids) >= 2 else None


def projection_inputs(site: AttentionSite, recording: Recording, captured: list[CapturedOp]) -> dict[str, torch.Tensor]:
    """{"q"|"k"|"v": the activation that operand's projection read}, for the operands whose path reaches one."""
    before = _projections_before(site, captured)
    projections = {i: c.event for c in before for i in c.event.output_ids}
    read = {c.event.index: c.operands[0] for c in before}
    q_id, k_id = operand_ids(site.score_op)
    found: dict[str, torch.Tensor] = {}
    for name, tensor_id in (("q", q_id), ("k", k_id), ("v", value_id(site))):
        path = path_to_projection(recording, tensor_id, site.score_op.index, projections, {})
        source = read.get(path.projection.index) if path.projection is not None else None
        if source is not None:
            found[name] = source
    return found


def _projections_before(site: AttentionSite, captured: list[CapturedOp]) -> list[CapturedOp]:
    return [c for c in captured if c.event.index < site.score_op.index and not c.extra.get("no_parameter")
            and c.operands and c.operands[0] is not None]


def routed_operands(site: AttentionSite, recording: Recording, captured: list[CapturedOp]) -> dict[str, OpEvent]:
    """{"q"|"k": the gather that put its tokens in an order ranked from activations}, looked for between the operand
    and its projection, within the module one level above the score product's (the attention block)."""
    projections = {i for c in _projections_before(site, captured) for i in c.event.output_ids}
    calls = recording.calls
    block = calls[site.score_op.call].parent if site.score_op.call is not None else None
    within = {block} if block is not None else set()
    for call in calls:  # parents come before their children
        if call.parent in within:
            within.add(call.index)
    if not within:
        return {}
    return {name: op for name, tensor_id in zip("qk", operand_ids(site.score_op))
            if (op := routed_by_content(recording, tensor_id, site.score_op.index, projections, within))}


def by_position(t: torch.Tensor, batch: int, length: int) -> torch.Tensor | None:
    """A projection's input as (batch, position, features), or None where it is not laid out so."""
    if t.dim() >= 3 and t.shape[0] == batch and t.shape[1] == length:
        return t.flatten(2)
    if t.dim() == 2 and t.shape[0] == batch * length:
        return t.reshape(batch, length, -1)
    return None


def record_sites(ctx, args: tuple, kwargs: dict, what: str):
    """One counted forward under the recorder with attention internals visible: (Probe, sites, Recording), the
    recording (with tensor identities) for walks a check makes only where it finds a problem."""
    collector = SiteCollector(ctx.subject.model)
    recorder = Recorder(ctx.subject.model, on_op=collector, track_ids=True)  # ids: operands traced to projections
    with visible_attention(), recorder:
        probe = ctx.run(args, kwargs, what)
    sites = collector.sites(recorder.recording)
    for site in sites:
        site.projected_from = projection_inputs(site, recorder.recording, collector.captured)
        site.routed_by = routed_operands(site, recorder.recording, collector.captured)
    return probe, sites, recorder.recording
