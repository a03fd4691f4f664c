"""What a check gets: the subject, and a forward that is counted, explained when it raises, and
never leaves gradients behind."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from tfcheck.explain import Explanation, explain, tracking
from tfcheck.report import Cost
from tfcheck.subject import Subject, infer_output


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
        """Run the model once at (batch, length) under no_grad and return its output tensor."""
        args, kwargs = self.subject.make_inputs(batch, length, seed)
        what = f"a forward at batch {batch}, length {length}"
        raw = self.call(args, kwargs, what, tokens=batch * length)
        infer_output(self.subject, raw)
        return Probe(args, kwargs, raw, self.subject.extract_output(raw), batch, length)

    def call(self, args: tuple, kwargs: dict, what: str, tokens: int) -> Any:
        model = self.subject.model
        self.cost.forward += 1
        self.cost.token_passes += tokens
        with tracking(model) as stack, torch.no_grad():
            try:
                return model(*args, **kwargs)
            except Exception as exc:
                raise ModelRaised(explain(exc, stack, what)) from exc
