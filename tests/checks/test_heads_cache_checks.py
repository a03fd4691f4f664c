"""attention.heads and decode.cache proven both ways: every broken pattern caught with its row and the
op's module and line; no failure on the reference models, torch.nn Transformers, Hugging Face models
built from configs and correct models in other layouts."""
from __future__ import annotations

import pytest

import tfcheck
from helpers import nn_encoder, nn_transformer, result
from reference_model import broken
from tfcheck import Status
from tfcheck.probe.attention_sites import Operand

HEADS, CACHE = "attention.heads", "decode.cache"


CORRECT = ["reference_model:TransformerEncoder", "reference_model:TransformerLM", "reference_model:Seq2SeqTransformer",
           nn_encoder, nn_transformer, "zoo:TinyLM", "zoo_heads:EinsumHeadsAfterPositions", "zoo_heads:CachedRotaryLM",
           "zoo_heads:LatentBottleneck", "zoo_heads:MultiQueryEinsumLM", "zoo_heads:MergedBeforeTheProjection"]
HF = ["GPT2LMHeadModel", "BertModel", "LlamaForCausalLM", "T5ForConditionalGeneration"]


def _id(spec):
    return spec if isinstance(spec, str) else spec.__name__


@pytest.mark.parametrize("spec", CORRECT + [f"transformers:{c}" for c in HF], ids=_id)
def test_correct_models_pass_attention_heads_with_every_merge_verified(spec):
    if str(spec).startswith("transformers:"):
        pytest.importorskip("transformers")
    res = result(spec, HEADS)
    assert res.status is Status.PASS, str(res.findings)
    checked = res.findings[0].evidence["checked"]
    assert [c["length"] for c in checked] == [5, 9]  # two distinct probe lengths
    for c in checked:  # not vacuous: attention was found and each merge matched its heads
        assert c["sites"] >= 1 and c["merges_verified"] == c["sites"]
    assert any("only" in n for n in res.findings[0].evidence["notes"])  # the split was judged, not skipped


@pytest.mark.parametrize("variant,module,line_text", [
    (broken.HeadsMergedWithoutTranspose, "layers.0.self_attn", "out.view(b, s_q, self.d_model)"),
    (broken.HeadsSplitWithoutTranspose, "layers.0.self_attn", "x.view(b, self.num_heads, s, self.d_k)"),
    (broken.ScoresOverFeatures, "", "q.transpose(-2, -1) @ k"),
], ids=lambda v: getattr(v, "__name__", None))
def test_each_head_bug_is_caught_with_its_row_module_and_line(variant, module, line_text):
    res = result(variant, HEADS)
    assert res.status is Status.FAIL
    [finding] = [f for f in res.findings if f.status is Status.FAIL]
    assert finding.row == variant.__tfcheck_expect__["row"]
    assert finding.location.module == module
    with open(finding.location.file) as f:
        assert line_text in f.read().splitlines()[finding.location.line - 1]


def _line(file: str, line: int) -> str:
    with open(file) as f:
        return f.read().splitlines()[line - 1]


@pytest.mark.parametrize("variant,merge_text,projection_text", [
    (broken.HeadsMergedWithoutTranspose, "out.view(b, s_q, self.d_model)", "self.w_o(out.view"),
    ("zoo_heads:ViewedBeforeTheProjection", "# the merging line", "self.out(merged)"),
    ("zoo_heads:MultiQueryMergedWithoutTranspose", "context.reshape(b, n, h * d)", "self.out(self.merge(context))"),
], ids=_id)
def test_a_merge_without_transpose_is_named_at_its_reshape_with_the_projection_beside_it(
        variant, merge_text, projection_text):
    """The projection only consumes the mixed tensor: the line to change is the view or reshape that merged the
    heads, a line (or a helper) away from it; the projection stays in the finding as a related place."""
    res = result(variant, HEADS)
    [finding] = [f for f in res.findings if f.status is Status.FAIL]
    assert finding.row == "head-merge-mixes-positions"
    assert merge_text in _line(finding.location.file, finding.location.line)
    [projection] = finding.related
    assert "output projection" in projection.role
    assert projection_text in _line(projection.file, projection.line)


def test_a_merge_whose_reshape_cannot_be_followed_is_named_at_the_projection():
    """A learned gain between the merge and the projection is no re-layout: the walk back stops there, and the
    finding keeps the projection's line rather than guess a reshape."""
    res = result("zoo_heads:ViewedThenGained", HEADS)
    [finding] = [f for f in res.findings if f.status is Status.FAIL]
    assert finding.row == "head-merge-mixes-positions" and finding.location.module == "out"
    assert "self.out(merged)" in _line(finding.location.file, finding.location.line)
    assert finding.related == ()


def test_a_split_bug_shows_positions_spread_differently_per_head():
    finding = result(broken.HeadsSplitWithoutTranspose, HEADS).findings[0]
    per_head = finding.evidence["q"]["changed_positions_per_head"]
    assert len({tuple(h) for h in per_head}) > 1
    assert finding.evidence["q"]["largest_change_elsewhere"] > finding.evidence["q"]["tolerance"]


def test_wrong_score_axes_fail_at_both_lengths_with_the_sizes_measured():
    finding = result(broken.ScoresOverFeatures, HEADS).findings[0]
    assert finding.evidence["query_key_sizes"] == (8, 8) and finding.evidence["score_shape"] == (2, 4, 8, 8)
    assert 8 not in finding.evidence["probe_lengths"]


def test_a_convolution_before_attention_warns_instead_of_failing():
    res = result("zoo_heads:ConvBeforeAttention", HEADS)
    assert [f.status for f in res.findings] == [Status.WARN]
    assert "convolution" in res.findings[0].message and res.findings[0].row is None


def test_no_attention_is_inconclusive_not_a_pass():
    res = result("zoo_heads:PerTokenWithCache", HEADS)
    assert res.status is Status.SKIP and "no attention found" in res.findings[0].message


def test_attention_heads_costs_two_batched_passes():
    res = result("reference_model:TransformerLM", HEADS)
    assert res.cost.forward == 2 and res.cost.token_passes == 2 * 5 + 2 * 9


def test_operand_layout_merges_batch_and_heads_batch_outermost():
    import torch

    q = torch.arange(2 * 3 * 5 * 4.0).view(2, 3, 5, 4)  # (b, h, s, d)
    bmm_view = Operand(q.reshape(6, 5, 4), 0, -2).by_position(2)
    assert torch.equal(bmm_view, Operand(q, 0, -2).by_position(2))
    assert bmm_view.shape == (2, 5, 3, 4)


# ----- decode.cache -------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["zoo_heads:CachedRotaryLM"] + [f"transformers:{c}" for c in
                                                                  ("GPT2LMHeadModel", "LlamaForCausalLM",
                                                                   "T5ForConditionalGeneration")], ids=_id)
def test_cached_decoding_matches_the_full_forward_on_correct_models(spec):
    if spec.startswith("transformers:"):
        pytest.importorskip("transformers")
    res = result(spec, CACHE)
    assert res.status is Status.PASS, str(res.findings)
    evidence = res.findings[0].evidence
    assert max(evidence["largest_difference_per_position"]) <= evidence["tolerance"] \
        < evidence["positive_control_change"]
    assert res.cost.forward == 4  # one full forward, a prefill of 4 tokens, 2 steps of one token


@pytest.mark.parametrize("probe_len", [6, 48])
def test_decode_cache_passes_are_constant_and_token_passes_linear_in_length(probe_len):
    res = result("zoo_heads:CachedRotaryLM", CACHE, probe_len=probe_len, max_len=64)
    assert res.status is Status.PASS, str(res.findings)
    assert res.cost.forward == 4
    # full forward (2 x L) + prefill (2 x (L - 2)) + 2 steps x 2 samples x 1 token
    assert res.cost.token_passes == 2 * probe_len + 2 * (probe_len - 2) + 2 * 2


@pytest.mark.parametrize("variant", [broken.CachePositionsRestartAtZero, broken.CacheWithTopLeftIsCausal],
                         ids=lambda v: v.__name__)
def test_each_cache_bug_fails_from_the_first_cached_step(variant):
    res = result(variant, CACHE)
    assert res.status is Status.FAIL
    finding = res.findings[0]
    assert finding.row == "kv-cache-decode-mismatch"
    per_position, prefill = finding.evidence["largest_difference_per_position"], finding.evidence["prefill"]
    assert max(per_position[:prefill]) <= finding.evidence["tolerance"] < min(per_position[prefill:])
    assert "at one-token step 1 of 2" in finding.message


def test_top_left_is_causal_is_named_at_its_op():
    finding = result(broken.CacheWithTopLeftIsCausal, CACHE).findings[0]
    assert "is_causal=True on 1 queries and 6 keys" in finding.message
    assert finding.location.module == "layers.0.attn" and finding.location.file.endswith("heads.py")


def test_a_model_that_declares_nothing_is_causal_by_the_mask_it_builds_and_its_cache_bug_fails():
    report = tfcheck.run_checks("zoo_heads:UndeclaredCachedLM", only=[CACHE])
    assert report.models[0].results[0].status is Status.FAIL
    causal = next(a for a in report.models[0].assumptions if a.key == "causal")
    assert causal.value is True and ("forward builds a look-ahead mask itself: tril" in causal.source
                                     or "a triangle built with tril()" in causal.source), causal


def test_unknown_causality_turns_the_mismatch_into_a_warning_naming_the_declaration(monkeypatch):
    from tfcheck.model.facts import causal_source, inference
    from tfcheck.model.trial import own_causal_mask, trial

    # Causality unknown: the rules that read it from the mask-building code (the source, the trial) left out.
    monkeypatch.setattr(trial, "ADOPTERS", tuple(a for a in trial.ADOPTERS if a is not own_causal_mask.adopt))
    monkeypatch.setattr(inference, "causal_source", lambda model: causal_source.CausalSource(None, "left out"))
    res = result("zoo_heads:UndeclaredCachedLM", CACHE)
    assert res.status is Status.WARN and "declare causal=true" in res.findings[0].message
    assert result("zoo_heads:UndeclaredCachedLM", CACHE, causal=True).status is Status.FAIL


def test_decode_cache_is_not_applicable_without_a_cache_argument_and_says_why():
    report = tfcheck.run_checks("reference_model:TransformerLM", only=[CACHE])
    assert CACHE not in {r.check for r in report.models[0].results}
    noted = [a for a in report.models[0].assumptions if a.key == "not applicable" and a.value == CACHE]
    assert noted and noted[0].source.startswith("forward takes no cache argument")


@pytest.mark.parametrize("spec,reason,declared", [
    ("zoo_heads:PerTokenWithCache", "inconclusive: changing the first token did not change", {}),
    # BERT takes past_key_values but returns no cache (it is an encoder; declared a decoder here to try)
    ("transformers:BertModel", "inconclusive: the model returned no cache", {"kind": "decoder"}),
])
def test_decode_cache_skips_with_its_reason(spec, reason, declared):
    if spec.startswith("transformers:"):
        pytest.importorskip("transformers")
    res = result(spec, CACHE, **declared)
    assert res.status is Status.SKIP and res.findings[0].message.startswith(reason)


def test_decode_cache_does_not_apply_to_encoders():
    report = tfcheck.run_checks("reference_model:TransformerEncoder", only=[CACHE])
    assert CACHE not in {r.check for r in report.models[0].results}


# ----- multi-query attention written with einsum (PaLM's form) ---------------------------------------------------

def test_multi_query_einsum_attention_is_read_and_passes_the_attention_checks():
    """One key and value head for every query head ('b h i d, b j d -> b h i j'): the site is found, so heads,
    scale and softmax axis are judged, not left inconclusive."""
    report = tfcheck.run_checks("zoo_heads:MultiQueryEinsumLM", only=[HEADS, "attention.scale",
                                                                      "attention.softmax_axis"]).models[0]
    assert all(r.status is Status.PASS for r in report.results), [(r.check, r.findings[0].message)
                                                                  for r in report.results]
    assert report.result("attention.scale").findings[0].evidence["sites"][0]["d_k"] == 8


@pytest.mark.parametrize("variant,check,row", [
    ("zoo_heads:MultiQueryScaledByDModel", "attention.scale", "attention-scale-wrong"),
    ("zoo_heads:MultiQuerySoftmaxOverQueries", "attention.softmax_axis", "softmax-wrong-axis"),
    ("zoo_heads:MultiQueryMergedWithoutTranspose", HEADS, "head-merge-mixes-positions"),
])
def test_each_multi_query_bug_is_caught(variant, check, row):
    res = result(variant, check)
    assert res.status is Status.FAIL and res.findings[0].row == row, str(res.findings)
