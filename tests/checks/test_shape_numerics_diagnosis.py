"""Issue 16 for the shape, attention, numerics and flow checks: the finding a gallery variant expects points at
the line its source marks as the defect (``# tfcheck: defect``), measured on real runs (the gallery test reads
the stored snapshots); and a constant passed down into a shared helper is located at the call that chose it."""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from locations import defect_lines
from reference_model import broken
from snapshot import REPO
from tfcheck.checks.numerics import value_origin
from tfcheck.report.status import Status

#: The checks this diagnosis covers; the variants are the gallery's, chosen by the check they expect.
CHECKS = ("forward.smoke", "shape.contract", "shape.residual", "attention.heads", "decode.cache", "attention.scale",
          "attention.softmax_axis", "embedding.scale", "numerics.half", "numerics.nan_source", "position.sensitivity",
          "batch.independence")
VARIANTS = [v for v in broken.VARIANTS if v.__tfcheck_expect__["check"] in CHECKS]


def test_the_gallery_has_variants_of_these_checks():
    assert {v.__tfcheck_expect__["check"] for v in VARIANTS} == set(CHECKS)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.__name__)
def test_the_expected_finding_points_at_the_marked_defect_line(variant):
    import tfcheck

    expect = variant.__tfcheck_expect__
    status = Status(expect.get("status", "fail"))
    marked = defect_lines(variant)
    assert marked, f"{variant.__name__}: mark its defect line with '# tfcheck: defect'"
    report = tfcheck.run_checks(variant, only=[expect["check"]])
    found = [f for f in report.models[0].findings() if f.check == expect["check"] and f.status is status]
    assert found, f"{variant.__name__}: no {status.value} from {expect['check']}"
    pointed = {(str(Path(f.location.file).resolve().relative_to(REPO)), f.location.line)
               for f in found if f.location and f.location.file}
    assert pointed & marked, f"{variant.__name__}: {expect['check']} points at {sorted(map(str, pointed))}, " \
                             f"the defect is at {sorted(marked)}"
    assert all(f.location.module is not None for f in found)


# ----- following a constant to the call that chose it ------------------------------------------------

def _uses(scale):
    return value_origin.user_frames(), scale  # the frame names the parameter that holds the value


def _passes_on(scale):
    return _uses(scale)  # passes the value on unchanged: not where it was chosen


def _chooses():
    return _passes_on(0.125)  # chosen here


def _writes_its_own():
    frames = value_origin.user_frames()  # a literal of its own, not a parameter: written here
    return frames, 0.5


def _line_of(function, text: str) -> tuple[str, int]:
    lines, start = inspect.getsourcelines(function)
    return inspect.getsourcefile(function), start + next(i for i, line in enumerate(lines) if text in line)


def test_a_value_passed_down_is_located_at_the_call_that_chose_it():
    frames, value = _chooses()
    chose, used = value_origin.chosen_at(frames, value)
    assert (chose.file, chose.line) == _line_of(_chooses, "# chosen here")
    assert (used.file, used.line) == _line_of(_uses, "value_origin.user_frames()")


def test_a_value_written_where_it_is_used_stays_there():
    frames, value = _writes_its_own()
    chose, used = value_origin.chosen_at(frames, value)
    assert (chose.file, chose.line) == _line_of(_writes_its_own, "# a literal of its own")
    assert used is None


def test_a_parameter_holding_another_value_is_not_followed():
    frames, _ = _chooses()
    chose, _ = value_origin.chosen_at(frames, 0.25)  # not what the parameter held
    assert (chose.file, chose.line) == _line_of(_uses, "value_origin.user_frames()")


def _holds_but_writes(scale):
    return value_origin.user_frames(), 0.125  # writes the same number itself, not the parameter


def test_a_parameter_its_line_does_not_name_is_not_followed():
    frames, value = _holds_but_writes(0.125)
    chose, _ = value_origin.chosen_at(frames, value)
    assert (chose.file, chose.line) == _line_of(_holds_but_writes, "# writes the same number itself")
