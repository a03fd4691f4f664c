"""The compact text report, golden: fixed width, colour off, seconds normalised. ``TFCHECK_UPDATE_SNAPSHOTS=1``
rewrites tests/golden/ from a real run (read the diff before committing it)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch

import tfcheck
from tfcheck.ui.numbers import brief, seconds, shorten_reprs
from tfcheck.ui.render import render_text

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
UPDATE = os.environ.get("TFCHECK_UPDATE_SNAPSHOTS") == "1"
#: a passing model, a model whose forward crashes, a model with two failures
MODELS = {"passing": "reference_model:TransformerLM", "crashing": "reference_model.broken:LinearInFeaturesMismatch",
          "two-failures": "reference_model.broken:CausalMaskAfterSoftmax"}


def _normal(text: str) -> str:
    return re.sub(r" +<?\d+(\.\d+)? s\b", " N s", text)


@pytest.fixture(scope="module")
def reports():
    return {name: tfcheck.run_checks(spec) for name, spec in MODELS.items()}


@pytest.mark.parametrize("name", MODELS)
def test_the_report_is_its_golden_text(reports, name):
    text = _normal(render_text(reports[name], width=100))
    golden = GOLDEN / f"report-{name}.txt"
    if UPDATE:
        golden.write_text(text, "utf-8")
    assert text == golden.read_text("utf-8"), f"{golden.name} differs (TFCHECK_UPDATE_SNAPSHOTS=1 rewrites it)"


def test_every_line_fits_the_width_and_has_no_trailing_space(reports):
    for report in reports.values():
        for line in render_text(report, width=100).splitlines():
            assert line == line.rstrip() and len(line) <= 100, repr(line)


def test_a_crashing_model_fits_in_25_lines_with_where_first_and_the_verdict_last(reports):
    lines = render_text(reports["crashing"], width=100).splitlines()
    assert len(lines) <= 25, len(lines)
    assert "18 checks blocked by forward.smoke (-v lists them)" in lines[2]
    problem = lines.index("FAIL forward.smoke")
    assert lines[problem + 1].startswith("  where: module 'layers.0.ffn.w_2' at reference_model/broken/shapes.py:31")
    assert sum("(21x64 and 32x32)" in line for line in lines) == 1  # the problem once, not once per blocked check
    assert re.fullmatch(r"FAIL 1 failed, 18 blocked, 0 warnings in \S+ s", lines[-1])


def test_verbose_names_the_blocked_checks_and_shows_the_evidence_and_every_assumption(reports):
    text = render_text(reports["crashing"], width=100, verbose=True)
    assert "SKIP  shape.contract" in text and "(-v lists them)" not in text
    assert "evidence:" in text and "  incoming_last_dim: 64" in text
    assert "kind = encoder  (__tfcheck__ on LinearInFeaturesMismatch)" in text


def test_the_guessed_line_names_what_was_not_declared_and_leaves_out_what_was(reports):
    guessed = next(line for line in render_text(reports["passing"], width=300).splitlines()
                   if line.startswith("guessed: "))
    assert "vocab_size=101 (config.vocab_size)" in guessed
    assert "kind=" not in guessed and "causal=" not in guessed  # declared in the model's __tfcheck__


def test_numbers_in_text_have_three_significant_figures():
    assert shorten_reprs("scale 0.5118308663368225 vs 0.3536") == "scale 0.512 vs 0.3536"
    assert brief({"change": 2.0000001e-07, "dtype": "torch.float32", "n": 3}) == "{change: 2e-07, dtype: float32, n: 3}"
    assert [seconds(s) for s in (0.001, 0.037, 2.7, 42.42, 131.2)] == ["<0.01 s", "0.04 s", "2.70 s", "42.4 s",
                                                                        "131 s"]


class GuessedDecoder(torch.nn.Module):
    """A GPT whose causality tfcheck guesses (it has generate()), and whose attention has no mask at all."""

    def __init__(self, vocab_size=50, d_model=16):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab_size, d_model)
        self.attn = torch.nn.MultiheadAttention(d_model, 2, batch_first=True)
        self.head = torch.nn.Linear(d_model, vocab_size)

    def forward(self, idx):
        x = self.emb(idx)
        return self.head(x + self.attn(x, x, x, need_weights=False)[0])

    def generate(self, idx):
        return idx


def test_a_failing_verdict_names_the_guesses_its_check_read_beside_it():
    report = tfcheck.run_checks(GuessedDecoder, only=["mask.causal"])
    result = report.models[0].result("mask.causal")
    assert result.status is tfcheck.Status.FAIL and "causal" in result.reads
    block = render_text(report, width=300).split("FAIL mask.causal\n")[1]
    assumes = next(line for line in block.splitlines() if "assumes (guessed" in line)
    assert "causal=True (" in assumes and "kind=decoder (" in assumes, assumes
    declared = render_text(tfcheck.run_checks(GuessedDecoder, only=["mask.causal"], causal=True), width=300)
    assert "causal=True" not in declared.split("FAIL mask.causal\n")[1].split("guessed:")[0]
