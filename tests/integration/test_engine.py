"""The engine on correct, broken and strange models: every verdict proven both ways."""
from __future__ import annotations

import json
import random
from importlib import resources

import jsonschema
import numpy as np
import pytest
import torch

import tfcheck
from reference_model import broken
from tfcheck import Status, UsageError
from tfcheck.errors import DeclarationError, SpecError

REFERENCE = ["reference_model:TransformerEncoder", "reference_model:TransformerLM",
             "reference_model:Seq2SeqTransformer"]


def statuses(report):
    return {r.check: r.status for r in report.models[0].results}


@pytest.mark.parametrize("spec", REFERENCE)
def test_reference_models_pass_every_check(spec):
    report = tfcheck.run_checks(spec)
    assert set(statuses(report).values()) == {Status.PASS}, str(report)
    tfcheck.assert_checks_pass(report)


@pytest.mark.parametrize("variant", broken.VARIANTS, ids=lambda v: v.__name__)
def test_each_broken_variant_fails_its_check_with_its_row(variant):
    expect = variant.__tfcheck_expect__
    status = Status(expect.get("status", "fail"))  # a design some correct models share is a warning
    report = tfcheck.run_checks(variant, only=[expect["check"]])
    result = report.models[0].result(expect["check"])
    assert result.status is status, str(report)
    assert {f.row for f in result.findings if f.status is status} == {expect["row"]}
    with pytest.raises(AssertionError, match=expect["check"]):
        tfcheck.assert_checks_pass(report, strict=True)


def test_smoke_failure_blocks_the_other_checks_instead_of_repeating_them():
    report = tfcheck.run_checks(broken.LinearInFeaturesMismatch)
    results = report.models[0].results
    assert results[0].check == "forward.smoke" and results[0].status is Status.FAIL
    for r in results[1:]:
        assert r.status is Status.SKIP and "blocked by forward.smoke" in r.findings[0].message
        assert r.cost.forward == 0


def test_forward_error_explainer_names_module_shapes_line_and_row():
    finding = tfcheck.run_checks(broken.LinearInFeaturesMismatch).models[0].result("forward.smoke").findings[0]
    assert finding.location.module == "layers.0.ffn.w_2"
    assert "Linear expects in_features=32, got last dim 64" in finding.message
    assert "(3, 7, 64)" in finding.message
    # The line to change is where the Linear was built with the wrong in_features; the raising line is related.
    assert finding.location.file.endswith("shapes.py") and finding.location.line > 0
    assert any(r.file.endswith("layers.py") for r in finding.related)
    assert finding.row == "mat1-mat2-shapes"


def test_unknown_error_maps_to_the_generic_row_with_the_users_line():
    finding = tfcheck.run_checks("zoo:ForwardRaises").models[0].result("forward.smoke").findings[0]
    assert finding.status is Status.FAIL and finding.row == "forward-fails"
    assert "custom kernel not available" in finding.message
    assert finding.location.file.endswith("zoo.py")


@pytest.mark.parametrize("spec,output", [("zoo:TupleOutput", 0), ("zoo:DictOutput", "hidden"),
                                         ("zoo:ObjectOutput", "logits")])
def test_outputs_in_tuples_dicts_and_output_objects(spec, output):
    report = tfcheck.run_checks(spec)
    assert set(statuses(report).values()) == {Status.PASS}, str(report)
    assumed = {a.key: a for a in report.models[0].assumptions}
    assert assumed["output"].value == output


def test_declared_output_wins_and_a_wrong_one_fails_clearly():
    report = tfcheck.run_checks("zoo:TupleOutput", output=1)
    finding = report.models[0].result("forward.smoke").findings[0]
    assert finding.status is Status.FAIL and "dict, not a tensor" in finding.message


def test_model_returning_no_tensor_fails_with_advice():
    finding = tfcheck.run_checks("zoo:ReturnsNothingUseful").models[0].result("forward.smoke").findings[0]
    assert finding.status is Status.FAIL and "declare 'output'" in finding.message


def test_swapped_batch_and_length_is_named():
    finding = tfcheck.run_checks("zoo:SwapsBatchAndLength").models[0].result("shape.contract").findings[0]
    assert finding.status is Status.FAIL and "swapped" in finding.message and finding.row == "output-shape"


def test_constructor_arguments_are_filled_and_reported():
    report = tfcheck.run_checks("zoo:NeedsArguments", only=["forward.smoke", "shape.contract"])
    assert set(statuses(report).values()) == {Status.PASS}, str(report)
    filled = next(a for a in report.models[0].assumptions if a.key == "constructor arguments")
    assert filled.value["d_model"] == 32 and filled.value["nhead"] == 4 and "small values" in filled.source


def test_kwargs_declaration_wins_over_filled_values():
    report = tfcheck.run_checks("zoo:NeedsArguments", kwargs={"d_model": 48, "nhead": 6})
    assert report.models[0].result("shape.contract").findings[0].evidence["checked"][0]["output_shape"][2] == 48


@pytest.mark.parametrize("spec,needle", [
    ("zoo:NeedsUnknownArgument", "needs argument(s) tokenizer_path"),
    ("zoo:ConstructorRaises", "raised ValueError: d_model must be divisible by num_heads"),
    ("zoo:factory_returning_junk", "returned a str, not an nn.Module"),
    ("zoo:NoSuchThing", "has no attribute 'NoSuchThing'"),
    ("no_such_module_anywhere:Model", "cannot import module 'no_such_module_anywhere'"),
    ("just-a-word", "expected MODULE:ATTR"),
    ("missing/file.py:Model", "does not exist"),
])
def test_bad_specs_raise_a_usage_error_that_says_what_to_do(spec, needle):
    with pytest.raises(SpecError, match=None) as info:
        tfcheck.run_checks(spec)
    assert needle in str(info.value)


def test_module_that_fails_to_import_names_its_file_and_line(tmp_path, monkeypatch):
    (tmp_path / "badmodel.py").write_text("import torch\n\nclass M(torch.nn.Module):\n    x = 1 / 0\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError) as info:
        tfcheck.run_checks("badmodel:M")
    assert "ZeroDivisionError" in str(info.value) and "badmodel.py:4" in str(info.value)


def test_forward_argument_tfcheck_cannot_build_says_which_declaration_to_give():
    with pytest.raises(UsageError) as info:
        tfcheck.run_checks("zoo:NeedsExtraInput")
    assert "speaker_embedding" in str(info.value) and "extra=module:factory" in str(info.value)


def test_the_extra_declaration_the_hint_names_feeds_the_model_and_keeps_the_token_checks():
    def extra(batch, length):
        return {"speaker_embedding": torch.zeros(batch, length, 32)}

    report = tfcheck.run_checks("zoo:NeedsExtraInput", extra=extra)
    assert set(statuses(report).values()) == {Status.PASS}, str(report)
    assert {"batch.independence", "position.sensitivity", "attention.heads"} <= set(statuses(report)), str(report)


def test_inputs_factory_declaration_feeds_the_model():
    def inputs(batch, length):
        return (torch.randint(1, 101, (batch, length)), torch.zeros(batch, length, 32)), {}

    report = tfcheck.run_checks("zoo:NeedsExtraInput", inputs=inputs)
    assert set(statuses(report).values()) == {Status.PASS}, str(report)


def test_factory_file_path_and_instance_specs(tmp_path, monkeypatch):
    for spec in ("zoo:build_tiny_lm", "tests/support/zoo.py:build_tiny_lm", "zoo:tiny_lm_instance"):
        report = tfcheck.run_checks(spec, only=["forward.smoke", "shape.contract"])
        assert report.status is Status.PASS, spec


def test_unknown_declaration_names_the_valid_keys():
    with pytest.raises(DeclarationError) as info:
        tfcheck.run_checks("reference_model:TransformerLM", causality=True)
    assert "valid keys are: kind, causal" in str(info.value)


def test_accept_turns_a_failure_into_accepted_with_its_reason():
    report = tfcheck.run_checks(broken.LMWithoutHead, accept={"shape.contract": "returns hidden states on purpose"})
    result = report.models[0].result("shape.contract")
    assert result.status is Status.ACCEPTED and "returns hidden states on purpose" in result.findings[0].message
    assert not report.failed()


def test_accept_turns_a_warning_into_accepted_too_as_the_warnings_say():
    plain = tfcheck.run_checks(broken.EmbeddingDrownsPositions, only=["embedding.scale"]).models[0]
    assert plain.result("embedding.scale").status is Status.WARN
    report = tfcheck.run_checks(broken.EmbeddingDrownsPositions, only=["embedding.scale"],
                                accept={"embedding.scale": "scaled on purpose"})
    result = report.models[0].result("embedding.scale")
    assert result.status is Status.ACCEPTED and "scaled on purpose" in result.findings[0].message


def test_accept_of_an_unknown_check_is_an_error():
    with pytest.raises(DeclarationError, match="unknown check"):
        tfcheck.run_checks("reference_model:TransformerLM", accept={"mask.causl": "typo"})


def test_model_is_left_exactly_as_it_was():
    model = tfcheck_model = __import__("zoo").MutatesItself()
    model.train()
    model.layers[0].ffn.w_2.weight.requires_grad_(False)
    model.layers[0].ffn.w_1.weight.grad = torch.ones_like(model.layers[0].ffn.w_1.weight)
    handle = model.register_forward_hook(lambda *a: None)
    model.embed.eval()  # a mixed train/eval state must come back as it was
    before_state = {k: v.clone() for k, v in model.state_dict().items()}
    modes = [m.training for m in model.modules()]
    grads = [p.grad for p in model.parameters()]
    flags = [p.requires_grad for p in model.parameters()]
    hooks = len(model._forward_hooks)
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    rng = (random.random(), np.random.rand(), torch.rand(1))
    random.seed(1), np.random.seed(1), torch.manual_seed(1)

    tfcheck.run_checks(tfcheck_model)

    assert (random.random(), np.random.rand(), torch.rand(1)) == rng
    after = model.state_dict()
    assert all(torch.equal(before_state[k], after[k]) for k in before_state)
    assert [m.training for m in model.modules()] == modes
    assert [p.grad for p in model.parameters()] == grads
    assert [p.requires_grad for p in model.parameters()] == flags
    assert len(model._forward_hooks) == hooks
    handle.remove()


def test_a_check_that_breaks_is_an_error_finding_not_a_crash(monkeypatch):
    from tfcheck import battery
    from tfcheck.engine import registry
    def broken_check(ctx):
        raise KeyError("internal")

    chk = battery.get("shape.contract")
    monkeypatch.setitem(registry._REGISTRY, "shape.contract",
                        registry.Check(chk.id, chk.title, chk.kinds, chk.rows, broken_check, chk.doc))
    result = tfcheck.run_checks("reference_model:TransformerLM").models[0].result("shape.contract")
    assert result.status is Status.ERROR and "bug in tfcheck" in result.findings[0].message


def test_only_runs_the_named_checks():
    report = tfcheck.run_checks("reference_model:TransformerLM", only=["shape.contract"])
    assert [r.check for r in report.models[0].results] == ["shape.contract"]
    with pytest.raises(UsageError, match="unknown check"):
        tfcheck.run_checks("reference_model:TransformerLM", only=["shape.contrct"])


def test_assumptions_carry_their_sources():
    assumed = {a.key: a for a in tfcheck.run_checks("reference_model:TransformerLM").models[0].assumptions}
    assert assumed["kind"].value == "decoder" and "__tfcheck__" in assumed["kind"].source
    assert assumed["vocab_size"].source == "config.vocab_size"
    unknown = {a.key: a for a in tfcheck.run_checks("zoo:NeedsArguments").models[0].assumptions}
    assert unknown["kind"].value is None and "Declare kind=" in unknown["kind"].source


def test_probe_lengths_are_capped_whatever_the_config_says():
    report = tfcheck.run_checks("zoo:NeedsArguments", kwargs={"max_len": 131072})
    sizes = report.models[0].result("shape.contract").findings[0].evidence["sizes"]
    assert max(int(s.split("x")[1]) for s in sizes) == 64


def test_costs_are_counted_in_passes_and_token_passes():
    result = tfcheck.run_checks("reference_model:TransformerLM").models[0].result("shape.contract")
    # sizes 1x1, 3x7 (forward.smoke's probe, memoised: reused, not charged), 1x64 and 3x64
    assert (result.cost.forward, result.cost.reused) == (3, 1)
    assert result.cost.token_passes == 1 * 1 + 1 * 64 + 3 * 64


def test_report_json_validates_against_the_documented_schema():
    schema = json.loads(resources.files("tfcheck").joinpath("data/report.schema.json").read_text())
    for model in (broken.LinearInFeaturesMismatch, broken.CausalMaskHidesDiagonal, "reference_model:TransformerLM"):
        data = json.loads(tfcheck.run_checks(model).to_json())
        jsonschema.validate(data, schema)
        assert data["schema_version"] == 1


def test_a_correct_model_of_unknown_kind_is_not_a_false_alarm():
    # docs/examples/quickstart/mymodel.py declares nothing: its logits must not be judged as an encoder's hidden states.
    report = tfcheck.run_checks("docs/examples/quickstart/mymodel.py:Model")
    assert {r.status for r in report.models[0].results} == {Status.PASS}, str(report)
    evidence = report.models[0].result("shape.contract").findings[0].evidence
    assert "kind unknown" in evidence["last_dim_from"]


def test_only_without_smoke_still_fails_a_broken_forward():
    report = tfcheck.run_checks(broken.LinearInFeaturesMismatch, only=["shape.contract"])
    result = report.models[0].result("shape.contract")
    assert result.status is Status.FAIL and result.findings[0].row == "mat1-mat2-shapes"
    assert "forward.smoke (not selected) failed" in result.findings[0].message


def test_a_factorys_own_declarations_are_read():
    def build():
        return __import__("zoo").NeedsArguments(101, 32, 4, 2, 64, 64, 0.1)

    build.__tfcheck__ = {"kind": "encoder"}
    assumed = {a.key: a for a in tfcheck.run_checks(build).models[0].assumptions}
    assert assumed["kind"].value == "encoder" and "__tfcheck__ on build" in assumed["kind"].source


def test_a_model_too_large_to_build_is_refused_before_allocating():
    with pytest.raises(SpecError) as info:
        tfcheck.run_checks("reference_model:TransformerLM",
                           kwargs={"num_layers": 80, "d_model": 8192, "num_heads": 64, "d_ff": 32768})
    message = str(info.value)
    assert "would allocate 240.0 GiB of parameters" in message and "--meta" in message


def test_a_forward_taking_varargs_gets_the_tokens_positionally():
    report = tfcheck.run_checks("zoo:VarArgsWrapper", only=["forward.smoke", "shape.contract"])
    assert {r.status for r in report.models[0].results} == {Status.PASS}, str(report)
