"""The trial forward's observer reads structure: masks a model builds, ids its tokens are compared with,
position tables and length-sized objects, each with the line that made it."""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from tfcheck.model.trial.observed import Observed, Observer
from tfcheck.recording.recorder import Recorder

B, T, D, V = 3, 7, 16, 50


def observe(model: nn.Module, tokens: torch.Tensor) -> Observed:
    observer = Observer(model, {id(tokens): "tokens"}, (tokens.shape[1],), batch=tokens.shape[0])
    recorder = Recorder(model, aten=False, on_op=observer.on_op)
    with recorder, torch.no_grad():
        model(tokens)
    return observer.finish(recorder.recording)


def tokens(batch: int = B, length: int = T) -> torch.Tensor:
    return torch.randint(1, V, (batch, length), generator=torch.Generator().manual_seed(0))


class PadMaskedAttention(nn.Module):
    """Builds its padding mask from its pad id, as the tutorials do, and applies it to the scores."""

    def __init__(self, pad_idx: int = 0, to_scores: bool = True):
        super().__init__()
        self.pad_idx, self.to_scores = pad_idx, to_scores
        self.emb = nn.Embedding(V, D)
        self.qkv = nn.Linear(D, 3 * D)

    def forward(self, src):
        keep = (src != self.pad_idx).unsqueeze(1)  # (b, 1, s)
        x = self.emb(src)
        if not self.to_scores:  # the comparison only zeroes the pad embeddings: no attention mask
            return x.masked_fill(~keep.transpose(1, 2), 0.0)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(D)
        scores = scores.masked_fill(keep == 0, -1e9)
        return scores.softmax(-1) @ v


class CachedCausal(nn.Module):
    """nanoGPT's convention: a triangular buffer registered once, sliced to the length in forward."""

    def __init__(self, block_size: int = 32):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, block_size, block_size))

    def forward(self, idx):
        t = idx.size(1)
        x = self.emb(idx)
        att = x @ x.transpose(-2, -1)
        att = att.masked_fill(self.bias[:, :t, :t] == 0, float("-inf"))
        return att.softmax(-1) @ x


class SeqFirstPositions(nn.Module):
    """A word-level LM in torch's (length, batch) layout: its sinusoid table is cut by x.size(0)."""

    def __init__(self, max_len: int = 40):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.register_buffer("pe", torch.zeros(max_len, 1, D))

    def forward(self, src):
        x = self.emb(src)
        return x + self.pe[: x.size(0)]


def test_a_comparison_with_the_pad_id_that_reaches_the_scores_is_seen_with_its_id_and_line():
    seen = observe(PadMaskedAttention(pad_idx=0), tokens())
    assert [(s.size, s.role) for s in seen.pad_comparisons] == [(0, "tokens")]
    assert "test_observed.py" in seen.pad_comparisons[0].where
    assert seen.causal_masks == []


def test_a_comparison_that_only_zeroes_embeddings_reaches_no_attention():
    assert observe(PadMaskedAttention(to_scores=False), tokens()).pad_comparisons == []


def test_a_triangular_buffer_sliced_to_the_length_is_a_causal_mask_and_a_table_of_its_rows():
    seen = observe(CachedCausal(block_size=32), tokens())
    assert any("triangular buffer 'bias'" in s.what for s in seen.causal_masks)
    assert {(s.size, s.length) for s in seen.position_tables} == {(32, T)}


def test_a_table_cut_by_axis_0_shows_a_length_object_of_the_batch_size():
    seen = observe(SeqFirstPositions(), tokens())
    assert seen.lengths_seen() == {B}  # fed (batch, length) ids, it cut its table to the batch size


def test_the_modules_that_ran_are_listed():
    seen = observe(PadMaskedAttention(), tokens())
    assert {"", "emb", "qkv"} <= seen.called


class TriangularWeightEncoder(nn.Module):
    """A bidirectional encoder that makes a weight triangular (a learned lower-triangular mixing): no mask."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.mix = nn.Parameter(torch.randn(D, D))

    def forward(self, src):
        x = self.emb(src) @ torch.tril(self.mix)
        att = (x @ x.transpose(-2, -1)).softmax(-1)
        return att @ x


def test_a_triangle_of_a_weight_or_of_another_size_is_no_look_ahead_mask():
    seen = observe(TriangularWeightEncoder(), tokens())
    assert seen.causal_masks == []


def test_a_triangle_built_for_the_probe_length_is_a_look_ahead_mask():
    class BuildsItsMask(TriangularWeightEncoder):
        def forward(self, src):
            x = self.emb(src)
            keep = torch.ones(src.size(1), src.size(1), dtype=torch.bool).tril()
            return (x @ x.transpose(-2, -1)).masked_fill(~keep, float("-inf")).softmax(-1) @ x

    assert [s.size for s in observe(BuildsItsMask(), tokens()).causal_masks] == [T]
