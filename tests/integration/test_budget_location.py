"""A check stopped by its budget names the user's line it was stopped at (and the module whose forward ran it):
the stop is raised once, and tfcheck's cleanup on the way out (mode exits, ``set_grad_enabled``, hook removal)
cannot replace it with a second stop raised outside the model, which used to leave the finding with no line.

The lines are marked in this file with ``# budget: stops here`` and read from the source, never written as numbers.
"""
from __future__ import annotations

import inspect
import json
import time
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import tfcheck
from tfcheck import Status
from tfcheck.cli import EXIT_OK, main
from tfcheck.engine.budget import BudgetExceeded, time_budget, where_stopped
from tfcheck.frames import innermost_user_frame

MARK = "# budget: stops here"
#: Small enough to keep the tests fast, large enough that the loop (not tfcheck's first imports) is running.
BUDGET_S = 1.0
THIS_FILE = Path(__file__).resolve()


def marked_line(obj, mark: str = MARK) -> int:
    """The line of ``obj``'s source marked with ``mark``."""
    lines, start = inspect.getsourcelines(obj)
    (found,) = [start + i for i, text in enumerate(lines) if mark in text]
    return found


class Busy(nn.Module):
    """A layer that loops over tiny torch ops and naps until something stops it."""

    def __init__(self, only_with_grad: bool = False):
        super().__init__()
        self.mix = nn.Linear(16, 16)
        self.only_with_grad = only_with_grad

    def forward(self, x):
        if torch.is_grad_enabled() or not self.only_with_grad:
            for _ in range(1_000_000):
                x = x + 0.0  # budget: stops here
                time.sleep(0.002)
        return self.mix(x)


class BusyLM(nn.Module):
    """A tiny LM whose one block (``busy``) spins: in every forward, or only in those that keep a graph, so
    that forward.smoke (no graph) passes and a training check is stopped."""

    __tfcheck__ = {"kind": "decoder"}

    def __init__(self, only_with_grad: bool = False):
        super().__init__()
        self.embed, self.busy, self.head = nn.Embedding(50, 16), Busy(only_with_grad), nn.Linear(16, 50)

    def forward(self, input_ids):
        return self.head(self.busy(self.embed(input_ids)))


class QuickLM(nn.Module):
    __tfcheck__ = {"kind": "decoder"}

    def __init__(self):
        super().__init__()
        self.embed, self.head = nn.Embedding(50, 16), nn.Linear(16, 50)

    def forward(self, input_ids):
        return self.head(self.embed(input_ids))


@pytest.fixture(scope="module", autouse=True)
def imports_done():
    # tfcheck's first recorded forward imports parts of torch for a second or more: a stop during it would land
    # at the first op after the import, not in the loop these tests mark.
    tfcheck.run_checks(QuickLM(), only=["forward.smoke"])


def assert_stopped_at_the_mark(finding, module: str):
    loc = finding.location
    assert finding.status is Status.SKIP and finding.evidence["blocked_by"] == "budget_s", finding.message
    assert loc is not None and loc.file, finding.message
    assert (Path(loc.file).resolve(), loc.line) == (THIS_FILE, marked_line(Busy.forward)), finding.message
    assert loc.module == module
    assert f"at {loc.file}:{loc.line} in module '{module}'" in finding.message


def test_a_forward_stopped_by_its_budget_names_the_line_it_was_stopped_at():
    report = tfcheck.run_checks(BusyLM(), budget_s=BUDGET_S, only=["forward.smoke"])
    (smoke,) = report.models[0].results
    assert smoke.check == "forward.smoke"
    assert_stopped_at_the_mark(smoke.findings[0], "busy")


def test_a_later_check_stopped_by_its_budget_names_the_line_in_the_training_copy():
    # The training check steps a copy of the model: its module path is read in the copy.
    report = tfcheck.run_checks(BusyLM(only_with_grad=True), budget_s=BUDGET_S,
                                only=["forward.smoke", "train.overfit_batch"])
    results = {r.check: r for r in report.models[0].results}
    assert results["forward.smoke"].status is Status.PASS
    assert_stopped_at_the_mark(results["train.overfit_batch"].findings[0], "busy")


class NapsAfterItsWork(nn.Module):
    """A forward whose last call is a nap as long as the budget: the deadline passes inside it, and the next
    torch call is tfcheck's own, reading the output."""

    __tfcheck__ = {"kind": "decoder"}
    NAP_S = 0.5

    def __init__(self):
        super().__init__()
        self.embed, self.head = nn.Embedding(50, 16), nn.Linear(16, 50)

    def forward(self, input_ids):
        out = self.head(self.embed(input_ids))
        time.sleep(self.NAP_S)
        return out


def test_a_stop_in_tfchecks_own_work_names_no_line_of_the_model_and_says_why():
    report = tfcheck.run_checks(NapsAfterItsWork(), budget_s=NapsAfterItsWork.NAP_S, only=["forward.smoke"])
    finding = report.models[0].results[0].findings[0]
    loc = finding.location
    assert finding.evidence["blocked_by"] == "budget_s", finding.message
    assert (loc.file, loc.line) == (None, None)
    assert "tfcheck" in loc.reason and "no line of" in loc.reason and loc.reason in finding.message


BUSY_FILE = '''\
import time, torch.nn as nn

class BusyLM(nn.Module):
    __tfcheck__ = {'kind': 'decoder'}

    def __init__(self):
        super().__init__()
        self.embed, self.head = nn.Embedding(50, 16), nn.Linear(16, 50)

    def forward(self, input_ids):
        x = self.embed(input_ids)
        while True:
            x = x + 0.0  # budget: stops here
            time.sleep(0.002)
'''


def test_the_json_report_and_the_output_name_the_stopped_line(tmp_path, monkeypatch, capsys):
    # The spec in the report's header is busy.py:BusyLM: only the line number tells the stop's own line apart.
    (tmp_path / "busy.py").write_text(BUSY_FILE)
    line = next(n for n, text in enumerate(BUSY_FILE.splitlines(), 1) if MARK in text)
    monkeypatch.chdir(tmp_path)
    code = main(["check", "busy.py:BusyLM", "--set", f"budget_s={BUDGET_S:g}", "--only", "forward.smoke",
                 "--json", "r.json"])
    assert code == EXIT_OK  # inconclusive is no failure
    finding = json.loads((tmp_path / "r.json").read_text())["models"][0]["checks"][0]["findings"][0]
    assert (finding["location"]["file"], finding["location"]["line"]) == ("busy.py", line)
    assert finding["location"]["module"] == ""
    assert f"busy.py:{line}" in capsys.readouterr().out.replace("\n", "")


# ----- the stop itself ------------------------------------------------------------------------------------

def spin() -> None:
    x = torch.zeros(4)
    while True:
        x = x + 1  # budget: stops here
        time.sleep(0.001)


def test_cleanup_on_the_way_out_runs_and_the_first_stop_arrives():
    ran = []
    with pytest.raises(BudgetExceeded) as info:
        with time_budget(0.05):
            try:
                spin()
            finally:
                ran.append(torch.ones(2).sum().item())  # torch ops in cleanup: neither stopped nor a second stop
    assert ran == [2.0]
    assert info.value.origin is info.value and info.value.first is None
    stop = where_stopped(info.value)
    assert (Path(stop.file).resolve(), stop.line) == (THIS_FILE, marked_line(spin))


def swallows_the_first_stop() -> None:
    x = torch.zeros(4)
    try:
        spin()
    except BaseException:  # noqa: BLE001 - the model under test may swallow anything
        pass
    while True:
        x = x + 1  # budget: the second stop
        time.sleep(0.001)


def test_code_that_swallows_a_stop_is_stopped_again_and_the_first_line_is_named():
    with pytest.raises(BudgetExceeded) as info:
        with time_budget(0.05):
            swallows_the_first_stop()
    again = info.value
    assert again.first is not None and again.origin is again.first
    assert innermost_user_frame(again).lineno == marked_line(swallows_the_first_stop, "# budget: the second stop")
    stop = where_stopped(again)
    assert (Path(stop.file).resolve(), stop.line) == (THIS_FILE, marked_line(spin))


def test_a_stop_in_no_user_frame_has_no_line():
    # This file stands for tfcheck's own code: with its frames not the user's, no line of the user's was running.
    with pytest.raises(BudgetExceeded) as info:
        with time_budget(0.05):
            spin()
    stop = where_stopped(info.value, not_users=[str(THIS_FILE.parent)])
    assert (stop.file, stop.line, stop.module) == (None, None, None)
