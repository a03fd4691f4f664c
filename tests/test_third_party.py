"""No false alarms on correct third-party models: torch.nn and Hugging Face models built from a config
(random weights, nothing downloaded)."""
from __future__ import annotations

import pytest
import torch.nn as nn

import tfcheck
from tfcheck import Status
from tfcheck.engine import load_subject


def nn_encoder():
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2)


def nn_transformer():
    return nn.Transformer(d_model=32, nhead=4, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=64,
                          batch_first=True)


def assert_all_pass(report):
    assert {r.status for r in report.models[0].results} == {Status.PASS}, str(report)


@pytest.mark.parametrize("factory", [nn_encoder, nn_transformer], ids=lambda f: f.__name__)
def test_torch_nn_transformers_pass(factory):
    report = tfcheck.run_checks(factory)
    assert_all_pass(report)
    assumed = {a.key: a for a in report.models[0].assumptions}
    assert "no nn.Embedding" in assumed["inputs"].source  # the features-in assumption is stated, not silent


HF = ["GPT2LMHeadModel", "GPT2Model", "BertModel", "BertForMaskedLM", "T5ForConditionalGeneration",
      "LlamaForCausalLM"]


@pytest.mark.parametrize("cls", HF)
def test_hugging_face_models_built_from_small_configs_pass(cls):
    pytest.importorskip("transformers")
    report = tfcheck.run_checks(f"transformers:{cls}")
    assert_all_pass(report)
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
