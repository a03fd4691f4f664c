"""A seq2seq model with a vocabulary per side (bentrevett's tutorial: 7853 source ids, 5893 target ids): its decoder
input is drawn below the table that reads it, and its logits are expected as wide as the target vocabulary; a model
with one vocabulary for both sides (the Annotated Transformer's style) is called exactly as before."""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

import frontdoor_call_pads as pads
import tfcheck
from tfcheck.engine.runner import load_subject, settle_facts
from tfcheck.model.facts.targets import target_embedding
from tfcheck.report.status import Status

SOURCE_VOCAB, TARGET_VOCAB, WIDTH = 53, 37, 16
#: the Annotated Transformer's make_model(src_vocab, tgt_vocab), one vocabulary size filled for both
ANNOTATED = f"{Path(__file__).resolve().parents[2] / 'support' / 'frontdoor_build' / 'annotated_style.py'}:make_model"


class Side(nn.Module):
    """One side: a token table, then a position table and a segment table inside the same module (never the
    other side's vocabulary), one layer of bidirectional or causal self-attention."""

    def __init__(self, vocab: int, causal: bool, segment_first: bool = False):
        super().__init__()
        if segment_first:  # registered before the token table: the structural guess picks it, the trial corrects it
            self.segment = nn.Embedding(2, WIDTH)
        self.tok = nn.Embedding(vocab, WIDTH)
        self.pos = nn.Embedding(40, WIDTH)
        if not segment_first:
            self.segment = nn.Embedding(2, WIDTH)
        self.attn = nn.MultiheadAttention(WIDTH, 2, batch_first=True)
        self.causal = causal

    def forward(self, ids: torch.Tensor, memory: torch.Tensor | None = None) -> torch.Tensor:
        n = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(n)) + self.segment(torch.zeros_like(ids))
        mask = torch.ones(n, n, dtype=torch.bool).triu(1) if self.causal else None
        x = x + self.attn(x, x, x, attn_mask=mask, need_weights=False)[0]
        return x if memory is None else x + memory.mean(1, keepdim=True)


class PerSideSeq2Seq(nn.Module):
    """forward(src, trg) with a source table of 53 ids and a target table of 37, logits over the 37 target ids."""

    def __init__(self, segment_first: bool = False):
        super().__init__()
        self.encoder = Side(SOURCE_VOCAB, causal=False)
        self.decoder = Side(TARGET_VOCAB, causal=True, segment_first=segment_first)
        self.fc_out = nn.Linear(WIDTH, TARGET_VOCAB)

    def forward(self, src: torch.Tensor, trg: torch.Tensor) -> torch.Tensor:
        return self.fc_out(self.decoder(trg, self.encoder(src)))


class SegmentFirstSeq2Seq(PerSideSeq2Seq):
    def __init__(self):
        super().__init__(segment_first=True)


def assumed(subject, key: str) -> list:
    return [(a.value, a.source) for a in subject.assumptions if a.key == key]


def test_the_decoder_sides_token_table_is_the_structural_guess():
    assert target_embedding(PerSideSeq2Seq())[0] == "decoder.tok"  # not the encoder's position or segment table
    assert target_embedding(nn.Sequential(nn.Embedding(5, 4))) is None


def test_a_per_side_vocabulary_seq2seq_runs_and_its_logits_are_the_targets():
    report = tfcheck.run_checks(PerSideSeq2Seq, only=["forward.smoke", "shape.contract", "mask.causal"])
    statuses = {r.check: r.status for r in report.models[0].results}
    assert statuses == {"forward.smoke": Status.PASS, "shape.contract": Status.PASS, "mask.causal": Status.PASS}
    subject = load_subject(PerSideSeq2Seq, {})
    settle_facts(subject)
    assert subject.facts.vocab_size == SOURCE_VOCAB
    assert subject.facts.target_vocab_size == subject.facts.output_vocab_size == TARGET_VOCAB
    [(value, source)] = assumed(subject, "target_vocab_size")
    assert value == TARGET_VOCAB and "decoder.tok" in source and "the decoder input is read by" in source
    args, kwargs = subject.make_inputs(3, 7)
    source_ids, target_ids = args if len(args) == 2 else (args[0], kwargs["trg"])
    assert int(target_ids.max()) < TARGET_VOCAB and int(source_ids.max()) >= TARGET_VOCAB  # each side its own
    # a draw whose side is not said takes ids both tables read
    assert int(subject.random_tokens(4, 50, torch.Generator().manual_seed(0)).max()) < TARGET_VOCAB


def test_the_trial_corrects_a_structural_guess_from_the_table_the_target_reaches():
    subject = load_subject(SegmentFirstSeq2Seq, {})
    assert subject.facts.target_vocab_size == 2  # the decoder's segment table, registered first
    settle_facts(subject)
    assert subject.facts.target_vocab_size == subject.facts.output_vocab_size == TARGET_VOCAB
    [(_, source)] = assumed(subject, "target_vocab_size")
    assert "was 2" in source
    report = tfcheck.run_checks(SegmentFirstSeq2Seq, only=["forward.smoke", "shape.contract"])
    assert all(r.status is Status.PASS for r in report.models[0].results)


def test_a_shared_vocabulary_seq2seq_is_called_as_before():
    for model in (pads.PadIdSeq2Seq, ANNOTATED):
        subject = load_subject(model, {})
        settle_facts(subject)
        facts = subject.facts
        assert facts.target_vocab_size == facts.vocab_size == facts.output_vocab_size
        assert not assumed(subject, "target_vocab_size")  # one vocabulary: nothing new to state
        assert facts.sources["target_vocab_size"] == "same as vocab_size"
