"""What a check gets: the subject, and forwards that are counted, memoised, explained when they raise,
and never leave gradients behind.

The API for check authors:
- ``ctx.subject``: the model and its facts (kind, causal, vocab_size, pad_id, d_model, mask, ...);
  ``subject.make_inputs(batch, length, seed)`` / ``subject.inputs_for(tokens, target, keep)`` build inputs.
- ``ctx.forward(batch, length, seed=0)``: the standard probe, memoised across the checks of one model
  (a check that reuses another's run is charged nothing and counts it in ``cost.reused``).
- ``ctx.run(args, kwargs, what, grad=False)``: one forward on inputs the check built; returns a Probe.
  Batch the perturbations of a measurement into one call: cost is counted in passes and token-passes.
- ``ctx.record(args, kwargs, what, on_op=None)``: the same, under the op recorder; returns (Probe, Recording).
- ``ctx.call(args, kwargs, what, tokens, grad=False)``: the raw return value of one counted forward, for
  calls whose return differs from the declared output (a decoding step returning (logits, cache)).
- ``ctx.count_backward(tokens)``: account a backward the check ran itself (with ``torch.autograd.grad``,
  never ``.backward()``, so ``.grad`` fields stay untouched).
A check that does not apply to some models says so with ``@check(..., applies=fn)``, ``fn(subject)``
returning ``NotApplicable(reason)`` (or None): such a check is no item and no finding for them. Verdicts are
built with ``tfcheck.engine.registry``'s ``passed`` / ``failed`` / ``warned`` / ``inconclusive`` /
``not_applicable``.
Outputs handed out may be shared between checks: never modify them in place.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tfcheck.engine.memory import fit_probes
from tfcheck.errors import UsageError
from tfcheck.explainers.explanation import Explanation, explain
from tfcheck.model import caller_masks, trial
from tfcheck.model.flat_outputs import output_size
from tfcheck.model.inputs import TARGET_LENGTH_DELTA, batch_length
from tfcheck.model.observed import Observed, Observer
from tfcheck.model.outputs import as_checks_read
from tfcheck.model.subject import PROBE_BATCH, Subject
from tfcheck.model.trial import Trial
from tfcheck.model.user_code import user_code
from tfcheck.probe import recorded_probe
from tfcheck.probe.attention_view import visible_attention
from tfcheck.probe.module_stack import tracking
from tfcheck.probe.recorder import Recorder
from tfcheck.report.report import Cost


class ModelRaised(Exception):
    """The model raised inside a check; the engine turns this into a failed finding."""

    def __init__(self, explanation: Explanation):
        super().__init__(explanation.message)
        self.explanation = explanation


@dataclass
class Probe:
    """One forward: the inputs given, the raw return value, and the output tensor selected from it."""

    args: tuple
    kwargs: dict
    raw: Any
    output: torch.Tensor
    batch: int
    length: int


#: One forward of the trial: its arguments, its return, what it showed (recorded ones only) and its recorder
#: with the observers attached (a recording of the standard probe's inputs only).
TrialRun = tuple[tuple, dict, Any, "Observed | None", Any]


class CheckContext:
    def __init__(self, subject: Subject):
        self.subject = subject
        self.cost = Cost()

    def forward(self, batch: int, length: int, seed: int = 0) -> Probe:
        """The standard probe at (batch, length): random real tokens, no padding. Memoised."""
        cache = self.subject.probe_cache
        key = (batch, length, seed)
        if key in cache:
            self.cost.reused += 1
            cached: Probe = cache[key]
            return cached
        args, kwargs = self.subject.make_inputs(batch, length, seed)
        probe = self.run(args, kwargs, f"a forward at batch {batch}, length {length}")
        cache[key] = probe
        return probe

    def run(self, args: tuple, kwargs: dict, what: str, grad: bool = False) -> Probe:
        """One counted forward on the given inputs; ``grad=True`` keeps the graph for autograd.grad."""
        batch, length = batch_length(args, kwargs)
        raw = self.call(args, kwargs, what, tokens=batch * length, grad=grad)
        return self.probe_of(args, kwargs, raw)

    def probe_of(self, args: tuple, kwargs: dict, raw: Any) -> Probe:
        batch, length = batch_length(args, kwargs)
        return Probe(args, kwargs, raw, self.subject.extract_output(raw), batch, length)

    def settle(self) -> Trial:
        """The facts only a forward shows (the layout of a mask the forward requires, which tensor of the return
        value is the output), settled once per model by the model layer's trial forward of the standard probe.

        The engine calls this before every check, under the check's guard, budget and device placement; the
        first check that runs (forward.smoke) pays for the trial's forwards, as when it settled them itself,
        and its probe is the memoised standard probe the other checks reuse."""
        subject = self.subject
        if subject.trial is not None:
            settled: Trial = subject.trial
            return settled
        batch, length = PROBE_BATCH, subject.probe_length()
        what = f"a forward at batch {batch}, length {length}"

        lengths = (length, max(1, length + TARGET_LENGTH_DELTA)) if subject.takes_target else (length,)
        unassisted: list[TrialRun | None] = []  # the trial with look-ahead masks at None

        def recorded(args: tuple, kwargs: dict) -> TrialRun:
            # Recorded: the structure only a forward shows (masks the model builds, its position tables,
            # the modules that ran, the op a caller's look-ahead mask reaches). Recorded as the checks that read
            # recorded ops record, so that, when the structure changes no fact, they read this recording.
            inputs_batch, inputs_length = batch_length(args, kwargs)
            observer = Observer(subject.model, trial.probe_roles(subject, args, kwargs), lengths,
                                caller_masks.probe_masks(subject, args, kwargs), batch=inputs_batch)
            recorder, fan_out = recorded_probe.start(subject.model, {"trial structure": observer.on_op})
            try:
                with visible_attention(), recorder:
                    raw = self.call(args, kwargs, what, tokens=inputs_batch * inputs_length)
            finally:
                observed = observer.finish(recorder.recording)
            return args, kwargs, raw, observed, (recorder, fan_out)

        def forward(observe: bool) -> TrialRun:
            args, kwargs = subject.make_inputs(batch, length)
            if not observe:
                inputs_batch, inputs_length = batch_length(args, kwargs)
                return args, kwargs, self.call(args, kwargs, what, tokens=inputs_batch * inputs_length), None, None
            if not unassisted and caller_masks.optional_unread(subject):
                # Once, with the caller's optional look-ahead masks at None: does the model build its own?
                try:
                    unassisted.append(recorded(*caller_masks.without_caller_masks(subject, args, kwargs)))
                except ModelRaised:
                    unassisted.append(None)
            bare = unassisted[0] if unassisted else None
            if bare is not None and bare[3] is not None and bare[3].causal_masks:
                # No mask of ours needed; its recording is not of the inputs the checks make (they give the mask).
                return (*bare[:3], dataclasses.replace(bare[3], unassisted=bare[3]), None)
            found = recorded(args, kwargs)
            if found[3] is not None:
                found[3].unassisted = bare[3] if bare is not None else None
            return found

        found = trial.settle(subject, forward, raw_of=lambda r: r[2], model_error=ModelRaised,
                             describe=_exception_text, observed_of=lambda r: r[3])
        if not found.ran and subject.loaded.shrunk and found.error is not None:
            return self.settle_at_defaults(found)
        if found.ran:
            found.result = subject.probe_cache[(batch, length, 0)] = self.probe_of(*found.result[:3])
            if found.recorded is not None and found.recorded[4] is not None:
                self.keep_recording(*found.recorded)
        subject.trial = found
        return found

    def settle_at_defaults(self, small: Trial) -> Trial:
        """The trial raised on the model tfcheck shrank: check the model at its written sizes when its trial runs
        there (the size constraint stated, with the small model's error and line), else keep the small model's
        error, which forward.smoke reports."""
        from tfcheck.engine.loading import at_defaults

        assert small.error is not None
        rebuilt = at_defaults(self.subject, _located(small.error))
        if rebuilt is None:
            return small
        shrunk = dataclasses.replace(self.subject)
        self.subject.__dict__.update(vars(rebuilt))
        # The guard of this check holds the small model; the rebuilt one is tfcheck's own, set up here as the
        # guard sets a model up (eval mode, the declared device) and with its probes fitted to memory again.
        model = self.subject.model.eval()
        if self.subject.facts.device is not None:
            model.to(self.subject.facts.device)
        fit_probes(self.subject)
        found = self.settle()
        if not found.ran:  # raises at its defaults too: the small model's error is the finding
            self.subject.__dict__.update(vars(shrunk))
            self.subject.trial = small
            return small
        found.size_constraint = _located(small.error)
        return found

    def keep_recording(self, args: tuple, kwargs: dict, raw: Any, observed: Observed | None, recording: Any) -> None:
        """The trial's recorded forward kept as the shared recorded probe (one pass fewer for the checks that
        read recorded ops), when it was made at the standard probe size."""
        recorder, fan_out = recording
        try:
            probe = self.probe_of(args, kwargs, raw)
        except UsageError:  # an output the checks cannot read: they say so themselves
            return
        if (probe.batch, probe.length) == (PROBE_BATCH, self.subject.probe_length()):
            recorded_probe.keep(self.subject, probe, recorder, fan_out)

    def record(self, args: tuple, kwargs: dict, what: str,
               on_op: Callable[..., Any] | None = None) -> tuple[Probe, Any]:
        """One counted forward under the op recorder: (Probe, Recording)."""
        recorder = Recorder(self.subject.model, on_op=on_op)
        with recorder:
            probe = self.run(args, kwargs, what)
        return probe, recorder.recording

    def count_backward(self, tokens: int) -> None:
        self.cost.backward += 1
        self.cost.token_passes += tokens

    def call(self, args: tuple, kwargs: dict, what: str, tokens: int, grad: bool = False,
             model: torch.nn.Module | None = None) -> Any:
        """The return of one counted forward of the model (or of ``model``, a training copy of it), as every
        check reads it: flattened output rows reshaped, a head forward does not call applied (``model``'s own)."""
        model = self.subject.model if model is None else model
        self.cost.forward += 1
        self.cost.token_passes += tokens
        with tracking(model) as stack, torch.set_grad_enabled(grad):
            try:
                batch, length = output_size(self.subject, args, kwargs)
                args, kwargs = self.subject.to_model_layout(args, kwargs)  # checks build (batch, length, ...)
                with user_code():
                    return as_checks_read(self.subject, model, model(*args, **kwargs), batch, length)
            except Exception as exc:
                raise ModelRaised(explain(exc, stack, what)) from exc


def _located(raised: Exception) -> str:
    """The model's exception and the user's line it came from."""
    text = _exception_text(raised).rstrip(": ")  # an empty assert reads "AssertionError", not "AssertionError: "
    if isinstance(raised, ModelRaised):
        where = raised.explanation.location
        if where is not None and where.file:
            return f"{text} ({where.file}:{where.line})"
    return text


def _exception_text(raised: Exception) -> str:
    """The model's own exception, as the mask-layout assumption quotes it."""
    if isinstance(raised, ModelRaised):
        return str(raised.explanation.evidence.get("exception") or raised)
    return str(raised)
