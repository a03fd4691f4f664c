"""Who shifts the labels (issue 15): BART's *ForCausalLM documents that its loss does not shift them, a zoo model
forgot to, and both copy their input when given labels = input_ids. Behaviour cannot tell them apart, so the
convention comes from a declaration (label_shift) or the label argument's own documentation, and under it
train.target_leak still tests something real: the next tokens as labels (a loss that reads ahead fails), with
a positive control. And a config's causal switch says whether a model is causal (XLM and Flaubert are masked
LMs by default, not causal LMs as their *WithLMHeadModel names suggest)."""
from __future__ import annotations

import pytest
import torch.nn.functional as F

import tfcheck
import zoo_training as zt
from helpers import result
from reference_model.broken import UnshiftedLabels
from tfcheck import Status
from tfcheck.errors import DeclarationError
from tfcheck.model.facts.label_convention import caller_shift_in_file, documented_shift, parameter_doc
from zoo_caller_shifted_labels import NextTokenLabelsLM, UnrelatedLM

LEAK, CAUSAL = "train.target_leak", "mask.causal"
BART_SAYS = "BartForCausalLM.forward docstring: 'The labels are not shifted inside the model'"


class DocumentedUnshiftedLabels(UnshiftedLabels):
    """UnshiftedLabels' very loss, documented as its contract: position t's logits are scored against labels[t]."""

    def forward(self, tokens, labels=None):
        """Args:
            tokens: the input ids, (batch, length).
            labels: the targets, (batch, length). The labels are not shifted inside the model: labels[:, t] is
                the target of logits[:, t], so shift them one position to the left yourself.
        """
        return super().forward(tokens, labels)


class DocumentedButShifting(zt.HFLikeLM):
    """HFLikeLM's correct loss (it shifts inside), under a docstring that says it does not: the documented
    convention is wrong, so a pass under it cannot be judged."""

    def forward(self, input_ids, labels=None):
        """labels (`torch.LongTensor`): the targets. The labels are **not shifted** inside the model."""
        return super().forward(input_ids, labels)


def _report(model, checks, **declared):
    return tfcheck.run_checks(model, only=list(checks), **declared).models[0]


def _stated(report, key):
    return {a.key: a for a in report.assumptions}[key]


# ----- the convention, read ---------------------------------------------------------------------------------

def test_a_parameters_documentation_is_its_header_and_the_lines_indented_under_it():
    doc = """Run it.

    Args:
        tokens (`LongTensor`): the ids.
        labels (`LongTensor`, *optional*):
            The targets.

            The labels are **not shifted** inside the model.
        use_cache: whether to cache.
    """
    assert parameter_doc(doc, "labels") == ("labels (`LongTensor`, *optional*): The targets. The labels are "
                                            "**not shifted** inside the model.")
    assert "not shifted" not in parameter_doc(doc, "tokens")
    assert parameter_doc(doc, "targets") is None


def test_only_the_label_arguments_own_documentation_says_who_shifts():
    class ElsewhereSaid(zt.HFLikeLM):
        def forward(self, input_ids, labels=None):
            """input_ids: the ids, which are not shifted.
            labels: the input ids; the model shifts them."""
            return super().forward(input_ids, labels)

    class Overridden(DocumentedUnshiftedLabels):  # a forward of its own, undocumented: it says nothing
        def forward(self, tokens, labels=None):
            return super().forward(tokens, labels)

    assert documented_shift(ElsewhereSaid()) is None
    assert documented_shift(Overridden()) is None
    shift, where = documented_shift(DocumentedUnshiftedLabels())
    assert (shift, where) == ("caller", "DocumentedUnshiftedLabels.forward docstring: 'The labels are not shifted "
                                        "inside the model'")


def test_a_bad_label_shift_declaration_names_the_values():
    with pytest.raises(DeclarationError, match="label_shift.*expected one of inside, caller"):
        tfcheck.run_checks(zt.HFLikeLM, only=[LEAK], label_shift="left")


# ----- train.target_leak under each convention ---------------------------------------------------------------

def test_bart_for_causal_lm_passes_under_its_documented_convention_read_off_its_loss():
    pytest.importorskip("transformers")
    report = _report("transformers:BartForCausalLM", [LEAK])
    stated = _stated(report, "label_shift")
    assert stated.value == "caller" and stated.source.startswith(BART_SAYS), stated
    finding = report.result(LEAK).findings[0]
    assert finding.status is Status.PASS, finding
    assert BART_SAYS in finding.evidence["label_argument"] and "must shift the labels" in finding.message
    # the labels given in BART's convention are what its loss trains each position on: the next token
    assert finding.evidence["trained_on_the_next_token"] == finding.evidence["positions_compared"] > 20


def test_the_same_unshifted_loss_fails_undocumented_and_passes_documented_or_declared():
    plain = result(UnshiftedLabels, LEAK)
    assert plain.status is Status.FAIL and {f.row for f in plain.findings} == {"targets-not-shifted"}
    assert plain.findings[0].location.file.endswith("reference_model/broken/training.py")
    assert plain.findings[0].location.line == 135  # the defect's line, as the stored snapshot has it
    assert "label_shift" not in {a.key for a in _report(UnshiftedLabels, [LEAK]).assumptions}

    documented = _report(DocumentedUnshiftedLabels, [LEAK])
    assert _stated(documented, "label_shift").source.startswith("DocumentedUnshiftedLabels.forward docstring")
    assert documented.result(LEAK).status is Status.PASS, documented.result(LEAK)
    declared = _report(UnshiftedLabels, [LEAK], label_shift="caller")
    assert _stated(declared, "label_shift").source == "run_checks() argument"
    assert declared.result(LEAK).status is Status.PASS, declared.result(LEAK)


def _reads_ahead_bart() -> type:
    bart = pytest.importorskip("transformers").BartForCausalLM

    class ReadsAheadBartForCausalLM(bart):
        """BART's documented forward (labels not shifted) with the defect injected in its loss: position t + 1's
        logits scored against labels[t], the token at t + 1 itself, which that position reads."""

        def forward(self, input_ids=None, labels=None, **kwargs):
            out = super().forward(input_ids=input_ids, **kwargs)
            if labels is not None:
                out.loss = F.cross_entropy(out.logits[:, 1:].flatten(0, 1), labels[:, :-1].flatten())
            return out

        forward.__doc__ = bart.forward.__doc__  # the contract stays BART's own words

    return ReadsAheadBartForCausalLM


def test_a_loss_that_reads_ahead_is_caught_under_the_documented_convention():
    finding = result(_reads_ahead_bart(), LEAK).findings[0]
    assert finding.status is Status.FAIL and finding.row == "targets-not-shifted", finding
    assert "ReadsAheadBartForCausalLM.forward docstring: 'The labels are not shifted inside the model'" \
        in finding.evidence["label_argument"]
    assert "logits with labels[t] (already token t + 1)" in finding.message
    assert finding.location.file.endswith("test_label_convention.py")  # the line of the loss that reads ahead
    assert finding.evidence["trained_on_the_token_fed"] == finding.evidence["positions_compared"] > 20


def test_a_documented_convention_the_loss_does_not_follow_is_inconclusive():
    finding = result(DocumentedButShifting, LEAK).findings[0]
    assert finding.status is Status.SKIP and "positive control" in finding.message, finding
    assert finding.evidence["positive_control"]["fresh_batch_loss"] >= 0.75 * finding.evidence["ln_vocab"]
    assert "label_shift=inside if the model does not follow label_shift=caller" in finding.message


# ----- causality from a config's causal switch ------------------------------------------------------------------

@pytest.mark.parametrize("name", ["XLMWithLMHeadModel", "FlaubertWithLMHeadModel"])
def test_a_config_that_says_causal_false_is_a_masked_lm(name):
    pytest.importorskip("transformers")
    report = _report(f"transformers:{name}", [CAUSAL, LEAK])
    assert (_stated(report, "kind").value, _stated(report, "kind").source) == ("encoder", "config.causal = False")
    assert (_stated(report, "causal").value, _stated(report, "causal").source) == (False, "config.causal")
    assert CAUSAL not in {r.check for r in report.results}
    not_applicable = {a.value: a.source for a in report.assumptions if a.key == "not applicable"}
    assert "not causal (causal=False" in not_applicable[LEAK]


def test_a_config_that_says_causal_true_gets_the_causal_checks():
    pytest.importorskip("transformers")
    report = _report("transformers:XLMWithLMHeadModel", [CAUSAL], kwargs={"config": {"causal": True}})
    assert (_stated(report, "kind").value, _stated(report, "kind").source) == ("decoder", "config.causal = True")
    assert (_stated(report, "causal").value, _stated(report, "causal").source) == (True, "config.causal")
    finding = report.result(CAUSAL).findings[0]
    assert finding.status is Status.PASS, finding
    assert finding.evidence["positive_control_change"] > finding.evidence["tolerance"]


def test_the_causal_switch_is_read_from_the_config_not_guessed_from_the_outputs():
    pytest.importorskip("transformers")
    report = _report("transformers:XLMModel", [CAUSAL])
    assert _stated(report, "causal").source == "config.causal" and CAUSAL not in {r.check for r in report.results}


def test_labels_a_wrapper_in_the_models_file_shifts_before_calling_it_are_read_as_the_next_tokens():
    shift, where = caller_shift_in_file(NextTokenLabelsLM()) or (None, "")
    assert shift == "caller" and "zoo_caller_shifted_labels.py:" in where and "in Wrapper" in where
    report = _report(NextTokenLabelsLM, [LEAK])
    assert report.result(LEAK).status is Status.PASS, report.result(LEAK).findings[0].message
    assert "prepares labels as the next tokens" in _stated(report, "label_shift").source


def test_a_wrapper_that_names_another_class_says_nothing_of_this_ones_labels():
    assert caller_shift_in_file(UnrelatedLM()) is None
    assert _report(UnrelatedLM, [LEAK]).result(LEAK).status is Status.FAIL
