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
    "MistralForCausalLM": {},  # sliding-window attention
    "MistralModel": {"train.loss_at_init": NO_HEAD},
    "Gemma2ForCausalLM": {},  # logit soft-capping, alternating local and global layers
    "Gemma3ForCausalLM": {},  # q/k norms
    "Phi3ForCausalLM": {},  # fused qkv projection
    "GPTNeoXForCausalLM": {},  # partial rotary, parallel residual
    "CohereForCausalLM": {"train.overfit_batch": (
        "Cohere multiplies its logits by config.logit_scale (0.0625): in 30 steps the loss falls slowly, and the "
        "warning says how far it fell")},
    "MixtralForCausalLM": {},  # mixture of experts
    "XLMRobertaForMaskedLM": {},  # positions derived from input_ids != pad
    "MPNetForMaskedLM": {},  # relative position bias
    "BigBirdForMaskedLM": {"train.grad_flow": (
        "the masked-LM head never reads the base model's pooled output: its pooler is computed and never read, "
        "which the warning names")},
    "M2M100ForConditionalGeneration": {},  # sinusoidal positions, scaled embeddings
    "MT5ForConditionalGeneration": {
        "attention.scale": "the T5 family runs unscaled attention by design; the warning names the family",
        "train.loss_at_init": (
            "mT5 ties its head to an embedding initialised N(0, 1) and, unlike T5 (scale_decoder_outputs), does not "
            "rescale the decoder output by d_model**-0.5 (modeling_mt5.py): its logits are large at init, as the "
            "warning says")},
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
