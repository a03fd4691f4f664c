"""A model that takes multiples of a bucket size only (Sinkhorn attention's buckets): without a declaration its
forward raises at tfcheck's probe length, and the trial reads the multiple from the lengths it runs at (stated, with
the declaration that states it); lengths with no multiple in common are named in forward.smoke's failure instead.
With the declaration, every probe is rounded to a multiple, the battery runs clean, and decoding token by token does
not apply."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

import tfcheck
from tfcheck import Status

VOCAB, D, BUCKET = 50, 16, 4


class BucketedLM(nn.Module):
    __tfcheck__ = {"kind": "decoder", "max_len": 32}

    def __init__(self):
        super().__init__()
        self.emb, self.pos = nn.Embedding(VOCAB, D), nn.Embedding(32, D)
        self.norm1, self.norm2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.out = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.ff = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
        self.head = nn.Linear(D, VOCAB)

    def forward(self, ids, past_key_values=None):
        b, s = ids.shape
        assert s % BUCKET == 0, f"sequence {s} needs to be divisible by bucket size {BUCKET}"
        x = self.emb(ids) + self.pos(torch.arange(s, device=ids.device))
        q, k, v = (t.view(b, s, 2, D // 2).transpose(1, 2) for t in self.qkv(self.norm1(x)).chunk(3, dim=-1))
        x = x + self.out(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, D))
        return self.head(x + self.ff(self.norm2(x)))


def test_without_a_declaration_the_trial_reads_the_multiple_from_the_lengths_that_run():
    # The probe length 7 is tfcheck's choice: the model's refusal of it is no finding against the model.
    report = tfcheck.run_checks(BucketedLM).models[0]
    assert not [r.check for r in report.results if r.status in (Status.FAIL, Status.ERROR)], str(report)
    assert "length 8" in report.result("forward.smoke").findings[0].message
    read = next(a for a in report.assumptions if a.key == "length_multiple")
    assert read.value == BUCKET and not read.declared
    assert "raised at tfcheck's probe length 7" in read.source and "divisible by bucket size 4" in read.source
    assert "ran at lengths 4, 8, 16, 32" in read.source and "declare length_multiple=4" in read.source.lower()


class LeaksWithBuckets(BucketedLM):
    def forward(self, ids, past_key_values=None):
        b, s = ids.shape
        assert s % BUCKET == 0, f"sequence {s} needs to be divisible by bucket size {BUCKET}"
        x = self.emb(ids) + self.pos(torch.arange(s, device=ids.device))
        q, k, v = (t.view(b, s, 2, D // 2).transpose(1, 2) for t in self.qkv(self.norm1(x)).chunk(3, dim=-1))
        x = x + self.out(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, D))  # no is_causal
        return self.head(x + self.ff(self.norm2(x)))


def test_a_bug_is_still_caught_on_the_lengths_read():
    report = tfcheck.run_checks(LeaksWithBuckets, only=["forward.smoke", "mask.causal"]).models[0]
    assert report.result("forward.smoke").status is Status.PASS
    assert report.result("mask.causal").status is Status.FAIL


class RunsAtEightOnly(BucketedLM):
    """Runs at length 8 and no other: one length is no multiple, so nothing is read and the failure names it."""

    def forward(self, ids, past_key_values=None):
        assert ids.shape[1] == 8, "the length must be 8"
        return self.head(self.emb(ids))


def test_lengths_with_no_multiple_in_common_are_named_in_the_failure_not_read():
    report = tfcheck.run_checks(RunsAtEightOnly, only=["forward.smoke"]).models[0]
    finding = report.results[0].findings[0]
    assert finding.status is Status.FAIL and "declare length_multiple=8" in finding.message
    assert finding.evidence["runs_at_lengths"] == [8]
    assert not any(a.key == "length_multiple" for a in report.assumptions)


def test_with_length_multiple_every_probe_is_a_multiple_and_the_battery_runs_clean():
    report = tfcheck.run_checks(BucketedLM, length_multiple=BUCKET).models[0]
    assert not [r.check for r in report.results if r.status in (Status.FAIL, Status.ERROR)], str(report)
    assert "length 8" in report.result("forward.smoke").findings[0].message  # 7 rounded up
    assert report.result("mask.causal").status is Status.PASS
    assert "decode.cache" not in {r.check for r in report.results}  # one token at a time is no multiple of 4
    assert any(a.key == "length_multiple" and a.value == BUCKET for a in report.assumptions)


class RefusesBatchesOfThree(BucketedLM):
    """Raises on a batch of 3 at any length: the batch, not the length, is what it refuses."""

    def forward(self, ids, past_key_values=None):
        assert ids.shape[0] != 3, "batches of 3 are not supported"
        return self.head(self.emb(ids))


def test_a_model_that_runs_alone_at_the_probe_length_gets_no_length_hint():
    finding = tfcheck.run_checks(RefusesBatchesOfThree, only=["forward.smoke"]).models[0].results[0].findings[0]
    assert finding.status is Status.FAIL and "length_multiple" not in finding.message
    assert "runs_at_lengths" not in finding.evidence
