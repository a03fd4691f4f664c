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

from dataclasses import dataclass
from typing import Any

import torch

from tfcheck.explainers.explanation import Explanation, explain
from tfcheck.probe.module_stack import tracking
from tfcheck.model.inputs import batch_length
from tfcheck.model.outputs import infer_output
from tfcheck.model.subject import Subject
from tfcheck.model.user_code import user_code
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
            return cache[key]
        args, kwargs = self.subject.make_inputs(batch, length, seed)
        probe = self.run(args, kwargs, f"a forward at batch {batch}, length {length}")
        cache[key] = probe
        return probe

    def run(self, args: tuple, kwargs: dict, what: str, grad: bool = False) -> Probe:
        """One counted forward on the given inputs; ``grad=True`` keeps the graph for autograd.grad."""
        batch, length = batch_length(args, kwargs)
        raw = self.call(args, kwargs, what, tokens=batch * length, grad=grad)
        infer_output(self.subject, raw)
        return Probe(args, kwargs, raw, self.subject.extract_output(raw), batch, length)

    def record(self, args: tuple, kwargs: dict, what: str, on_op=None):
        """One counted forward under the op recorder: (Probe, Recording)."""
        from tfcheck.probe.recorder import Recorder

        recorder = Recorder(self.subject.model, on_op=on_op)
        with recorder:
            probe = self.run(args, kwargs, what)
        return probe, recorder.recording

    def count_backward(self, tokens: int) -> None:
        self.cost.backward += 1
        self.cost.token_passes += tokens

    def call(self, args: tuple, kwargs: dict, what: str, tokens: int, grad: bool = False,
             model: torch.nn.Module | None = None) -> Any:
        """The raw return of one counted forward of the model (or of ``model``, a training copy of it)."""
        model = self.subject.model if model is None else model
        self.cost.forward += 1
        self.cost.token_passes += tokens
        with tracking(model) as stack, torch.set_grad_enabled(grad):
            try:
                args, kwargs = self.subject.to_model_layout(args, kwargs)  # checks build (batch, length, ...)
                with user_code():
                    return model(*args, **kwargs)
            except Exception as exc:
                raise ModelRaised(explain(exc, stack, what)) from exc


# Kept for tfcheck.probe.training until it imports tfcheck.model.inputs.batch_length (the public name).
_batch_length = batch_length
