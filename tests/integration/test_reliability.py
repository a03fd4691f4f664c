"""Reliability: whatever the model does, tfcheck does not crash, reports a status for every check, leaves the
model and torch's process state exactly as they were, stops a check that runs past its budget, runs on the
declared device, refuses bad input with a message that says what to do, and writes only what it is asked to."""
from __future__ import annotations

import _thread
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
from torch.overrides import _get_current_function_mode_stack

import tfcheck
import tfcheck.engine.runner as engine
from model_state import assert_same, snapshot
from reference_model import TransformerLM, broken
from tfcheck import Status
from tfcheck.cli import EXIT_FAIL, EXIT_OK, EXIT_USAGE, main
from tfcheck.engine.budget import Deadline, time_budget
from tfcheck.engine.guard import placed_on
from tfcheck.engine.runner import applicable_checks, load_subject

CUDA = torch.cuda.is_available()
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def after_every_check(monkeypatch):
    """Asserts, after each check the engine runs, that the model and the process are as they were before it."""
    checked: list[str] = []
    real = engine.run_check

    def run_check(subject, chk):
        before = snapshot(subject.model)
        result = real(subject, chk)
        assert_same(before, snapshot(subject.model), f"after {chk.id}")
        checked.append(chk.id)
        return result

    monkeypatch.setattr(engine, "run_check", run_check)
    return checked


@pytest.mark.parametrize("make", [
    lambda: TransformerLM().train(),
    lambda: broken.LinearInFeaturesMismatch(),        # raises mid-forward
    lambda: broken.CausalMaskHidesDiagonal(),         # NaN everywhere
    lambda: __import__("zoo").MutatesItself(),        # writes its weights and buffers, flips its mode
    lambda: LeavesModesBehind(),                      # enters a torch function mode and never leaves it
    lambda: ReassignsState(),                         # new buffer, parameter, storage, submodule, cache tensor
    lambda: HooksEverywhere(),                        # global, state-dict, tensor and kwargs hooks, each forward
    lambda: ChangesProcessState(),                    # backend flags, precision, warning filters, sys.path
    lambda: SparseBufferLM(),                         # a sparse buffer: no data pointer, no torch.equal
], ids=["reference-lm-train-mode", "raises-mid-forward", "nan-output", "mutates-itself", "leaves-modes-behind",
        "reassigns-state", "hooks-everywhere", "changes-process-state", "sparse-buffer"])
def test_every_check_leaves_model_and_process_as_they_were(make, after_every_check):
    model = make()
    for p in list(model.parameters())[:2]:
        p.grad = torch.full_like(p, 0.5)
    before = snapshot(model)
    report = tfcheck.run_checks(model)
    assert_same(before, snapshot(model))
    ran = [r.check for r in report.models[0].results if r.findings[0].evidence.get("blocked_by") != "forward.smoke"]
    # a check found not applicable once it ran (norm.placement on a model without a norm) is an assumption now
    stated = {a.value for a in report.models[0].assumptions if a.key == "not applicable"}
    assert ran and [c for c in after_every_check if c not in stated] == ran  # the blocked ones never ran


class LeavesModesBehind(nn.Module):
    """A forward that enters a TorchFunctionMode and never leaves it (a profiler wrapper gone wrong)."""

    __tfcheck__ = {"kind": "decoder"}

    def __init__(self):
        super().__init__()
        self.embed, self.head = nn.Embedding(50, 16), nn.Linear(16, 50)

    def forward(self, input_ids):
        torch.overrides.TorchFunctionMode().__enter__()
        return self.head(self.embed(input_ids))


class _TinyLM(nn.Module):
    __tfcheck__ = {"kind": "decoder"}

    def __init__(self):
        super().__init__()
        self.embed, self.head = nn.Embedding(50, 16), nn.Linear(16, 50)
        self.register_buffer("step", torch.zeros(()))
        self.cache = None

    def logits(self, input_ids):
        return self.head(self.embed(input_ids))


class SparseBufferLM(TransformerLM):
    """Keeps a sparse buffer (a graph's adjacency, as graph-Transformer code does) and a sparse tensor attribute,
    and reads the buffer in every forward: tfcheck's storage and value comparisons must hold for that layout."""

    def __init__(self):
        super().__init__()
        self.register_buffer("adjacency", torch.eye(32).to_sparse())
        self.relations = torch.eye(4).to_sparse_csr()

    def forward(self, tokens):
        logits = super().forward(tokens)
        return logits + 0 * torch.sparse.mm(self.adjacency, torch.ones(32, 1)).sum()


def test_a_sparse_buffer_stops_no_check():
    statuses = {r.check: r.status for r in tfcheck.run_checks(SparseBufferLM()).models[0].results}
    assert Status.ERROR not in statuses.values() and statuses["forward.smoke"] is Status.PASS, statuses


class ReassignsState(_TinyLM):
    """Reassigns rather than writes in place: what a copy of the values cannot undo."""

    def forward(self, input_ids):
        self.step = self.step + 1                                   # a new buffer tensor
        self.head.bias = nn.Parameter(self.head.bias.detach() + 0)  # a new Parameter object
        self.embed.weight.data = self.embed.weight.data.clone()     # new storage under the same Parameter
        self.extra = nn.Identity()                                  # a submodule added by forward
        out = self.logits(input_ids)
        self.cache = out.detach()                                   # a plain tensor attribute (a KV cache)
        return out


class HooksEverywhere(_TinyLM):
    def forward(self, input_ids):
        nn.modules.module.register_module_forward_hook(lambda module, args, output: None)
        nn.modules.module.register_module_forward_pre_hook(lambda module, args: None)
        self.register_state_dict_pre_hook(lambda *a, **k: None)
        self.register_load_state_dict_post_hook(lambda *a, **k: None)
        self.head.register_forward_hook(lambda *a, **k: None, with_kwargs=True, always_call=True)
        if self.head.weight.requires_grad:
            self.head.weight.register_hook(lambda grad: grad)
            self.head.weight.register_post_accumulate_grad_hook(lambda p: None)
        return self.logits(input_ids)


class ChangesProcessState(_TinyLM):
    def forward(self, input_ids):
        torch.backends.cudnn.benchmark = True
        torch.backends.mkldnn.enabled = False
        torch.set_float32_matmul_precision("medium")
        warnings.simplefilter("ignore")  # would silence tfcheck's warnings and -W error
        sys.path.append("/nonexistent-added-by-the-model")
        return self.logits(input_ids)


def test_the_same_model_gives_the_same_report():
    def run():
        data = json.loads(tfcheck.run_checks(TransformerLM(), only=None).to_json())
        for m in data["models"]:
            for c in m["checks"]:
                c.pop("seconds")
        return data

    torch.manual_seed(0)
    first = run()
    torch.manual_seed(0)
    assert run() == first


FIRST_LOOKUP = """
import random, sys
import numpy as np, torch
random.seed(7); np.random.seed(7); torch.manual_seed(7)
before = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
import tfcheck
tfcheck.run_checks  # the first lookup imports the report views (rich draws from Python's random on import)
after = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
sys.exit(0 if before[0] == after[0] and (before[1] == after[1]).all() and torch.equal(before[2], after[2]) else 1)
"""


def test_the_first_lookup_of_tfcheck_leaves_the_callers_random_streams_as_they_were():
    # In a fresh process: within this suite the views are imported already.
    done = subprocess.run([sys.executable, "-c", FIRST_LOOKUP], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


# ----- time budgets -------------------------------------------------------------------------------------

class SleepyLM(nn.Module):
    """A correct tiny LM whose every forward sleeps between two torch ops: a check of a few forwards fits a
    budget of 0.3 s, the 30 training steps of train.overfit_batch do not."""

    __tfcheck__ = {"kind": "decoder"}
    NAP_S = 0.03

    def __init__(self):
        super().__init__()
        self.embed, self.mix, self.head = nn.Embedding(50, 16), nn.Linear(16, 16), nn.Linear(16, 50)

    def forward(self, input_ids):
        x = self.embed(input_ids)
        time.sleep(self.NAP_S)
        return self.head(torch.relu(self.mix(x)))


class SpinsInOneModule(nn.Module):
    """A forward that loops over tiny torch ops for seconds, with no submodule call and no sleep, and
    swallows every Exception on the way."""

    __tfcheck__ = {"kind": "decoder"}

    def __init__(self):
        super().__init__()
        self.embed, self.head = nn.Embedding(50, 16), nn.Linear(16, 50)

    def forward(self, input_ids):
        x = self.embed(input_ids)
        for _ in range(2_000_000):
            try:
                x = x + 0.0
            except Exception:  # noqa: BLE001 - the budget must get through this
                pass
        return self.head(x)


#: How late a stop may come on a loaded machine, beyond the op or nap that was running at the deadline.
LATE_S = 1.5  # CI runs two workers on two cores: a stop 0.5 s late has been seen; the spin runs seconds


def test_a_check_over_budget_is_stopped_in_time_and_the_other_checks_run():
    model = SleepyLM()
    before = snapshot(model)
    report = tfcheck.run_checks(model, budget_s=0.3)
    assert_same(before, snapshot(model))
    results = {r.check: r for r in report.models[0].results}
    stated = {a.value for a in report.models[0].assumptions if a.key == "not applicable"}
    assert set(results) | stated == {c.id for c in applicable_checks(load_subject(SleepyLM()))} | stated
    stopped = results["train.overfit_batch"]
    finding = stopped.findings[0]
    assert stopped.status is Status.SKIP and finding.evidence["blocked_by"] == "budget_s"
    assert 0.3 <= finding.evidence["elapsed_s"] < 0.3 + SleepyLM.NAP_S + LATE_S
    for needle in ("train.overfit_batch stopped after", "budget_s=0.3 from run_checks() argument",
                   "--set budget_s=1", "--tfcheck-set budget_s=1"):
        assert needle in finding.message, finding.message
    assert results["forward.smoke"].status is Status.PASS and results["shape.contract"].status is Status.PASS


def test_a_check_over_budget_is_written_in_the_json_report(tmp_path, monkeypatch, capsys):
    (tmp_path / "sleepy.py").write_text(
        "import time, torch, torch.nn as nn\n\n"
        "class SleepyLM(nn.Module):\n"
        "    __tfcheck__ = {'kind': 'decoder'}\n\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.embed, self.head = nn.Embedding(50, 16), nn.Linear(16, 50)\n\n"
        "    def forward(self, input_ids):\n"
        "        x = self.embed(input_ids)\n"
        "        time.sleep(0.03)\n"
        "        return self.head(x)\n")
    monkeypatch.chdir(tmp_path)
    code = main(["check", "sleepy.py:SleepyLM", "--set", "budget_s=0.3", "--only", "train.overfit_batch",
                 "--json", "r.json"])
    assert code == EXIT_OK  # inconclusive is no failure
    check = json.loads((tmp_path / "r.json").read_text())["models"][0]["checks"][-1]
    assert check["check"] == "train.overfit_batch" and check["status"] == "skip"
    assert "over budget_s=0.3 from --set" in check["findings"][0]["message"]
    assert "sleepy.py:" in capsys.readouterr().out.replace("\n", "")  # where it was stopped


def test_a_forward_over_budget_blocks_the_other_checks_instead_of_running_each_to_its_budget():
    start = time.monotonic()
    report = tfcheck.run_checks(SpinsInOneModule(), budget_s=0.2)
    results = report.models[0].results
    smoke = results[0]
    assert smoke.check == "forward.smoke" and smoke.status is Status.SKIP
    assert smoke.findings[0].evidence["elapsed_s"] < 0.2 + LATE_S
    assert all(r.status is Status.SKIP and "blocked by forward.smoke" in r.findings[0].message for r in results[1:])
    assert time.monotonic() - start < 5  # not one budget per check


def test_a_budget_outside_the_main_thread_still_stops_the_check():
    # No signal handler runs there: the deadline is then a mode on the stack from the start.
    box = {}
    worker = threading.Thread(target=lambda: box.update(report=tfcheck.run_checks(SpinsInOneModule(), budget_s=0.2)))
    worker.start()
    worker.join(30)
    assert not worker.is_alive()
    smoke = box["report"].models[0].results[0]
    assert smoke.status is Status.SKIP and smoke.findings[0].evidence["elapsed_s"] < 0.2 + LATE_S


def test_within_budget_no_mode_is_on_the_stack_in_the_main_thread():
    # The zero-cost path: a TorchFunctionMode would cost a Python call per op (a third of a small battery).
    with time_budget(10):
        assert not any(isinstance(m, Deadline) for m in _get_current_function_mode_stack())
    seen = []
    worker = threading.Thread(target=lambda: seen.extend(_modes_inside_a_budget()))
    worker.start()
    worker.join(10)
    assert any(isinstance(m, Deadline) for m in seen)


def _modes_inside_a_budget():
    with time_budget(10):
        return list(_get_current_function_mode_stack())


def test_a_budget_stops_between_ops_and_leaves_nothing_behind():
    handler = signal.getsignal(signal.SIGINT)
    x = torch.zeros(3)
    with pytest.raises(tfcheck.engine.budget.BudgetExceeded) as info:
        with time_budget(0.05):
            while True:
                x = x + 1
    assert info.value.budget_s == 0.05 and info.value.elapsed_s >= 0.05
    assert signal.getsignal(signal.SIGINT) is handler and not _get_current_function_mode_stack()
    assert torch.equal(x + 1, x + 1)  # ops run again


def test_a_real_ctrl_c_still_interrupts_a_check():
    with pytest.raises(KeyboardInterrupt):
        with time_budget(30):
            _thread.interrupt_main()  # what Ctrl-C does: SIGINT's handler runs in the main thread
            for _ in range(1000):
                time.sleep(0.001)


CTRL_C_AFTER_DEADLINE = """
import os, signal, sys, threading, time
import torch
from tfcheck.engine.budget import time_budget
threading.Timer(0.6, lambda: os.kill(os.getpid(), signal.SIGINT)).start()  # Ctrl-C, after the deadline
start = time.monotonic()
try:
    with time_budget(0.2):
        time.sleep(3)  # one long call: the deadline passes inside it, the wake-up waits for it to return
        torch.zeros(1) + 1
except KeyboardInterrupt:
    print("interrupted after %.2f s" % (time.monotonic() - start))
    sys.exit(130)
print("not interrupted")
"""


def test_ctrl_c_after_a_deadline_is_the_users_at_once():
    # The budget's wake-up shared SIGINT's handler: the first Ctrl-C after the deadline was taken for it.
    done = subprocess.run([sys.executable, "-c", CTRL_C_AFTER_DEADLINE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 130, done.stdout + done.stderr
    assert float(done.stdout.split()[2]) < 2.5  # the sleep was cut short by the first Ctrl-C


@pytest.mark.parametrize("budget_s", [float("inf"), 1e300])
def test_an_infinite_budget_means_no_budget(budget_s):
    with time_budget(budget_s):
        assert not _get_current_function_mode_stack()
        assert torch.equal(torch.ones(2) + 1, torch.full((2,), 2.0))


def test_budget_s_inf_is_declared_as_no_budget():
    report = tfcheck.run_checks(TransformerLM(), only=["shape.contract"], budget_s="inf")
    assert report.models[0].result("shape.contract").status is tfcheck.Status.PASS


def test_the_budget_never_installs_a_sigint_handler():
    handler = signal.getsignal(signal.SIGINT)
    with time_budget(10):
        assert signal.getsignal(signal.SIGINT) is handler


def test_a_model_file_that_importorskips_is_skipped_under_pytest_and_a_usage_error_outside(pytester, capsys,
                                                                                          monkeypatch):
    _strange_files(pytester.path)
    result = pytester.runpytest("--tfcheck", "skips_itself.py:Model")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED and result.parseoutcomes() == {"skipped": 1}
    monkeypatch.chdir(pytester.path)
    assert main(["check", "skips_itself.py:Model"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "the model's code called pytest's skipped: could not import 'no_such_package_q'" in err
    assert "Traceback" not in err


def test_sys_exit_in_a_forward_is_a_failure_and_the_json_is_written(tmp_path, monkeypatch, capsys):
    # It used to end the process with the model's exit code 0: no report, no JSON, a silent pass.
    _strange_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["check", "strange.py:ExitsInForward", "--strict", "--json", "r.json"]) == EXIT_FAIL
    data = json.loads((tmp_path / "r.json").read_text())
    smoke = data["models"][0]["checks"][0]
    assert data["status"] == "fail" and smoke["check"] == "forward.smoke" and smoke["status"] == "fail"
    assert "sys.exit(0) was called at strange.py:" in smoke["findings"][0]["message"]
    report = tfcheck.run_checks("strange.py:ExitsInForward", only=["forward.smoke"])  # no SystemExit from the API
    assert report.models[0].result("forward.smoke").status is tfcheck.Status.FAIL


# ----- devices ------------------------------------------------------------------------------------------

class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.head = nn.Embedding(20, 8), nn.Linear(8, 20, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.ones(8))


def test_placed_on_moves_every_tensor_and_puts_the_very_same_ones_back():
    model = Tied()
    model.embed.weight.grad = torch.ones_like(model.embed.weight)
    before = snapshot(model)
    with pytest.raises(RuntimeError, match="inside"):
        with placed_on(model, "meta") as moved:  # a device every machine has: exercises the move and back
            assert moved
            assert {t.device.type for t in [*model.parameters(), *model.buffers()]} == {"meta"}
            assert model.head.weight is model.embed.weight  # still tied
            assert model.embed.weight.grad.device.type == "meta"
            raise RuntimeError("inside")
    assert_same(before, snapshot(model))
    with placed_on(model, "cpu") as moved:
        assert not moved  # already there: nothing is copied


def test_device_cpu_declared_runs_there_and_says_so():
    report = tfcheck.run_checks(TransformerLM, device="cpu")
    assert report.status is Status.PASS, str(report)
    assumed = {a.key: a for a in report.models[0].assumptions}
    assert assumed["device"].value == "cpu" and assumed["device"].source == "run_checks() argument"


@pytest.mark.skipif(CUDA, reason="this machine has CUDA")
def test_an_unavailable_device_is_a_usage_error_that_says_what_to_do():
    with pytest.raises(tfcheck.UsageError) as info:
        tfcheck.run_checks(TransformerLM, device="cuda")
    assert "device=cuda declared (run_checks() argument) but torch.cuda.is_available() is False" in str(info.value)


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("spec", ["reference_model:TransformerLM", "reference_model:Seq2SeqTransformer",
                                  "transformers:GPT2LMHeadModel"])
def test_the_battery_runs_on_cuda_and_the_model_comes_back_to_the_cpu(spec, after_every_check):
    if spec.startswith("transformers"):
        pytest.importorskip("transformers")
    subject = load_subject(spec)
    model = subject.model
    torch.cuda.init()
    before = snapshot(model)
    report = tfcheck.run_checks(model, device="cuda")
    assert_same(before, snapshot(model))
    assert all(t.device.type == "cpu" for t in model.parameters())
    assert {r.status for r in report.models[0].results} <= {Status.PASS, Status.SKIP, Status.WARN}, str(report)


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_a_cpu_battery_does_not_initialise_cuda():
    import subprocess
    import sys

    code = ("import torch, tfcheck; from reference_model import TransformerLM; tfcheck.run_checks(TransformerLM); "
            "print(torch.cuda.is_initialized())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.stdout.strip() == "False", done.stderr


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_cuda_random_generators_are_restored():
    torch.cuda.init()
    torch.cuda.manual_seed_all(3)
    before = torch.cuda.get_rng_state_all()
    tfcheck.run_checks(broken.DropoutInEval, device="cuda")  # draws dropout masks on the GPU
    assert all(torch.equal(a, b) for a, b in zip(before, torch.cuda.get_rng_state_all()))


# ----- bad input: one table, the command line and the pytest plugin ---------------------------------------

STRANGE = '''
import torch, torch.nn as nn

class _Base(nn.Module):
    __tfcheck__ = {"kind": "encoder"}

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 16)

class ReturnsString(_Base):
    def forward(self, tokens):
        return "hidden states"

class ReturnsNestedJunk(_Base):
    def forward(self, tokens):
        return [{"a": ("b", None)}, 3]

NOT_A_MODEL = 42

class LazyHead(_Base):
    def __init__(self):
        super().__init__()
        self.head = nn.LazyLinear(50)

    def forward(self, tokens):
        return self.head(self.embed(tokens))

def built_on_meta():
    with torch.device("meta"):
        return nn.Sequential(nn.Embedding(50, 16), nn.Linear(16, 50))

class ExitsInForward(_Base):
    def forward(self, tokens):
        import sys
        sys.exit(0)

def factory_exits():
    import sys
    sys.exit(3)

def inputs_raise(batch, length):
    raise ValueError("no data here")

class ReadsATensorValue(_Base):
    """Reads a value from a tensor while building (which a meta tensor cannot answer), then asks for 160 GB."""

    def __init__(self):
        super().__init__()
        self.temperature = torch.tensor(2.0).item()  # a meta tensor has no value to give
        self.huge = nn.Parameter(torch.zeros(400_000, 100_000))

    def forward(self, tokens):
        return self.embed(tokens)
'''

def case(name, spec, options, exit_code, outcome, needle, skip_if=None):
    """One row: the spec, options (kind, value) given as --set / --json on the command line and as
    --tfcheck-set / --tfcheck-json to pytest, the CLI exit code, the pytest outcome, what the message says."""
    marks = [pytest.mark.skipif(skip_if[0], reason=skip_if[1])] if skip_if else []
    return pytest.param(spec, options, exit_code, outcome, needle, id=name, marks=marks)


LM = "reference_model:TransformerLM"
ROOT_WRITES_ANYWHERE = (os.name != "posix" or os.geteuid() == 0, "root (or no POSIX permissions) writes anywhere")
BAD_INPUT = [
    case("does-not-import", "nosuch_module_q:Model", (), EXIT_USAGE, "load",
         ("cannot import module 'nosuch_module_q'", "give a file path")),
    case("raises-on-import", "raises_on_import.py:Model", (), EXIT_USAGE, "load",
         ("raised ZeroDivisionError: division by zero", "raises_on_import.py:2). Fix the error in that module")),
    case("missing-attribute", "zoo:NoSuchThing", (), EXIT_USAGE, "load", "has no attribute 'NoSuchThing'"),
    case("not-a-model", "strange.py:NOT_A_MODEL", (), EXIT_USAGE, "load",
         "is a int, not an nn.Module subclass, a factory returning one, or a module instance"),
    case("factory-returns-junk", "zoo:factory_returning_junk", (), EXIT_USAGE, "load",
         "returned a str, not an nn.Module"),
    case("constructor-needs-arguments", "zoo:NeedsUnknownArgument", (), EXIT_USAGE, "load",
         "needs argument(s) tokenizer_path that tfcheck cannot guess"),
    case("constructor-raises", "zoo:ConstructorRaises", (), EXIT_USAGE, "load",
         "d_model must be divisible by num_heads"),
    case("forward-inputs-unknown", "zoo:NeedsExtraInput", (), EXIT_USAGE, "load",
         "requires argument 'speaker_embedding', which tfcheck cannot build. Declare it with extra"),
    case("lazy-parameters", "strange.py:LazyHead", (), EXIT_USAGE, "load",
         ("has uninitialised (lazy) parameters: head.weight, head.bias", "Run one forward on a dummy batch")),
    case("factory-on-meta", "strange.py:built_on_meta", (), EXIT_USAGE, "load",
         ("is on the meta device", "model.to_empty(device='cpu')")),
    case("forward-calls-sys-exit", "strange.py:ExitsInForward", (), EXIT_FAIL, "failed",
         "UserExit: sys.exit(0) was called at strange.py:"),
    case("factory-calls-sys-exit", "strange.py:factory_exits", (), EXIT_USAGE, "load",
         "constructing strange.py:factory_exits stopped: sys.exit(3) was called at strange.py:"),
    case("import-calls-sys-exit", "script_exits.py:Model", (), EXIT_USAGE, "load",
         ("importing 'script_exits.py' called sys.exit(0)", 'under `if __name__ == "__main__":`')),
    case("inputs-factory-raises", LM, (("set", "inputs=strange.py:inputs_raise"),), EXIT_FAIL, "failed",
         ("the 'inputs' factory for reference_model:TransformerLM raised ValueError: no data here (strange.py:",
          "factory(batch=3, length=7)")),
    case("output-index-beyond-the-return", LM, (("set", "output=99"),), EXIT_FAIL, "failed",
         "output=99 selects an element of a returned tuple, but the model returns a tensor itself"),
    case("mask-names-no-argument", LM, (("set", "mask=nonexistent:keep"),), EXIT_USAGE, "load",
         ("mask=nonexistent:...", "names no argument of TransformerLM.forward, which takes tokens")),
    case("item-in-constructor-then-too-large", "strange.py:ReadsATensorValue", (), EXIT_USAGE, "load",
         ("would allocate", "(an estimate: the constructor read tensor values, which the count answers with 0)")),
    case("returns-none", "zoo:ReturnsNothingUseful", (), EXIT_FAIL, "failed", "returned a NoneType with no tensor"),
    case("returns-string", "strange.py:ReturnsString", (), EXIT_FAIL, "failed", "returned a str with no tensor"),
    case("returns-nested-junk", "strange.py:ReturnsNestedJunk", (), EXIT_FAIL, "failed",
         "returned a list with no tensor"),
    case("unknown-key", LM, (("set", "causality=true"),), EXIT_USAGE, "usage",
         ("unknown tfcheck declaration 'causality'", "valid keys are: kind, causal")),
    case("wrong-type", LM, (("set", "kind=gpt"),), EXIT_USAGE, "usage",
         ("bad value 'gpt' for tfcheck declaration 'kind'", "expected one of encoder, decoder")),
    case("wrong-number", LM, (("set", "budget_s=-1"),), EXIT_USAGE, "usage",
         "bad value '-1' for tfcheck declaration 'budget_s'"),
    case("fractional-int", LM, (("set", "pad_id=2.9"),), EXIT_USAGE, "usage",
         ("bad value '2.9' for tfcheck declaration 'pad_id'", "expected an integer or none")),
    case("int-overflows-torch", LM, (("set", "vocab_size=" + "9" * 26),), EXIT_USAGE, "usage",
         "for tfcheck declaration 'vocab_size'"),
    case("infinite-float", LM, (("set", "lr=1e400"),), EXIT_USAGE, "usage",
         ("bad value '1e400' for tfcheck declaration 'lr'", "expected a positive finite number")),
    case("device-index-absurd", LM, (("set", "device=cuda:99999999999999999999"),), EXIT_USAGE, "usage",
         "expected cpu, cuda, cuda:N or mps"),
    case("json-directory-missing", LM, (("json", "no/such/dir/r.json"),), EXIT_USAGE, "usage",
         "the directory no/such/dir does not exist"),
    case("json-is-a-directory", LM, (("json", "adir"),), EXIT_USAGE, "usage", "adir: that is a directory"),
    case("json-under-a-file", LM, (("json", "afile/r.json"),), EXIT_USAGE, "usage", "afile is a file, not a directory"),
    case("json-permission", LM, (("json", "locked/r.json"),), EXIT_USAGE, "usage", "permission denied",
         skip_if=ROOT_WRITES_ANYWHERE),
    case("device-unavailable", LM, (("set", "device=cuda"),), EXIT_USAGE, "load",
         "torch.cuda.is_available() is False", skip_if=(CUDA, "this machine has CUDA")),
]


def _needles(needle: str | tuple[str, ...]) -> tuple[str, ...]:
    return (needle,) if isinstance(needle, str) else needle


def _strange_files(folder: Path) -> None:
    (folder / "strange.py").write_text(STRANGE)
    (folder / "raises_on_import.py").write_text("import torch\nBROKEN = 1 / 0\n")
    (folder / "script_exits.py").write_text("import sys\nsys.exit(0)\n")
    (folder / "skips_itself.py").write_text("import pytest\npytest.importorskip('no_such_package_q')\n")
    (folder / "adir").mkdir()
    (folder / "afile").write_text("")
    (folder / "locked").mkdir()
    (folder / "locked").chmod(0o500)


@pytest.mark.parametrize("spec,options,exit_code,outcome,needle", BAD_INPUT)
def test_bad_input_on_the_command_line(spec, options, exit_code, outcome, needle, tmp_path, monkeypatch,
                                       capsys):
    _strange_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    argv = ["check", spec] + [a for kind, value in options for a in (f"--{kind}", value)]
    assert main(argv) == exit_code
    out, err = capsys.readouterr()
    if exit_code == EXIT_USAGE:
        assert err.startswith("tfcheck: error: "), err
    assert all(n in " ".join((out + err).split()) for n in _needles(needle)), out + err
    assert "Traceback" not in out + err


@pytest.mark.parametrize("spec,options,exit_code,outcome,needle", BAD_INPUT)
def test_bad_input_under_pytest(spec, options, exit_code, outcome, needle, pytester):
    _strange_files(pytester.path)
    argv = ["--tfcheck", spec, "-k", "smoke"] + [a for kind, value in options for a in (f"--tfcheck-{kind}", value)]
    result = pytester.runpytest(*argv)
    expected = {"load": pytest.ExitCode.INTERRUPTED, "usage": pytest.ExitCode.USAGE_ERROR,
                "failed": pytest.ExitCode.TESTS_FAILED}[outcome]
    assert result.ret == expected
    text = result.stdout.str() + result.stderr.str()
    if outcome == "load":
        assert f"tfcheck cannot load model {spec}" in text
    assert all(n in " ".join(text.split()) for n in _needles(needle)), text
    assert "Traceback" not in text


# ----- security: no pickles, no downloads, no files but the ones asked for --------------------------------

def test_tfcheck_neither_unpickles_nor_downloads():
    sources = {p: p.read_text("utf-8") for p in (ROOT / "tfcheck").rglob("*.py")}
    forbidden = re.compile(r"torch\.load\(|pickle\.loads?\(|from_pretrained\(|hf_hub_download|snapshot_download|"
                           r"urllib|requests\.|http\.client|socket\.")
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p, text in sources.items() for m in forbidden.finditer(text)]
    assert not found


def test_a_hugging_face_model_from_its_config_opens_no_connection(monkeypatch):
    pytest.importorskip("transformers")

    def refuse(*args, **kwargs):
        raise AssertionError(f"tfcheck tried to reach the network: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    report = tfcheck.run_checks("transformers:GPT2LMHeadModel", only=["forward.smoke", "shape.contract"])
    assert report.status is Status.PASS, str(report)


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def test_the_command_line_writes_only_the_report_it_was_asked_for(tmp_path, monkeypatch, capsys):
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir(), home.mkdir()
    for var in ("HOME", "XDG_CACHE_HOME", "HF_HOME", "TORCH_HOME"):
        monkeypatch.setenv(var, str(home))
    monkeypatch.chdir(work)
    assert main(["check", "reference_model:TransformerLM", "--json", "r.json"]) == EXIT_OK
    assert main(["check", "reference_model.broken:LMWithoutHead"]) == EXIT_FAIL
    # A leak is shrunk to a minimal example by hypothesis, which must keep no .hypothesis folder here.
    assert main(["check", "reference_model.broken:LMWithoutCausalMask", "--only", "mask.causal"]) == EXIT_FAIL
    assert _files(work) == {"r.json"} and _files(home) == set()  # no .hypothesis, no cache, no pycache


def test_the_plugin_writes_only_the_report_it_was_asked_for(pytester):
    before = _files(pytester.path)
    # Without pytest's own cache and pytest-benchmark's folder, which are theirs, not tfcheck's.
    pytester.runpytest("--tfcheck", "reference_model:TransformerLM", "-p", "no:cacheprovider", "-p", "no:benchmark",
                       "--tfcheck-json", "r.json").assert_outcomes(passed=len(applicable_checks(
                           load_subject("reference_model:TransformerLM"))))
    assert _files(pytester.path) - before == {"r.json"}


NUMPY_INIT = '''
import random
import numpy as np
import torch, torch.nn as nn

class NumpyInit(nn.Module):
    """Initialises from NumPy's and Python's global generators, as some repos do."""

    __tfcheck__ = {"kind": "decoder"}

    def __init__(self):
        super().__init__()
        self.embed, self.head = nn.Embedding(50, 16), nn.Linear(16, 50)
        with torch.no_grad():
            self.head.weight.copy_(torch.from_numpy(np.random.randn(50, 16)).float() * random.random())

    def forward(self, input_ids):
        return self.head(self.embed(input_ids))
'''


def test_construction_does_not_consume_the_callers_python_or_numpy_rng(tmp_path, monkeypatch):
    (tmp_path / "numpy_init.py").write_text(NUMPY_INIT)
    monkeypatch.chdir(tmp_path)
    random.seed(1)
    np.random.seed(1)
    expected = (random.random(), float(np.random.rand()))
    random.seed(1)
    np.random.seed(1)
    first = tfcheck.run_checks("numpy_init.py:NumpyInit", only=["train.loss_at_init"])
    assert (random.random(), float(np.random.rand())) == expected  # the caller's generators untouched
    second = tfcheck.run_checks("numpy_init.py:NumpyInit", only=["train.loss_at_init"])
    evidence = [r.result("train.loss_at_init").findings[0].evidence for r in (first.models[0], second.models[0])]
    assert evidence[0] == evidence[1]  # the same weights whatever state the generators were in


# ----- refused before any battery runs; duplicates ----------------------------------------------------------

@pytest.mark.parametrize("argv,needle", [
    (["check", LM, "nosuch_module_q:Model"], "cannot import module 'nosuch_module_q'"),  # a bad second spec
    (["check", LM, "--only", ",,"], "--only ',,' names no check"),
    (["check", LM, "--json="], "--json needs a PATH"),
    (["check", LM, "--images"], "--images draws the leak maps next to the JSON report: give --json PATH too"),
])
def test_bad_options_are_refused_before_the_first_battery_runs(argv, needle, capsys):
    assert main(argv) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == "" and needle in err  # no report printed: nothing ran


DUPLICATE_ENTRIES = """
[[tool.tfcheck.models]]
spec = "reference_model:TransformerLM"
kind = "decoder"

[[tool.tfcheck.models]]
spec = "reference_model:TransformerLM"
probe_len = 9
"""


def test_two_pyproject_entries_with_one_spec_are_a_usage_error_in_cli_and_pytest(pytester, capsys, monkeypatch):
    pytester.makefile(".toml", pyproject=DUPLICATE_ENTRIES)
    needle = "#1 and #2 both have spec = 'reference_model:TransformerLM': merge them into one entry"
    result = pytester.runpytest("--tfcheck-all")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and needle in result.stderr.str()
    monkeypatch.chdir(pytester.path)
    assert main(["check", "--all"]) == EXIT_USAGE and needle in capsys.readouterr().err


NAMED_ENTRIES = """
[[tool.tfcheck.models]]
spec = "reference_model:TransformerLM"
name = "small"
kwargs = {d_model = 16, num_heads = 2}

[[tool.tfcheck.models]]
spec = "reference_model:TransformerLM"
name = "wide"
kwargs = {d_model = 48, num_heads = 4}
"""


def test_one_spec_at_two_sizes_runs_twice_when_each_entry_is_named(pytester, capsys, monkeypatch):
    pytester.makefile(".toml", pyproject=NAMED_ENTRIES)
    result = pytester.runpytest("--tfcheck-all", "-k", "smoke", "--collect-only", "-q")
    ids = [line for line in result.stdout.lines if "tfcheck[" in line]
    assert ids == ["pyproject.toml::tfcheck[small]::forward.smoke", "pyproject.toml::tfcheck[wide]::forward.smoke"], (
        result.stdout.str())
    monkeypatch.chdir(pytester.path)
    json_path = pytester.path / "r.json"
    assert main(["check", "--all", "--only", "forward.smoke", "--json", str(json_path)]) == EXIT_OK
    capsys.readouterr()
    models = json.loads(json_path.read_text())["models"]
    assert [m["spec"] for m in models] == [f"{LM}[small]", f"{LM}[wide]"]
    widths = [next(a["value"] for a in m["assumptions"] if a["key"] == "d_model") for m in models]
    assert widths == [16, 48]  # each entry built with its own kwargs


def test_two_entries_with_one_name_are_a_usage_error(pytester, capsys, monkeypatch):
    pytester.makefile(".toml", pyproject=NAMED_ENTRIES.replace('"wide"', '"small"'))
    monkeypatch.chdir(pytester.path)
    assert main(["check", "--all"]) == EXIT_USAGE
    assert "#1 and #2 are both named 'small'" in capsys.readouterr().err


def test_a_spec_given_twice_is_checked_once(pytester):
    result = pytester.runpytest("--tfcheck", LM, "--tfcheck", LM, "-k", "smoke or contract")
    result.assert_outcomes(passed=2, deselected=len(applicable_checks(load_subject(LM))) - 2)
    assert "given more than once: checked once" in result.stdout.str() + result.stderr.str()


def test_an_error_of_tfcheck_in_forward_smoke_exits_3_with_or_without_only(monkeypatch, capsys):
    from tfcheck import battery
    from tfcheck.engine import registry
    smoke = battery.get("forward.smoke")

    def broken_smoke(ctx):
        raise RuntimeError("a bug in the smoke check")

    monkeypatch.setitem(registry._REGISTRY, "forward.smoke",
                        registry.Check(smoke.id, smoke.title, smoke.kinds, smoke.rows, broken_smoke, smoke.doc, 0))
    assert main(["check", LM]) == 3
    assert main(["check", LM, "--only", "shape.contract"]) == 3


CTRL_C_BETWEEN_MODELS = """
import os, signal, sys
import tfcheck.engine.runner as runner
from tfcheck.cli import main

real = runner.run_model
def ctrl_c_on_the_second(subject, only=None):
    if subject.spec.endswith("TransformerEncoder"):
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C once the first model is done
    return real(subject, only)

runner.run_model = ctrl_c_on_the_second
sys.exit(main(["check", "reference_model:TransformerLM", "reference_model:TransformerEncoder",
               "--only", "shape.contract", "--json", sys.argv[1]]))
"""


def test_ctrl_c_exits_130_without_a_traceback_and_keeps_the_models_already_checked(tmp_path):
    out = tmp_path / "r.json"
    done = subprocess.run([sys.executable, "-c", CTRL_C_BETWEEN_MODELS, str(out)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 130, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "tfcheck: interrupted" in done.stderr
    assert [m["spec"] for m in json.loads(out.read_text())["models"]] == ["reference_model:TransformerLM"]


def test_a_model_file_runs_once_under_tfcheck_check(tmp_path, monkeypatch, capsys):
    # Checking every spec before the first battery imported file specs, and loading them imported them again.
    (tmp_path / "once.py").write_text("print('MODULE RUN')\n" + NUMPY_INIT)
    monkeypatch.chdir(tmp_path)
    assert main(["check", "once.py:NumpyInit", "--only", "shape.contract"]) == EXIT_OK
    assert capsys.readouterr().out.count("MODULE RUN") == 1


class CachesItsTableWithALength(nn.Module):
    """Keeps a computed table in a buffer and its valid length in a plain int, as rotary-embedding-torch does
    (``cached_freqs`` and ``cached_freqs_seq_len``): restoring the buffer without the int leaves a stale length
    that makes every later forward read zeros."""

    __tfcheck__ = {"kind": "encoder"}

    def __init__(self):
        super().__init__()
        self.embed, self.head = nn.Embedding(50, 16), nn.Linear(16, 50)
        self.register_buffer("table", torch.zeros(64, 16), persistent=False)
        self.table_len = 0

    def forward(self, input_ids):
        s = input_ids.shape[1]
        if s > self.table_len:
            self.table[:s] = torch.sin(torch.arange(s).float()[:, None] / (1 + torch.arange(16).float()))
            self.table_len = s
        return self.head(self.embed(input_ids) + self.table[:s])


def test_a_cache_length_kept_beside_its_buffer_is_restored_with_it():
    model = CachesItsTableWithALength()
    tokens = torch.randint(0, 50, (2, 7))
    fresh = CachesItsTableWithALength()
    fresh.load_state_dict(model.state_dict())
    report = tfcheck.run_checks(model)
    assert model.table_len == 0 and not model.table.any()
    torch.testing.assert_close(model(tokens), fresh(tokens))
    assert report.models[0].result("batch.independence").status is Status.PASS
