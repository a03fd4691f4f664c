"""forward.smoke: the model can be called once at the probe size. Runs first; when it fails, every other
check is skipped as blocked, instead of failing twenty times with the same error."""
from __future__ import annotations

import dataclasses

from tfcheck.engine.context import ModelRaised
from tfcheck.engine.registry import check, passed, warned
from tfcheck.model.inputs import PROBE_BATCH, TARGET_LENGTH_DELTA
from tfcheck.model.trial.length_reading import lengths_that_run
from tfcheck.report.findings import Finding, Location, Related
from tfcheck.report.status import Status

ID = "forward.smoke"


@check(ID, "the model runs one forward at the probe size", rows=("forward-fails", "mat1-mat2-shapes",
                                                                   "tensor-size-mismatch", "out-of-memory"), order=0)
def forward_smoke(ctx) -> list[Finding]:
    """Call the model once on inputs of batch 3 and length 7 (distinct, so no axis can pass for another)
    and select its output tensor. A model that raises fails with the innermost module, the shapes it
    received and the troubleshooting row of the error message."""
    length = ctx.subject.probe_length()
    # The trial forward (tfcheck.model.trial.trial), run by the engine just before this check, is that forward:
    # its layout retries and output selection are settled; this check reports what it measured.
    trial = ctx.settle()
    if not trial.ran:
        raised = trial.error
        if not isinstance(raised, ModelRaised):
            raise raised
        explanation = raised.explanation
        # A matmul against a module's own weight: that module's construction chose the size that disagrees.
        made_by = explanation.location.module if explanation.row == "mat1-mat2-shapes" else None
        if explanation.row == "tensor-size-mismatch":
            explanation, made_by = _with_residual_culprit(ctx, explanation, length)
        failed = _failed(ctx.subject, explanation, made_by)
        return [_with_lengths_that_run(ctx, failed, length)]
    out = trial.result.output
    if trial.size_constraint is not None:
        # The small sizes are distinct so that no axis can pass for another; at the defaults two may be equal
        # (d_ff == d_model), and a swapped projection would run. Said, not passed over.
        return [warned(ID, f"the forward raised at tfcheck's small sizes ({trial.size_constraint}), so the model "
                       f"is checked at its defaults, where a forward at batch {PROBE_BATCH}, length {length} returned "
                       f"{tuple(out.shape)}. If the model should run at any size, that error is a bug (two sizes "
                       "equal at the defaults can hide a swapped axis); if it needs these sizes, declare them with "
                       "kwargs or shrink=false to say so", Location(module=""),
                       {"small_size_error": trial.size_constraint, "output_shape": tuple(out.shape)})]
    return [passed(ID, f"forward at batch {PROBE_BATCH}, length {length}{_target_note(ctx.subject, length)} "
                   f"returned {tuple(out.shape)} {str(out.dtype).replace('torch.', '')}",
                   Location(module=""), {"batch": PROBE_BATCH, "length": length, "output_shape": tuple(out.shape),
                                         "output_dtype": str(out.dtype)})]


def _with_residual_culprit(ctx, explanation, length: int):
    """A size mismatch is most often a residual add: one recorded rerun names the sublayer that changed
    the width, which the exception alone cannot say. (explanation, path of the module that made the operand of
    the wrong width, or None)."""
    from tfcheck.checks.shape.shape_residual import failed_residual

    culprit = failed_residual(ctx, *ctx.subject.make_inputs(PROBE_BATCH, length))
    if culprit is None:
        return explanation, None
    text, made_by = culprit
    return dataclasses.replace(explanation, message=f"{explanation.message} {text}"), made_by


def _failed(subject, explanation, made_by: str | None) -> Finding:
    """The forward's failure, located at the line that built the module whose weights set the size that
    disagrees (a Linear built with the wrong in_features or out_features), the raising line as related; at the
    raising line where no module of the user's own built it."""
    raised, message = explanation.location, explanation.message
    location: Location = raised
    related: tuple[Related, ...] = ()
    modules = dict(subject.model.named_modules())
    module = modules.get(made_by) if made_by is not None else None
    if module is not None and any(True for _ in module.parameters(recurse=False)):
        built = subject.construction_site(made_by, made_by)
        if built.line:
            location = built
            related = (Related("it raises here", raised.file, raised.line, raised.module),) if raised.file else ()
            message = (f"{message} '{made_by}' was built at {built.file}:{built.line}: the sizes of its weights are "
                       "chosen there.")
    elif not raised.file and not raised.reason:
        location = Location("" if raised.module is None else raised.module, reason="the error was raised outside "
                            "the user's code (no frame of it on the traceback)")
    return Finding(ID, Status.FAIL, message, location, explanation.evidence, explanation.row, related=related)


def _with_lengths_that_run(ctx, failed: Finding, length: int) -> Finding:
    """The failure, with the lengths the model does run at (one forward at batch 1 each) and the declaration that
    says so, when it runs at any: then the probe length, not the model, is what raised. The trial reads a length
    multiple from the same lengths (tfcheck.model.trial.length_reading) where they show one; here they did not."""
    subject = ctx.subject
    if subject.takes_target or (subject.facts.length_multiple or 1) > 1 or failed.row == "out-of-memory":
        return failed
    ran = lengths_that_run(subject, length, ctx.runs_at)
    if not ran:  # none, or alone at the same length it runs: the batch, not the length, is what it refuses
        return failed
    listed = ", ".join(str(n) for n in ran)
    shortest = f" (if it needs {ran[0]} positions at least, min_len={ran[0]})" if ran[0] > length else ""
    hint = (f" It runs at length{'s' if len(ran) > 1 else ''} {listed} (batch 1), so the length is what it refuses: "
            f"if it takes only multiples of {ran[0]}, declare length_multiple={ran[0]} and every probe is rounded to "
            f"one{shortest}.")
    return dataclasses.replace(failed, message=failed.message + hint,
                               evidence={**failed.evidence, "runs_at_lengths": ran})


def _target_note(subject, length: int) -> str:
    return f" (target length {max(1, length + TARGET_LENGTH_DELTA)})" if subject.kind == "seq2seq" else ""
