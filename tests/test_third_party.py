"""No false alarms on correct third-party models: torch.nn and Hugging Face models built from a config
(random weights, nothing downloaded)."""
from __future__ import annotations

import pytest

import tfcheck
from tfcheck import Status
from tfcheck.engine import load_subject
from helpers import nn_encoder, nn_transformer


#: Warnings a correct third-party model earns by design, each explaining itself.
EXPLAINED = {("T5ForConditionalGeneration", "attention.scale")}  # T5 folds 1/sqrt(d_k) into its init


def assert_all_pass(report, name: str = ""):
    """No failure and no unexplained warning: every check passes, or skips because it was inconclusive."""
    results = [r for r in report.models[0].results if (name, r.check) not in EXPLAINED]
    assert {r.status for r in results} <= {Status.PASS, Status.SKIP}, str(report)
    for r in results:
        if r.status is Status.SKIP:
            assert all(f.message.startswith("inconclusive") for f in r.findings), str(report)
    assert sum(r.status is Status.PASS for r in results) >= len(results) - 1, str(report)


@pytest.mark.parametrize("factory", [nn_encoder, nn_transformer], ids=lambda f: f.__name__)
def test_torch_nn_transformers_pass(factory):
    # nn.TransformerEncoder says nothing of its causality: it is bidirectional unless given a mask.
    report = tfcheck.run_checks(factory, **({"kind": "encoder"} if factory is nn_encoder else {}))
    assert_all_pass(report)
    assumed = {a.key: a for a in report.models[0].assumptions}
    assert "no nn.Embedding" in assumed["inputs"].source  # the features-in assumption is stated, not silent


HF = ["GPT2LMHeadModel", "GPT2Model", "BertModel", "BertForMaskedLM", "T5ForConditionalGeneration",
      "LlamaForCausalLM"]


def test_torch_nn_encoder_of_unknown_kind_gets_a_warning_that_says_what_to_declare():
    result = tfcheck.run_checks(nn_encoder, only=["mask.causal"]).models[0].result("mask.causal")
    assert result.status is Status.WARN and "causal=true" in result.findings[0].message


@pytest.mark.parametrize("cls", HF)
def test_hugging_face_models_built_from_small_configs_pass(cls):
    pytest.importorskip("transformers")
    report = tfcheck.run_checks(f"transformers:{cls}")
    assert_all_pass(report, cls)
    filled = next(a for a in report.models[0].assumptions if a.key == "constructor arguments")
    assert "small sizes" in str(filled.value["config"])
    model_params = sum(p.numel() for p in load_subject(f"transformers:{cls}").model.parameters())
    assert model_params < 1_000_000  # a default config of millions of parameters is never allocated


def test_hugging_face_kind_comes_from_the_config():
    pytest.importorskip("transformers")
    kinds = {cls: next(a for a in tfcheck.run_checks(f"transformers:{cls}").models[0].assumptions if a.key == "kind")
             for cls in ("T5ForConditionalGeneration", "GPT2LMHeadModel")}
    assert kinds["T5ForConditionalGeneration"].value == "seq2seq"
    assert kinds["T5ForConditionalGeneration"].source == "config.is_encoder_decoder = True"
    assert kinds["GPT2LMHeadModel"].value == "decoder"
    bert = next(a for a in tfcheck.run_checks("transformers:BertModel", only=["forward.smoke"]).models[0].assumptions
                if a.key == "kind")
    assert bert.value == "encoder" and bert.source == "config.model_type = 'bert' (model family: encoder)"


def test_a_nanogpt_style_model_is_given_targets_to_return_every_position():
    report = tfcheck.run_checks("zoo_training:NanoGPTStyle")
    assert_all_pass(report)
    targets = next(a for a in report.models[0].assumptions if a.key == "targets")
    assert "nanoGPT convention" in targets.source
