"""Tests for the reference Transformer and its deliberately broken variants."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from reference_model import (
    EncoderConfig,
    LMConfig,
    MultiHeadAttention,
    Seq2SeqConfig,
    Seq2SeqTransformer,
    TransformerEncoder,
    TransformerLM,
    broken,
    noam_lr,
    noam_schedule,
)
from reference_model.attention import scaled_dot_product
from reference_model.layers import EncoderLayer, SinusoidalPositionalEncoding, TokenEmbedding

B, S, D, H = 3, 7, 32, 4


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _tokens(b=B, s=S, vocab=101):
    return torch.randint(1, vocab, (b, s))  # no pad tokens


def _keep_mask():
    """Key-padding keep mask (b, 1, 1, s): the last few keys of rows 1 and 2 are padding."""
    lengths = torch.tensor([S, S - 2, 3])
    return (torch.arange(S)[None, :] < lengths[:, None])[:, None, None, :]


# (a) attention against PyTorch's implementations


def _split(x):
    return x.view(B, -1, H, D // H).transpose(1, 2)  # (b, h, s, d_k)


@pytest.mark.parametrize("use_mask", [False, True])
def test_mha_matches_sdpa(use_mask):
    mha = MultiHeadAttention(D, H).eval()
    x, mem = torch.randn(B, S, D), torch.randn(B, S, D)
    mask = _keep_mask() if use_mask else None
    q, k, v = _split(mha.w_q(x)), _split(mha.w_k(mem)), _split(mha.w_v(mem))
    # SDPA's boolean attn_mask has the same convention: True = take part in attention.
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (b, h, s, d_k)
    out, weights = scaled_dot_product(q, k, v, mask)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, S))
    merged = mha.w_o(expected.transpose(1, 2).reshape(B, S, D))
    torch.testing.assert_close(mha(x, mem, mem, mask), merged, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("self_attention", [True, False])
def test_mha_matches_nn_multihead_attention(self_attention):
    mha = MultiHeadAttention(D, H).eval()
    ref = nn.MultiheadAttention(D, H, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([mha.w_q.weight, mha.w_k.weight, mha.w_v.weight]))
        ref.in_proj_bias.copy_(torch.cat([mha.w_q.bias, mha.w_k.bias, mha.w_v.bias]))
        ref.out_proj.weight.copy_(mha.w_o.weight)
        ref.out_proj.bias.copy_(mha.w_o.bias)
    x = torch.randn(B, S, D)
    mem = x if self_attention else torch.randn(B, S, D)
    keep = _keep_mask()
    # nn.MultiheadAttention's boolean masks mean True = NOT allowed: invert ours.
    expected, _ = ref(x, mem, mem, key_padding_mask=~keep[:, 0, 0, :])
    torch.testing.assert_close(mha(x, mem, mem, keep), expected, atol=1e-5, rtol=1e-5)


def test_fully_masked_row_is_finite():
    q = k = v = torch.randn(1, 1, 2, 8)
    mask = torch.tensor([[False, False], [True, True]])
    out, _ = scaled_dot_product(q, k, v, mask)
    assert torch.isfinite(out).all()


def test_mha_rejects_indivisible_heads():
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(30, 4)


# (b) causality


def test_lm_is_causal():
    model = TransformerLM().eval()
    tokens = _tokens(2, 10)
    t = 5
    with torch.no_grad():
        base = model(tokens)
        future = tokens.clone()
        future[:, t + 1 :] = torch.randint(1, 101, (2, 10 - t - 1))
        torch.testing.assert_close(model(future)[:, : t + 1], base[:, : t + 1])
        # Positive control: the test would pass vacuously if logits ignored the input.
        past = tokens.clone()
        past[:, 2] = tokens[:, 2] % 100 + 1
        changed = model(past)
    torch.testing.assert_close(changed[:, :2], base[:, :2])
    assert not torch.allclose(changed[:, t], base[:, t])


def test_seq2seq_decoder_is_causal():
    model = Seq2SeqTransformer().eval()
    src, tgt = _tokens(2, 6), _tokens(2, 8)
    with torch.no_grad():
        base = model(src, tgt)
        future = tgt.clone()
        future[:, 4:] = tgt[:, 4:] % 100 + 1
        torch.testing.assert_close(model(src, future)[:, :4], base[:, :4])
        assert not torch.allclose(model(src, future)[:, 4:], base[:, 4:])


# (c) padding


def test_encoder_right_padding_does_not_change_real_tokens():
    model = TransformerEncoder().eval()
    real = _tokens(1, 5)
    padded = torch.cat([real, torch.zeros(1, 3, dtype=torch.long)], dim=1)  # pad_id = 0
    with torch.no_grad():
        torch.testing.assert_close(model(padded)[:, :5], model(real), atol=1e-5, rtol=1e-5)


def test_seq2seq_source_padding_does_not_change_logits():
    model = Seq2SeqTransformer().eval()
    src, tgt = _tokens(1, 5), _tokens(1, 4)
    padded = torch.cat([src, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(model(padded, tgt), model(src, tgt), atol=1e-5, rtol=1e-5)


# (d) embedding scale


def test_token_and_position_signal_are_comparable():
    emb = TokenEmbedding(101, D, pad_id=0)
    pe = SinusoidalPositionalEncoding(D, 64)
    token_std = emb(_tokens(8, 64)).std().item()
    pos_std = pe.pe.std().item()
    assert pos_std / 3 < token_std < pos_std * 3
    assert emb(torch.zeros(1, 1, dtype=torch.long)).abs().sum() == 0  # pad row stays zero


def test_positional_encoding_values_and_length_check():
    pe = SinusoidalPositionalEncoding(D, 16)
    assert "pe" not in pe.state_dict()
    pos, i = 3, 2  # feature pair (2i, 2i + 1)
    angle = pos / 10000 ** (2 * i / D)
    assert pe.pe[0, pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
    assert pe.pe[0, pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    with pytest.raises(ValueError, match="max_len=16"):
        pe(torch.zeros(1, 17, D))


# (e) Pre-LN


def test_pre_ln_option():
    post, pre = TransformerEncoder().eval(), TransformerEncoder(norm_first=True).eval()
    assert isinstance(post.norm, nn.Identity) and isinstance(pre.norm, nn.LayerNorm)
    assert pre(_tokens()).shape == (B, S, D)
    assert TransformerLM(norm_first=True)(_tokens()).shape == (B, S, 101)
    assert Seq2SeqTransformer(norm_first=True)(_tokens(), _tokens()).shape == (B, S, 101)
    # Same weights, different wiring -> different outputs.
    a = EncoderLayer(D, H, 64, norm_first=False).eval()
    b = EncoderLayer(D, H, 64, norm_first=True).eval()
    b.load_state_dict(a.state_dict())
    x = torch.randn(B, S, D)
    assert not torch.allclose(a(x), b(x))


# (f) schedule


def test_noam_lr():
    d, warmup = 512, 100
    assert math.isfinite(noam_lr(0, d, warmup)) and noam_lr(0, d, warmup) > 0
    rates = [noam_lr(s, d, warmup) for s in range(3 * warmup)]
    peak = max(range(len(rates)), key=rates.__getitem__)
    assert peak == warmup - 1
    assert all(a < b for a, b in zip(rates[:peak], rates[1 : peak + 1]))
    assert all(a > b for a, b in zip(rates[peak:], rates[peak + 1 :]))

    def paper(step):
        return d**-0.5 * min(step**-0.5, step * warmup**-1.5)

    for step in (1, 50, 99, 100, 1000):
        assert noam_lr(step - 1, d, warmup) == pytest.approx(paper(step))
    assert noam_lr(10, d, warmup, factor=2.0) == pytest.approx(2 * noam_lr(10, d, warmup))


def test_noam_schedule_sets_absolute_rate():
    param = nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adam([param], lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    sched = noam_schedule(opt, d_model=32, warmup=10)
    for step in range(3):
        assert opt.param_groups[0]["lr"] == pytest.approx(noam_lr(step, 32, 10))
        opt.step()
        sched.step()


# (g) configs and overrides


def test_overrides_and_config():
    model = TransformerLM(d_model=64, num_heads=8)
    assert model.config.d_model == 64 and model.lm_head.in_features == 64
    assert model.config.vocab_size == 101 and model.config.max_len == 64
    assert TransformerEncoder(EncoderConfig(num_layers=1), dropout=0.0).config == EncoderConfig(
        num_layers=1, dropout=0.0
    )
    with pytest.raises(TypeError, match="valid fields"):
        TransformerLM(d_modle=64)
    with pytest.raises(TypeError, match="vocab_size"):
        Seq2SeqTransformer(vocab_size=50)  # seq2seq has src_/tgt_vocab_size
    with pytest.raises(AttributeError):
        model.config = LMConfig()  # read-only
    assert Seq2SeqConfig().vocab_size == 101
    with pytest.raises(AttributeError):
        _ = Seq2SeqConfig(src_vocab_size=7).vocab_size


def test_declarations():
    assert TransformerEncoder.__tfcheck__ == {
        "kind": "encoder", "causal": False, "mask": "internal", "pad_id": 0, "output": "tensor",
        "schedule": "reference_model:noam_schedule",
    }
    schedule = TransformerLM(d_model=64).__tfcheck__["schedule"]
    assert schedule.keywords == {"d_model": 64}  # the instance's schedule follows its width
    assert TransformerLM.__tfcheck__["kind"] == "decoder" and TransformerLM.__tfcheck__["causal"]
    assert Seq2SeqTransformer.__tfcheck__["kind"] == "seq2seq"
    assert TransformerEncoder(pad_id=5).__tfcheck__["pad_id"] == 5
    assert TransformerEncoder.__tfcheck__["pad_id"] == 0


# (h) broken variants


def test_variants_declare_expectations():
    assert len(broken.VARIANTS) >= 5
    for variant in broken.VARIANTS:
        assert {"check", "row"} <= set(variant.__tfcheck_expect__) <= {"check", "row", "status"}
        assert variant.__doc__ and "Fix" in variant.__doc__
        variant()  # constructible with no arguments


def test_linear_in_features_mismatch():
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        broken.LinearInFeaturesMismatch()(_tokens())


def test_residual_width_mismatch():
    with pytest.raises(RuntimeError, match=r"size of tensor a \(32\) must match the size of tensor b \(64\)"):
        broken.ResidualWidthMismatch()(_tokens())


def test_lm_without_head():
    assert broken.LMWithoutHead()(_tokens()).shape == (B, S, D)


def test_causal_mask_hides_diagonal():
    model = broken.CausalMaskHidesDiagonal().eval()
    logits = model(_tokens())
    assert torch.isnan(logits).any()
    loss = F.cross_entropy(logits.flatten(0, 1), _tokens().flatten())
    assert torch.isnan(loss)


def test_positional_table_too_short():
    model = broken.PositionalTableTooShort()
    assert model.config.max_len == 64
    assert model(_tokens(s=7)).shape == (B, 7, D)
    with pytest.raises(RuntimeError, match=r"size of tensor b \(16\)"):
        model(_tokens(s=64))


# (i) shapes


def test_output_shapes():
    assert TransformerEncoder()(_tokens()).shape == (B, S, 32)
    assert TransformerLM()(_tokens()).shape == (B, S, 101)
    model = Seq2SeqTransformer(tgt_vocab_size=50)
    src, tgt = _tokens(s=9), _tokens(s=S, vocab=50)
    assert model(src, tgt).shape == (B, S, 50)
    memory = model.encode(src)
    assert memory.shape == (B, 9, 32)
    assert model.decode(tgt, memory, src).shape == (B, S, 50)
