"""Minimal failing examples (tfcheck.tools.shrinking): after a mask or batch check fails, hypothesis shrinks the
failure to the smallest batch, length and padding that still show it; the search is deterministic, writes nothing,
ignores the user's hypothesis profile, and costs nothing on a correct model."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import tfcheck
from helpers import result
from reference_model import TransformerLM, broken
from reference_model.models import padding_mask
from tfcheck import Status
from tfcheck.shrinking import describe_padding, replay  # the public path the replay lines print
from tfcheck.tools import shrinking

CAUSAL, PADDING, BATCH = "mask.causal", "mask.padding", "batch.independence"
ROOT = Path(__file__).resolve().parents[2]


class LMWithShortCausalCache(TransformerLM):
    """A causal mask cached for 4 positions and padded with True (may attend) beyond them: correct up to
    length 4, so the smallest input that leaks has length 5 and changes position 4."""

    CACHED = 4

    def build_mask(self, tokens):
        s = tokens.size(1)
        cached = torch.tril(torch.ones(self.CACHED, self.CACHED, dtype=torch.bool, device=tokens.device))
        causal = F.pad(cached[:s, :s], (0, max(0, s - self.CACHED), 0, max(0, s - self.CACHED)), value=True)
        return padding_mask(tokens, self.config.pad_id) & causal


def minimal(model, check, **declared):
    finding = result(model, check, **declared).findings[0]
    assert finding.status is Status.FAIL, finding.message
    return finding, finding.evidence["minimal_example"]


@pytest.mark.parametrize("variant", [broken.CausalMaskOffByOne, broken.LMWithoutCausalMask, broken.CausalMaskInverted,
                                     broken.LMNormalisesOverTheSequence, "zoo_masks:TorchSeq2SeqWithoutTgtMask"])
def test_causal_leaks_shrink_to_batch_1_length_2(variant):
    finding, example = minimal(variant, CAUSAL)
    assert {k: example[k] for k in ("batch", "length", "position", "seed")} == \
        {"batch": 1, "length": 2, "position": 1, "seed": 0}
    assert example["change"] > example["tolerance"]
    assert "still leaks with batch 1, length 2: output position 0 changes by" in finding.message
    assert "when position 1 changes" in finding.message


def test_a_leak_that_needs_length_5_shrinks_to_length_5():
    finding, example = minimal(LMWithShortCausalCache, CAUSAL)
    # Position 1 reaches output 0 through the uncached key 4 (two layers): the smallest change that shows it.
    assert (example["batch"], example["length"], example["position"]) == (1, 5, 1)
    assert "still leaks with batch 1, length 5: output position 0 changes by" in finding.message
    assert finding.evidence["minimal_example_search"]["forwards"] <= shrinking.MAX_FORWARDS
    # and it is minimal: nothing of length 4 leaks
    for position in range(1, 4):
        shown = replay(LMWithShortCausalCache, CAUSAL, {"batch": 1, "length": 4, "position": position,
                                                                   "seed": 0})
        assert not shown.leaks, shown


@pytest.mark.parametrize("variant", [broken.EncoderPaddingMaskInverted, broken.EncoderPaddingMaskOnQueries,
                                     broken.EncoderPaddingMaskIgnored, broken.Seq2SeqCrossAttentionUnmasked,
                                     "zoo_masks:HFLikeInvertedMask"])
def test_padding_leaks_shrink_to_one_pad_at_the_end(variant):
    finding, example = minimal(variant, PADDING)
    assert (example["batch"], example["length"], example["pads"]) == (1, 2, ["._"])
    assert "padding leaks with batch 1, length 2, one pad at the end" in finding.message


def test_a_mask_laid_out_for_the_wrong_sample_needs_two_samples_padded_differently():
    finding, example = minimal("zoo_masks:HFLikeMaskRepeatedNotInterleaved", PADDING)
    assert (example["batch"], example["length"], example["pads"]) == (2, 2, ["..", "._"])
    assert ("padding leaks with batch 2, length 2 (sample 0 unpadded; sample 1 one pad at the end): sample 1's "
            "real output") in finding.message


def test_a_causal_model_that_ignores_its_padding_mask_leaks_only_from_a_pad_at_the_start():
    from zoo_masks import HFLikeCausalLM

    class CausalLMIgnoringPadding(HFLikeCausalLM):
        def forward(self, input_ids, attention_mask=None):
            return super().forward(input_ids)  # BUG: the padding never reaches the attention

    finding, example = minimal(CausalLMIgnoringPadding, PADDING)
    assert (example["batch"], example["length"], example["pads"]) == (1, 2, ["_."])
    assert "padding leaks with batch 1, length 2, one pad at the start" in finding.message


@pytest.mark.parametrize("variant,length,sample", [(broken.LMNormalisesOverTheBatch, 1, 0),
                                                   (broken.EncoderMergesBatchWithReshape, 2, 0),
                                                   ("zoo_flow:GPTPositionsFromBatchSize", 1, 1)])
def test_batch_mixing_shrinks_to_two_samples(variant, length, sample):
    finding, example = minimal(variant, BATCH)
    assert (example["batch"], example["length"], example["sample"]) == (2, length, sample)
    assert f"with batch 2, length {length}: sample {sample}'s output changes by" in finding.message


def test_the_replay_line_measures_the_example_again():
    finding, example = minimal("zoo_masks:HFLikeMaskRepeatedNotInterleaved", PADDING)
    line = finding.evidence["replay"]
    assert line.startswith("python -c ") and "zoo_masks:HFLikeMaskRepeatedNotInterleaved" in line
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "support"), str(ROOT)])}
    argv = shlex.split(line)
    assert argv[0] == "python", line  # what tfcheck prints for the user; run it with this interpreter, not PATH's
    out = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("shows the failure: sample 1's real output at position 0 changes by")
    # The spec builds a model with fresh random weights; the same instance gives the same numbers.
    from zoo_masks import HFLikeMaskRepeatedNotInterleaved

    model = HFLikeMaskRepeatedNotInterleaved()
    finding, example = minimal(model, PADDING)
    assert finding.evidence["replay"].startswith(
        "python -c 'from tfcheck.shrinking import replay; print(replay(MODEL, ")
    shown = replay(model, PADDING, {k: example[k] for k in ("batch", "length", "pads", "seed")})
    assert shown.leaks and shown.change == example["change"] and shown.detail == example["shows"]
    # a correct model, same example: nothing to show
    assert not replay("zoo_masks:HFLikeBmmEncoder", PADDING, {"batch": 2, "length": 2, "pads": ["..", "._"],
                                                                         "seed": 0}).leaks


def test_the_replay_line_carries_the_declarations_given_on_the_command_line():
    finding = result(broken.CausalMaskOffByOne, CAUSAL, probe_len=12).findings[0]
    assert finding.evidence["replay"].endswith(
        ', {"batch": 1, "length": 2, "position": 1, "seed": 0}, probe_len=12))\'')
    assert '"reference_model.broken.masks:CausalMaskOffByOne"' in finding.evidence["replay"]


def test_reports_are_byte_identical_across_runs():
    from zoo_masks import HFLikeMaskRepeatedNotInterleaved

    model = HFLikeMaskRepeatedNotInterleaved()  # one instance: a spec would draw new random weights each time
    runs = [_without_timings(tfcheck.run_checks(model, only=[PADDING]).to_dict()) for _ in range(2)]
    assert runs[0] == runs[1] and "minimal_example" in runs[0]


def _without_timings(report: dict) -> str:
    for entry in report["models"]:
        for check in entry["checks"]:
            check["seconds"] = 0
    return json.dumps(report, sort_keys=True)


def test_two_runs_of_the_cli_write_the_same_report_and_nothing_else(tmp_path):
    """In fresh processes, from an empty working directory: the same report, and no .hypothesis directory
    (no example database, no cache of mined constants) left behind."""
    (tmp_path / "seeded.py").write_text(
        "import torch\nfrom reference_model.broken import CausalMaskOffByOne\n\n\n"
        "def build():\n    torch.manual_seed(0)  # the same weights in both runs\n    return CausalMaskOffByOne()\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("HYPOTHESIS_STORAGE_DIRECTORY", None)
    reports = []
    for name in ("a.json", "b.json"):
        out = subprocess.run([sys.executable, "-m", "tfcheck", "check", "seeded.py:build", "--only", CAUSAL,
                              "--json", name], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 1, out.stderr
        reports.append(_without_timings(json.loads((tmp_path / name).read_text())))
    assert reports[0] == reports[1] and '"minimal_example": {' in reports[0]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == ["a.json", "b.json", "seeded.py"]


def test_the_search_writes_nowhere_and_puts_hypothesis_back_as_it_was(tmp_path):
    from hypothesis import configuration

    before = vars(configuration).get("__hypothesis_home_directory")
    configuration.set_hypothesis_home_dir(tmp_path / "users-own")
    try:
        minimal(broken.CausalMaskOffByOne, CAUSAL)
        assert vars(configuration).get("__hypothesis_home_directory") == tmp_path / "users-own"
    finally:
        configuration.set_hypothesis_home_dir(before)
    assert not (tmp_path / "users-own").exists()


def test_inside_the_search_hypothesis_stores_nothing_in_the_project_and_mines_no_user_constants(tmp_path):
    """hypothesis caches the literals it mines from local modules in .hypothesis/constants/ (even with
    database=None) and lets them bias its draws: neither may happen during tfcheck's search."""
    from hypothesis.configuration import storage_directory
    from hypothesis.internal.conjecture import providers

    mined = providers._get_local_constants
    outside = storage_directory("constants").path
    with shrinking.isolated_hypothesis():
        inside = storage_directory("constants").path
        assert Path.cwd() not in inside.parents and "tfcheck-hypothesis-" in str(inside)
        assert not providers._get_local_constants().integers
    assert storage_directory("constants").path == outside and providers._get_local_constants is mined
    assert not inside.parent.exists()  # the scratch directory is removed


def test_a_users_hypothesis_profile_changes_nothing_and_stays_loaded(tmp_path, monkeypatch):
    from hypothesis import Verbosity, settings
    from hypothesis.database import DirectoryBasedExampleDatabase

    from zoo_masks import HFLikeMaskRepeatedNotInterleaved

    model = HFLikeMaskRepeatedNotInterleaved()
    expected = result(model, PADDING).findings[0].to_dict()
    previous = settings._current_profile
    settings.register_profile("tfcheck-test-user", max_examples=3, derandomize=False, verbosity=Verbosity.verbose,
                              database=DirectoryBasedExampleDatabase(str(tmp_path / "db")), deadline=10)
    settings.load_profile("tfcheck-test-user")
    try:
        got = result(model, PADDING).findings[0].to_dict()
        assert settings.default.max_examples == 3 and settings._current_profile == "tfcheck-test-user"
    finally:
        settings.load_profile(previous)
    assert got == expected
    assert not (tmp_path / "db").exists()


def test_correct_models_cost_no_extra_forward():
    calls = []
    original = shrinking.search
    shrinking.search = lambda *a, **k: calls.append(a) or original(*a, **k)
    try:
        lm = tfcheck.run_checks("reference_model:TransformerLM", only=[CAUSAL, PADDING, BATCH]).models[0]
    finally:
        shrinking.search = original
    assert calls == []
    assert lm.result(CAUSAL).cost.forward == 2 and lm.result(PADDING).cost.forward == 2
    assert all("minimal_example" not in f.evidence for f in lm.findings())


def test_the_search_is_bounded_by_its_forward_budget(monkeypatch):
    monkeypatch.setattr(shrinking, "MAX_FORWARDS", 3)
    finding = result(LMWithShortCausalCache, CAUSAL).findings[0]
    searched = finding.evidence["minimal_example_search"]
    assert finding.status is Status.FAIL  # the failure stands whatever the search finds
    assert searched["forwards"] <= 3 and searched["stopped_by"] == "the budget of 3 forwards"
    monkeypatch.setattr(shrinking, "MAX_FORWARDS", 1)  # not even one example (two forwards) fits
    finding = result(LMWithShortCausalCache, CAUSAL).findings[0]
    assert finding.status is Status.FAIL and finding.evidence["minimal_example"] is None
    assert "Smallest input" not in finding.message
    assert finding.evidence["minimal_example_search"]["result"].startswith("no smaller input showed the failure")


def test_a_leak_beyond_the_default_lengths_is_searched_up_to_the_checks_own_length():
    class LMWithCacheOf20(LMWithShortCausalCache):
        CACHED = 20

    assert result(LMWithCacheOf20, CAUSAL).status is Status.PASS  # lengths 7 and 16 cannot see it
    finding, example = minimal(LMWithCacheOf20, CAUSAL, probe_len=32)
    assert example["length"] == 21 and "still leaks with batch 1, length 21" in finding.message


def test_inside_a_users_hypothesis_test_the_search_is_skipped_with_the_reason():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    seen = []

    @settings(max_examples=1, database=None, deadline=None)
    @given(st.just(0))
    def users_property(_):
        seen.append(result(broken.CausalMaskOffByOne, CAUSAL).findings[0])

    users_property()
    assert seen[0].status is Status.FAIL
    assert seen[0].evidence["minimal_example"] is None
    assert "inside a hypothesis test" in seen[0].evidence["minimal_example_search"]["result"]


def test_a_model_that_raises_at_small_sizes_keeps_its_failure():
    class RaisesBelowLength4(TransformerLM):
        def forward(self, tokens):
            if tokens.size(1) < 4:
                raise RuntimeError("needs at least 4 tokens")
            return super().forward(tokens)

    class LeaksAndRaisesBelowLength4(RaisesBelowLength4, broken.LMWithoutCausalMask):
        pass

    finding, example = minimal(LeaksAndRaisesBelowLength4, CAUSAL)
    assert (example["batch"], example["length"], example["position"]) == (1, 4, 1)


def test_describe_padding():
    d = describe_padding
    assert d((True, True)) == "unpadded"
    assert d((True, False)) == "one pad at the end"
    assert d((False, False, True)) == "2 pads at the start"
    assert d((True, False, True, False, True)) == "2 pads at positions 1, 3"
    assert d((True, False, True)) == "one pad at position 1"


def test_replay_refuses_a_check_without_examples():
    with pytest.raises(tfcheck.UsageError,
                       match="checks with minimal examples are: batch.independence, mask.causal, mask.padding$"):
        replay("reference_model:TransformerLM", "shape.contract", {})
    with pytest.raises(tfcheck.UsageError, match="missing position"):
        replay("reference_model:TransformerLM", CAUSAL, {"batch": 1, "length": 2, "seed": 0})


def test_a_budget_that_runs_out_during_the_search_keeps_the_failure(monkeypatch):
    from tfcheck.engine.budget import BudgetExceeded
    from tfcheck.tools import shrinking

    def out_of_time(*args, **kwargs):
        raise BudgetExceeded(1.0, 1.2)

    monkeypatch.setattr(shrinking, "search", out_of_time)
    result = tfcheck.run_checks(broken.CausalMaskOffByOne, only=["mask.causal"]).models[0].result("mask.causal")
    assert result.status is tfcheck.Status.FAIL, str(result)
    assert "stopped by the check's time budget" in result.findings[0].evidence["minimal_example_search"]["result"]
