"""mask.padding and cross.dependence name the line to change (issue 16): the first layer where pads reach real
outputs and the line where its attention applies, or fails to get, the padding mask; the cross-attention call that
passes the wrong keys and values. Every expected location is a line the model's source marks ``# tfcheck: defect``
(the gallery's convention, read by tests/integration/test_locations.py's ``defect_lines``), never a number."""
from __future__ import annotations

import linecache
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from helpers import result
from locations import defect_lines
from reference_model import broken
from reference_model.attention import MultiHeadAttention
from reference_model.layers import DecoderLayer, EncoderLayer
from reference_model.models import Seq2SeqTransformer, TransformerEncoder
from snapshot import REPO
from tfcheck import Status
from tfcheck.probe.padding_trace import PaddingTrace, blame

PADDING, CROSS = "mask.padding", "cross.dependence"


def problem(model, check: str):
    """The first fail/warn finding of ``check`` on ``model`` (``result`` asserts every problem is located)."""
    found = [f for f in result(model, check).findings if f.status in (Status.FAIL, Status.WARN)]
    assert found, f"{check} found no problem in {model}"
    return found[0]


def pointed(finding) -> tuple[str | None, int | None]:
    file = finding.location.file
    return (str(Path(file).resolve().relative_to(REPO)) if file else None), finding.location.line


def source_of(related) -> str:
    return linecache.getline(related.file, related.line)


# ----- the gallery ----------------------------------------------------------------------------------

GALLERY = [broken.EncoderPaddingMaskInverted, broken.EncoderPaddingMaskOnQueries, broken.EncoderPaddingMaskIgnored,
           broken.Seq2SeqCrossAttentionUnmasked, broken.Seq2SeqCrossAttentionOnDecoderStates,
           broken.Seq2SeqSourcePaddingReachesCrossAttention]


@pytest.mark.parametrize("variant", GALLERY, ids=lambda v: v.__name__)
def test_the_expected_finding_points_at_the_marked_defect_line(variant):
    expect = variant.__tfcheck_expect__
    finding = problem(variant, expect["check"])
    assert finding.row == expect["row"]
    assert pointed(finding) in defect_lines(variant), (pointed(finding), defect_lines(variant))


@pytest.mark.parametrize("variant", [broken.EncoderPaddingMaskInverted, broken.EncoderPaddingMaskOnQueries,
                                     broken.EncoderPaddingMaskIgnored, broken.Seq2SeqCrossAttentionUnmasked],
                         ids=lambda v: v.__name__)
def test_the_module_is_the_first_layer_where_pads_reach_real_outputs(variant):
    finding = problem(variant, PADDING)
    layer = finding.evidence["first_leaking_layer"]
    assert layer and finding.location.module == layer
    assert layer in dict(variant().named_modules())


def test_a_mask_built_wrong_points_where_it_is_built_and_names_where_it_is_applied():
    finding = problem(broken.EncoderPaddingMaskInverted, PADDING)
    roles = {r.role: r for r in finding.related}
    assert "masked_fill" in source_of(roles["mask applied"])
    assert "@" in source_of(roles["scores computed"])


def test_collateral_padding_failures_name_the_first_leaking_layer_and_a_line():
    """A padding failure whose cause lies elsewhere (here the softmax over the wrong axis) still says where."""
    finding = problem(broken.SoftmaxOverQueries, PADDING)
    assert finding.location.module == finding.evidence["first_leaking_layer"] == "layers.0"
    assert finding.location.file and finding.location.line


def test_a_leak_seen_only_against_the_unpadded_sequence_still_names_its_layer():
    """Normalising over the batch mixes the padded groups alike, so only the right-padding equivalence shows it:
    the layers of that pass name where it starts."""
    finding = problem(broken.LMNormalisesOverTheBatch, PADDING)
    assert finding.evidence["pad_content_change"] <= finding.evidence["tolerance"]
    assert finding.location.module == finding.evidence["first_leaking_layer"] == "layers.0"


# ----- the same rules on models of this file: the drop deeper down, an SDPA that is given no mask ---------------

class _LayerDropsTheMask(EncoderLayer):
    def forward(self, x, mask=None):
        x = self.residual(x, self.norm1, lambda h: self.self_attn(h, h, h))  # tfcheck: defect(EncoderLayerDropsMask)
        return self.residual(x, self.norm2, self.ffn)


class EncoderLayerDropsMask(TransformerEncoder):
    """The model passes the mask to its layers; each layer forgets to give it to its self-attention."""

    def __init__(self):
        super().__init__()
        c = self.config
        for i, old in enumerate(self.layers):
            self.layers[i] = _LayerDropsTheMask(c.d_model, c.num_heads, c.d_ff, c.dropout, c.norm_first)
            self.layers[i].load_state_dict(old.state_dict())


class _SdpaWithoutMask(MultiHeadAttention):
    def attend(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v), None  # tfcheck: defect(EncoderSdpaIgnoresMask)


class EncoderSdpaIgnoresMask(TransformerEncoder):
    """The attention receives the mask and calls scaled_dot_product_attention without it."""

    def __init__(self):
        super().__init__()
        for layer in self.layers:
            layer.self_attn = _SdpaWithoutMask(self.config.d_model, self.config.num_heads)


class _CrossAttentionWithoutMask(DecoderLayer):
    def forward(self, x, memory, self_mask=None, memory_mask=None):
        x = self.residual(x, self.norm1, lambda h: self.self_attn(h, h, h, self_mask))
        x = self.residual(x, self.norm2, lambda h: self.cross_attn(h, memory, memory))  # tfcheck: defect(Seq2SeqLayerDropsMemoryMask)  # noqa: E501
        return self.residual(x, self.norm3, self.ffn)


class Seq2SeqLayerDropsMemoryMask(Seq2SeqTransformer):
    """The model gives each decoder layer the memory mask; the layer does not pass it to its cross-attention."""

    def __init__(self):
        super().__init__()
        c = self.config
        for i, old in enumerate(self.decoder_layers):
            self.decoder_layers[i] = _CrossAttentionWithoutMask(c.d_model, c.num_heads, c.d_ff, c.dropout, c.norm_first)
            self.decoder_layers[i].load_state_dict(old.state_dict())


@pytest.mark.parametrize("model,check,module", [
    (EncoderLayerDropsMask, PADDING, "layers.0"),
    (EncoderSdpaIgnoresMask, PADDING, "layers.0"),
    (Seq2SeqLayerDropsMemoryMask, PADDING, "decoder_layers.0"),
    (Seq2SeqLayerDropsMemoryMask, CROSS, "decoder_layers.0.cross_attn"),
], ids=lambda v: getattr(v, "__name__", v))
def test_the_call_that_leaves_the_mask_out_is_the_line_named(model, check, module):
    finding = problem(model, check)
    assert finding.location.module == module
    assert pointed(finding) in defect_lines(model), (pointed(finding), defect_lines(model))


def test_a_correct_model_keeps_passing_with_the_same_layers():
    assert result("reference_model:Seq2SeqTransformer", CROSS).status is Status.PASS
    assert result("reference_model:TransformerEncoder", PADDING).status is Status.PASS


def test_a_trace_that_saw_no_attention_gives_a_reason_not_a_line():
    trace = PaddingTrace(torch.nn.Identity(), batch=3, length=10)
    found = blame(trace, "layers.0")
    assert found.location.module == "layers.0" and found.location.line is None
    assert "no attention" in found.location.reason
