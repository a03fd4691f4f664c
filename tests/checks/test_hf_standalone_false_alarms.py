"""Classes of the Hugging Face sweep that failed forward.smoke for a reason that is not their bug (issue 15), each
beside the look-alike that must still be caught:
- a forward that raises without inputs only another model makes (Gemma 4's assistant heads: ``if inputs_embeds is
  None or shared_kv_states is None: raise``) is refused by tfcheck with the line and the declaration to give, and the
  sweep lists it as not standalone; a forward that needs one of two inputs, or raises only on some calls, still runs;
- a model whose ids are rows of audio codes (Dia's delay_pattern, one delay per codebook) is no text model;
- a class the mappings list but transformers does not export is built from its family's modeling module;
- a build the constructor refuses is reported with tfcheck's reason and declaration, not a traceback;
- Blt's forward.smoke failure is transformers' own (its cache is built from a config without a layer count)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import tfcheck
from tfcheck import Status
from tfcheck.errors import SpecError
from tfcheck.model.facts.required_inputs import required_at_runtime


class RunsOnAnotherModelsStates(nn.Module):
    """A head whose forward defaults ``states`` to None and raises without it (an assistant of a larger model)."""

    def __init__(self, vocab=50, d=16):
        super().__init__()
        self.emb, self.out = nn.Embedding(vocab, d), nn.Linear(d, vocab)

    def forward(self, input_ids, attention_mask=None, states=None):
        if states is None or attention_mask is None:
            raise ValueError("states cannot be None")
        return self.out(self.emb(input_ids) + states)


class NeedsOneOfTwoInputs(nn.Module):
    """Raises only when both the ids and the embeddings are missing, and on a cache only when it is asked for one:
    the ids tfcheck gives are enough."""

    def __init__(self, vocab=50, d=16):
        super().__init__()
        self.emb, self.out = nn.Embedding(vocab, d), nn.Linear(d, vocab)

    def forward(self, input_ids=None, inputs_embeds=None, cache=None, use_cache=False):
        if input_ids is None and inputs_embeds is None:
            raise ValueError("give input_ids or inputs_embeds")
        if use_cache:
            if cache is None:
                raise ValueError("a cache is needed")
        return self.out(self.emb(input_ids) if inputs_embeds is None else inputs_embeds)


def test_a_forward_that_raises_without_another_models_states_is_refused_with_the_line():
    needed = required_at_runtime(RunsOnAnotherModelsStates.forward)
    assert needed is not None and needed.names == ("states", "attention_mask")
    with pytest.raises(SpecError) as refused:
        tfcheck.run_checks(RunsOnAnotherModelsStates, kind="decoder")
    message = str(refused.value)
    assert "raises when states is None" in message and "attention_mask" not in message.split("(")[0]
    assert f"test_hf_standalone_false_alarms.py:{needed.line}" in message and "inputs=module:factory" in message


def test_a_forward_needing_one_of_two_inputs_still_runs():
    assert required_at_runtime(NeedsOneOfTwoInputs.forward) is None
    report = tfcheck.run_checks(NeedsOneOfTwoInputs, kind="decoder", only=["forward.smoke"]).models[0]
    assert report.result("forward.smoke").status is Status.PASS


def test_declared_inputs_are_taken_as_the_callers():
    def inputs(batch, length):
        return (torch.randint(0, 50, (batch, length)),), {"attention_mask": torch.ones(batch, length),
                                                            "states": torch.zeros(batch, length, 16)}

    report = tfcheck.run_checks(RunsOnAnotherModelsStates, kind="decoder", inputs=inputs, only=["forward.smoke"])
    assert report.models[0].result("forward.smoke").status is Status.PASS


# ----- the sweep's classification and its reasons -------------------------------------------------------

@pytest.fixture(scope="module")
def sweep():
    pytest.importorskip("transformers")
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "hf_sweep.py"
    spec = importlib.util.spec_from_file_location("hf_sweep_for_standalone", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def test_the_sweep_lists_assistant_heads_as_not_standalone(sweep):
    for name, line in (("Gemma4AssistantForCausalLM", "modeling_gemma4_assistant.py:"),
                       ("Gemma4UnifiedAssistantForCausalLM", "modeling_gemma4_unified_assistant.py:")):
        reason = sweep.non_text_reason(name)
        assert reason.startswith("not standalone") and "shared_kv_states" in reason and line in reason, reason
    assert sweep.non_text_reason("Gemma4TextModel") is None  # the model they assist runs alone


def test_a_delay_per_codebook_makes_audio_codes(sweep):
    reason = sweep.non_text_reason("DiaModel")
    assert reason.startswith("audio codes") and "delay_pattern" in reason and "= 9" in reason, reason
    assert sweep.non_text_reason("T5Model") is None  # an encoder-decoder of text tokens


def test_a_mapped_class_transformers_does_not_export_is_built_from_its_module(sweep):
    import transformers

    assert not hasattr(transformers, "VoxtralRealtimeTextModel")
    spec = sweep.model_spec("VoxtralRealtimeTextModel")
    assert spec == "transformers.models.voxtral_realtime.modeling_voxtral_realtime:VoxtralRealtimeTextModel"
    assert sweep.model_class("VoxtralRealtimeTextModel").__name__ == "VoxtralRealtimeTextModel"
    assert sweep.model_spec("GPT2LMHeadModel") == "transformers:GPT2LMHeadModel"


def test_a_refused_build_is_reported_with_what_to_declare(sweep):
    with pytest.raises(SpecError) as refused:
        tfcheck.run_checks("transformers:Lfm2MoeModel", only=["forward.smoke"])
    outcome = sweep.build_error(refused.value)
    assert outcome.result == "NOT BUILT"
    assert "the constructor raised TypeError" in outcome.reason and "modeling_lfm2_moe.py:" in outcome.reason
    assert "--set 'kwargs={\"config\": {\"layer_types\": VALUE}}'" in outcome.reason
    assert "/" not in outcome.reason.split("--set")[0], outcome.reason  # file names, no paths


def test_blt_raises_with_its_cache_on_at_any_size(sweep):
    """The sweep marks this failure as transformers' own: pinned here on a small config written out by hand."""
    transformers = pytest.importorskip("transformers")
    small = {"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 1,
             "intermediate_size": 64}
    config = transformers.BltConfig(
        vocab_size=260, patcher_config={**small, "head_dim": 8},
        encoder_config={**small, "hidden_size_global": 64}, decoder_config={**small, "hidden_size_global": 64,
                                                                             "head_dim": 8},
        global_config={**small, "hidden_size": 64, "head_dim": 16})
    model, ids = transformers.BltModel(config).eval(), torch.randint(4, 250, (2, 9))
    assert config.use_cache and not hasattr(config, "num_hidden_layers")
    with pytest.raises(AttributeError, match="num_hidden_layers"):
        model(ids)
    assert model(ids, use_cache=False).last_hidden_state.shape[:2] == (2, 9)
    assert sweep.TRUE_FINDINGS["BltModel"][0] == "forward.smoke"
