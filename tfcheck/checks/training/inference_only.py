"""The training checks' shared precondition: a forward written to run without autograd (an inference-only
implementation) cannot be trained by design, so they do not apply, said with the decorator that shows it."""
from __future__ import annotations

from typing import Any

from tfcheck.engine.registry import NotApplicable
from tfcheck.model.facts.structure import inference_only


def inference_only_design(subject: Any) -> NotApplicable | None:
    why = inference_only(subject.model)
    return NotApplicable(why) if why is not None else None
