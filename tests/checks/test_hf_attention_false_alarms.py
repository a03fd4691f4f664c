"""False FAILs on correct Hugging Face designs (issue 15), fixed at their cause, each beside the bug it resembles:
- attention.scale: a query shifted by a bias and divided by a tensor-valued scale before the product (DeBERTa) is
  traced through those ops to its projection; q and k each normalised before a product scaled by 1 (qk-norm,
  Gemma 4) is a WARN that names the norms, while the same product without the norms stays a FAIL; so is a layer
  that reuses an earlier layer's normalised keys however many ops lie between (Gemma 3n's shared key-value layers);
- attention.heads: the first attention after a layer that mixes positions (a causal convolution, a state-space
  layer: Jamba, Zaya) is judged against its own input, while a head split that mixes positions stays a FAIL;
- shape.contract: a position table read one row ahead (ProphetNet's predicting stream) caps the probes, a config's
  downsampling rate sets the shortest probe (Canine), and an output width a config field sets through the head
  that made the output is a WARN (FSMT, EmbeddingGemma2)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import result
from tfcheck import Status

SCALE, HEADS, SHAPE = "attention.scale", "attention.heads", "shape.contract"


def _hf(spec: str, check: str):
    pytest.importorskip("transformers")
    return result(f"transformers:{spec}", check)


# ----- attention.scale -------------------------------------------------------------------------------

class _BiasThenScaledQuery(nn.Module):
    """One fused projection split per head, a bias added to q after the split and q divided by a 0-dim tensor
    before the product, as DeBERTa does. ``scaled=False`` leaves the division out: the bug."""

    __tfcheck__ = {"kind": "encoder"}

    def __init__(self, scaled=True, vocab=101, d_model=32, heads=4):
        super().__init__()
        self.scaled, self.h, self.d_k = scaled, heads, d_model // heads
        self.embed, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(64, d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.q_bias = nn.Parameter(torch.randn(d_model))
        self.o, self.head = nn.Linear(d_model, d_model), nn.Linear(d_model, vocab)

    def forward(self, x):
        b, s = x.shape
        h = self.embed(x) + self.pos(torch.arange(s, device=x.device))
        q, k, v = self.qkv(h).view(b, s, self.h, -1).permute(0, 2, 1, 3).chunk(3, dim=-1)  # per-head fused
        q = q + self.q_bias.view(1, self.h, 1, self.d_k)
        if self.scaled:
            q = q / torch.sqrt(torch.tensor(q.size(-1), dtype=torch.float))
        probs = torch.matmul(q, k.transpose(-1, -2)).softmax(-1)
        return self.head(h + self.o((probs @ v).transpose(1, 2).reshape(b, s, -1)))


def _rms(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x * torch.pow(x.pow(2).mean(-1, keepdim=True) + 1e-6, -0.5) * weight


class _UnitScaleAttention(nn.Module):
    """sdpa with scale=1.0; ``qk_norm`` RMS-normalises each head's q and k first (Gemma 4's design)."""

    __tfcheck__ = {"kind": "encoder"}

    def __init__(self, qk_norm=True, vocab=101, d_model=32, heads=4):
        super().__init__()
        self.qk_norm, self.h, self.d_k = qk_norm, heads, d_model // heads
        self.embed, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(64, d_model)
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model, bias=False) for _ in range(4))
        self.q_gain, self.k_gain = nn.Parameter(torch.ones(self.d_k)), nn.Parameter(torch.ones(self.d_k))
        self.head = nn.Linear(d_model, vocab)

    def forward(self, x):
        b, s = x.shape
        h = self.embed(x) + self.pos(torch.arange(s, device=x.device))
        q, k, v = (p(h).view(b, s, self.h, self.d_k) for p in (self.q, self.k, self.v))
        if self.qk_norm:
            q, k = _rms(q, self.q_gain), _rms(k, self.k_gain)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=1.0)
        return self.head(h + self.o(out.transpose(1, 2).reshape(b, s, -1)))


def test_a_query_shifted_by_a_bias_and_divided_by_a_tensor_scale_is_traced_to_its_projection():
    res = result(_BiasThenScaledQuery(), SCALE)
    assert res.status is Status.PASS, str(res.findings)
    assert all(math.isclose(s["measured"], 8 ** -0.5, rel_tol=0.02) for s in res.findings[0].evidence["sites"])


def test_the_same_query_left_unscaled_is_still_caught():
    res = result(_BiasThenScaledQuery(scaled=False), SCALE)
    assert res.status is Status.FAIL and "not scaled" in res.findings[0].message, str(res.findings)


def test_deberta_scales_its_query_before_the_product():
    res = _hf("DebertaModel", SCALE)
    assert res.status is Status.PASS, str(res.findings)


def test_q_and_k_normalised_before_a_unit_scale_is_a_qk_norm_warning():
    res = result(_UnitScaleAttention(), SCALE)
    assert res.status is Status.WARN, str(res.findings)
    finding = res.findings[0]
    assert "qk-norm design" in finding.message and "q_gain" not in finding.message
    assert set(finding.evidence["normalised"]) == {"q", "k"}


def test_a_unit_scale_without_the_norms_is_still_caught():
    res = result(_UnitScaleAttention(qk_norm=False), SCALE)
    assert res.status is Status.FAIL and "not scaled" in res.findings[0].message, str(res.findings)


class _QueryLayer(nn.Module):
    """One attention layer's own query (RMS-normed with ``gain``, or not), over keys and values it is given."""

    def __init__(self, d_model, heads, gain):
        super().__init__()
        self.h, self.d_k, self.gain = heads, d_model // heads, gain
        self.q = nn.Linear(d_model, d_model, bias=False)

    def forward(self, h, k, v):
        b, s, _ = h.shape
        q = self.q(h).view(b, s, self.h, self.d_k)
        q = q if self.gain is None else _rms(q, self.gain)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k, v, scale=1.0)
        return h + out.transpose(1, 2).reshape(b, s, -1)


class _SharedKeysAttention(nn.Module):
    """Two attention layers with q/k RMS-norms and scale 1, a deep feed-forward stack between them, and the second
    reusing the first one's keys and values (Gemma 3n's shared key-value layers): its keys were normalised hundreds
    of ops before its product. ``qk_norm=False`` leaves the norms out: the bug, in both layers."""

    __tfcheck__ = {"kind": "encoder"}

    def __init__(self, qk_norm=True, vocab=101, d_model=32, heads=4, depth=48):
        super().__init__()
        self.h, self.d_k = heads, d_model // heads
        self.embed, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(64, d_model)
        self.gain = nn.Parameter(torch.ones(self.d_k)) if qk_norm else None
        self.k, self.v = nn.Linear(d_model, d_model, bias=False), nn.Linear(d_model, d_model, bias=False)
        self.first, self.second = _QueryLayer(d_model, heads, self.gain), _QueryLayer(d_model, heads, self.gain)
        self.stack = nn.ModuleList(nn.Sequential(nn.Linear(d_model, d_model), nn.GELU()) for _ in range(depth))
        self.head = nn.Linear(d_model, vocab)

    def forward(self, x):
        b, s = x.shape
        h = self.embed(x) + self.pos(torch.arange(s, device=x.device))
        k = self.k(h).view(b, s, self.h, self.d_k)
        k = (k if self.gain is None else _rms(k, self.gain)).transpose(1, 2)
        v = self.v(h).view(b, s, self.h, self.d_k).transpose(1, 2)
        h = self.first(h, k, v)
        for block in self.stack:
            h = h + 0.1 * block(h)
        return self.head(self.second(h, k, v))  # the keys and values of the first layer, reused


def test_keys_reused_from_an_earlier_layer_are_traced_to_their_norm():
    res = result(_SharedKeysAttention(), SCALE)
    assert res.status is Status.WARN, str(res.findings)
    assert [f.location.module for f in res.findings] == ["first", "second"], str(res.findings)
    assert all("qk-norm design" in f.message for f in res.findings), str(res.findings)


def test_reused_keys_without_the_norms_are_still_caught():
    res = result(_SharedKeysAttention(qk_norm=False), SCALE)
    assert [(f.location.module, f.status) for f in res.findings] == [("first", Status.FAIL), ("second", Status.FAIL)]
    assert "not scaled" in res.findings[1].message, str(res.findings)


@pytest.mark.parametrize("spec", ["Gemma4TextModel", "EmbeddingGemma2TextModel", "Gemma3nTextModel"])
def test_gemma_qk_norm_with_scaling_1_is_a_warning_not_a_failure(spec):
    res = _hf(spec, SCALE)
    assert res.status is Status.WARN, str(res.findings)
    assert "normalised between their projection and the product" in res.findings[0].message


# ----- attention.heads -------------------------------------------------------------------------------

class _ConvThenAttention(nn.Module):
    """A causal depthwise convolution over the sequence, then attention: each head of q, k, v sees positions
    mixed (causally) by the convolution. ``split_bug`` splits the heads with x.view(b, h, s, d_k)."""

    __tfcheck__ = {"kind": "decoder", "causal": True}

    def __init__(self, split_bug=False, vocab=101, d_model=32, heads=4):
        super().__init__()
        self.split_bug, self.h, self.d_k = split_bug, heads, d_model // heads
        self.embed = nn.Embedding(vocab, d_model)
        self.conv = nn.Conv1d(d_model, d_model, kernel_size=3, groups=d_model)
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))
        self.head = nn.Linear(d_model, vocab)

    def split(self, t, b, s):
        if self.split_bug:
            return t.view(b, self.h, s, self.d_k)
        return t.view(b, s, self.h, self.d_k).transpose(1, 2)

    def forward(self, x):
        b, s = x.shape
        h = self.embed(x)
        h = h + self.conv(F.pad(h.transpose(1, 2), (2, 0))).transpose(1, 2)  # causal: left padding only
        q, k, v = (self.split(p(h), b, s) for p in (self.q, self.k, self.v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.head(h + self.o(out.transpose(1, 2).reshape(b, s, -1)))


def test_the_first_attention_after_a_causal_convolution_is_judged_against_its_input():
    res = result(_ConvThenAttention(), HEADS)
    assert res.status is Status.WARN, str(res.findings)
    finding = res.findings[0]
    assert "already changed there" in finding.message
    assert finding.evidence["perturbed"] == "source position 3 of 5"
    assert finding.evidence["q"]["changed_positions_in_projection_input"] == [3, 4]  # the kernel reaches 4 from 3


def test_a_head_split_that_mixes_positions_after_the_convolution_is_still_caught():
    res = result(_ConvThenAttention(split_bug=True), HEADS)
    assert res.status is Status.FAIL and "the head split mixes positions" in res.findings[0].message, \
        str(res.findings)


@pytest.mark.parametrize("spec", ["JambaModel", "ZayaModel"])
def test_hybrids_whose_first_attention_follows_a_mixing_layer_warn(spec):
    res = _hf(spec, HEADS)
    assert res.status is Status.WARN, str(res.findings)
    assert "mixes positions before the attention does this by design" in res.findings[0].message


# ----- shape.contract --------------------------------------------------------------------------------

class _ReadsPositionsOneAhead(nn.Module):
    """Positions counted by a cumsum of a mask of ones, and a second stream reading the same table one row
    ahead (ProphetNet's predicting stream): the 20-row table holds 19 positions."""

    __tfcheck__ = {"kind": "encoder"}

    def __init__(self, vocab=101, d_model=16, rows=20):
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(rows, d_model)
        self.mix = nn.Linear(d_model, d_model)

    def forward(self, x):
        positions = torch.ones_like(x).cumsum(1)
        return self.mix(self.embed(x) + self.pos(positions - 1) + self.pos(positions))


class _PoolsInWindows(nn.Module):
    """Max-pools the sequence in windows of config.downsampling_rate positions (Canine), then repeats back."""

    __tfcheck__ = {"kind": "encoder"}

    def __init__(self, vocab=101, d_model=16):
        super().__init__()
        self.config = type("Config", (), {"downsampling_rate": 4})()
        self.embed, self.mix = nn.Embedding(vocab, d_model), nn.Linear(d_model, d_model)

    def forward(self, x):
        h = self.embed(x)
        rate = self.config.downsampling_rate
        pooled = F.max_pool1d(h.transpose(1, 2), rate, rate).transpose(1, 2)
        up = pooled.repeat_interleave(rate, dim=1)
        return self.mix(h + F.pad(up, (0, 0, 0, h.shape[1] - up.shape[1])))


def test_a_position_table_read_one_row_ahead_caps_the_probes():
    res = result(_ReadsPositionsOneAhead(), SHAPE)
    assert res.status is Status.PASS, str(res.findings)
    assert "1x19" in res.findings[0].message


def test_a_config_downsampling_rate_sets_the_shortest_probe():
    res = result(_PoolsInWindows(), SHAPE)
    assert res.status is Status.PASS, str(res.findings)
    assert "1x4" in res.findings[0].message and "1x1," not in res.findings[0].message


@pytest.mark.parametrize("spec", ["ProphetNetForCausalLM", "CanineModel"])
def test_hugging_face_models_are_probed_within_their_lengths(spec):
    assert _hf(spec, SHAPE).status is Status.PASS


@pytest.mark.parametrize("spec, field", [("FSMTModel", "tgt_vocab_size"),
                                         ("EmbeddingGemma2TextModel", "embedding_dim")])
def test_an_output_width_a_config_field_sets_through_its_head_is_a_warning(spec, field):
    res = _hf(spec, SHAPE)
    assert res.status is Status.WARN, str(res.findings)
    assert f"config.{field}" in res.findings[0].evidence["width_from"]


def test_a_wrong_output_width_without_a_config_is_still_caught():
    class WrongWidth(nn.Module):
        __tfcheck__ = {"kind": "encoder", "d_model": 16}

        def __init__(self):
            super().__init__()
            self.embed, self.out = nn.Embedding(101, 16), nn.Linear(16, 24)

        def forward(self, x):
            return self.out(self.embed(x))

    res = result(WrongWidth(), SHAPE)
    assert res.status is Status.FAIL and "last dim 24 where 16 was expected" in res.findings[0].message, \
        str(res.findings)
