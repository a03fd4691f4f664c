"""The command line: what it prints and its exit codes."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tfcheck.cli import EXIT_FAIL, EXIT_OK, EXIT_USAGE, REFERENCE_SPECS, main


def test_check_with_no_spec_runs_the_bundled_reference_models(capsys, tmp_path):
    out = tmp_path / "r.json"
    assert main(["check", "--json", str(out)]) == EXIT_OK
    printed = capsys.readouterr().out
    for spec in REFERENCE_SPECS:
        assert f"tfcheck {spec}  PASS" in printed
    assert [m["spec"] for m in json.loads(out.read_text())["models"]] == list(REFERENCE_SPECS)


def test_a_failure_exits_1_and_prints_the_row(capsys):
    assert main(["check", "reference_model.broken:ResidualWidthMismatch"]) == EXIT_FAIL
    printed = capsys.readouterr().out
    assert "row [tensor-size-mismatch]" in printed
    assert "The size of tensor a (32) must match the size of tensor b (64)" in " ".join(printed.split())  # wrapped


# Bad specs, declarations and --json paths: the table in test_reliability.py, for the CLI and the plugin.
def test_an_unknown_check_id_exits_2_with_a_message_not_a_traceback(capsys):
    assert main(["check", "reference_model:TransformerLM", "--only", "mask.causl"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("tfcheck: error: ") and "unknown check id(s) mask.causl" in err and "Traceback" not in err


def test_only_limits_the_checks(capsys, tmp_path):
    out = tmp_path / "r.json"
    assert main(["check", "reference_model:TransformerLM", "--only", "shape.contract", "--json", str(out)]) == 0
    assert [c["check"] for c in json.loads(out.read_text())["models"][0]["checks"]] == ["shape.contract"]


def test_accept_on_the_command_line(capsys):
    assert main(["check", "reference_model.broken:LMWithoutHead", "--set",
                 "accept=shape.contract:hidden states on purpose"]) == EXIT_OK
    assert "ACCEPTED" in capsys.readouterr().out


def test_list_shows_checks_and_declaration_keys(capsys):
    assert main(["list"]) == EXIT_OK
    printed = capsys.readouterr().out
    for needle in ("forward.smoke", "shape.contract", "vocab_size", "accept"):
        assert needle in printed


def test_table_in_chinese_keeps_the_source_wording(capsys):
    assert main(["table", "--lang", "zh"]) == EXIT_OK
    printed = capsys.readouterr().out
    assert "线性层输入维度不匹配" in printed and "忘了加causal mask" in printed


def test_python_dash_m_and_exit_code_through_a_real_process():
    done = subprocess.run([sys.executable, "-m", "tfcheck", "check", "reference_model.broken:LMWithoutHead"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == EXIT_FAIL, done.stderr
    assert "FAIL" in done.stdout


@pytest.mark.parametrize("choice,env,tty,expected", [
    ("always", {"NO_COLOR": "1"}, False, True), ("never", {"FORCE_COLOR": "1"}, True, False),
    ("auto", {"NO_COLOR": "1", "FORCE_COLOR": "1"}, True, False), ("auto", {"FORCE_COLOR": "1"}, False, True),
    ("auto", {}, True, True), ("auto", {}, False, False)])
def test_colour_is_decided_by_the_option_then_no_color_then_force_color_then_the_terminal(
        choice, env, tty, expected, monkeypatch):
    from tfcheck.cli import use_color

    for name in ("NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr("sys.stdout.isatty", lambda: tty)
    assert use_color(choice) is expected


def test_version_and_colour_in_the_report(capsys):
    from tfcheck.version import __version__

    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"tfcheck {__version__}"
    main(["check", "reference_model:TransformerLM", "--only", "shape.contract", "--color", "always"])
    coloured = capsys.readouterr().out
    main(["check", "reference_model:TransformerLM", "--only", "shape.contract", "--color", "never"])
    assert "\x1b[" in coloured and "\x1b[" not in capsys.readouterr().out


def test_progress_names_the_running_check_and_a_training_step_and_nothing_is_drawn_when_piped(capsys):
    import tfcheck
    from tfcheck import progress

    with progress.watched("reference_model:TransformerLM") as state:
        tfcheck.run_checks("reference_model:TransformerLM", only=["train.overfit_batch"])
    assert state.check == "train.overfit_batch" and 0 < state.step < state.steps == 30  # stopped at its verdict
    assert state.line().startswith(f"reference_model:TransformerLM  train.overfit_batch  step {state.step}/30  ")
    assert state.line().endswith(" s of 120 s")
    assert main(["check", "reference_model:TransformerLM", "--only", "shape.contract"]) == EXIT_OK
    assert capsys.readouterr().err == ""  # stderr is no terminal here: no progress line


@pytest.mark.parametrize("choice,env,styled", [("auto", {}, True), ("auto", {"NO_COLOR": "1"}, False),
                                               ("never", {}, False), ("always", {"NO_COLOR": "1"}, True)])
def test_the_progress_line_takes_the_reports_colour_decision_for_stderr(choice, env, styled, monkeypatch):
    from tfcheck import progress
    from tfcheck.cli import use_color
    from tfcheck.ui.live import progress_text

    class Terminal:
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with progress.watched("m:M") as state:
        text = progress_text(state, use_color(choice, Terminal()))
    assert (text.style == "dim") is styled and text.plain.startswith("m:M")


@pytest.mark.parametrize("flags,code", [([], EXIT_OK), (["--budget-overrun", "fail"], EXIT_FAIL),
                                        (["--strict"], EXIT_FAIL), (["--strict", "--budget-overrun", "skip"], EXIT_OK),
                                        (["--set", "budget_overrun=fail"], EXIT_FAIL)])
def test_a_check_over_its_budget_is_a_skip_unless_overruns_fail(flags, code, capsys, tmp_path, monkeypatch):
    # Each forward naps 0.05 s: the forward probe fits 0.5 s, 30 training steps cannot, however loaded the machine.
    (tmp_path / "napping.py").write_text(
        "import time\nfrom torch import nn\n\n\n"
        "class NappingLM(nn.Module):\n"
        "    __tfcheck__ = {'kind': 'decoder'}\n\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.embed, self.head = nn.Embedding(50, 16), nn.Linear(16, 50)\n\n"
        "    def forward(self, input_ids):\n"
        "        time.sleep(0.05)\n"
        "        return self.head(self.embed(input_ids))\n")
    monkeypatch.chdir(tmp_path)
    args = ["check", "napping.py:NappingLM", "--only", "train.overfit_batch", "--set", "budget_s=0.5"]
    assert main(args + flags) == code
    lines = capsys.readouterr().out.splitlines()
    # the only check run did not decide: SKIP, unless overruns fail
    head = "FAIL, 1 over budget (budget_overrun=fail): train." if code == EXIT_FAIL else "SKIP"
    assert lines[0].startswith(f"tfcheck napping.py:NappingLM  {head}"), lines[0]
    assert lines[-1].startswith(("FAIL" if code == EXIT_FAIL else "SKIP") + " 1 over budget")


@pytest.mark.parametrize("args", [
    ["list"], ["table"], ["table", "output-shape"], ["explain", "my dataloader broke"],
    ["trace", "reference_model:TransformerLM"], ["check", "reference_model:TransformerLM"]])
def test_no_command_pads_its_lines_with_trailing_spaces(args, capsys):
    main(args)
    padded = [line for line in capsys.readouterr().out.splitlines() if line != line.rstrip()]
    assert not padded, padded[:3]
