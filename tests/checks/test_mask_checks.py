"""mask.causal and mask.padding, proven both ways: every named pattern caught by a broken model (the
reference gallery and other people's styles in zoo_masks), and no failure on correct models."""
from __future__ import annotations

import io
import linecache

import pytest
import torch
from rich.console import Console

import tfcheck
from helpers import nn_encoder, nn_transformer, result
from reference_model import broken
from tfcheck import Status
from tfcheck.probe import layer_capture
from tfcheck.report import leak_map
from tfcheck.ui import leakmap

CAUSAL, PADDING = "mask.causal", "mask.padding"


CORRECT = [
    ("reference_model:TransformerLM", (CAUSAL, PADDING)),
    ("reference_model:Seq2SeqTransformer", (CAUSAL, PADDING)),
    ("reference_model:TransformerEncoder", (PADDING,)),
    (nn_encoder, (PADDING,)),
    (nn_transformer, (CAUSAL, PADDING)),
    ("zoo_masks:MHAGPT", (CAUSAL,)),
    ("zoo_masks:TutorialEncoder", (PADDING,)),
    ("zoo_masks:HFLikeEncoder", (PADDING,)),
    ("zoo_masks:HFLikeBmmEncoder", (PADDING,)),
    ("zoo_masks:HFLikeCausalLM", (CAUSAL, PADDING)),
    ("zoo_masks:TorchSeq2Seq", (CAUSAL, PADDING)),
]


@pytest.mark.parametrize("model,checks", CORRECT, ids=lambda v: v if isinstance(v, str) else getattr(v, "__name__", ""))
def test_correct_models_pass(model, checks):
    report = tfcheck.run_checks(model, only=list(checks))
    for check in checks:
        res = report.models[0].result(check)
        assert res.status is Status.PASS, str(report)
        ev = res.findings[0].evidence
        assert ev["largest_forbidden_change"] <= ev["tolerance"] < ev["positive_control_change"]


@pytest.mark.parametrize("cls", ["GPT2LMHeadModel", "LlamaForCausalLM", "T5ForConditionalGeneration", "BertModel"])
def test_hugging_face_models_built_from_configs_do_not_fail(cls):
    pytest.importorskip("transformers")
    report = tfcheck.run_checks(f"transformers:{cls}", only=[CAUSAL, PADDING])
    assert report.models[0].result(PADDING).status is Status.PASS, str(report)
    if cls == "BertModel":  # an encoder by its config's model_type: causality is not checked
        assert CAUSAL not in {r.check for r in report.models[0].results}
    else:
        assert report.models[0].result(CAUSAL).status is Status.PASS, str(report)


MASK_VARIANTS = [
    (broken.LMWithoutCausalMask, "no mask at all"),
    (broken.CausalMaskOffByOne, "diagonal off by one"),
    (broken.CausalMaskInverted, "inverted"),
    (broken.CausalMaskAfterSoftmax, "normalisation leak"),
    (broken.CausalMaskFloatAdded, "float 0/1 mask added"),
    (broken.CausalMaskFillTooSmall, "fill value too small"),
    (broken.LMNormalisesOverTheSequence, "statistics over the sequence"),
    (broken.EncoderPaddingMaskInverted, "inverted convention"),
    (broken.EncoderPaddingMaskOnQueries, "mask on the query axis"),
    (broken.EncoderPaddingMaskIgnored, "mask ignored"),
    (broken.Seq2SeqCrossAttentionUnmasked, "mask not reaching cross-attention"),
]


@pytest.mark.parametrize("variant,pattern", MASK_VARIANTS, ids=lambda v: getattr(v, "__name__", v))
def test_gallery_variant_is_named_by_its_pattern(variant, pattern):
    expect = variant.__tfcheck_expect__
    res = result(variant, expect["check"])
    finding = res.findings[0]
    assert finding.status is Status.FAIL and finding.row == expect["row"], finding.message
    assert finding.evidence["pattern"] == pattern and f"({pattern})" in finding.message
    assert "X" in finding.evidence["leak_map"]


ZOO = [
    ("MHAGPTWithoutMask", CAUSAL, "no mask at all", "inference-worse-than-training"),
    ("MHAGPTKeepMaskGiven", CAUSAL, "inverted", "causal-mask-misaligned"),
    ("MHAGPTOffByOne", CAUSAL, "diagonal off by one", "causal-mask-misaligned"),
    ("MHAGPTFloatKeepMask", CAUSAL, "float 0/1 mask added", "causal-mask-ineffective"),
    ("TutorialDecoderMaskAfterSoftmax", CAUSAL, "normalisation leak", "causal-mask-ineffective"),
    ("HFLikeCausalLMCentresOverTheSequence", CAUSAL, "statistics over the sequence", "sequence-statistics-leak"),
    ("TorchSeq2SeqWithoutTgtMask", CAUSAL, "no mask at all", "inference-worse-than-training"),
    ("TutorialMaskOnQueries", PADDING, "mask on the query axis", "padding-mask-query-axis"),
    ("TutorialMaskIgnored", PADDING, "mask ignored", "padding-mask-ignored"),
    ("TutorialMaskInverted", PADDING, "inverted convention", "padding-mask-inverted"),
    ("HFLikeInvertedMask", PADDING, "inverted convention", "padding-mask-inverted"),
    ("HFLikeMaskRepeatedNotInterleaved", PADDING, "padding leak", "padding-leak"),
    ("TorchSeq2SeqWithoutMemoryMask", PADDING, "mask not reaching cross-attention", "padding-mask-cross-attention"),
]


@pytest.mark.parametrize("name,check,pattern,row", ZOO, ids=[z[0] for z in ZOO])
def test_other_styles_are_caught_and_named(name, check, pattern, row):
    finding = result(f"zoo_masks:{name}", check).findings[0]
    assert (finding.status, finding.row, finding.evidence["pattern"]) == (Status.FAIL, row, pattern), finding.message


def test_the_first_leaking_layer_and_the_op_line_are_named():
    off_by_one = result(broken.CausalMaskOffByOne, CAUSAL).findings[0]
    assert off_by_one.evidence["first_leaking_layer"] == "layers.0" == off_by_one.location.module
    tiny_fill = result(broken.CausalMaskFillTooSmall, CAUSAL).findings[0]
    assert tiny_fill.location.file.endswith("masks.py") and tiny_fill.location.line > 0
    assert "-1e-12" in tiny_fill.evidence["op"]["detail"]


def test_unknown_kind_leak_is_a_warning_that_names_the_declarations():
    warned = result("zoo_masks:HFLikeEncoder", CAUSAL).findings[0]
    assert warned.status is Status.WARN and "causal=true" in warned.message and "kind=encoder" in warned.message
    assert result("zoo_masks:HFLikeEncoder", CAUSAL, kind="decoder").status is Status.FAIL
    report = tfcheck.run_checks("zoo_masks:HFLikeEncoder", kind="encoder", only=[PADDING])
    assert CAUSAL not in {r.check for r in report.models[0].results}  # encoders are not causal


def not_applicable(spec, check, **declared) -> str | None:
    """The reason the report gives for not running ``check`` (None when it ran)."""
    report = tfcheck.run_checks(spec, only=[check], **declared)
    assert check not in {r.check for r in report.models[0].results}
    return next((a.source for a in report.models[0].assumptions if a.key == "not applicable" and a.value == check),
                None)


def test_a_decoder_declared_not_causal_is_not_applicable_with_the_reason():
    assert not_applicable("reference_model:TransformerLM", CAUSAL, causal=False).startswith("causal=false")


def test_a_model_without_padding_is_not_applicable():
    assert "declare mask=ARG:CONVENTION or pad_id" in not_applicable("zoo_masks:MHAGPT", PADDING)


def test_a_pad_id_without_a_declared_mask_warns_and_the_declaration_makes_it_a_failure():
    warned = result("zoo_masks:PadIdOnlyEncoder", PADDING).findings[0]
    assert warned.status is Status.WARN and "declare mask=internal" in warned.message
    assert result("zoo_masks:PadIdOnlyEncoder", PADDING, mask="internal").status is Status.FAIL
    assert not_applicable("zoo_masks:PadIdOnlyEncoder", PADDING, mask="none")


def test_no_positive_control_is_inconclusive_never_a_pass():
    for check in (CAUSAL, PADDING):
        finding = result("zoo_masks:ConstantOutput", check).findings[0]
        assert finding.status is Status.SKIP and finding.message.startswith("inconclusive"), finding.message


def test_cost_is_a_constant_number_of_batched_passes():
    causal = result("reference_model:TransformerLM", CAUSAL).cost
    assert (causal.forward, causal.token_passes) == (2, 8 * 7 + 17 * 16)  # lengths 7 and 16: every position + base
    padding = result("reference_model:TransformerLM", PADDING).cost
    assert (padding.forward, padding.token_passes) == (2, 9 * 10 + 6)  # 3 groups of 3 samples; 1 unpadded


@pytest.mark.parametrize("probe_len", [32, 64])
def test_long_probes_keep_a_constant_batch_and_still_catch_leaks(probe_len):
    declared = {"probe_len": probe_len, "kwargs": {"max_len": 64}}
    causal = result("reference_model:TransformerLM", CAUSAL, **declared)
    assert causal.status is Status.PASS, str(causal.findings)
    short = round(7 * probe_len / 16)  # the default lengths 7 and 16 scaled so the longer is probe_len
    rows = min(short, 16) + 1  # every position up to 16, and the base
    assert causal.cost.forward == 2 and causal.cost.token_passes == rows * short + 17 * probe_len
    for variant, pattern in [(broken.CausalMaskOffByOne, "diagonal off by one"),
                             (broken.LMWithoutCausalMask, "no mask at all"), (broken.CausalMaskInverted, "inverted")]:
        finding = result(variant, CAUSAL, **declared).findings[0]
        assert finding.status is Status.FAIL and finding.evidence["pattern"] == pattern, finding.message
        assert len(finding.evidence["leak_map_data"]["columns"]) == 16  # the map shows the perturbed positions


def test_leak_map_text_rich_json_and_image(tmp_path):
    finding = result(broken.CausalMaskOffByOne, CAUSAL).findings[0]
    lines = finding.evidence["leak_map"].splitlines()
    assert lines[1].split() == ["0123456789012345"]  # every position of length 16, last digits
    assert lines[2].split()[1].startswith("oXX.")  # q0: itself allowed, the next two leak (two layers)
    wide = result(broken.CausalMaskOffByOne, CAUSAL, probe_len=48, kwargs={"max_len": 64}).findings[0]
    header = wide.evidence["leak_map"].splitlines()[1:3]  # 16 of 48 positions: indices written downwards
    assert [line.strip() for line in header] == ["111222333444", "0369369258148147"]  # 0, 3, ..., 47
    restored = leak_map.LeakMap.from_evidence(finding.to_dict()["evidence"]["leak_map_data"])
    assert restored.text() == finding.evidence["leak_map"]
    buf = io.StringIO()
    Console(width=60, file=buf, color_system=None).print(leakmap.leak_map_table(restored))
    assert "q15" in buf.getvalue() and "X" in buf.getvalue()
    report = tfcheck.run_checks(broken.CausalMaskOffByOne, only=[CAUSAL])
    written = leakmap.save_images(report, tmp_path)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert written == []
    else:
        assert [p.name for p in written] == ["CausalMaskOffByOne-mask.causal-0.png"] and written[0].stat().st_size > 0


def test_probe_hooks_are_removed_even_when_the_model_raises():
    model = broken.CausalMaskOffByOne()
    tokens = torch.randint(1, 50, (2, 5))
    with pytest.raises(RuntimeError):
        with layer_capture.captured_layers(model, 2), layer_capture.perturbed_embedding(model, tokens, tokens > 0, 0):
            model(tokens[:, :0].float())
    assert all(not m._forward_hooks for m in model.modules())


class _EncoderIgnoringItsMaskFlat(torch.nn.Module):
    """Ignores attention_mask and embeds the flattened ids, so no nn.Embedding sees the (batch, length)
    tokens: keeping pad_id in the pads would perturb nothing, and the check must change the ids instead."""

    __tfcheck__ = {"kind": "encoder", "pad_id": 0, "vocab_size": 50}

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(50, 16)
        self.layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0)

    def forward(self, input_ids, attention_mask=None):
        b, s = input_ids.shape
        return self.layer(self.emb(input_ids.reshape(-1)).reshape(b, s, -1))


def test_a_probe_whose_pads_reach_no_embedding_changes_the_pad_ids_instead_of_passing():
    finding = result(_EncoderIgnoringItsMaskFlat, PADDING).findings[0]
    assert finding.status is Status.FAIL and finding.evidence["pattern"] == "mask ignored", finding.message


# ----- a pooled output: one vector per sample, judged per sample ------------------------------------------------

@pytest.mark.parametrize("name", ["PooledClassifier", "MeanPooledClassifier"])
def test_a_pooled_classifier_passes_per_sample_with_its_positive_control(name):
    finding = result(f"zoo_masks:{name}", PADDING).findings[0]
    assert finding.status is Status.PASS, finding.message
    assert finding.message.startswith("each sample's pooled output does not depend on padding"), finding.message
    ev = finding.evidence
    assert ev["largest_forbidden_change"] <= ev["tolerance"] < ev["positive_control_change"]
    assert ev["pooled"]["pooled_by"][0]["file"].endswith("zoo_masks.py") and "not judged" in ev["judged"]


@pytest.mark.parametrize("name,pattern,row", [
    ("PooledClassifierMaskOnQueries", "mask on the query axis", "padding-mask-query-axis"),
    ("PooledClassifierIgnoresMask", "mask ignored", "padding-mask-ignored"),
    ("MeanPooledOverThePads", "padding leak", "padding-leak"),
])
def test_a_pooled_classifier_whose_pads_reach_its_output_fails_at_the_changed_line(name, pattern, row):
    finding = result(f"zoo_masks:{name}", PADDING).findings[0]
    assert (finding.status, finding.row, finding.evidence["pattern"]) == (Status.FAIL, row, pattern), finding.message
    assert "pooled output (pooled at " in finding.message and "zoo_masks.py:" in finding.message
    assert finding.location.file.endswith("zoo_masks.py")
    assert "# the bug" in linecache.getline(finding.location.file, finding.location.line), finding.location
    assert finding.evidence["leak_map"].splitlines()[2:5] == ["sample 0 _", "sample 1 X", "sample 2 X"]


def test_a_pooled_output_that_no_real_token_moves_is_inconclusive_never_a_pass():
    finding = result("zoo_masks:PooledConstant", PADDING).findings[0]
    assert finding.status is Status.SKIP and "changed no pooled output" in finding.message, finding.message


def test_an_output_without_a_length_axis_and_no_pooling_stays_inconclusive():
    """(batch, C) with no op of the model's pooling its positions: nothing says the rows are whole samples."""
    finding = result(_FlattensPositions, PADDING).findings[0]
    assert finding.status is Status.SKIP and "not one entry per position" in finding.message, finding.message


class _FlattensPositions(torch.nn.Module):
    """Returns its states flattened per sample, (b, s * d): the length axis folded away, not pooled."""

    __tfcheck__ = {"kind": "encoder", "pad_id": 0, "vocab_size": 50}

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(50, 16)
        self.layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0)

    def forward(self, input_ids, attention_mask=None):
        pads = None if attention_mask is None else attention_mask == 0
        return self.layer(self.emb(input_ids), src_key_padding_mask=pads).flatten(1)


@pytest.mark.parametrize("cls", ["BertForSequenceClassification", "GPT2ForSequenceClassification"])
def test_hugging_face_sequence_classifiers_pass_on_their_pooled_logits(cls):
    pytest.importorskip("transformers")
    finding = result(f"transformers:{cls}", PADDING).findings[0]
    assert finding.status is Status.PASS and "pooled output" in finding.message, finding.message
