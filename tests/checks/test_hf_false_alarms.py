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
from tfcheck.model.small_sizes import hugging_face_values
from tfcheck.ui import leakmap

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
    with leakmap.perturbed_embedding(model, ids, where, seed=0) as perturbed:
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
