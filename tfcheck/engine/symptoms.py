"""Which checks measure symptoms: the flow and mask checks perturb inputs and read where an effect first
appears, the training checks train a copy and read its loss. Their findings are effects that a structural
finding on the same line explains (tfcheck.report.root_cause); read from where each check lives, so a new check
in those families needs no list to be kept."""
from __future__ import annotations

from tfcheck.engine.registry import battery

#: The check packages whose findings are symptoms.
SYMPTOM_FAMILIES = ("tfcheck.checks.flow.", "tfcheck.checks.mask.")


def symptom_checks() -> frozenset[str]:
    return frozenset(c.id for c in battery()
                     if c.func.__module__.startswith(SYMPTOM_FAMILIES) or c.group == "training")
