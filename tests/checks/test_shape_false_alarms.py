"""shape.contract false alarms on real implementations (issue 15), each fixed at its cause, and the look-alike bugs
that still fail: a length the config declares pooled (Funnel's blocks, a downsampling rate) against positions
dropped with nothing declaring it; a reversible network's two streams returned side by side (Reformer) against a
width doubled by a head or by a tensor concatenated with itself; a padded vocabulary's true size shrunk with it in
the small config (Inkling 2's unpadded_vocab_size, its LM head's width); a pooled output, (batch, C) where the
recorded forward shows the model pool its positions (a [CLS] classifier, a mean-pooled encoder), against a length
axis folded into the features and a language model that keeps one position's logits."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn

import tfcheck
from tfcheck import Status

SHAPE = "shape.contract"
VOCAB, D = 50, 16


def _shape(model, **declared):
    return tfcheck.run_checks(model, only=[SHAPE], **declared).models[0].result(SHAPE).findings[0]


class _Encoder(nn.Module):
    def __init__(self, width: int = D):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.ffn = nn.Linear(D, D)
        self.norm = nn.LayerNorm(width)

    def states(self, ids):
        x = self.emb(ids)
        return x + self.ffn(x)


class PoolsAsDeclared(_Encoder):
    """Halves the sequence (rounding up) between its two blocks, as its config's block_sizes says."""

    def __init__(self):
        super().__init__()
        self.config = SimpleNamespace(block_sizes=[1, 1], separate_cls=False)

    def forward(self, ids):
        x = self.states(ids).transpose(1, 2)
        return self.norm(nn.functional.avg_pool1d(x, 2, ceil_mode=True).transpose(1, 2))


class PoolsInWindows(_Encoder):
    """Pools windows of its config's downsampling_rate positions into one and returns them."""

    def __init__(self):
        super().__init__()
        self.config = SimpleNamespace(downsampling_rate=2)

    def forward(self, ids):
        x = self.states(ids).transpose(1, 2)
        return self.norm(nn.functional.max_pool1d(x, 2, ceil_mode=True).transpose(1, 2))


class DropsPositions(_Encoder):
    """Bug: keeps every other position, and no config says the sequence is pooled."""

    def forward(self, ids):
        return self.norm(self.states(ids)[:, ::2])


class PoolsMoreThanDeclared(PoolsAsDeclared):
    """Bug: its config declares one pooling by 2, it keeps one position in four."""

    def forward(self, ids):
        return self.norm(self.states(ids)[:, ::4])


def test_a_length_the_config_declares_pooled_passes_and_says_which_fields():
    finding = _shape(PoolsAsDeclared, kind="encoder")
    assert finding.status is Status.PASS, finding.message
    assert "1x2->1" in finding.message and "3x7->4" in finding.message
    assert "config.block_sizes = [1, 1]" in finding.message
    windows = _shape(PoolsInWindows, kind="encoder")
    assert windows.status is Status.PASS, windows.message
    assert "config.downsampling_rate = 2" in windows.message


def test_positions_dropped_with_no_declared_pooling_still_fail():
    finding = _shape(DropsPositions, kind="encoder")
    assert finding.status is Status.FAIL
    assert "the output has shape (3, 4, 16); expected (3, 7, 16)" in finding.message


def test_a_length_that_matches_no_declared_pooling_still_fails_and_says_what_was_declared():
    finding = _shape(PoolsMoreThanDeclared, kind="encoder")
    assert finding.status is Status.FAIL
    assert "config.block_sizes = [1, 1]" in finding.message and "matches none of it" in finding.message


class TwoStreams(_Encoder):
    """A reversible residual network: two streams, each updated from the other, returned side by side and
    normalised together at 2 x d_model."""

    def __init__(self):
        super().__init__(2 * D)
        self.f, self.g = nn.Linear(D, D), nn.Linear(D, D)

    def forward(self, ids):
        x1 = x2 = self.emb(ids)
        x1 = x1 + self.f(x2)
        x2 = x2 + self.g(x1)
        return self.norm(torch.cat([x1, x2], dim=-1))


class HeadTwiceTooWide(_Encoder):
    """Bug: the output projection is built 2 x d_model wide."""

    def __init__(self):
        super().__init__()
        self.out = nn.Linear(D, 2 * D)

    def forward(self, ids):
        return self.out(self.norm(self.states(ids)))


class ConcatenatedWithItself(_Encoder):
    """Bug: the states concatenated with themselves (meant: with the skip connection) and normalised at 2 x d."""

    def __init__(self):
        super().__init__(2 * D)

    def forward(self, ids):
        h = self.states(ids)
        return self.norm(torch.cat([h, h], dim=-1))


def test_two_streams_side_by_side_warn_and_name_the_concatenation():
    finding = _shape(TwoStreams, kind="encoder", d_model=D)
    assert finding.status is Status.WARN, finding.message
    assert "2 streams of d_model = 16" in finding.message and "accept=" in finding.message
    assert "test_shape_false_alarms.py" in finding.evidence["joined_at"]
    assert finding.evidence["taken_by"] == "norm"


@pytest.mark.parametrize("model", [HeadTwiceTooWide, ConcatenatedWithItself])
def test_a_width_doubled_by_a_bug_still_fails(model):
    finding = _shape(model, kind="encoder", d_model=D)
    assert finding.status is Status.FAIL, finding.message
    assert "last dim 32 where 16 was expected" in finding.message


# ----- a pooled output: one vector per sample by design -----------------------------------------------------------

class FoldsPositionsIntoFeatures(_Encoder):
    """Bug: the states flattened per sample, (b, s * d): the length axis is folded into the features, not pooled."""

    def forward(self, ids):
        return self.norm(self.states(ids)).flatten(1)


class DecoderKeepsTheLastLogits(_Encoder):
    """Bug for a language model: only the last position's logits come back, so its loss cannot read the others."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(D, VOCAB)

    def forward(self, ids):
        return self.head(self.norm(self.states(ids))[:, -1])


@pytest.mark.parametrize("model,how", [("zoo_masks:PooledClassifier", "one position taken per sample"),
                                       ("zoo_masks:MeanPooledClassifier", "a reduction over the positions (sum)")])
def test_a_pooled_classifier_is_judged_as_batch_by_its_width_and_says_where_it_pools(model, how):
    finding = _shape(model)
    assert finding.status is Status.PASS, finding.message
    assert finding.message.startswith("output is pooled, (batch, 3)") and "1x1, 3x7, 1x64, 3x64" in finding.message
    assert how in finding.message and "zoo_masks.py:" in finding.message
    assert {tuple(c["output_shape"]) for c in finding.evidence["checked"]} == {(1, 3), (3, 3)}
    assert finding.evidence["pooled"]["pooled_by"][0]["file"].endswith("zoo_masks.py")


def test_a_length_axis_folded_into_the_features_still_fails_and_names_the_fold():
    finding = _shape(FoldsPositionsIntoFeatures, kind="encoder")
    assert finding.status is Status.FAIL, finding.message
    assert "the output has shape (1, 16); expected (1, 1, 16)" in finding.message
    assert "the length axis is gone" in finding.message and "folds the positions into another axis" in finding.message
    assert "`return self.norm(self.states(ids)).flatten(1)`" in finding.message


def test_a_language_model_that_keeps_one_position_still_fails():
    finding = _shape(DecoderKeepsTheLastLogits, kind="decoder", vocab_size=VOCAB)
    assert finding.status is Status.FAIL, finding.message
    assert "expected (1, 1, 50)" in finding.message and "returns the logits of every position" in finding.message
    assert "[:, -1]" in finding.message


@pytest.mark.parametrize("name", ["BertForSequenceClassification", "GPT2ForSequenceClassification"])
def test_hugging_face_sequence_classifiers_return_pooled_logits_by_design(name):
    pytest.importorskip("transformers")
    finding = _shape(f"transformers:{name}")
    assert finding.status is Status.PASS, finding.message
    assert finding.message.startswith("output is pooled, (batch, 2)") and "one position taken" in finding.message


# ----- the Hugging Face classes that raised them ------------------------------------------------------------------

def test_funnel_base_model_returns_its_pooled_length_by_design():
    pytest.importorskip("transformers")
    finding = _shape("transformers:FunnelBaseModel")
    assert finding.status is Status.PASS, finding.message
    assert "1x5->2" in finding.message and "config.separate_cls = True" in finding.message
    assert "config.truncate_seq = True" in finding.message


def test_reformer_model_returns_its_two_streams_and_its_lm_head_still_passes():
    pytest.importorskip("transformers")
    finding = _shape("transformers:ReformerModel")
    assert finding.status is Status.WARN, finding.message
    assert "2 streams of d_model = 32" in finding.message
    assert "modeling_reformer.py" in finding.evidence["joined_at"]
    assert _shape("transformers:ReformerForMaskedLM").status is Status.PASS


@pytest.mark.parametrize("name", ["Inkling2ForCausalLM", "Inkling2LoopForCausalLM"])
def test_a_padded_vocabulary_true_size_is_shrunk_so_the_logits_are_vocab_size_wide(name):
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, name):
        pytest.skip(f"this transformers has no {name}")
    finding = _shape(f"transformers:{name}")
    assert finding.status is Status.PASS, finding.message
    assert "(batch, length, 101)" in finding.message


class TopKOverKeys(_Encoder):
    """Attention that keeps the 3 largest scores per query (x-transformers' attn_sparse_topk): fewer than 3 keys
    cannot run."""

    def forward(self, ids):
        x = self.states(ids)
        scores = x @ x.transpose(-2, -1)
        kept = scores.topk(3, dim=-1).values[..., -1:]
        return self.norm(torch.softmax(scores.masked_fill(scores < kept, float("-inf")), dim=-1) @ x)


def test_a_model_that_raises_below_a_length_names_the_shortest_it_runs_at_and_min_len():
    finding = _shape(TopKOverKeys, kind="encoder", d_model=D)
    assert finding.status is Status.FAIL and "It runs from length 3 (batch 1)" in finding.message
    assert "declare min_len=3" in finding.message
    assert _shape(TopKOverKeys, kind="encoder", d_model=D, min_len=3).status is Status.PASS


# ----- a vocabulary padded for speed -----------------------------------------------------------------------

class _PaddedConfig:
    vocab_size, n_embd = 101, 32

    def __init__(self, padded: bool):
        if padded:
            self.padded_vocab_size = 128  # litgpt / Megatron: the vocabulary rounded up to a multiple of 64


class WideHeadLM(nn.Module):
    """A decoder whose logits are 128 wide over a vocabulary of 101: a design when the config pads it."""

    def __init__(self, padded: bool = True):
        super().__init__()
        self.config = _PaddedConfig(padded)
        self.wte, self.head = nn.Embedding(128, 32), nn.Linear(32, 128)

    def generate(self, idx):  # an autoregressive LM (its kind, read from the method)
        return idx

    def forward(self, idx):
        return self.head(self.wte(idx))


def test_logits_as_wide_as_the_padded_vocabulary_the_config_states_pass_and_others_still_fail():
    report = tfcheck.run_checks(WideHeadLM, only=["shape.contract"]).models[0]
    assert report.result("shape.contract").status is Status.PASS, report
    padded = next(a for a in report.assumptions if a.key == "padded_vocab_size")
    assert padded.value == 128 and "config.padded_vocab_size" in padded.source
    unpadded = tfcheck.run_checks(WideHeadLM(padded=False), only=["shape.contract"]).models[0]
    assert unpadded.result("shape.contract").status is Status.FAIL, unpadded
