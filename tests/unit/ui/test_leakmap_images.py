"""Leak-map images: one file per model and check (a second failing model adds its own, never replaces the
first's), drawn without touching the user's matplotlib state (backend, rcParams, pyplot's figures)."""
from __future__ import annotations

import sys

import pytest

from tfcheck.report.findings import Finding
from tfcheck.report.leak_map import LeakMap, evidence_of
from tfcheck.report.report import CheckResult, ModelReport, Report
from tfcheck.report.status import Status
from tfcheck.ui.leakmap import file_slug, save_images


def leaking(spec: str) -> ModelReport:
    leak_map = LeakMap("causal", "output position x perturbed position", ["q0", "q1"], ["k0", "k1"],
                       [[1.0, 0.5], [1.0, 1.0]], [["allowed", "forbidden"], ["allowed", "allowed"]], 1e-4)
    finding = Finding("mask.causal", Status.FAIL, "q0 depends on k1", evidence=evidence_of(leak_map))
    return ModelReport(spec, results=[CheckResult("mask.causal", "causal mask", [finding])])


@pytest.mark.parametrize("spec,slug", [
    ("reference_model.broken:CausalMaskOffByOne", "reference_model.broken-CausalMaskOffByOne"),
    ("models/my model.py:GPT", "models-my-model.py-GPT"),
    ("C:\\work\\gpt.py:GPT[small]", "C-work-gpt.py-GPT-small"),
    (":::", "model"),
])
def test_a_spec_becomes_a_file_name_of_safe_characters(spec, slug):
    assert file_slug(spec) == slug


def test_a_long_spec_keeps_the_end_that_names_the_model():
    slug = file_slug("/" + "deep/" * 60 + "model.py:TheModel")
    assert len(slug) <= 120 and slug.endswith("model.py-TheModel")


def test_two_failing_models_write_two_images_named_by_model_and_check(tmp_path):
    pytest.importorskip("matplotlib")
    report = Report([leaking("zoo:First"), leaking("zoo:Second"), leaking("zoo/First")])  # the last slugs alike
    written = save_images(report, tmp_path)
    assert [p.name for p in written] == ["zoo-First-mask.causal-0.png", "zoo-Second-mask.causal-0.png",
                                         "zoo-First-mask.causal-1.png"]
    assert all(p.stat().st_size > 0 for p in written) and len(set(written)) == 3


def test_saving_leaves_the_backend_rcparams_and_pyplot_alone(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    before_backend = matplotlib.get_backend()
    pyplot_loaded = "matplotlib.pyplot" in sys.modules
    matplotlib.use("svg")  # a backend of the user's that is not the one the images are drawn with
    try:
        params = dict(matplotlib.rcParams)
        assert save_images(Report([leaking("zoo:First")]), tmp_path)
        assert matplotlib.get_backend() == "svg"
        assert dict(matplotlib.rcParams) == params
        assert pyplot_loaded or "matplotlib.pyplot" not in sys.modules
    finally:
        matplotlib.use(before_backend)
