"""The hints that no hand-written corpus model prints where they are true of it, each with why and the test that
makes the declaration in the situation the hint is written for (read by tests/corpus/test_hints.py, which fails
on a hint tfcheck prints that is neither followed on the corpus nor listed here)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Elsewhere:
    why: str  # why no corpus model prints it where it is true
    where: str  # "tests/...py::test_name": the test that declares what the hint says and checks the run


CORPUS_IS_HEALTHY = "the corpus models build, run and finish inside their budget, so this message never prints"
ONLY_IF_NOT = ("printed on the corpus only as the 'if not' alternative, false of the models that print it "
               "(an encoder told how to declare it is causal, a decoder how to declare it is not)")
NO_SCHEDULE = "no corpus model has a schedule (lr.warmup is not applicable), so no schedule hint prints"

ELSEWHERE: dict[str, Elsewhere] = {
    "accept=JSON": Elsewhere("no corpus model hard-codes its attention scale",
                             "tests/checks/test_scale_literals.py::test_accept_silences_the_hard_coded_warning"),
    "accept=train.grad_flow:REASON": Elsewhere(
        "no corpus model has a module whose output nothing reads",
        "tests/checks/test_training_checks.py::test_frozen_by_mistake_says_how_to_accept_a_deliberate_freeze"),
    "budget_overrun": Elsewhere(CORPUS_IS_HEALTHY, "tests/integration/test_cli.py::"
                                "test_a_check_over_its_budget_is_a_skip_unless_overruns_fail"),
    "budget_s={}": Elsewhere(CORPUS_IS_HEALTHY, "tests/integration/test_cli.py::"
                             "test_a_check_over_its_budget_is_a_skip_unless_overruns_fail"),
    "causal=false": Elsewhere(ONLY_IF_NOT, "tests/checks/test_mask_checks.py::"
                              "test_a_decoder_declared_not_causal_is_not_applicable_with_the_reason"),
    "causal=true": Elsewhere(ONLY_IF_NOT, "tests/checks/test_mask_checks.py::"
                             "test_unknown_kind_leak_is_a_warning_that_names_the_declarations"),
    "causal={}": Elsewhere(ONLY_IF_NOT, "tests/checks/test_mask_checks.py::"
                           "test_a_decoder_declared_not_causal_is_not_applicable_with_the_reason"),
    "causal_mask=none": Elsewhere("a usage error about a declared causal_mask; the corpus declares none",
                                  "tests/unit/model/test_calling.py::"
                                  "test_the_causal_mask_declaration_gives_a_generic_argument_the_mask"),
    "causal_mask={}": Elsewhere("no corpus forward takes a look-ahead mask from its caller",
                                "tests/unit/model/test_calling.py::"
                                "test_the_causal_mask_declaration_gives_a_generic_argument_the_mask"),
    "causal_mask={}:pad": Elsewhere("no corpus forward takes a look-ahead mask from its caller",
                                    "tests/unit/model/test_calling.py::"
                                    "test_the_causal_mask_declaration_gives_a_generic_argument_the_mask"),
    "d_model=INT": Elsewhere("every corpus model embeds tokens with an nn.Embedding, whose width tfcheck reads",
                             "tests/checks/test_hf_false_alarms.py::"
                             "test_a_model_declaring_token_ids_its_input_gets_ids_even_without_an_nn_embedding"),
    "device=cpu": Elsewhere("the corpus declares no device",
                            "tests/integration/test_reliability.py::test_device_cpu_declared_runs_there_and_says_so"),
    "extra=module:factory": Elsewhere("the one corpus argument tfcheck cannot build (start_pos) is a value",
                                      "tests/unit/model/test_calling.py::"
                                      "test_extra_arguments_are_held_fixed_and_every_token_check_still_runs"),
    "head=ATTR": Elsewhere("every corpus model returns its logits from forward",
                           "tests/unit/model/test_outputs_capacity.py::"
                           "test_several_heads_name_the_candidates_and_the_declaration_works"),
    "head={}": Elsewhere("every corpus model returns its logits from forward",
                         "tests/unit/model/test_outputs_capacity.py::"
                         "test_several_heads_name_the_candidates_and_the_declaration_works"),
    "inputs=module:factory": Elsewhere("every corpus model takes token ids tfcheck builds",
                                       "tests/integration/test_engine.py::test_inputs_factory_declaration_feeds_the_model"),
    "kind": Elsewhere("printed where the output width is both vocab_size and d_model; no corpus model's is",
                      "tests/checks/test_mask_checks.py::test_unknown_kind_leak_is_a_warning_that_names_the_declarations"),
    "kind=decoder": Elsewhere(ONLY_IF_NOT, "tests/checks/test_mask_checks.py::"
                              "test_unknown_kind_leak_is_a_warning_that_names_the_declarations"),
    "kind=encoder": Elsewhere(ONLY_IF_NOT, "tests/checks/test_mask_checks.py::"
                              "test_unknown_kind_leak_is_a_warning_that_names_the_declarations"),
    "kind=seq2seq": Elsewhere("every corpus seq2seq model is read as one (its forward takes a target argument)",
                              "tests/unit/model/test_target_vocab.py::"
                              "test_a_shared_vocabulary_seq2seq_is_called_as_before"),
    "kwargs=JSON": Elsewhere("every corpus model builds from its defaults and tfcheck's small sizes",
                             "tests/checks/test_hf_standalone_false_alarms.py::"
                             "test_a_refused_build_is_reported_with_what_to_declare"),
    "kwargs={}": Elsewhere("every corpus model builds from its defaults and tfcheck's small sizes",
                           "tests/checks/test_hf_standalone_false_alarms.py::"
                           "test_a_refused_build_is_reported_with_what_to_declare"),
    "label_shift=inside": Elsewhere("no corpus model takes labels beside its inputs",
                                    "tests/checks/test_label_convention.py::"
                                    "test_a_documented_convention_the_loss_does_not_follow_is_inconclusive"),
    "label_shift={}": Elsewhere("no corpus model takes labels beside its inputs",
                                "tests/checks/test_label_convention.py::"
                                "test_the_same_unshifted_loss_fails_undocumented_and_passes_documented_or_declared"),
    "layout=batch_first": Elsewhere("every corpus model is batch first and read as such",
                                    "tests/unit/model/test_calling.py::test_a_declared_layout_outranks_what_the_trial_reads"),
    "length_multiple={}": Elsewhere("every corpus model runs at any length",
                                    "tests/integration/test_length_multiple.py::"
                                    "test_with_length_multiple_every_probe_is_a_multiple_and_the_battery_runs_clean"),
    "lr=FLOAT": Elsewhere(NO_SCHEDULE, "tests/integration/test_reference_model.py::"
                          "test_noam_schedule_sets_absolute_rate"),
    "mask=ARG:CONVENTION": Elsewhere("printed on corpus models that take no padding mask, where it is not true",
                                     "tests/checks/test_hf_mask_false_alarms.py::"
                                     "test_a_declared_mask_is_tested_even_where_the_forward_says_it_is_unused"),
    "mask=ARG:keep|pad|additive": Elsewhere("printed on corpus models that take no padding mask, where it is not true",
                                            "tests/checks/test_hf_mask_false_alarms.py::"
                                            "test_a_declared_mask_is_tested_even_where_the_forward_says_it_is_unused"),
    "mask=none": Elsewhere("printed on the seq2seq models that mask their pads inside, where it is not true",
                           "tests/checks/test_mask_checks.py::"
                           "test_a_pad_id_without_a_declared_mask_warns_and_the_declaration_makes_it_a_failure"),
    "mask=ARGUMENT:CONVENTION": Elsewhere("no corpus model is read as masking its cross-attention's pads",
                                          "tests/checks/test_mask_checks.py::"
                                          "test_a_pad_id_without_a_declared_mask_warns_and_the_declaration_makes_it_a_failure"),
    "mask=internal": Elsewhere("no corpus model is read as masking its cross-attention's pads",
                               "tests/checks/test_mask_checks.py::"
                               "test_a_pad_id_without_a_declared_mask_warns_and_the_declaration_makes_it_a_failure"),
    "mask={}:CONVENTION": Elsewhere("every corpus mask argument is read in the trial forward",
                                    "tests/checks/test_hf_mask_false_alarms.py::"
                                    "test_a_declared_mask_is_tested_even_where_the_forward_says_it_is_unused"),
    "mask={}:CONVENTION:LAYOUT": Elsewhere("every corpus mask argument runs in one of the layouts tried",
                                           "tests/unit/model/test_trial.py::test_an_optional_additive_square_mask_is_"
                                           "run_with_the_layout_and_convention_the_trial_found"),
    "mask={}:pad": Elsewhere("no corpus model takes a pad-convention mask under a generic name",
                             "tests/corpus/test_hints.py::"
                             "test_the_pad_convention_hint_followed_turns_the_failure_it_explains_into_a_pass"),
    "mask={}:keep": Elsewhere("no corpus model is seq-first with a padding mask",
                              "tests/checks/test_hf_mask_false_alarms.py::"
                              "test_a_declared_mask_is_tested_even_where_the_forward_says_it_is_unused"),
    "memory_budget": Elsewhere(CORPUS_IS_HEALTHY, "tests/integration/test_memory_budget.py::"
                               "test_a_training_copy_that_would_not_fit_is_inconclusive_and_says_why"),
    "min_len={}": Elsewhere("every corpus model runs at the shortest probe",
                            "tests/checks/test_hf_false_alarms.py::test_a_declared_min_len_is_where_the_shape_probes_start"),
    "output": Elsewhere("every corpus model's output keeps its positions and batch",
                        "tests/integration/test_engine.py::test_declared_output_wins_and_a_wrong_one_fails_clearly"),
    "output=KEY": Elsewhere("no corpus model returns a dict",
                            "tests/integration/test_engine.py::test_declared_output_wins_and_a_wrong_one_fails_clearly"),
    "output=logits": Elsewhere("no corpus model returns an output object with a logits field",
                               "tests/integration/test_engine.py::test_declared_output_wins_and_a_wrong_one_fails_clearly"),
    "output=tensor": Elsewhere("no corpus model returns a tensor subclass",
                               "tests/unit/model/test_outputs_capacity.py::test_seq_first_rows_are_put_back_batch_first"),
    "pad_id": Elsewhere("no corpus model declares mask=internal",
                        "tests/checks/test_mask_checks.py::"
                        "test_a_pad_id_without_a_declared_mask_warns_and_the_declaration_makes_it_a_failure"),
    "precision=fp16": Elsewhere("no corpus model trains in float16 (the hint says the warning then fails)",
                                "tests/checks/test_numerics_checks.py::test_minus_1e9_warns_and_fails_when_fp16_is_declared"),
    "probe_len=INT": Elsewhere("no corpus model has windows longer than the probe",
                               "tests/checks/test_grad_flow_false_alarms.py::test_a_module_of_whole_windows_shorter_than_"
                               "the_input_cannot_be_judged_and_passes_when_long_enough"),
    "schedule": Elsewhere(NO_SCHEDULE, "tests/checks/test_training_checks.py::"
                          "test_broken_schedules_are_caught_with_their_row"),
    "shrink=false": Elsewhere("every corpus model runs at tfcheck's small sizes",
                              "tests/unit/model/test_construction.py::test_shrink_false_keeps_the_model_as_written"),
    "total_steps=INT": Elsewhere(NO_SCHEDULE, "tests/checks/test_training_checks.py::"
                                 "test_hugging_face_models_with_usual_schedules_pass"),
    "train_steps": Elsewhere("no corpus model's leak is missed for want of steps",
                             "tests/checks/test_training_checks.py::test_train_steps_declaration_sets_the_budget"),
    "train_steps=100": Elsewhere("no corpus model's leak is missed for want of steps",
                                 "tests/checks/test_training_checks.py::test_train_steps_declaration_sets_the_budget"),
    "vocab_size": Elsewhere("every corpus model's vocabulary is read from its nn.Embedding",
                            "tests/integration/test_reference_model.py::test_overrides_and_config"),
    "vocab_size=INT": Elsewhere("every corpus model's vocabulary is read from its nn.Embedding",
                                "tests/integration/test_reference_model.py::test_overrides_and_config"),
    "warmup_steps=INT": Elsewhere(NO_SCHEDULE, "tests/checks/test_training_checks.py::"
                                  "test_hugging_face_models_with_usual_schedules_pass"),
}
