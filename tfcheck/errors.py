"""tfcheck's own exceptions. None of them should reach a user as a bare traceback."""
from __future__ import annotations


class TfcheckError(Exception):
    """Base class of every error tfcheck raises on purpose."""


class UsageError(TfcheckError):
    """The user asked for something that cannot be done as asked (bad option, bad spec, bad value).

    The message says what happened, where, and what to do.
    """


class SpecError(UsageError):
    """A model spec that does not import, names nothing, or cannot be constructed."""


class DeclarationError(UsageError):
    """An unknown declaration key or a value of the wrong type."""


class MaskUnread(TfcheckError):
    """The padding mask cannot be given: the trial forward raised in every reading of an optional mask argument
    tfcheck tried (tfcheck.model.trial.optional_mask). A check that pads through it is inconclusive, never failed: the
    reading was tfcheck's guess, not the model's contract. ``reason`` names the declaration that settles it."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
