"""False alarms found by running real implementations (issue 15), each fixed at its cause: Longformer pads its ids
to a multiple of its window before embedding them (the pads' embedding must still be perturbed, and pad ids never
changed where the model reads them); LED's first readable attention is a cross-attention (attention.heads reads
self-attention); Funnel pools the sequence (probed at lengths it accepts; its pooling named as the padding leak's
cause); Hugging Face configs built small keep their heads' switches and their families' invariants."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import tfcheck
from tfcheck import Status
from tfcheck.model.build.small_sizes import hugging_face_values
from tfcheck.probe import layer_capture

PADDING, HEADS, SHAPE = "mask.padding", "attention.heads", "shape.contract"


def _result(model, check: str, **declared):
    return tfcheck.run_checks(model, only=[check], **declared).models[0].result(check)


class PadsToAWindow(nn.Module):
    """Embeds its ids padded on the right to a multiple of 4, as Longformer does."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)

    def forward(self, ids):
        extra = -ids.shape[1] % 4
        return self.emb(nn.functional.pad(ids, (0, extra), value=0))[:, :ids.shape[1]]


def test_an_embedding_fed_the_tokens_padded_on_the_right_is_perturbed_at_the_tokens_only():
    model, ids = PadsToAWindow(), torch.randint(1, 20, (2, 5))
    where = torch.zeros(2, 5, dtype=torch.bool)
    where[0, 4] = True
    calm = model.emb(nn.functional.pad(ids, (0, 3)))
    captured: list[torch.Tensor] = []
    with layer_capture.perturbed_embedding(model, ids, where, seed=0) as perturbed:
        handle = model.emb.register_forward_hook(lambda mod, args, out: captured.append(out))  # after the perturbation
        model(ids)
        handle.remove()
    assert perturbed == ["emb"]
    moved = (captured[0] - calm).abs().amax(-1) > 0
    assert moved.tolist() == [[False] * 4 + [True] + [False] * 3, [False] * 8]


class PositionsFromPadIds(nn.Module):
    """RoBERTa's positions (counted over the ids that are not pad) with the ids embedded flattened, so no
    embedding receives the (batch, length) tokens as given; a correct padding mask."""

    def __init__(self, vocab: int = 50, d: int = 16, max_len: int = 32):
        super().__init__()
        self.tok = nn.Embedding(vocab, d, padding_idx=0)
        self.pos = nn.Embedding(max_len + 1, d, padding_idx=0)
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)
        self.out = nn.Linear(d, d)

    def forward(self, input_ids, attention_mask):
        real = input_ids.ne(0).long()
        positions = real.cumsum(1) * real
        b, s = input_ids.shape
        x = self.tok(input_ids.flatten()).view(b, s, -1) + self.pos(positions.flatten()).view(b, s, -1)
        x = x + self.attn(x, x, x, key_padding_mask=attention_mask == 0, need_weights=False)[0]
        return self.out(x)


def test_pad_ids_are_kept_where_the_model_compares_its_ids_with_pad():
    """Other ids at the pads would renumber the real tokens' positions: a change of the real tokens, which the
    check used to report as a padding leak."""
    result = _result(PositionsFromPadIds, PADDING, kind="encoder")
    assert result.status is Status.SKIP, str(result)
    finding = result.findings[0]
    assert "compares its ids with pad_id=0" in finding.message
    assert "test_hf_false_alarms.py" in finding.evidence["pad_comparison"]


class RaisesBelowFour(nn.Module):
    """Pools the sequence by 4 (an encoder that needs 4 positions), as its min_len declaration says."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(30, 16)
        self.layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0)

    def forward(self, ids):
        if ids.shape[1] < 4:
            raise ValueError("needs at least 4 positions")
        return self.layer(self.emb(ids))


def test_a_declared_min_len_is_where_the_shape_probes_start():
    assert _result(RaisesBelowFour, SHAPE, kind="encoder").status is Status.FAIL
    result = _result(RaisesBelowFour, SHAPE, kind="encoder", min_len=4)
    assert result.status is Status.PASS, str(result)
    assert "1x4" in result.findings[0].message


def test_hugging_face_heads_get_their_switch_and_routing_fits_the_experts():
    defaults = {"num_experts": 128, "num_experts_per_tok": 8, "is_decoder": False, "hidden_size": 4096}
    small = {"num_experts": 4, "hidden_size": 32}
    assert hugging_face_values("Qwen3MoeForCausalLM", defaults, small, {}) == {"num_experts_per_tok": 2,
                                                                              "is_decoder": True}
    assert hugging_face_values("RobertaModel", defaults, small, {}) == {"num_experts_per_tok": 2}
    assert hugging_face_values("ReformerModelWithLMHead", defaults, small, {"is_decoder": False}) == {
        "num_experts_per_tok": 2}
    axial = {"hidden_size": 256, "max_position_embeddings": 4096, "axial_pos_embds_dim": (64, 192),
             "axial_pos_shape": (64, 64)}
    assert hugging_face_values("ReformerModelWithLMHead", {**axial, "is_decoder": False},
                               {"hidden_size": 32, "max_position_embeddings": 64}, {}) == {
        "axial_pos_embds_dim": [16, 16], "axial_pos_shape": [8, 8], "is_decoder": True}


# ----- the Hugging Face classes themselves ---------------------------------------------------------------

def test_longformer_padding_perturbs_the_pads_embedding_and_passes():
    pytest.importorskip("transformers")
    result = _result("transformers:LongformerModel", PADDING)
    assert result.status is Status.PASS, str(result)
    assert result.findings[0].evidence["embeddings_perturbed"] == ["embeddings.word_embeddings"]


def test_led_heads_are_read_at_a_self_attention_not_the_cross_attention():
    pytest.importorskip("transformers")
    result = _result("transformers:LEDForConditionalGeneration", HEADS)
    assert result.status is Status.PASS, str(result)


def test_funnel_is_probed_at_lengths_it_accepts_and_a_decoder_still_at_length_1():
    pytest.importorskip("transformers")
    report = tfcheck.run_checks("transformers:FunnelModel", only=[SHAPE]).models[0]
    assert report.result(SHAPE).status is Status.PASS, str(report)
    assert "1x5" in report.result(SHAPE).findings[0].message
    stated = {a.key: a for a in report.assumptions}
    assert stated["min_len"].value == 5 and "config.block_sizes" in stated["min_len"].source
    gpt2 = _result("transformers:GPT2LMHeadModel", SHAPE)
    assert gpt2.status is Status.PASS and "1x1" in gpt2.findings[0].message


def test_funnel_padding_leak_is_a_warning_that_names_its_pooling():
    pytest.importorskip("transformers")
    result = _result("transformers:FunnelModel", PADDING,
                     kwargs={"config": {"block_sizes": [1, 1, 1], "block_repeats": [1, 1, 1]}})
    assert result.status is Status.WARN, str(result)
    assert "pools the sequence (config.block_sizes = [1, 1, 1]" in result.findings[0].message


# ----- small configs that keep their family's invariants (issue 15) ------------------------------------------

def _small_config(name: str):
    """The config tfcheck builds ``transformers:name`` from, zero-config: read, never a model built."""
    transformers = pytest.importorskip("transformers")
    from tfcheck.model.build.construction import plan_arguments

    return plan_arguments(getattr(transformers, name), {}, f"transformers:{name}").configs["config"].make()


def test_grouped_routing_fits_the_small_experts():
    """AXK1 routes within 4 of 8 expert groups: over 4 experts its router viewed them as 8 groups of none."""
    config = _small_config("AXK1Model")
    experts, groups = config.n_routed_experts, config.n_group
    assert experts % groups == 0 and experts // groups >= 2, (experts, groups)
    assert 1 <= config.topk_group < groups  # routed within fewer groups than there are, as by default
    assert config.num_experts_per_tok <= config.topk_group * experts // groups


def test_the_parts_of_a_head_keep_their_proportions():
    """Longcat's rotary embedding is read at head_dim, its keys' rotary part is qk_rope_head_dim: equal by default
    (64), so head_dim shrunk alone to 8 beside a 64-wide rotary part raised a size mismatch."""
    config = _small_config("LongcatFlashModel")
    assert config.head_dim == config.qk_rope_head_dim == 8
    assert (config.qk_nope_head_dim, config.v_head_dim) == (16, 16)  # 128 : 64, as by default
    assert config.qk_head_dim == config.qk_nope_head_dim + config.qk_rope_head_dim


def test_grouped_query_attention_stays_grouped():
    """MiMo-V2 has 4 kv heads for 64 heads and doubles them in its sliding layers: 4 of 4 small heads made 8 kv
    heads for 4 heads there (0 heads per group)."""
    config = _small_config("MiMoV2FlashModel")
    heads, kv = config.num_attention_heads, config.num_key_value_heads
    assert kv < heads and heads % kv == 0 and heads % (2 * kv) == 0, (heads, kv)


def test_a_width_derived_by_a_rounded_factor_is_exact():
    """xLSTM's config rounds hidden_size x qk_dim_factor up to 64 for its cache while its layers use the product:
    at d_model 32 the cache held 16-wide keys for 4-wide ones."""
    config = _small_config("xLSTMModel")
    assert config.qk_dim == int(config.hidden_size * config.qk_dim_factor)
    assert config.v_dim == int(config.hidden_size * config.v_dim_factor)
    assert config.hidden_size <= 128


def test_sections_of_the_layer_stack_sum_to_the_layer_count():
    """Dory runs 8 input, the recurrent, then 8 output layers: beside 2 layers its recurrent section was -14 and
    the output section ran the input layers again (each cache grew twice per forward)."""
    config = _small_config("DoryModel")
    sections = (config.n_input_layers, config.n_recurrent_layers, config.n_output_layers)
    assert all(s >= 1 for s in sections) and sum(sections) == config.num_hidden_layers, sections
    assert len(config.layer_types) == config.num_hidden_layers


def test_state_space_heads_times_their_width_is_expand_times_d_model():
    """Bamba's 128 Mamba heads of 64 = 2 x 4096; beside d_model 32 the config refused 128 heads for 64 channels,
    and Mamba-2's 4 heads of 8 (the attention table's values) for 2 x 32."""
    bamba = _small_config("BambaModel")
    assert bamba.mamba_n_heads * bamba.mamba_d_head == bamba.mamba_expand * bamba.hidden_size
    mamba2 = _small_config("Mamba2Model")
    assert mamba2.num_heads * mamba2.head_dim == mamba2.expand * mamba2.hidden_size
    assert mamba2.num_heads % mamba2.n_groups == 0


def test_a_kind_of_layer_placed_periodically_appears_twice():
    """Zamba ties every hybrid layer's shared block to the first one's, and refused a stack with one hybrid
    layer (its _tied_weights_keys found nothing to tie)."""
    transformers = pytest.importorskip("transformers")
    config = _small_config("ZambaModel")
    assert config.layers_block_type.count("hybrid") >= 2
    assert len(config.layers_block_type) == config.num_hidden_layers
    transformers.ZambaModel(config)  # builds


def test_mrope_sections_split_the_rotary_part_even_where_the_config_refused_them():
    """HYV4-VL's sections split its keys' rotary part (qk_rope_head_dim, shrunk with the head); Cosmos3-Edge's
    default sections refused the small head_dim, and were then never scaled."""
    hy = _small_config("HYV4VLTextModel")
    assert hy.qk_rope_head_dim <= 8
    assert sum(hy.rope_parameters["mrope_section"]) == hy.qk_rope_head_dim // 2
    cosmos = _small_config("Cosmos3EdgeTextModel")
    assert sum(cosmos.rope_parameters["mrope_section"]) == cosmos.head_dim // 2


def test_pass_through_experts_and_their_routing_are_small_too():
    """Longcat's 256 pass-through experts, 2048-wide experts and top-12 routing: 74 M parameters and 15 s a
    forward beside d_model 32."""
    config = _small_config("LongcatFlashModel")
    assert config.zero_expert_num <= 4 and config.expert_ffn_hidden_size == 64
    assert config.moe_topk <= config.n_routed_experts


def test_the_sweep_skips_classes_that_need_inputs_beside_the_tokens():
    """A box per token, codebook rows, a language: not text-only classes in the sweep's sense."""
    pytest.importorskip("transformers")
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "hf_sweep.py"
    spec = importlib.util.spec_from_file_location("hf_sweep_for_false_alarms", path)
    sweep = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = sweep  # its dataclasses look their module up while being defined
    spec.loader.exec_module(sweep)
    assert "bbox" in sweep.non_text_reason("BrosModel")
    assert "num_codebooks = 4" in sweep.non_text_reason("MusicgenForCausalLM")
    assert "lang_ids" in sweep.non_text_reason("XmodForMaskedLM")
    assert sweep.non_text_reason("GPT2LMHeadModel") is None and sweep.non_text_reason("BertModel") is None


class QuantisedEmbeddingLM(nn.Module):
    """Token ids embedded by a module of its own (I-BERT's QuantEmbedding), no nn.Embedding anywhere; the library
    declares its input with main_input_name, as every Hugging Face model does."""

    main_input_name = "input_ids"

    def __init__(self, vocab_size=40, d_model=8):
        super().__init__()
        self.table = nn.Parameter(torch.randn(vocab_size, d_model))
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, input_ids):
        return self.head(nn.functional.embedding(input_ids, self.table))


def test_a_model_declaring_token_ids_its_input_gets_ids_even_without_an_nn_embedding():
    smoke = _result(QuantisedEmbeddingLM, "forward.smoke", vocab_size=40, d_model=8)
    assert smoke.status is Status.PASS, str(smoke.findings)
    pytest.importorskip("transformers")
    assert _result("transformers:IBertForMaskedLM", "forward.smoke").status is Status.PASS


def test_a_vocabulary_padded_for_speed_shrinks_with_its_true_size():
    from tfcheck.model.build.small_sizes import plan, quantity

    assert quantity("unpadded_vocab_size") == quantity("vocab_size") == "VOCAB_SIZE"
    assert plan({"vocab_size": 201024, "unpadded_vocab_size": 200058},
                ["vocab_size", "unpadded_vocab_size"]) == {"vocab_size": 101, "unpadded_vocab_size": 101}
