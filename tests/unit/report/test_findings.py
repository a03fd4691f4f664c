"""A finding crosses xdist workers as JSON: every field survives the round trip."""
from tfcheck.report.findings import Finding, Location, Related
from tfcheck.report.status import Status


def test_location_reason_related_and_explained_by_survive_the_round_trip():
    f = Finding("mask.padding", Status.FAIL, "leak", Location("layers.1", None, None, reason="no line: a C++ kernel"),
                {"largest": 0.5}, "padding-mask-ignored", (Related("mask built", "model.py", 12, "embed"),),
                explained_by="attention.heads")
    assert Finding.from_dict(f.to_dict()) == f


def test_a_line_in_an_installed_package_says_it_is_outside_the_workspace():
    inside = Location("h.0.attn", "/venv/lib/python3.11/site-packages/transformers/models/gpt2/modeling_gpt2.py", 88)
    assert inside.installed and inside.to_dict()["installed"] is True
    assert "installed package" in str(inside)
    assert not Location("h.0.attn", "model.py", 3).installed
