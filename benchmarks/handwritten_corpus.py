"""Prints, for the hand-written corpus (tests/corpus/handwritten/, each model zero-config as a new user types it):
ran zero-config N/M, clean N/M, bugs FAIL N/M, line named N/M, then one line per model that misses one
(run: python benchmarks/handwritten_corpus.py [NAME ...])."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "corpus"))

from handwritten_table import HANDWRITTEN, evaluate  # noqa: E402


def main(names: list[str]) -> None:
    outcomes = [evaluate(n) for n in names or HANDWRITTEN]
    m = len(outcomes)
    ran, clean = sum(o.ran for o in outcomes), sum(o.clean for o in outcomes)
    fails, named = sum(o.bug_fails for o in outcomes), sum(o.bug_line_named for o in outcomes)
    print(f"ran zero-config {ran}/{m}, clean {clean}/{m}, bugs FAIL {fails}/{m}, line named {named}/{m}")
    for o in outcomes:
        marks = "".join(c if ok else "." for c, ok in (("r", o.ran), ("c", o.clean), ("F", o.bug_fails),
                                                        ("L", o.bug_line_named)))
        print(f"  {marks} {o.name:24} bug {o.bug_status:5} {o.detail}")
        for extra in o.unexplained[1:]:
            print(f"  {'':4} {'':24} {'':9} {extra}")


if __name__ == "__main__":
    main(sys.argv[1:])
