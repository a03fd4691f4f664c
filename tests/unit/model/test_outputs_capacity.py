"""The outputs and capacity rules of the front door (issue 14): a position table tfcheck finds in the trial
forward caps every probe; a stated capacity the table contradicts still fails shape.contract; flattened
(batch·length, vocab) outputs are read per position (and said inconclusive where their rows cannot be); a head
forward never calls is applied by every check. Each rule on fixtures of two naming styles, zero-config (no
FAIL, every WARN justified here) and with one injected defect caught by the right check."""
from __future__ import annotations

import types

import pytest
import torch
import torch.nn as nn

import frontdoor_out_capacity as cap
import frontdoor_out_flat as flat
import frontdoor_out_head as head
import tfcheck
from tfcheck.engine.context import CheckContext
from tfcheck.engine.loading import load_declared
from tfcheck.model.facts.facts import Facts
from tfcheck.model.trial.outputs import extract_output, unflattened
from tfcheck.report.status import Status


def run(model, **declared):
    return tfcheck.run_checks(model, **declared).models[0]


def problems(report) -> dict[str, list[str]]:
    return {r.check: [f"{f.status.name} {f.message}" for f in r.findings]
            for r in report.results if r.status in (Status.FAIL, Status.WARN, Status.ERROR)}


def assumption(report, key):
    return next(a for a in report.assumptions if a.key == key)


def settled(model, **declared):
    subject = load_declared(model, declared, "test")
    CheckContext(subject).settle()
    return subject


def only(model, check, **declared):
    return tfcheck.run_checks(model, only=[check], **declared).models[0].result(check)


# ----- capacity ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("model, table", [(cap.BlockGPT, "'wpe.weight' of 32 rows indexed by positions"),
                                          (cap.TinyTransformerLM, "'pos_emb' of 32 rows cut to 7")])
def test_a_32_position_table_caps_the_probes_with_no_declaration(model, table):
    report = run(model)
    assert problems(report) == {}
    stated = assumption(report, "capacity")
    assert stated.value == 32 and table in stated.source
    checked = report.result("shape.contract").findings[0].evidence["checked"]
    assert max(c["length"] for c in checked) == 32


@pytest.mark.parametrize("model, check", [(cap.LeakyBlockGPT, "mask.causal"),
                                          (cap.UnscaledTinyTransformerLM, "attention.scale")])
def test_a_defect_in_a_capacity_fixture_is_still_caught(model, check):
    assert only(model, check).status is Status.FAIL


@pytest.mark.parametrize("model, length, stated", [(cap.MisbuiltTable, 48, "max_len=48 (model.max_len)"),
                                                   (cap.ShortTableLM, 64, "max_len=128 (config.max_seq_len)")])
def test_a_stated_capacity_the_table_contradicts_fails_shape_contract(model, length, stated):
    result = only(model, "shape.contract")
    assert result.status is Status.FAIL
    assert f"length {length}" in result.findings[0].message
    promised = assumption(run_model_facts(model), "capacity promised")
    assert promised.value == length and promised.source.startswith(stated)


def run_model_facts(model):
    return settled(model)


def test_a_length_tfcheck_filled_is_no_promise():
    class FilledLength(nn.Module):
        """max_len is required, so tfcheck fills it; the table is built with 32 rows whatever it is."""

        def __init__(self, vocab_size, max_len):
            super().__init__()
            self.max_len = max_len
            self.emb, self.pos = nn.Embedding(vocab_size, 32), nn.Embedding(32, 32)
            self.out = nn.Linear(32, vocab_size)

        def forward(self, x):
            return self.out(self.emb(x) + self.pos(torch.arange(x.size(1))))

    subject = settled(FilledLength)
    assert subject.loaded.filled.get("max_len", 0) > 32  # tfcheck chose it
    assert subject.facts.capacity == 32 and subject.length_cap() == 32
    assert not any(a.key == "capacity promised" for a in subject.assumptions)
    assert only(FilledLength, "shape.contract").status is Status.PASS


def test_a_slice_that_stops_at_no_probe_length_is_no_position_table():
    class FusedSplit(nn.Module):
        """Cuts a fused weight to d_model rows: a slice, but no position table (its stop is not the length)."""

        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(101, 32)
            self.w = nn.Parameter(torch.randn(48, 32) * 0.1)
            self.out = nn.Linear(32, 101)

        def forward(self, x):
            return self.out(self.emb(x) @ self.w[:32].T)

    subject = settled(FusedSplit)
    assert subject.facts.capacity is None
    assert subject.length_cap() == 64


# ----- flattened outputs -------------------------------------------------------------------------------

@pytest.mark.parametrize("model", [flat.FlatLogitsGPT, flat.PaddedTagger])
def test_flattened_logits_are_read_per_position(model):
    report = run(model)
    found = problems(report)
    if model is flat.PaddedTagger:
        # Nothing in a hand-written bidirectional model says it is one: mask.causal measures the
        # bidirectional attention and warns that it would be a failure for a causal model.
        assert list(found) == ["mask.causal"] and "kind is unknown" in found["mask.causal"][0]
    else:
        assert found == {}
    layout = assumption(report, "output layout")
    assert layout.value == "(batch·length, 101) rows read as (batch, length, 101)"
    assert "(21, 101) at batch 3, length 7" in layout.source
    assert report.result("shape.contract").status is Status.PASS


@pytest.mark.parametrize("model, check", [(flat.LeakyFlatLogitsGPT, "mask.causal"),
                                          (flat.UnmaskedPaddedTagger, "mask.padding")])
def test_a_defect_behind_flattened_logits_is_caught(model, check):
    assert only(model, check).status is Status.FAIL


def test_rows_that_are_not_batch_times_length_are_inconclusive_with_the_reason():
    report = run(flat.LastDroppedLM)
    assert not [r for r in report.results if r.status in (Status.FAIL, Status.ERROR)]
    contract = report.result("shape.contract").findings[0]
    assert contract.status is Status.SKIP and "inconclusive" in contract.message
    assert "not batch × length" in contract.message and "flatten them in the loss" in contract.message
    assert "not batch × length" in assumption(report, "output layout").value


def test_cross_dependence_reads_flattened_seq2seq_rows_per_sample():
    # Read as batch-first rows, (5·t, vocab) would compare rows 2, 3 and 4 of one sample's first positions.
    aligned = only(flat.FlatEncoderDecoder, "cross.dependence")
    assert aligned.status is Status.PASS and len(aligned.findings) == 2
    dropped = only(flat.LastDroppedEncoderDecoder, "cross.dependence")
    assert [f.status for f in dropped.findings] == [Status.SKIP]
    assert "flattened to 20 rows, which is not batch × length = 5 × 5" in dropped.findings[0].message


def test_real_token_rows_are_inconclusive_where_a_batch_is_padded():
    padding = only(flat.RealTokensTagger, "mask.padding")
    assert padding.status is Status.SKIP and "not one entry per position" in padding.findings[0].message
    assert only(flat.RealTokensTagger, "shape.contract").status is Status.PASS  # unpadded rows are b·t


def test_a_seq_first_model_s_flattened_rows_are_read_length_first():
    # Token ids reach a seq-first model transposed by the sequence-layout rule (tfcheck.model.trial.sequence_layout).
    report = run(flat.SeqFirstLM)
    assert problems(report) == {}
    assert assumption(report, "output layout").value == "(length·batch, 101) rows read as (batch, length, 101)"


def test_seq_first_rows_are_put_back_batch_first():
    b, s, v = 3, 5, 11
    per_position = torch.randn(b, s, v)
    flattened = per_position.transpose(0, 1).reshape(s * b, v)  # (s, b, V).view(-1, V)
    subject = types.SimpleNamespace(facts=Facts(batch_first=False, output="tensor", flat_output=True))
    seq_first = unflattened(subject, flattened, b, s)  # type: ignore[arg-type]
    assert torch.equal(extract_output(subject, seq_first), per_position)  # type: ignore[arg-type]
    subject.facts.batch_first = None
    assert torch.equal(unflattened(subject, per_position.reshape(b * s, v), b, s), per_position)  # type: ignore


# ----- a head outside forward ------------------------------------------------------------------------

@pytest.mark.parametrize("model, name, cls", [(head.EncoderDecoder, "generator", "Generator"),
                                              (head.StatesLM, "lm_head", "Linear")])
def test_a_head_forward_never_calls_is_applied_by_every_check(model, name, cls):
    report = run(model)
    assert problems(report) == {}
    found = assumption(report, "head")
    assert found.value == name and f"'{name}' ({cls}, an nn.Linear 32 → 101" in found.source
    assert report.result("train.grad_flow").status is Status.PASS
    assert report.result("train.overfit_batch").status is Status.PASS  # the copy's head is trained
    shape = report.result("shape.contract").findings[0].evidence["checked"][0]["output_shape"]
    assert shape[-1] == 101


@pytest.mark.parametrize("model", [head.SequenceAxisEncoderDecoder, head.LeakyStatesLM])
def test_a_defect_seen_through_the_head_is_caught(model):
    # SequenceAxisEncoderDecoder: log_softmax(dim=1) normalises over the target positions, so each output
    # depends on the later ones: a causal leak made in the head.
    assert only(model, "mask.causal").status is Status.FAIL


def test_several_heads_name_the_candidates_and_the_declaration_works():
    report = run(head.TwoHeadsLM)
    assert list(problems(report)) == ["shape.contract"]
    message = report.result("shape.contract").findings[0].message
    assert "(lm_head, next_next_head)" in message and "declare head=ATTR (e.g. head=lm_head)" in message
    declared = run(head.TwoHeadsLM, head="lm_head")
    assert problems(declared) == {}
    grad = declared.result("train.grad_flow").findings[0]
    assert grad.evidence["heads_outside_forward"] == ["next_next_head"]


def test_a_declared_head_that_names_nothing_is_a_usage_error_that_names_the_submodules():
    with pytest.raises(tfcheck.UsageError) as refused:  # before any check runs (exit 2 on the command line)
        only(head.TwoHeadsLM, "forward.smoke", head="lm_heads")
    message = str(refused.value)
    assert "head=lm_heads (run_checks() argument) names no submodule of TwoHeadsLM" in message
    assert "lm_head" in message and "next_next_head" in message
