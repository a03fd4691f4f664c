"""A fixed sample of the Hugging Face sweep (benchmarks/hf_sweep.py, docs/models/huggingface-sweep.md) run in CI:
one class per head (causal LM, masked LM, base model, seq2seq LM) for families that test_model_families.py does
not cover, each built by tfcheck from a small config, zero-config. A correct model has no failure and no error,
and every warning or skip it gets is justified here; a justification no longer needed fails too."""
from __future__ import annotations

import pytest

import tfcheck
from families import FAMILIES, NO_HEAD
from tfcheck import Status

HEADS = ("ForCausalLM", "ForMaskedLM", "Model", "ForConditionalGeneration")

#: class -> check -> why a correct model of it warns or skips there (and must)
SAMPLE: dict[str, dict[str, str]] = {
    "BartForConditionalGeneration": {},
    "BartModel": {"train.loss_at_init": NO_HEAD},
    "MBartForConditionalGeneration": {},
    "Qwen2ForCausalLM": {},
    "Qwen2Model": {"train.loss_at_init": NO_HEAD},
    "OPTForCausalLM": {},
    "OPTModel": {"train.loss_at_init": NO_HEAD},
    "ElectraForCausalLM": {},
    "ElectraForMaskedLM": {},
    "ElectraModel": {},
    "DebertaV2ForMaskedLM": {},
    "DebertaV2Model": {},
}


@pytest.fixture(scope="module")
def transformers():
    return pytest.importorskip("transformers")


@pytest.mark.parametrize("name", SAMPLE)
def test_a_sampled_class_has_no_failure_and_every_warning_is_justified(name, transformers):
    full = tfcheck.run_checks(f"transformers:{name}")
    report, rendered = full.models[0], str(full)
    assert not [r.check for r in report.results if r.status in (Status.FAIL, Status.ERROR)], rendered
    not_passed = {r.check: r for r in report.results if r.status is not Status.PASS}
    assert set(not_passed) == set(SAMPLE[name]), rendered  # each justification is still needed, too
    for result in not_passed.values():
        assert result.status in (Status.WARN, Status.SKIP), rendered
        assert not any("blocked by" in f.message for f in result.findings), rendered
    assert sum(r.status is Status.PASS for r in report.results) >= 8, rendered  # the battery ran


def test_the_sample_has_every_head_and_no_family_the_family_tests_cover(transformers):
    def model_type(class_name: str) -> str:
        return getattr(transformers, class_name).config_class.model_type

    covered = {model_type(f.make.split(":", 1)[1]) for f in FAMILIES.values()
               if isinstance(f.make, str) and f.make.startswith("transformers:")}
    assert not {name: model_type(name) for name in SAMPLE if model_type(name) in covered}
    for head in HEADS:
        assert any(name.endswith(head) for name in SAMPLE), head
