"""The engine runs the battery its front end loads, and the data prints through the views its front end
registers: each read in a fresh interpreter, since this one has long imported both."""
from __future__ import annotations

from fresh_interpreter import found_by

_ENGINE_ALONE = r'''
import json, sys
from tfcheck.engine.registry import battery
from tfcheck.engine.runner import load_declared, run_model

out = {"checks loaded": any(m.startswith("tfcheck.checks.") for m in sys.modules)}
try:
    battery()
except RuntimeError as exc:
    out["refused"] = str(exc)
from tfcheck.battery import all_checks
all_checks()  # as a front end does
subject = load_declared("reference_model:TransformerLM", {}, "test")
report = run_model(subject, ["forward.smoke"])  # the engine alone: data, no views
from tfcheck.report.report import Report
out["printed before views"] = str(Report([report]))
import tfcheck.ui.views
out["printed after views"] = str(Report([report])).splitlines()[0]
print(json.dumps(out))
'''

_PUBLIC = r'''
import json, tfcheck
report = tfcheck.run_checks("reference_model:TransformerLM", only=["forward.smoke"])
trace = tfcheck.trace_shapes("reference_model:TransformerLM")
print(json.dumps({"report": str(report).splitlines()[0], "trace": str(trace).splitlines()[0]}))
'''


def test_the_engine_refuses_to_run_no_battery_and_data_prints_its_repr_until_a_view_is_registered():
    found = found_by(_ENGINE_ALONE)
    assert found["checks loaded"] is False
    assert "no tfcheck check is registered: load the battery first (tfcheck.battery.all_checks()" in found["refused"]
    assert found["printed before views"].startswith("<Report reference_model:TransformerLM")
    assert found["printed after views"].startswith("tfcheck reference_model:TransformerLM")


def test_the_public_names_load_the_battery_and_register_the_views():
    found = found_by(_PUBLIC)
    assert found["report"].startswith("tfcheck reference_model:TransformerLM")
    assert not found["trace"].startswith("<Trace")
