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
A check registered with ``flow=True`` (the flow, mask and attention families) is run by ``run_flow_check``: the
model's eval-mode determinism is measured once per model before it (``determinism()``), and the check runs
with dropout and Bernoulli draws neutralised when eval mode left them on, or is inconclusive when the
randomness cannot be neutralised.
A check that does not apply to some models says so with ``@check(..., applies=fn)``, ``fn(subject)``
returning ``NotApplicable(reason)`` (or None): such a check is no item and no finding for them. Verdicts are
built with ``tfcheck.engine.registry``'s ``passed`` / ``failed`` / ``warned`` / ``inconclusive`` /
``not_applicable``.
Outputs handed out may be shared between checks: never modify them in place.
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from tfcheck.engine.flow_weights import flow_weights
from tfcheck.engine.limits import NOT_APPLICABLE, InstrumentationLimit, dynamo_disabled, instrumented, without_modes
from tfcheck.engine.memory import fit_probes
from tfcheck.engine.noise_text import NEUTRALISED, neutralised_why, noise_reason
from tfcheck.engine.registry import Check, NotApplicable, inconclusive
from tfcheck.errors import UsageError
from tfcheck.explainers.explanation import Explanation, explain
from tfcheck.model.build.user_code import user_code
from tfcheck.model.facts.structure import without_cache
from tfcheck.model.inputs import PROBE_BATCH, TARGET_LENGTH_DELTA, batch_length
from tfcheck.model.subject import Subject
from tfcheck.model.trial import caller_masks, optional_mask, trial
from tfcheck.model.trial.flat_outputs import output_size
from tfcheck.model.trial.length_reading import read_length_multiple
from tfcheck.model.trial.observed import Observed, Observer
from tfcheck.model.trial.outputs import as_checks_read
from tfcheck.model.trial.trial import Trial
from tfcheck.probe import deterministic, recorded_probe
from tfcheck.probe.attention_view import visible_attention
from tfcheck.recording.module_stack import tracking
from tfcheck.recording.recorder import Recorder
from tfcheck.report.findings import Finding
from tfcheck.report.report import Assumption, Cost


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
        #: the model's forwards run under the neutraliser (a flow check on a model that left dropout on in eval)
        self.neutralising = False

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
        """The facts only a forward shows (a required mask's layout, an optional mask's reading, the output's
        selection), settled once per model by the model layer's trial, called before every check under its guard,
        budget and device placement: the first check (forward.smoke) pays for the trial's forwards, and its probe
        is the memoised standard probe the other checks reuse."""
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
            except InstrumentationLimit as limit:
                # The structure cannot be read; the plain forward that ran is the trial's.
                limit.note(subject.assumptions, "the trial forward's structure was not read")
                return args, kwargs, limit.plain, None, None
            finally:
                observed = observer.finish(recorder.recording)
            return args, kwargs, raw, observed, (recorder, fan_out)

        def forward(observe: bool, padded: bool = False) -> TrialRun:
            args, kwargs = subject.make_inputs(batch, length)
            if padded:  # an optional mask's reading, tried on a padded probe (tfcheck.model.trial.optional_mask)
                args, kwargs = optional_mask.padded_probe(subject, args, kwargs)
            if not observe or padded:
                inputs_batch, inputs_length = batch_length(args, kwargs)
                return (args, kwargs, self.call(args, kwargs, what, tokens=inputs_batch * inputs_length), None, None) \
                    if not observe else recorded(args, kwargs)
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

        generators = deterministic.generator_states()
        found = trial.settle(subject, forward, raw_of=lambda r: r[2], model_error=ModelRaised,
                             describe=_exception_text, observed_of=lambda r: r[3])
        # Whether the trial's forwards drew random numbers: when none did, eval mode is deterministic and the
        # flow checks' precondition costs no forward (``determinism()``).
        subject.probe_cache[TRIAL_DREW] = deterministic.moved(generators, deterministic.generator_states())
        if not found.ran and isinstance(found.error, ModelRaised) and \
                read_length_multiple(subject, length, _located(found.error), self.runs_at):
            return self.settle()  # again, at the probe length rounded to the multiple read
        if not found.ran and subject.loaded.shrunk and subject.loaded.shrink and found.error is not None:
            return self.settle_at_defaults(found)
        if found.ran:
            found.result = subject.probe_cache[(batch, length, 0)] = self.probe_of(*found.result[:3])
            if found.recorded is not None and found.recorded[4] is not None:
                self.keep_recording(*found.recorded)
        subject.trial = found
        return found

    def runs_at(self, length: int) -> bool:
        """Whether a forward at batch 1 and ``length`` runs, asked once per model (the trial's length reading and
        forward.smoke's hint ask the same); an error of tfcheck's own is not the model's and is raised."""
        key = ("runs at", length)
        if key not in self.subject.probe_cache:
            try:
                self.run(*self.subject.make_inputs(1, length), f"a forward at batch 1, length {length}")
                self.subject.probe_cache[key] = True
            except ModelRaised:
                self.subject.probe_cache[key] = False
        return bool(self.subject.probe_cache[key])

    def settle_at_defaults(self, small: Trial) -> Trial:
        """The trial raised on the model tfcheck shrank: check the model at its written sizes when its trial runs
        there (the size constraint stated, with the small model's error and line), else keep the small model's
        error, which forward.smoke reports. Once: the rebuild may still change a size to keep an invariant."""
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

    def determinism(self) -> deterministic.Determinism | None:
        """Whether eval-mode forwards are deterministic, measured once per model (memoised with the probes, so
        the checks run one by one in pytest share it too). When the trial's forwards of the standard probe drew
        no random number (no generator moved), they are, at no cost. Otherwise: the memoised standard probe,
        and the same inputs again under the neutraliser from another random state, one forward charged to the
        first flow check that runs. None when that forward raised or its output cannot be read: the checks
        report that."""
        cache = self.subject.probe_cache
        key = DETERMINISM, PROBE_BATCH, self.subject.probe_length()
        if key in cache:
            measured: deterministic.Determinism | None = cache[key]
            return measured
        drew = cache.get(TRIAL_DREW)
        if drew == [] and (PROBE_BATCH, self.subject.probe_length(), 0) in cache:
            measured = deterministic.Determinism.drew_nothing(
                f"the trial's forwards of the standard probe at batch {PROBE_BATCH}, length "
                f"{self.subject.probe_length()} (no random generator moved)")
        else:
            measured = self._measure_determinism()
        cache[key] = measured
        return measured

    def _measure_determinism(self) -> deterministic.Determinism | None:
        subject = self.subject
        length = subject.probe_length()
        what = f"two forwards of the standard probe at batch {PROBE_BATCH}, length {length}"
        saved = deterministic.generator_states()
        try:
            first = self.forward(PROBE_BATCH, length)
            # A random op left running must draw other numbers than in the memoised probe: the generators are
            # reseeded from a seed drawn from them (deterministic, and put back below, so the check that
            # triggered the measurement starts from the random state every check starts from).
            deterministic.reseed(int(torch.randint(0, 2**31 - 1, (1,))))
            before = deterministic.generator_states()
            with deterministic.Neutraliser() as neutraliser:
                second = self.run(first.args, first.kwargs, "the standard probe's forward again, with dropout and "
                                                            "Bernoulli draws as in eval mode")
            moved = deterministic.moved(before, deterministic.generator_states())
        except (ModelRaised, UsageError):
            return None
        finally:
            deterministic.restore(saved)
        measured = deterministic.Determinism.of(what, first.output, second.output, neutraliser, moved)
        if measured.neutralises:
            # The neutralised forward is the standard probe of the neutralised checks: they reuse it.
            cache = subject.probe_cache.setdefault(NEUTRAL_PROBES, {})
            cache[(PROBE_BATCH, length, 0)] = second
            subject.assumptions.append(Assumption(NEUTRALISED, measured.random_ops(measured.neutralised),
                                                  neutralised_why()))
        return measured

    def run_flow_check(self, chk: Check) -> list[Finding]:
        """A check that compares eval-mode forwards, on the model with its all-zero weights re-drawn (none: as it
        is): run as it is on a deterministic model; with the random ops neutralised (and its own memoised
        probes, made so) when eval mode left dropout on; inconclusive when the randomness cannot be
        neutralised, with the measurement under ``evidence["nondeterministic"]``."""
        with flow_weights(self.subject):
            return self._run_flow(chk)

    def _run_flow(self, chk: Check) -> list[Finding]:
        measured = self.determinism()
        if measured is None or not (measured.neutralises or measured.uncontrolled):
            return list(chk.func(self))
        if measured.uncontrolled:
            return [inconclusive(chk.id, noise_reason(measured, chk.id),
                                 evidence={deterministic.EVIDENCE_KEY: measured.evidence()})]
        with self._neutral_probes():
            self.neutralising = True
            try:
                return list(chk.func(self))
            finally:
                self.neutralising = False

    @contextlib.contextmanager
    def _neutral_probes(self) -> Iterator[None]:
        """The probes memoised while the neutraliser runs are kept apart: the shared ones carry the noise."""
        subject = self.subject
        shared = subject.probe_cache
        subject.probe_cache = shared.setdefault(NEUTRAL_PROBES, {})
        try:
            yield
        finally:
            subject.probe_cache = shared

    def not_applicable(self, check_id: str, reason: str, evidence: dict | None = None) -> Finding:
        """The finding of a check that its forward showed it does not apply: the report states it among the
        assumptions instead, the pytest item is skipped with the reason."""
        return NotApplicable(reason).finding(check_id, evidence={**(evidence or {}), NOT_APPLICABLE: reason})

    def count_backward(self, tokens: int) -> None:
        self.cost.backward += 1
        self.cost.token_passes += tokens

    def call(self, args: tuple, kwargs: dict, what: str, tokens: int, grad: bool = False,
             model: torch.nn.Module | None = None) -> Any:
        """The return of one counted forward of the model (or of ``model``, a training copy of it), as every
        check reads it: flattened output rows reshaped, a head forward does not call applied (``model``'s own).
        One that raises under tfcheck's modes is run once more without them: an InstrumentationLimit if it runs."""
        model = self.subject.model if model is None else model
        self.cost.forward += 1
        self.cost.token_passes += tokens
        # Only the model's forward is neutralised: the check's own random draws stay as they are.
        neutraliser = deterministic.Neutraliser() if self.neutralising else contextlib.nullcontext()
        with tracking(model) as stack, torch.set_grad_enabled(grad), neutraliser, dynamo_disabled():
            try:
                batch, length = output_size(self.subject, args, kwargs)
                args, kwargs = self.subject.to_model_layout(args, kwargs)  # checks build (batch, length, ...)
                if grad:
                    kwargs = without_cache(model, kwargs)
                with user_code():
                    return as_checks_read(self.subject, model, model(*args, **kwargs), batch, length)
            except Exception as exc:
                explanation = explain(exc, stack, what)
                if not instrumented():
                    raise ModelRaised(explanation) from exc
                self.cost.forward += 1  # the plain rerun, on a raise only
                self.cost.token_passes += tokens
                try:
                    with without_modes(), user_code():
                        plain = as_checks_read(self.subject, model, model(*args, **kwargs), batch, length)
                except Exception:  # noqa: BLE001 - it raises plainly too: the model's own error
                    raise ModelRaised(explanation) from exc
                raise InstrumentationLimit(explanation, plain) from exc


#: Keys of the model's probe cache: the determinism measurement, the generators the trial's forwards moved, and
#: the probes memoised under the neutraliser.
DETERMINISM = "determinism"
TRIAL_DREW = "generators the trial moved"
NEUTRAL_PROBES = "neutralised probes"
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
