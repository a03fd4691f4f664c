"""The memory budget: a declared probe_len whose probes would not fit is scaled down, deterministically (from
the machine's limits or a declared memory_budget, never the memory free now), and the report says so."""
from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

import tfcheck
from tfcheck.engine.memory import ASSUMPTION, ModelShape, fit_probes
from tfcheck.engine.runner import load_subject
from tfcheck.errors import DeclarationError
from tfcheck.model.build.memory_limits import Limit, memory_limit
from tfcheck.model.facts import declarations as decl

ROOT = Path(__file__).resolve().parents[2]


def _subject(**declared):
    strong = {k: decl.parse_value(k, v, "test") for k, v in declared.items()}
    return load_subject("reference_model:TransformerLM", strong)


def test_a_probe_len_that_fits_is_kept():
    subject = _subject(probe_len=32)
    fit_probes(subject, Limit(8 << 30, "test limit"))
    assert subject.facts.probe_len == 32
    assert not any(a.key == ASSUMPTION for a in subject.assumptions)


def test_a_probe_len_that_does_not_fit_is_scaled_to_the_longest_that_does_and_said():
    subject = _subject(probe_len=4096)
    fit_probes(subject, Limit(1 << 30, "test limit"))
    fitted = subject.facts.probe_len
    assert 8 <= fitted < 4096 and fitted % 8 == 0
    shape = ModelShape(32, 2, 4, 101)  # the reference model: d_model 32, 2 layers, 4 heads
    budget = (1 << 30) // 4
    assert shape.peak(17, fitted) <= budget < shape.peak(17, fitted + 8)
    said = next(a for a in subject.assumptions if a.key == ASSUMPTION)
    assert said.value == fitted and "probe_len=4096 (test) scaled down" in said.source and "test limit" in said.source


def test_a_declared_memory_budget_decides():
    subject = _subject(probe_len=4096, memory_budget="1GiB")
    fit_probes(subject)
    assert subject.facts.probe_len < 4096
    assert "memory_budget (test)" in next(a for a in subject.assumptions if a.key == ASSUMPTION).source


def test_the_memory_budget_declaration_reads_units_and_refuses_nonsense():
    assert decl.parse_value("memory_budget", "512MiB", "t").value == 512 << 20
    assert decl.parse_value("memory_budget", "8GB", "t").value == 8 * 10**9
    for bad in ("-1GiB", "lots", "0", True):
        with pytest.raises(DeclarationError):
            decl.parse_value("memory_budget", bad, "t")


def test_the_limit_is_the_address_space_limit_when_that_is_smallest():
    # 3 GiB of address space less the process's own 2: a 1 GiB limit, below any machine's physical memory.
    code = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, resource.RLIM_INFINITY)); "
            "from tfcheck.model.build.memory_limits import memory_limit; l = memory_limit(); print(l.bytes, l.source)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split(" ", 1)
    assert memory_limit().bytes > 1 << 30
    assert int(out[0]) == 1 << 30 and "RLIMIT_AS" in out[1]


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, resource.RLIM_INFINITY))


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS is enforced on Linux")
def test_a_4096_probe_under_a_4_gib_address_space_comes_back_with_the_scaled_probe_named(tmp_path):
    """Without the budget this run allocated 17 rows of 4096² attention scores per layer and died."""
    out = tmp_path / "report.json"
    run = subprocess.run(
        [sys.executable, "-m", "tfcheck", "check", "reference_model:TransformerLM", "--set",
         'kwargs={"max_len": 4096}', "--set", "probe_len=4096", "--set", "budget_s=60", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, preexec_fn=_limit_address_space)
    assert run.returncode in (0, 1), run.stdout[-2000:] + run.stderr[-2000:]
    model = json.loads(out.read_text())["models"][0]
    scaled = next(a for a in model["assumptions"] if a["key"] == ASSUMPTION)
    assert scaled["value"] < 4096 and "RLIMIT_AS" in scaled["source"]
    statuses = {r["check"]: r["status"] for r in model["checks"]}
    assert "error" not in statuses.values(), statuses
    assert statuses["mask.causal"] == "pass", statuses


def test_a_training_copy_that_would_not_fit_is_inconclusive_and_says_why():
    """Training checks train a deep copy with gradients and Adam's two moments: four times the parameters."""
    report = tfcheck.run_checks("reference_model:TransformerLM", memory_budget="64KiB",
                                only=["train.overfit_batch", "train.target_leak"])
    for result in report.models[0].results:
        finding = result.findings[0]
        assert finding.status is tfcheck.Status.SKIP, finding
        assert "training a copy needs about" in finding.message and "memory_budget (run_checks() argument)" in \
            finding.message, finding.message


def test_a_training_copy_that_fits_trains():
    report = tfcheck.run_checks("reference_model:TransformerLM", memory_budget="8GiB", only=["train.overfit_batch"])
    assert report.models[0].results[0].status is tfcheck.Status.PASS


def test_the_default_probes_are_scaled_down_too_when_even_they_do_not_fit():
    subject = _subject()
    fit_probes(subject, Limit(8 << 20, "test limit"))  # 2 MiB for a probe of 17 rows: not 64 positions
    said = next(a for a in subject.assumptions if a.key == ASSUMPTION)
    assert subject.facts.probe_len is None and subject.facts.memory_cap == said.value < 64
    assert subject.length_cap() == said.value and subject.probe_length() == min(7, said.value)
    assert said.source.startswith("the default probes (up to 64 positions) scaled down")


def test_a_declared_cuda_device_is_limited_by_its_total_memory_not_its_free_memory(monkeypatch):
    import torch

    from tfcheck.model.facts.memory_budget import limit_for

    subject = _subject()
    subject.facts.device = "cuda:0"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (3 << 30, 80 << 30))  # (free, total)
    limit = limit_for(subject)
    assert (limit.bytes, limit.source) == (80 << 30, "cuda:0 memory")
