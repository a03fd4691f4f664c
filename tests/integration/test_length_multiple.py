"""A model that takes multiples of a bucket size only (Sinkhorn attention's buckets): without a declaration its
forward raises at the probe length, and forward.smoke names the lengths it runs at and the length_multiple
declaration; with it, every probe is rounded to a multiple, the battery runs clean, and decoding token by token does
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


def test_forward_smoke_names_the_lengths_the_model_runs_at_and_the_declaration():
    result = tfcheck.run_checks(BucketedLM, only=["forward.smoke"]).models[0].result("forward.smoke")
    assert result.status is Status.FAIL
    finding = result.findings[0]
    assert "divisible by bucket size 4" in finding.message and "declare length_multiple=4" in finding.message
    assert finding.evidence["runs_at_lengths"] == [4, 8, 16, 32]


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
