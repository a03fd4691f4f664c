"""forward.smoke: the model can be called once at the probe size. Runs first; when it fails, every other
check is skipped as blocked, instead of failing twenty times with the same error."""
from __future__ import annotations

import dataclasses

from tfcheck.engine.context import ModelRaised
from tfcheck.report.findings import Finding, Location
from tfcheck.engine.registry import check
from tfcheck.report.status import Status
from tfcheck.model.subject import PROBE_BATCH, TARGET_LENGTH_DELTA

ID = "forward.smoke"


@check(ID, "the model runs one forward at the probe size", rows=("forward-fails", "mat1-mat2-shapes",
                                                                   "tensor-size-mismatch", "out-of-memory"), order=0)
def forward_smoke(ctx) -> list[Finding]:
    """Call the model once on inputs of batch 3 and length 7 (distinct, so no axis can pass for another)
    and select its output tensor. A model that raises fails with the innermost module, the shapes it
    received and the troubleshooting row of the error message."""
    length = ctx.subject.probe_length()
    try:
        probe = ctx.forward(PROBE_BATCH, length)
    except ModelRaised as raised:
        probe = _with_another_mask_layout(ctx, length, raised)
        if probe is None and raised.explanation.row == "tensor-size-mismatch":
            raise ModelRaised(_with_residual_culprit(ctx, raised.explanation, length)) from raised
        if probe is None:
            raise
    out = probe.output
    return [Finding(ID, Status.PASS, f"forward at batch {PROBE_BATCH}, length {length}{_target_note(ctx.subject, length)} returned "
                    f"{tuple(out.shape)} {str(out.dtype).replace('torch.', '')}",
                    Location(module=""), {"batch": PROBE_BATCH, "length": length, "output_shape": tuple(out.shape),
                                          "output_dtype": str(out.dtype)})]


def _with_another_mask_layout(ctx, length: int, raised: ModelRaised):
    """A forward that requires its masks laid out for the attention scores (the tutorial style) raises on
    (batch, length) ones: the layouts it may want are tried before failing, and the one that ran is kept
    and stated among the assumptions."""
    subject = ctx.subject
    layouts = subject.mask_layouts_to_try()
    for layout in layouts:
        subject.set_mask_layout(layout)
        try:
            probe = ctx.forward(PROBE_BATCH, length)
        except ModelRaised:
            continue
        subject.adopt_mask_layout(layout, str(raised.explanation.evidence.get("exception") or raised))
        return probe
    if layouts:
        subject.set_mask_layout(None)  # none ran: the error of the (batch, length) masks is the finding
    return None


def _with_residual_culprit(ctx, explanation, length: int):
    """A size mismatch is most often a residual add: one recorded rerun names the sublayer that changed
    the width, which the exception alone cannot say."""
    from tfcheck.checks.shape.shape_residual import failed_residual

    culprit = failed_residual(ctx, *ctx.subject.make_inputs(PROBE_BATCH, length))
    if culprit is None:
        return explanation
    return dataclasses.replace(explanation, message=f"{explanation.message} {culprit}")


def _target_note(subject, length: int) -> str:
    return f" (target length {max(1, length + TARGET_LENGTH_DELTA)})" if subject.kind == "seq2seq" else ""
