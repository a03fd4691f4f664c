"""The attention-reading checks on correct designs they used to misread (issue 15): a feature-map softmax
(linear attention) is not an attention's softmax, padding added to reach a block size is no part of q's
projection, and a mask constant is a mask whatever its size. The bugs next to them stay caught."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import zoo_mask_constants as zoo
from helpers import result
from reference_model import broken
from tfcheck import Status

SCALE, AXIS, HEADS = "attention.scale", "attention.softmax_axis", "attention.heads"


class _FeatureMapLayer(nn.Module):
    """Linear attention: softmax(q) over the features and softmax(k) over the sequence, k·v first."""

    def __init__(self, d_model=32, heads=4):
        super().__init__()
        self.h, self.d_k = heads, d_model // heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x):
        b, s, _ = x.shape
        split = lambda t: t.view(b, s, self.h, self.d_k).transpose(1, 2)  # noqa: E731
        h = self.norm(x)
        q, k, v = split(self.q(h)).softmax(dim=-1), split(self.k(h)).softmax(dim=-2), split(self.v(h))
        context = torch.einsum("bhnd,bhne->bhde", k, v)  # (b, h, d_k, d_k)
        out = torch.einsum("bhnd,bhde->bhne", q * self.d_k ** -0.5, context)  # shaped like the next layer's k
        return x + self.o(out.transpose(1, 2).reshape(b, s, -1))


class LinearAttentionLM(nn.Module):
    __tfcheck__ = {"kind": "encoder"}

    def __init__(self, vocab=101, d_model=32, layers=2):
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(64, d_model)
        self.layers = nn.ModuleList(_FeatureMapLayer(d_model) for _ in range(layers))
        self.head = nn.Linear(d_model, vocab)

    def forward(self, x):
        h = self.embed(x) + self.pos(torch.arange(x.shape[1], device=x.device))
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


@pytest.mark.parametrize("check", [AXIS, SCALE, HEADS])
def test_a_feature_map_softmax_is_no_attention_site(check):
    res = result(LinearAttentionLM(), check)
    assert res.status is Status.SKIP, str(res.findings)
    assert "no attention found" in res.findings[0].message


class BlockPaddedAttention(nn.Module):
    """Attention over the length zero-padded to a block of 16 (k padded with -1, as a look-around pad does), q
    scaled after the padding: correct, 1/√d_k."""

    __tfcheck__ = {"kind": "encoder"}
    BLOCK = 16

    def __init__(self, vocab=101, d_model=32, heads=4):
        super().__init__()
        self.h, self.d_k = heads, d_model // heads
        self.embed, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(64, d_model)
        self.qkv, self.o, self.head = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model), \
            nn.Linear(d_model, vocab)

    def forward(self, x):
        b, s = x.shape
        h = self.embed(x) + self.pos(torch.arange(s, device=x.device))
        q, k, v = (t.view(b, s, self.h, self.d_k).transpose(1, 2) for t in self.qkv(h).chunk(3, dim=-1))
        pad = -s % self.BLOCK
        q, v = F.pad(q, (0, 0, 0, pad)), F.pad(v, (0, 0, 0, pad))
        k = F.pad(k, (0, 0, 0, pad), value=-1.0)
        q = q * self.d_k ** -0.5
        scores = torch.einsum("bhid,bhjd->bhij", q, k)
        padded = torch.arange(s + pad, device=x.device) >= s
        weights = scores.masked_fill(padded, torch.finfo(scores.dtype).min).softmax(dim=-1)
        out = (weights @ v)[:, :, :s]
        return self.head(h + self.o(out.transpose(1, 2).reshape(b, s, -1)))


def test_padding_to_a_block_size_is_left_out_when_q_is_traced_to_its_projection():
    res = result(BlockPaddedAttention(), SCALE)
    assert res.status is Status.PASS, str(res.findings)
    site = res.findings[0].evidence["sites"][0]
    assert site["operand_scalars"]["q"] == pytest.approx(8 ** -0.5)


@pytest.mark.parametrize("cls", [zoo.TutorialEncoderDecoderFill1e4, zoo.DecoderWhere1e4, zoo.DecoderAdditive1e4])
def test_a_minus_1e4_mask_is_recognised_by_its_use_and_left_out_of_the_scale_fit(cls):
    res = result(cls(), SCALE)
    assert res.status is Status.PASS, str(res.findings)
    constants = [c for s in res.findings[0].evidence["sites"] for c in s["mask_constants"] if c["entries"]]
    assert constants and all(c["value"] == -1e4 and c["masks"] for c in constants), constants


def test_a_minus_1e4_mask_does_not_hide_a_scale_by_the_model_width():
    res = result(zoo.TutorialEncoderDecoderFill1e4ByDModel(), SCALE)
    assert res.status is Status.FAIL and res.findings[0].row == "attention-scale-wrong", str(res.findings)
    assert "√d_model" in res.findings[0].message
    assert res.findings[0].location.file.endswith("zoo_mask_constants.py")


def test_a_fill_too_small_to_mask_is_still_a_mask_constant_and_mask_causal_still_fails_it():
    res = result(broken.CausalMaskFillTooSmall(), SCALE)
    assert res.status is Status.PASS, str(res.findings)  # the scale is right; the mask is mask.causal's
    constants = [c for s in res.findings[0].evidence["sites"] for c in s["mask_constants"]]
    assert constants and all(c["value"] == -1e-12 and not c["masks"] for c in constants), constants
    causal = result(broken.CausalMaskFillTooSmall(), "mask.causal")
    assert causal.status is Status.FAIL and "fill value too small" in causal.findings[0].message


@pytest.mark.parametrize("cls", [broken.AttentionScaledByDModel, broken.AttentionMultipliedBySqrtDk,
                                 broken.AttentionUnscaled])
def test_the_gallery_scale_bugs_stay_failures(cls):
    res = result(cls(), SCALE)
    assert res.status is Status.FAIL and res.findings[0].row == "attention-scale-wrong", str(res.findings)

