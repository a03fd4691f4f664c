"""batch.independence, position.sensitivity and cross.dependence, proven both ways: every named pattern is
caught (reference variants in reference_model.broken.flow, other styles in tests/support/zoo_flow.py), and correct
models — the reference models, torch.nn used as documented, Hugging Face models built from configs — raise
no failure."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import tfcheck
import zoo_flow
import zoo_masks
from helpers import nn_encoder, nn_transformer, result
from reference_model.broken import flow as broken
from tfcheck import Status

CHECKS = ("batch.independence", "position.sensitivity", "cross.dependence")


def failure(spec, check, **declared):
    res = result(spec, check, **declared)
    failed = [f for f in res.findings if f.status is Status.FAIL]
    assert failed, str(res.findings)
    return failed[0]


@pytest.mark.parametrize("spec,check,row,needle", [
    ("zoo_flow:MultiheadAttentionBatchFirstMismatch", "batch.independence", "sample-depends-on-batch",
     "batch_first mismatch: nn.MultiheadAttention 'attn'"),
    ("zoo_flow:HFStyleEncoderCentresOverTheBatch", "batch.independence", "sample-depends-on-batch",
     "statistics over the batch: mean reduces over dim 0"),
    ("zoo_flow:GPTPositionsFromBatchSize", "batch.independence", "sample-depends-on-batch", "arange(x.size(0))"),
    ("zoo_flow:GPTPositionsFromBatchSize", "position.sensitivity", "position-table-wrong-axis", "positions repeat"),
    ("zoo_flow:TutorialEncoderWithoutPositions", "position.sensitivity", "no-position-signal",
     "only permuted the outputs"),
    ("zoo_flow:HFStyleSeq2SeqCrossAttendsToItself", "cross.dependence", "cross-attention-ignores-source",
     "'decoder.0' (_Decoder"),
    ("zoo_flow:TokenTransformerWithoutMemoryMask", "cross.dependence", "source-padding-reaches-cross-attention",
     "the leak is in cross-attention: 'transformer.decoder.layers.0.multihead_attn'"),
])
def test_patterns_in_other_styles_are_caught_and_named(spec, check, row, needle):
    found = failure(spec, check)
    assert found.row == row and needle in found.message, found.message
    assert found.evidence["tolerance"] > 0


@pytest.mark.parametrize("variant,needle,module", [
    (broken.EncoderMergesBatchWithReshape, "a reshape/view or index moves values across the batch axis",
     "layers.0.self_attn"),
    (broken.LMNormalisesOverTheBatch, "statistics over the batch", "layers.0.norm1"),
])
def test_batch_mixing_points_at_the_first_op_where_the_sample_changes(variant, needle, module):
    found = failure(variant, "batch.independence")
    assert needle in found.message and found.location.module == module
    assert found.location.file.endswith("flow.py") and found.location.line > 0
    assert found.evidence["sample_0_change_when_neighbours_replaced"] > found.evidence["tolerance"]


def test_a_table_indexed_by_the_batch_shows_as_a_dependence_on_the_batch_index():
    found = failure(broken.EncoderPositionTableIndexedByBatch, "batch.independence")
    assert found.evidence["sample_0_change_when_neighbours_replaced"] <= found.evidence["tolerance"]
    assert "index in the batch" in found.message and found.location.module == "pos"


def test_the_layer_whose_cross_attention_ignores_the_source_is_named_and_the_others_are_not():
    found = failure(broken.Seq2SeqCrossAttentionOnDecoderStates, "cross.dependence")
    per_module = found.evidence["per_module_change_from_the_source_alone"]
    assert per_module["decoder_layers.1"]["change"] <= per_module["decoder_layers.1"]["tolerance"]
    assert per_module["decoder_layers.0.cross_attn"]["change"] > per_module["decoder_layers.0.cross_attn"]["tolerance"]
    assert found.location.module == "decoder_layers.1"
    # From outside nothing looks wrong: the output still depends on the source, through layer 0.
    assert found.evidence["decoder_output_change_when_the_source_changes"] > found.evidence["tolerance"]


def test_padding_that_reaches_cross_attention_is_told_apart_from_an_encoder_leak():
    found = failure(broken.Seq2SeqSourcePaddingReachesCrossAttention, "cross.dependence")
    assert found.evidence["memory_change_at_real_positions"] <= found.evidence["tolerance"]
    assert "the leak is in cross-attention" in found.message


@pytest.mark.parametrize("spec", ["zoo_flow:LMWithoutPositions"])
def test_a_decoder_without_positions_is_a_warning_that_explains_why(spec):
    res = result(spec, "position.sensitivity")
    assert res.status is Status.WARN, str(res.findings)
    assert "NoPE" in res.findings[0].message and res.findings[0].row == "no-position-signal"
    assert res.findings[0].evidence["positive_control_row_spread"] > res.findings[0].evidence["tolerance"]


def test_unknown_kind_without_positions_warns_and_names_the_declaration_that_decides():
    res = result("zoo:NeedsArguments", "position.sensitivity")
    assert res.status is Status.WARN and "declare kind=encoder" in res.findings[0].message
    assert result("zoo:NeedsArguments", "position.sensitivity", kind="encoder").status is Status.FAIL


@pytest.mark.parametrize("spec", ["reference_model:TransformerEncoder", "reference_model:TransformerLM",
                                  "reference_model:Seq2SeqTransformer", nn_transformer, nn_encoder,
                                  "transformers:GPT2LMHeadModel", "transformers:BertModel",
                                  "transformers:LlamaForCausalLM", "transformers:T5ForConditionalGeneration"],
                         ids=lambda s: s if isinstance(s, str) else s.__name__)
def test_correct_models_raise_no_failure(spec):
    if isinstance(spec, str) and spec.startswith("transformers:"):
        pytest.importorskip("transformers")
    report = tfcheck.run_checks(spec, only=list(CHECKS))
    findings = list(report.models[0].findings())
    features = not isinstance(spec, str)
    for f in findings:
        # nn.Transformer* take features: their positions are the caller's to add, which is a skip with a reason.
        allowed = {Status.PASS, Status.SKIP} if features and f.check == "position.sensitivity" else {Status.PASS}
        assert f.status in allowed, f"{f.check}: {f.message}"
        if f.status is Status.SKIP:
            assert "the caller's to add" in f.message


def test_the_position_signal_is_read_at_the_first_attention_for_rotary_and_relative_schemes():
    pytest.importorskip("transformers")
    llama = result("transformers:LlamaForCausalLM", "position.sensitivity").findings[0]
    assert llama.location.module == "model.layers.0.self_attn"  # rotary lives in q and k
    t5 = result("transformers:T5ForConditionalGeneration", "position.sensitivity").findings
    decoder_side = next(f for f in t5 if "decoder self-attention" in f.message)
    assert decoder_side.location.module == "decoder.block.0.layer.0.SelfAttention"  # relative bias in the scores


def test_costs_are_a_small_constant_number_of_passes():
    report = tfcheck.run_checks("reference_model:TransformerLM", only=["forward.smoke", *CHECKS[:2]])
    costs = {r.check: r.cost for r in report.models[0].results}
    assert costs["batch.independence"].forward == 2 and costs["batch.independence"].reused == 1
    assert costs["batch.independence"].token_passes == 3 * 7 + 2 * 7
    assert costs["position.sensitivity"].forward == 1 and costs["position.sensitivity"].token_passes == 21
    seq2seq = tfcheck.run_checks("reference_model:Seq2SeqTransformer", only=["cross.dependence"])
    assert seq2seq.models[0].result("cross.dependence").cost.forward == 4


# ----- zero-initialised output projections ------------------------------------------------------------------

class ZeroInitDecoder(torch.nn.Module):
    """A block whose output projection starts at zero (a modern recipe): at init it returns its input."""

    def __init__(self, causal: bool = True):
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(101, 32), torch.nn.Linear(32, 101)
        self.qkv, self.proj = torch.nn.Linear(32, 96), torch.nn.Linear(32, 32)
        self.causal = causal
        torch.nn.init.zeros_(self.proj.weight)

    def forward(self, idx):
        x = self.embed(idx)
        b, t, _ = x.shape
        q, k, v = (z.view(b, t, 4, 8).transpose(1, 2) for z in self.qkv(x).chunk(3, dim=-1))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.head(x + self.proj(y.transpose(1, 2).reshape(b, t, 32)))


def test_zero_initialised_projections_are_redrawn_for_the_flow_checks_only_and_put_back():
    model = ZeroInitDecoder()
    report = tfcheck.run_checks(model).models[0]
    redrawn = next(a for a in report.assumptions if a.key == "zero weights re-drawn")
    assert redrawn.value == "1: proj.weight" and "training checks keep your init" in redrawn.source
    assert report.result("mask.causal").status is Status.PASS, report  # measured, not inconclusive
    assert not bool(model.proj.weight.any())  # the user's init, put back
    assert tfcheck.run_checks(ZeroInitLeak, only=["mask.causal"]).models[0].result("mask.causal").status \
        is Status.FAIL


class ZeroInitLeak(ZeroInitDecoder):
    """The same block with its causal mask gone (is_causal still True in the parent's source)."""

    def forward(self, idx):
        x = self.embed(idx)
        b, t, _ = x.shape
        q, k, v = (z.view(b, t, 4, 8).transpose(1, 2) for z in self.qkv(x).chunk(3, dim=-1))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.head(x + self.proj(y.transpose(1, 2).reshape(b, t, 32)))


def test_a_model_without_zero_weights_is_measured_as_it_is():
    report = tfcheck.run_checks(ZeroInitLeak, only=["mask.causal"]).models[0]
    assert any(a.key == "zero weights re-drawn" for a in report.assumptions)
    plain = tfcheck.run_checks("reference_model:TransformerLM", only=["mask.causal"]).models[0]
    assert not any(a.key == "zero weights re-drawn" for a in plain.assumptions)


# ----- a pooled output, measured on the states it is made from; a table read with no axis of the length -----------

class _TokensAndPositions(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(zoo_masks.VOCAB, zoo_masks.D), nn.Embedding(16, zoo_masks.D)

    def forward(self, ids):
        return self.tokens(ids) + self.positions(torch.arange(ids.shape[1], device=ids.device))


class PooledWithPositions(zoo_masks.PooledClassifier):
    """Correct: the [CLS] classifier with a learned position table added to its token embedding."""

    def __init__(self):
        super().__init__()
        self.embeddings = _TokensAndPositions()


class FoldsPositions(PooledWithPositions):
    """(batch, s * d): the length folded into the features, no op pools it, so no per-position states are found."""

    def forward(self, input_ids, attention_mask=None):
        return zoo_masks.HFLikeEncoder.forward(self, input_ids, attention_mask).flatten(1)


class OneRowForEveryPosition(zoo_flow.TutorialEncoderWithoutPositions):
    """Bug: a learned position table read at one index (the length), the same row added at every position."""

    def __init__(self):
        super().__init__()
        self.positions = nn.Embedding(zoo_flow.MAX_LEN, zoo_flow.D)

    def forward(self, x, mask=None):
        row = self.positions(torch.tensor(x.size(1) - 1, device=x.device))  # BUG: one row, not arange(length)
        h = self.embedding(x) * math.sqrt(zoo_flow.D) + row
        keep = None if mask is None else mask.bool()[:, None, None, :]
        for layer in self.layers:
            h = layer(h, keep)
        return h


def test_a_pooled_output_is_measured_on_the_states_it_is_made_from_both_ways():
    passed = result(PooledWithPositions, "position.sensitivity", kind="encoder").findings[0]
    assert passed.status is Status.PASS and "measured on the output of 'layer.1'" in passed.message, passed.message
    assert passed.evidence["pooled_output"]["tensor"] == "the output of 'layer.1'"
    found = failure("zoo_masks:PooledClassifier", "position.sensitivity", kind="encoder")  # no positions at all
    assert found.row == "no-position-signal" and "only permuted the output of 'layer.1'" in found.message
    assert found.evidence["positive_control_change"] > 10 * found.evidence["tolerance"]


def test_an_output_with_no_pooled_states_behind_it_stays_inconclusive():
    skipped = result(FoldsPositions, "position.sensitivity", kind="encoder").findings[0]
    assert skipped.status is Status.SKIP and "no per-position states were found" in skipped.message


def test_a_position_table_read_with_no_axis_of_the_length_is_named_at_its_read():
    found = failure(OneRowForEveryPosition, "position.sensitivity")
    line = next(i for i, code in enumerate(Path(__file__).read_text().splitlines(), 1) if "# BUG: one row" in code)
    assert found.location.line == line and found.location.file.endswith("test_flow_checks.py"), found.location
    assert "the table 'positions.weight'" in found.message and found.evidence["table_read"]["result_shape"] == (32,)
