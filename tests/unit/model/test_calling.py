"""How tfcheck calls a hand-written model's forward with no declaration (issue 14, the front door): the decoder
input, the look-ahead mask its caller builds, a padding mask built inside from pad ids, the sequence-first layout;
and, when a forward still cannot be called, a message whose one declaration works when followed.

Each rule is proven on fixtures of two naming styles (tests/support/frontdoor_call_*.py): zero-config, every
report has no FAIL and each WARN is justified here; a copy with one defect is caught by the right check."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import frontdoor_call_pads as pads
import frontdoor_call_seqfirst as seqfirst
import frontdoor_call_tgtmask as tgtmask
import tfcheck
from tfcheck.engine.runner import load_subject, settle_facts
from tfcheck.errors import SpecError
from tfcheck.model.trial.mask_uses import MaskFollower
from tfcheck.report.status import Status

TUTORIAL_FILL = "-1e+09"  # the tutorials' masked_fill(mask == 0, -1e9) / logits += mask * -1e9: float16 overflows
#: check -> a piece of the warning's message, for the warnings each correct fixture must give (and why)
WARNED = {
    # the tutorials' -1e9 fill does not fit float16: true of the code, explained by numerics.half's own text
    "PadIdSeq2Seq": {"numerics.half": TUTORIAL_FILL,
                     # xavier-initialised lookups never scaled by sqrt(d_model), as that repository's default
                     "embedding.scale": "the tokens drown in the positions"},
    "PadIdxTransformer": {"numerics.half": TUTORIAL_FILL},
    "CallerMaskedSeq2Seq": {"numerics.half": TUTORIAL_FILL},
    "LookAheadSeq2Seq": {"numerics.half": TUTORIAL_FILL},
    "WordLanguageModel": {},
    "TutorialSeqFirstLM": {},
}
FIXTURES = [(seqfirst, "WordLanguageModel"), (seqfirst, "TutorialSeqFirstLM"), (pads, "PadIdSeq2Seq"),
            (pads, "PadIdxTransformer"), (tgtmask, "CallerMaskedSeq2Seq"), (tgtmask, "LookAheadSeq2Seq")]


def findings(report, status: Status) -> dict[str, str]:
    return {r.check: f.message for r in report.models[0].results for f in r.findings if f.status is status}


def assumed(report, key: str) -> list:
    return [(a.value, a.source) for a in report.models[0].assumptions if a.key == key]


@pytest.mark.parametrize("module, name", FIXTURES, ids=[n for _, n in FIXTURES])
def test_each_front_door_fixture_runs_zero_config_without_a_failure(module, name):
    report = tfcheck.run_checks(getattr(module, name))
    assert not findings(report, Status.FAIL) and not findings(report, Status.ERROR)
    warned = findings(report, Status.WARN)
    assert set(warned) == set(WARNED[name]), warned
    for check_id, why in WARNED[name].items():
        assert why in warned[check_id]


# ----- sequence-first -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, source", [("WordLanguageModel", "batch_first = False"),
                                          ("TutorialSeqFirstLM", "took axis 0 as the length")])
def test_a_sequence_first_lm_gets_its_ids_transposed_and_its_output_read_back(name, source):
    subject = load_subject(getattr(seqfirst, name), {})
    settle_facts(subject)
    report = tfcheck.run_checks(getattr(seqfirst, name), only=["shape.contract"])
    assert findings(report, Status.PASS)["shape.contract"].startswith("output is (batch, length, 101)")
    ((value, why),) = assumed(report, "layout")
    assert "(length, batch" in value and source in why
    args, kwargs = subject.make_inputs(3, 7)
    laid_out, _ = subject.to_model_layout(args, kwargs)
    assert laid_out[0].shape == (7, 3)  # the token ids, not only float features


def test_a_declared_layout_outranks_what_the_trial_reads():
    # Declared batch-first, the sequence-first LM is fed (batch, length) ids: its attention runs across the batch.
    report = tfcheck.run_checks(seqfirst.TutorialSeqFirstLM, only=["batch.independence"], layout="batch_first")
    assert assumed(report, "layout") == [("(batch, length, ...)", "run_checks() argument")]
    assert "batch.independence" in findings(report, Status.FAIL)


def test_the_batch_first_mismatch_still_fails_batch_independence():
    report = tfcheck.run_checks("zoo_flow:MultiheadAttentionBatchFirstMismatch", only=["batch.independence"])
    assert "batch.independence" in findings(report, Status.FAIL)
    assert not assumed(report, "layout")  # its position slice reads axis 1 as the length: left batch-first


@pytest.mark.parametrize("name", ["WordLanguageModelMaskOffByOne", "TutorialSeqFirstLMWithoutMask"])
def test_a_sequence_first_lm_with_a_broken_own_mask_shows_the_leak(name):
    # Their kind is unknown (nothing in the signature says decoder), but each builds a look-ahead mask (one
    # shifted by one, one never passed on): the mask-building code says causal, so the leak fails.
    report = tfcheck.run_checks(getattr(seqfirst, name), only=["mask.causal"])
    assert "causal leak" in findings(report, Status.FAIL)["mask.causal"]
    assert any("forward builds a look-ahead mask itself" in source or "a triangle built with" in source
               for _, source in assumed(report, "causal"))


# ----- padding masks built inside from the pad ids ---------------------------------------------------------

@pytest.mark.parametrize("name, source_pad, target_pad", [("PadIdSeq2Seq", 1, 2), ("PadIdxTransformer", 1, 0)])
def test_a_padding_mask_built_from_pad_ids_is_read_per_side(name, source_pad, target_pad):
    subject = load_subject(getattr(pads, name), {})
    settle_facts(subject)
    assert str(subject.facts.mask) == "internal" and subject.facts.kind == "seq2seq"
    assert (subject.facts.pad_id, subject.facts.target_pad_id) == (source_pad, target_pad)
    tokens = subject.random_tokens(64, 64, torch.Generator().manual_seed(0))
    assert not bool(((tokens == source_pad) | (tokens == target_pad)).any())


@pytest.mark.parametrize("name, check_id", [("PadIdSeq2SeqPadMaskOnQueries", "mask.padding"),
                                            ("PadIdxTransformerPadMaskOnQueries", "mask.padding"),
                                            ("PadIdSeq2SeqCrossAttentionUnmasked", "cross.dependence"),
                                            ("PadIdxTransformerWithoutSubsequentMask", "mask.causal")])
def test_a_pad_id_model_with_one_defect_is_caught(name, check_id):
    report = tfcheck.run_checks(getattr(pads, name), only=[check_id])
    assert check_id in findings(report, Status.FAIL)


def test_a_pad_idx_attribute_alone_is_no_evidence_of_an_internal_mask():
    subject = load_subject("zoo_masks:PadIdOnlyEncoder", {})
    settle_facts(subject)
    assert str(subject.facts.mask) == "none"


# ----- the look-ahead mask its caller builds -----------------------------------------------------------------

@pytest.mark.parametrize("name, argument, convention", [("CallerMaskedSeq2Seq", "tgt_mask", "keep"),
                                                        ("LookAheadSeq2Seq", "look_ahead_mask", "pad")])
def test_an_optional_look_ahead_mask_is_given_in_the_convention_its_consumer_reads(name, argument, convention):
    subject = load_subject(getattr(tgtmask, name), {})
    settle_facts(subject)
    assert subject.facts.causal_mask.argument == argument and subject.facts.causal_mask.convention == convention
    assert any(r == "causal_mask" for _, r in subject.facts.call_plan)


@pytest.mark.parametrize("name", ["CallerMaskedSeq2SeqIgnoresTgtMask", "LookAheadSeq2SeqMaskShifted"])
def test_a_decoder_that_misuses_the_callers_mask_fails_mask_causal(name):
    report = tfcheck.run_checks(getattr(tgtmask, name), only=["mask.causal"])
    assert "causal leak" in findings(report, Status.FAIL)["mask.causal"]


class BuildsItsOwnWhenNone(tgtmask.CallerMaskedSeq2Seq):
    """forward(..., tgt_mask=None) that builds the look-ahead mask itself when none is given."""

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        if tgt_mask is None:
            tgt_mask = torch.tril(torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool)).expand(tgt.size(0), -1, -1)
        return super().forward(src, tgt, src_mask, tgt_mask)


class BuildsItsOwnWrongly(BuildsItsOwnWhenNone):
    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        if tgt_mask is None:  # BUG: diagonal=1 lets each position see the next
            tgt_mask = torch.tril(torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool), diagonal=1)
            tgt_mask = tgt_mask.expand(tgt.size(0), -1, -1)
        return tgtmask.CallerMaskedSeq2Seq.forward(self, src, tgt, src_mask, tgt_mask)


def test_a_model_that_builds_its_own_look_ahead_mask_is_left_to_it():
    subject = load_subject(BuildsItsOwnWhenNone, {})
    settle_facts(subject)
    assert str(subject.facts.causal_mask) == "none"
    assert all(r != "causal_mask" for _, r in subject.facts.call_plan)
    assert any("builds its own" in str(a.value) for a in subject.assumptions if a.key == "tgt_mask")
    report = tfcheck.run_checks(BuildsItsOwnWrongly, only=["mask.causal"])  # its own mask is what is tested
    assert "causal leak" in findings(report, Status.FAIL)["mask.causal"]


def test_a_decoder_whose_mask_argument_has_a_generic_name_gets_no_look_ahead_mask():
    report = tfcheck.run_checks(tgtmask.ForgetfulDecoder, only=["mask.causal"])
    assert "causal leak" in findings(report, Status.FAIL)["mask.causal"]


def test_the_causal_mask_declaration_gives_a_generic_argument_the_mask():
    report = tfcheck.run_checks(tgtmask.ForgetfulDecoder, only=["mask.causal"], causal_mask="mask")
    assert "mask.causal" in findings(report, Status.PASS)


# ----- how the consumer reads the probe mask -----------------------------------------------------------------

def follow(use) -> str:
    keep = torch.ones(4, 4, dtype=torch.bool).tril()
    follower = MaskFollower({id(keep): ("m", keep)}, frozenset({4}))
    scores = torch.zeros(2, 2, 4, 4)
    for name, args, kwargs, out in use(keep, scores):
        inputs = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
        follower.on_op(name, args, kwargs, inputs, [out], "here")
    return follower.uses[0].reads


def test_the_op_a_mask_reaches_says_how_it_is_read():
    def keep_fill(m, s):
        eq = m == 0
        return [("eq", (m, 0), {}, eq), ("masked_fill", (s, eq, -1e9), {}, s)]

    def blocked_fill(m, s):
        return [("masked_fill", (s, m, float("-inf")), {}, s)]

    def scaled_add(m, s):
        scaled = m * -1e9
        return [("mul", (m, -1e9), {}, scaled), ("add_", (s, scaled), {}, s)]

    def sdpa(m, s):
        return [("scaled_dot_product_attention", (s, s, s, m), {}, s)]

    assert [follow(u) for u in (keep_fill, blocked_fill, scaled_add, sdpa)] == ["keep", "blocked", "blocked", "keep"]


# ----- a forward that still cannot be called: the hint works when followed -------------------------------------

class DecoderInputWithOneEmbedding(nn.Module):
    """forward(src, dec_inp) on a shared vocabulary: one embedding, so nothing says encoder-decoder."""

    def __init__(self):
        super().__init__()
        self.embed, self.head = nn.Embedding(101, 32), nn.Linear(32, 101)

    def forward(self, src, dec_inp):
        return self.head(self.embed(dec_inp) + self.embed(src).mean(1, keepdim=True))


class RequiresABiasMask(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.head = nn.Embedding(101, 32), nn.Linear(32, 101)

    def forward(self, x, attn_bias_mask):
        h = self.embed(x)
        scores = (h @ h.transpose(1, 2)).masked_fill(attn_bias_mask == 0, -1e9)
        return self.head(scores.softmax(-1) @ h)


class RequiresASpeaker(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.head = nn.Embedding(101, 32), nn.Linear(32, 101)

    def forward(self, x, speaker):
        return self.head(self.embed(x) + speaker[:, None, :])


def speaker_extra(batch, length):
    return {"speaker": torch.randn(batch, 32)}


@pytest.mark.parametrize("model, said, declared", [
    (DecoderInputWithOneEmbedding, "declare kind=seq2seq", {"kind": "seq2seq"}),
    (RequiresABiasMask, "declare causal_mask=attn_bias_mask", {"causal_mask": "attn_bias_mask"}),
    (RequiresABiasMask, "mask=attn_bias_mask:keep", {"mask": "attn_bias_mask:keep"}),
    (RequiresASpeaker, "extra=module:factory", {"extra": speaker_extra}),
    (RequiresASpeaker, "extra='{\"speaker\": VALUE}'", {"extra": speaker_extra}),
])
def test_a_forward_tfcheck_cannot_call_names_a_declaration_that_works(model, said, declared):
    with pytest.raises(SpecError, match=re.escape(said)):
        load_subject(model, {})
    report = tfcheck.run_checks(model, only=["forward.smoke"], **declared)
    assert "forward.smoke" in findings(report, Status.PASS)


TOKEN_CHECKS = ("batch.independence", "mask.causal", "position.sensitivity", "attention.heads")


def test_extra_arguments_are_held_fixed_and_every_token_check_still_runs():
    # The hint's declaration, followed: the speaker is made per probe (its batch axis follows the probe's), the
    # tokens are still tfcheck's to perturb, so no token check is switched off (as inputs= would).
    report = tfcheck.run_checks(RequiresASpeaker, extra=speaker_extra).models[0]
    ran = {r.check for r in report.results}
    assert set(TOKEN_CHECKS) - {"attention.heads"} <= ran, report  # this model has no attention to split
    off = {a.value for a in report.assumptions if a.key == "not applicable"}
    assert not off & set(TOKEN_CHECKS), off
    assert not [r.check for r in report.results if r.status in (Status.FAIL, Status.ERROR)], report


class StartsAt(nn.Module):
    """llama's forward(tokens, start_pos): a causal decoder whose positions start at start_pos."""

    def __init__(self, leaks=False):
        super().__init__()
        self.embed, self.pos, self.head = nn.Embedding(101, 32), nn.Embedding(64, 32), nn.Linear(32, 101)
        self.leaks = leaks

    def forward(self, tokens, start_pos: int):
        t = tokens.size(1)
        h = self.embed(tokens) + self.pos(torch.arange(start_pos, start_pos + t))
        scores = h @ h.transpose(1, 2) / 32 ** 0.5
        future = torch.ones(t, t, dtype=torch.bool).triu(2 if self.leaks else 1)
        return self.head(scores.masked_fill(future, float("-inf")).softmax(-1) @ h)


def test_a_required_start_position_is_given_as_zero_and_stated():
    report = tfcheck.run_checks(StartsAt).models[0]
    start = next(a for a in report.assumptions if a.key == "start_pos")
    assert start.value == 0 and "start position" in start.source and "extra=" in start.source
    assert report.result("mask.causal").status is Status.PASS, report
    leaky = tfcheck.run_checks(StartsAt(leaks=True), only=["mask.causal"]).models[0]
    assert leaky.result("mask.causal").status is Status.FAIL, leaky
    declared = tfcheck.run_checks(StartsAt, only=["forward.smoke"], extra='{"start_pos": 5}').models[0]
    assert declared.result("forward.smoke").status is Status.PASS


def test_a_tensor_of_positions_is_never_read_as_a_start_position():
    class TakesPositions(StartsAt):
        def forward(self, tokens, start_pos: torch.Tensor):
            return super().forward(tokens, int(start_pos))

    with pytest.raises(SpecError, match="extra="):
        load_subject(TakesPositions, {})


class LabelsBesideTwoTables(nn.Module):
    """A decoder-only training forward(idx, targets) with a token and a position table (no max length stated):
    two embeddings, a required loss target, which the trial shows are labels (the output keeps idx's length)."""

    def __init__(self):
        super().__init__()
        self.wte, self.wpe, self.head = nn.Embedding(101, 32), nn.Embedding(64, 32), nn.Linear(32, 101)

    def forward(self, idx, targets):
        t = idx.size(1)
        h = self.wte(idx) + self.wpe(torch.arange(t))
        future = torch.ones(t, t, dtype=torch.bool).triu(1)
        logits = self.head((h @ h.transpose(1, 2)).masked_fill(future, float("-inf")).softmax(-1) @ h)
        return logits, nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


def test_required_targets_are_labels_unless_the_output_follows_their_length():
    report = tfcheck.run_checks(LabelsBesideTwoTables, only=["forward.smoke"]).models[0]
    targets = next(a for a in report.assumptions if a.key == "targets")
    # its loss cannot take targets of another length: the forward raises, and the reading falls back to labels
    assert "labels" in str(targets.value) and "raised" in targets.source, targets
    assert report.result("forward.smoke").status is Status.PASS, report
    assert all(a.value != "seq2seq" for a in report.assumptions if a.key == "kind")  # no longer read as seq2seq
    seq2seq = tfcheck.run_checks(HANDWRITTEN_SEQ2SEQ, only=["forward.smoke"]).models[0]
    decoder_input = next(a for a in seq2seq.assumptions if a.key == "targets")
    assert "decoder input" in str(decoder_input.value) and "follows its length" in decoder_input.source


HANDWRITTEN_SEQ2SEQ = str(Path(__file__).resolve().parents[2] / "corpus" / "handwritten" / "targets_seq2seq.py") + \
    ":Transformer"


class InferenceOnly(StartsAt):
    @torch.inference_mode()
    def forward(self, tokens, start_pos: int):
        return super().forward(tokens, start_pos)


def test_a_forward_decorated_inference_only_is_not_trained_and_says_why():
    report = tfcheck.run_checks(InferenceOnly).models[0]
    off = {a.value: a.source for a in report.assumptions if a.key == "not applicable"}
    for check in ("train.grad_flow", "train.overfit_batch"):
        assert "inference_mode" in off[check], off
    trained = {r.check for r in tfcheck.run_checks(StartsAt).models[0].results}
    assert {"train.grad_flow", "train.overfit_batch"} <= trained  # the same model, trainable
