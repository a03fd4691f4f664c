"""The model under test as the stages of the model layer read it: a Protocol that ``tfcheck.model.subject.Subject``
fulfils. The build, facts and trial stages, and the inputs made from the facts, run before the Subject is whole
and sit below it, so they are typed against this, never against the Subject class (which imports them)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from tfcheck.model.facts.declarations import Declared, MaskSpec

if TYPE_CHECKING:
    import torch
    import torch.nn as nn

    from tfcheck.model.build.loaded import Loaded
    from tfcheck.model.facts.facts import Facts
    from tfcheck.report.report import Assumption


class ModelUnderTest(Protocol):
    """What a stage may read of the model under test, and the assumptions it may add to."""

    loaded: Loaded
    declared: dict[str, Declared]
    assumptions: list[Assumption]
    facts: Facts
    #: the trial forward's outcome (tfcheck.model.trial.trial.Trial) once the engine has run it; None before
    trial: Any

    @property
    def model(self) -> nn.Module: ...

    @property
    def spec(self) -> str: ...

    @property
    def kind(self) -> str | None: ...

    @property
    def takes_target(self) -> bool: ...

    @property
    def device(self) -> torch.device: ...

    def source_of(self, key: str) -> str | None: ...

    def probe_length(self, default: int = ...) -> int: ...

    def accepted_length(self, n: int) -> int: ...

    def length_cap(self) -> int: ...


def mask_spec(subject: ModelUnderTest) -> MaskSpec:
    """The padding mask's argument and convention (no mask argument when nothing settled one)."""
    return subject.facts.mask or MaskSpec(None, "none")
