"""A Hugging Face model's small config keeps the layout its defaults describe: a hybrid model keeps every kind of
layer (an attention layer beside the linear-attention or recurrent ones: the cache's get_seq_length reads one),
and multimodal rotary sections split the small heads' rotary width, not the released one."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

import tfcheck  # noqa: E402
from tfcheck.model.build.hf_configs import hugging_face_source  # noqa: E402
from tfcheck.model.build.small_sizes import _proportional  # noqa: E402

HYBRID = ["Qwen3NextForCausalLM", "Qwen3NextModel", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM",
          "Qwen3_5MoeTextModel", "Qwen3_5TextModel", "JambaForCausalLM", "KimiLinearForCausalLM", "Lfm3ForCausalLM",
          "RecurrentGemmaForCausalLM", "Glm5NextTextModel", "BailingHybridForCausalLM",
          # a config that refuses its default pattern beside the small layer count
          "Zamba2ForCausalLM"]
MROPE = ["Qwen2VLTextModel", "Qwen2_5_VLTextModel", "Glm4vTextModel", "Glm4vMoeTextModel", "GlmOcrTextModel"]


def small_and_default(name: str):
    model = getattr(transformers, name, None)
    if model is None:
        pytest.skip(f"transformers {transformers.__version__} has no {name}")
    cls = model.config_class
    return hugging_face_source(model, cls, {}, True).make(), cls()


@pytest.mark.parametrize("name", HYBRID)
def test_a_hybrid_models_small_config_keeps_every_kind_of_layer(name):
    small, default = small_and_default(name)
    assert small.num_hidden_layers < default.num_hidden_layers
    assert len(small.layer_types) == small.num_hidden_layers
    assert set(small.layer_types) == set(default.layer_types), small.layer_types
    # the first layer's kind stays first, as in the released layout
    assert small.layer_types[0] == default.layer_types[0]


@pytest.mark.parametrize("name", MROPE)
def test_mrope_sections_split_the_small_rotary_width(name):
    small, _ = small_and_default(name)
    rope = small.rope_parameters
    head_dim = getattr(small, "head_dim", None) or small.hidden_size // small.num_attention_heads
    sections = rope["mrope_section"]
    assert sum(sections) == int(head_dim * rope.get("partial_rotary_factor", 1.0)) // 2, sections
    assert len(sections) == 3


def test_the_sections_keep_their_proportions_and_one_frequency_each_where_there_are_enough():
    assert _proportional([16, 24, 24], 64) == [16, 24, 24]
    assert _proportional([16, 24, 24], 16) == [4, 6, 6]
    assert _proportional([8, 12, 12], 4) == [1, 2, 1]
    assert sum(_proportional([8, 12, 12], 2)) == 2


def test_a_user_given_layer_pattern_is_kept():
    given = {"num_hidden_layers": 2, "layer_types": ["linear_attention", "linear_attention"]}
    source = hugging_face_source(transformers.Qwen3NextModel, transformers.Qwen3NextConfig, given, True)
    assert source.make().layer_types == ["linear_attention", "linear_attention"]


@pytest.mark.parametrize("name", ["Qwen3NextForCausalLM", "Qwen2VLTextModel"])
def test_forward_smoke_passes_on_the_small_config(name):
    result = tfcheck.run_checks(f"transformers:{name}", only=["forward.smoke"]).models[0].result("forward.smoke")
    assert result.status is tfcheck.Status.PASS, str(result)


def test_a_user_given_layer_count_is_kept_and_the_pattern_covers_it():
    source = hugging_face_source(transformers.Qwen3NextModel, transformers.Qwen3NextConfig, {"num_hidden_layers": 3},
                                 True)
    config = source.make()
    assert config.num_hidden_layers == 3 and set(config.layer_types) == {"linear_attention", "full_attention"}
