"""mask.padding and decode.cache on designs that look like the bug (issue 15), each settled at its cause:

- a convolution over the positions (ConvBERT, Nystromformer, RecurrentGemma's conv1d) or a shift of the sequence
  by whole positions (MobileBERT's trigram embedding) reads the pads beside real tokens by construction: where the
  padding mask does reach the attention scores, a WARN that names the op, not a FAIL; where it reaches none, the
  FAIL stays (a convolution excuses no ignored mask);
- a mask argument the forward itself says it does not use (RWKV's warning, CpmAnt's "dummy parameter" comment) is
  no padding mask: mask.padding does not apply;
- a mask applied on both axes (Yoso's query and key mask) is no "mask on the query axis";
- a forward that slices the cached prefix off its whole input itself, as its prepare_inputs_for_generation says
  (CpmAnt), is decoded with the whole sequence each step.
"""
from __future__ import annotations

import logging

import pytest
import torch
import torch.nn as nn

import tfcheck
from tfcheck import Status

PADDING, CACHE, CAUSAL = "mask.padding", "decode.cache", "mask.causal"
VOCAB, D = 40, 16
log = logging.getLogger(__name__)


def _result(model, check: str, **declared):
    return tfcheck.run_checks(model, only=[check], **declared).models[0].result(check)


def _not_applicable(model, check: str, **declared) -> str | None:
    """Why ``check`` does not apply to ``model`` (the report's assumption), or None where it ran."""
    report = tfcheck.run_checks(model, only=[check], **declared).models[0]
    return next((a.source for a in report.assumptions if a.key == "not applicable" and a.value == check), None)


class _Encoder(nn.Module):
    """Embedding, a mixer over positions (the subclass's), then attention that masks the pads as keys."""

    def __init__(self, mask_attention: bool = True):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D, padding_idx=0)
        self.attn = nn.MultiheadAttention(D, 2, batch_first=True)
        self.out = nn.Linear(D, D)
        self.mask_attention = mask_attention

    def mix(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def forward(self, input_ids, attention_mask=None):
        x = self.mix(self.emb(input_ids))
        pads = None if attention_mask is None or not self.mask_attention else attention_mask == 0
        x = x + self.attn(x, x, x, key_padding_mask=pads, need_weights=False)[0]
        return self.out(x)


class ConvOverPositions(_Encoder):
    """ConvBERT's style: a depthwise convolution of kernel 3 over the sequence before the attention."""

    def __init__(self, mask_attention: bool = True):
        super().__init__(mask_attention)
        self.conv = nn.Conv1d(D, D, kernel_size=3, padding=1, groups=D)

    def mix(self, x):
        return x + self.conv(x.transpose(1, 2)).transpose(1, 2)


class CausalConvCutBack(_Encoder):
    """RecurrentGemma's style: a conv1d padded on both sides and cut back to the sequence's length."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(D, D, kernel_size=3, padding=2, groups=D)

    def mix(self, x):
        return x + self.conv(x.transpose(1, 2))[..., :x.shape[1]].transpose(1, 2)


class TrigramEmbedding(_Encoder):
    """MobileBERT's style: each position concatenated with its neighbours (the sequence shifted by one)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3 * D, D)

    def mix(self, x):
        after = nn.functional.pad(x[:, 1:], (0, 0, 0, 1))
        before = nn.functional.pad(x[:, :-1], (0, 0, 1, 0))
        return self.proj(torch.cat([after, x, before], dim=-1))


@pytest.mark.parametrize("model", [ConvOverPositions, CausalConvCutBack, TrigramEmbedding])
def test_a_local_mixer_over_positions_with_a_working_mask_is_a_warning_that_names_the_op(model):
    result = _result(model, PADDING, kind="encoder")
    assert result.status is Status.WARN, str(result)
    finding = result.findings[0]
    assert finding.message.startswith("padding read by design"), finding.message
    mixing = finding.evidence["local_mixing"]
    assert mixing["op"] in ("conv1d", "pad")
    assert "test_hf_mask_false_alarms.py" in mixing["line"]
    assert finding.location.file is not None and finding.location.file.endswith("test_hf_mask_false_alarms.py")


def test_a_convolution_does_not_excuse_a_mask_that_reaches_no_attention():
    result = _result(lambda: ConvOverPositions(mask_attention=False), PADDING, kind="encoder")
    assert result.status is Status.FAIL, str(result)
    assert "local_mixing" not in result.findings[0].evidence


class SaysItsMaskIsUnused(nn.Module):
    """RWKV's style: takes attention_mask for the interface, says so, and mixes every earlier position."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.mix = nn.Linear(D, D)

    def forward(self, input_ids, attention_mask=None):
        if attention_mask is not None:
            log.debug("`attention_mask` was passed, but it is unused in this model.")
        x = self.emb(input_ids)
        return self.mix(x.cumsum(1) / torch.arange(1, x.shape[1] + 1)[:, None])


class HeadOverIt(nn.Module):
    """A head that hands attention_mask to the base model that says it is unused."""

    def __init__(self):
        super().__init__()
        self.base = SaysItsMaskIsUnused()
        self.head = nn.Linear(D, VOCAB)

    def forward(self, input_ids, attention_mask=None):
        return self.head(self.base(input_ids, attention_mask=attention_mask))


class DummyMaskParameter(SaysItsMaskIsUnused):
    """CpmAnt's style: the parameter's own comment says it is a dummy."""

    def forward(self, input_ids, attention_mask=None):  # dummy parameter for a pipeline
        x = self.emb(input_ids)
        return self.mix(x.cumsum(1))


@pytest.mark.parametrize("model", [SaysItsMaskIsUnused, HeadOverIt, DummyMaskParameter])
def test_a_mask_argument_the_forward_says_is_unused_is_no_padding_mask(model):
    why = _not_applicable(model, PADDING, kind="decoder")
    assert why is not None and "is unused" in why and "test_hf_mask_false_alarms.py" in why, why


def test_a_declared_mask_is_tested_even_where_the_forward_says_it_is_unused():
    result = _result(SaysItsMaskIsUnused, PADDING, kind="decoder", mask="attention_mask:keep")
    assert result.status is Status.FAIL, str(result)


class MasksBothAxesWithWrongValues(nn.Module):
    """Yoso's style: scores multiplied by a query mask and a key mask, the mask converted as if it were additive
    ((1 + m / 10000).int() is 1 for 0 and 1 alike), so the pads are attended: a leak, but not on the query axis."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.qkv = nn.Linear(D, 3 * D)

    def forward(self, input_ids, attention_mask):
        q, k, v = self.qkv(self.emb(input_ids)).chunk(3, -1)
        m = (1.0 + attention_mask / 10000.0).int()
        weights = torch.exp(q @ k.transpose(1, 2) / 4) * m[:, :, None] * m[:, None, :]
        return (weights / weights.sum(-1, keepdim=True)) @ v


def test_a_mask_on_both_axes_is_not_reported_on_the_query_axis():
    result = _result(MasksBothAxesWithWrongValues, PADDING, kind="encoder")
    assert result.status is Status.FAIL, str(result)
    assert result.findings[0].evidence["pattern"] != "mask on the query axis"


class SlicesItsCachedPrefix(nn.Module):
    """A causal LM whose forward takes the whole sequence each step and slices off what its cache holds, as its
    prepare_inputs_for_generation says (CpmAnt's protocol); correct."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.pos = nn.Embedding(64, D)
        self.qkv = nn.Linear(D, 3 * D)
        self.head = nn.Linear(D, VOCAB)

    def prepare_inputs_for_generation(self, input_ids, next_sequence_length=None, **kwargs):
        return {"input_ids": input_ids, **kwargs}  # the whole sequence: forward slices the cached prefix itself

    def forward(self, input_ids, past_key_values=None, use_cache=None):
        past = 0 if past_key_values is None else past_key_values[0].shape[1]
        n = input_ids.shape[1]
        x = self.emb(input_ids[:, past:]) + self.pos(torch.arange(past, n))
        q, k, v = self.qkv(x).chunk(3, -1)
        if past_key_values is not None:
            k, v = torch.cat([past_key_values[0], k], 1), torch.cat([past_key_values[1], v], 1)
        keep = torch.ones(n - past, n, dtype=torch.bool).tril(diagonal=past)
        scores = (q @ k.transpose(1, 2) / 4).masked_fill(~keep, float("-inf"))
        return {"logits": self.head(scores.softmax(-1) @ v), "past_key_values": (k, v)}


def test_a_forward_that_slices_its_cached_prefix_is_decoded_with_the_whole_sequence():
    result = _result(SlicesItsCachedPrefix, CACHE, kind="decoder")
    assert result.status is Status.PASS, str(result)


# ----- the real classes, built small ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["ConvBertModel", "MobileBertModel", "RecurrentGemmaModel"])
def test_hugging_face_local_mixers_warn(name):
    pytest.importorskip("transformers")
    result = _result(f"transformers:{name}", PADDING)
    assert result.status is Status.WARN, str(result)
    assert "local_mixing" in result.findings[0].evidence


@pytest.mark.parametrize("name", ["RwkvForCausalLM", "CpmAntForCausalLM"])
def test_hugging_face_unused_masks_are_not_applicable(name):
    pytest.importorskip("transformers")
    why = _not_applicable(f"transformers:{name}", PADDING)
    assert why is not None and "'attention_mask' is unused" in why, why


def test_yoso_still_fails_but_not_as_a_query_axis_mask():
    """A true finding: modeling_yoso.py converts the 0/1 mask it is given as if it were additive (1 + m / 10000),
    so every position, pads included, gets 1."""
    pytest.importorskip("transformers")
    result = _result("transformers:YosoModel", PADDING)
    assert result.status is Status.FAIL, str(result)
    assert result.findings[0].evidence["pattern"] != "mask on the query axis"


def test_cpmant_decodes_with_the_whole_sequence_and_its_bidirectional_forward_stays_caught():
    """CpmAnt's forward marks every input position as context (bidirectional): a true finding, now measured
    instead of a raise at step 2."""
    pytest.importorskip("transformers")
    result = _result("transformers:CpmAntForCausalLM", CACHE)
    assert result.status is Status.FAIL, str(result)
    assert "raised" not in result.findings[0].message


# ----- a sequence resampled by a strided convolution -----------------------------------------------------------

class Downsampled(nn.Module):
    """Canine's style: characters attended under the mask, convolved into molecules of two characters (kernel =
    stride), the molecules attended under the mask max-pooled with them, then repeated back to characters. A molecule
    of a pad and a real character reads the pad by design; one of pads only is masked."""

    masks_molecules = True

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D, padding_idx=0)
        self.chars = nn.MultiheadAttention(D, 2, batch_first=True)
        self.down = nn.Conv1d(D, D, kernel_size=2, stride=2)
        self.molecules = nn.MultiheadAttention(D, 2, batch_first=True)
        self.out = nn.Linear(2 * D, D)

    def forward(self, input_ids, attention_mask):
        x = self.emb(input_ids)
        x = x + self.chars(x, x, x, key_padding_mask=attention_mask == 0, need_weights=False)[0]
        m = self.down(x.transpose(1, 2)).transpose(1, 2)
        real = nn.functional.max_pool1d(attention_mask[:, None].float(), 2, 2)[:, 0] > 0
        pads = ~real if self.masks_molecules else None
        m = m + self.molecules(m, m, m, key_padding_mask=pads, need_weights=False)[0]
        up = m.repeat_interleave(2, dim=1)
        up = torch.cat([up, m[:, -1:].expand(-1, x.shape[1] - up.shape[1], -1)], dim=1)  # an odd last character
        return self.out(torch.cat([x, up], dim=-1))


class DownsampledMoleculesUnmasked(Downsampled):
    """The bug: the molecules' attention gets no mask, so molecules of pads only are attended."""

    masks_molecules = False


def test_a_strided_convolution_with_its_resampled_mask_is_a_warning_that_names_the_convolution():
    result = _result(Downsampled, PADDING, kind="encoder")
    assert result.status is Status.WARN, str(result)
    finding = result.findings[0]
    assert finding.message.startswith("padding read by design"), finding.message
    assert "resamples the 10 positions to 5" in finding.message, finding.message
    mixing = finding.evidence["local_mixing"]
    assert mixing["op"] == "conv1d" and mixing["resampled"]["attention_masked_per_sample"] is True, mixing
    assert mixing["resampled"]["attention_lengths"] == [5], mixing
    with open(finding.location.file) as source:
        assert "self.down(" in source.read().splitlines()[finding.location.line - 1]


def test_a_strided_convolution_does_not_excuse_a_resampled_sequence_attended_without_a_mask():
    result = _result(DownsampledMoleculesUnmasked, PADDING, kind="encoder")
    assert result.status is Status.FAIL, str(result)
    assert result.findings[0].evidence["pattern"] == "padding leak", result.findings[0]
    assert "local_mixing" not in result.findings[0].evidence


def test_canine_downsampling_convolution_warns():
    """Canine (modeling_canine.py, CharactersToMolecules) convolves characters into molecules with kernel = stride =
    config.downsampling_rate: a molecule of pads and real characters reads the pads; the molecules' attention is
    masked with the mask max-pooled alike (CanineModel._downsample_attention_mask)."""
    pytest.importorskip("transformers")
    result = _result("transformers:CanineModel", PADDING)
    assert result.status is Status.WARN, str(result)
    mixing = result.findings[0].evidence["local_mixing"]
    assert mixing["op"] == "conv1d" and "modeling_canine.py" in mixing["line"], mixing
    assert mixing["resampled"]["attention_masked_per_sample"] is True, mixing


def test_deepseek_v4_compressed_attention_still_fails():
    """A true finding: DeepseekV4Attention.forward (modeling_deepseek_v4.py:840) calls its compressor without the
    attention mask; the compressor pools every window of compress_rates['compressed_sparse_attention'] tokens, pads
    included (:684), and its block_bias, concatenated to the mask (:851), carries causality and the indexer's picks
    only (:711), so real queries attend to compressed entries of pads, even to a window of pads only."""
    pytest.importorskip("transformers")
    result = _result("transformers:DeepseekV4Model", PADDING)
    assert result.status is Status.FAIL, str(result)
    assert "local_mixing" not in result.findings[0].evidence
