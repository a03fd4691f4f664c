"""The lengths a model takes, read when the trial forward raised at the probe length.

The probe length (7) is tfcheck's choice, not the user's: a model that takes only multiples of a bucket, block or
chunk size (Reformer's LSH buckets, a hierarchical attention's powers of two) raises there, and failing it for that
would be judging it by tfcheck's guess. So, once, before any check: one forward at batch 1 at each of
RETRY_LENGTHS up to the length cap. When the model runs at the probe length at batch 1 too, the batch is what it
refuses and nothing is read. When it runs at a length m and at every larger multiple of m tried, and the probe
length is no multiple of m, the model is read as taking multiples of m (length_multiple = m, stated with the error
and the lengths that ran, the declaration that states it named): every probe is then rounded to one. Anything
else (no length runs, or lengths that run with no multiple in common) leaves the trial's error to forward.smoke.
"""
from __future__ import annotations

from collections.abc import Callable

from tfcheck.model.facts.under_test import ModelUnderTest
from tfcheck.report.report import Assumption

#: Lengths tried after the forward raised at the probe length: powers of two, so a bucket, block or chunk size
#: of any power of two up to the cap shows as the smallest that runs.
RETRY_LENGTHS = (2, 4, 8, 16, 32, 64)


def lengths_that_run(subject: ModelUnderTest, failed: int, runs: Callable[[int], bool]) -> list[int] | None:
    """The RETRY_LENGTHS (up to the cap, the failed one left out) at which a forward at batch 1 runs; None when
    the failed length runs at batch 1 itself (the batch, not the length, is refused)."""
    if runs(failed):
        return None
    return [n for n in RETRY_LENGTHS if n != failed and n <= subject.length_cap() and runs(n)]


def read_length_multiple(subject: ModelUnderTest, failed: int, error: str, runs: Callable[[int], bool]) -> bool:
    """Settle length_multiple from the lengths that run, as the module docstring says; True when it did."""
    if subject.takes_target or subject.facts.length_multiple is not None:
        return False
    ran = lengths_that_run(subject, failed, runs)
    if not ran or len(ran) < 2:
        return False
    multiple = ran[0]
    tried = [n for n in RETRY_LENGTHS if multiple < n <= subject.length_cap()]
    if failed % multiple == 0 or any(n % multiple == 0 and n not in ran for n in tried):
        return False
    why = (f"the trial forward raised at tfcheck's probe length {failed} ({error}) and ran at lengths "
           f"{', '.join(map(str, ran))} (batch 1): read as a model that takes multiples of {multiple} only, so every "
           f"probe is rounded to one. Declare length_multiple={multiple} to state it (or min_len={multiple} if it "
           "needs that many positions at least)")
    subject.facts.set("length_multiple", multiple, why)
    subject.assumptions.append(Assumption("length_multiple", multiple, why))
    return True
