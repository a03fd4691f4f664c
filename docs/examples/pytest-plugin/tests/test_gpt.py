"""Tests of your own that run tfcheck, through the plugin's tfcheck_run fixture (docs/pytest-plugin.md)."""
import pytest

import tfcheck


@pytest.mark.tfcheck
def test_gpt_returns_logits(tfcheck_run):
    tfcheck_run.assert_pass("model:GPT", only=["shape.contract"])


@pytest.mark.tfcheck
def test_loud_embedding_encoder_warns_at_most(tfcheck_run):
    report = tfcheck_run.assert_pass("model:LoudEmbeddingEncoder", only=["embedding.scale"])  # fails when strict
    assert report.status is tfcheck.Status.WARN
