"""Every problem the gallery shows points at a module and at the user's line, or says why it cannot; and the
finding a gallery variant expects points at the line of its defect, which the variant's source marks with
``# tfcheck: defect`` (in the class body) or ``# tfcheck: defect(VariantName)`` (in a helper it uses).

The reports are the stored snapshots, which tests/integration/test_snapshots.py proves equal to real runs, so
the gallery is not run a third time. The fields are compared, never rendered text.
"""
from __future__ import annotations

import json

import pytest

from locations import at, defect_lines, unlocated
from reference_model import broken
from snapshot import STORE
from tfcheck.report.findings import Finding
from tfcheck.report.status import Status


def _findings(variant) -> list[Finding]:
    data = json.loads((STORE / f"broken-{variant.__name__}.json").read_text())
    return [Finding.from_dict(f) for m in data["models"] for c in m["checks"] for f in c["findings"]]


@pytest.mark.parametrize("variant", broken.VARIANTS, ids=lambda v: v.__name__)
def test_every_problem_says_where_it_is(variant):
    assert not unlocated(_findings(variant))


@pytest.mark.parametrize("variant", broken.VARIANTS, ids=lambda v: v.__name__)
def test_the_expected_finding_points_at_the_defect_line(variant):
    expect = variant.__tfcheck_expect__
    status = Status(expect.get("status", "fail"))
    marked = defect_lines(variant)
    assert marked, f"{variant.__name__}: mark the line of its defect with '# tfcheck: defect'"
    found = [f for f in _findings(variant) if f.check == expect["check"] and f.status is status]
    assert found, f"{variant.__name__}: no {status.value} from {expect['check']} in its snapshot"
    pointed = {at(f.location) for f in found if f.location}
    assert pointed & marked, (f"{variant.__name__}: {expect['check']} points at {sorted(map(str, pointed))}; "
                              f"the defect is at {sorted(marked)}")

