"""The battery on real implementations installed from PyPI (the `corpus` extra, tests/corpus/corpus.py): run as
their packages build them, zero-config, a correct model has no failure and no error, and every warning or skip
it gets is justified in corpus.py (a justification no longer needed fails too). A false alarm found on one is
listed in KNOWN_FALSE_ALARMS, expected until its fix lands; the real bug one package has stays a failure. Each
package also gets one injected defect, caught by the right check with the right troubleshooting row."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
import torch.nn as nn
from corpus import CORPUS, EXPLAINED, KNOWN_FALSE_ALARMS, REAL_BUGS, Member, expected

import tfcheck
from helpers import pre_hook_kwargs
from tfcheck import Status
from tfcheck.model.build.spec import load


def _member(name: str) -> Member:
    member = CORPUS[name]
    pytest.importorskip(member.module, reason=f"{member.package} is not installed (pip install -c constraints.txt "
                                              "-e '.[test,corpus]')")
    return member


@pytest.mark.parametrize("name", CORPUS)
def test_a_corpus_model_fails_only_where_it_has_a_real_bug_and_every_other_result_is_explained(name):
    member = _member(name)
    full = tfcheck.run_checks(member.spec, **member.declared)
    report, rendered = full.models[0], str(full)
    not_passed = {r.check: r for r in report.results if r.status is not Status.PASS}
    assert set(not_passed) == set(expected(name)), rendered  # each justification is still needed, too
    for check, result in not_passed.items():
        may_fail = (name, check) in REAL_BUGS or (name, check) in KNOWN_FALSE_ALARMS
        assert result.status is not Status.ERROR, rendered
        assert result.status is not Status.FAIL or may_fail, rendered
        assert not any("blocked by" in f.message for f in result.findings), rendered
    assert sum(r.status is Status.PASS for r in report.results) >= 8, rendered  # the battery ran


def test_a_real_bug_is_reported_where_it_is():
    _member("simple-transformer")
    result = tfcheck.run_checks(CORPUS["simple-transformer"].spec, only=["attention.scale"]).models[0] \
        .result("attention.scale")
    assert result.status is Status.FAIL and result.findings[0].row == "attention-scale-wrong", str(result)
    assert "√d_model" in result.findings[0].message, str(result)
    assert result.findings[0].location.file.endswith("simple_transformer/self_attention.py"), str(result)


def test_the_tables_name_only_corpus_models_and_keep_apart():
    for table in (EXPLAINED, REAL_BUGS, KNOWN_FALSE_ALARMS):
        assert {model for model, _ in table} <= set(CORPUS)
    assert not set(EXPLAINED) & set(KNOWN_FALSE_ALARMS) and not set(EXPLAINED) & set(REAL_BUGS)
    assert len(KNOWN_FALSE_ALARMS) <= 10  # a corpus of false alarms proves nothing: prefer correct designs
    assert len({m.package for m in CORPUS.values()}) >= 8


# ----- one defect each, caught ------------------------------------------------------------------------

def _modules_with_causal_flag(model: nn.Module, kind: str) -> list[nn.Module]:
    return [m for m in model.modules() if type(m).__name__ == kind and isinstance(getattr(m, "causal", None), bool)]


def causal_off(kind: str) -> Callable[[nn.Module], None]:
    """The causal flag of the attention modules turned off, while the model's own flag still says causal."""
    def inject(model):
        targets = _modules_with_causal_flag(model, kind)
        assert targets, kind  # a package that renamed the class would otherwise make this test pass vacuously
        for module in targets:
            module.causal = False
    return inject


def mask_dropped(model):
    pre_hook_kwargs(model, lambda kw: kw.update(mask=None))


def batch_mixed(attribute: str) -> Callable[[nn.Module], None]:
    """A forward hook on one submodule that adds the batch mean to its output."""
    def inject(model):
        model.get_submodule(attribute).register_forward_hook(lambda mod, args, out: out + out.mean(0, keepdim=True))
    return inject


def trg_mask_dropped(model):
    model.make_trg_mask = lambda trg: torch.ones(trg.shape[0], 1, trg.shape[1], trg.shape[1])


@dataclass
class Defect:
    member: str
    inject: Callable[[nn.Module], None]
    check: str
    row: str
    declared: dict[str, Any] = field(default_factory=dict)


DEFECTS = {
    "x-decoder-causal-off": Defect("x-transformers-decoder", causal_off("Attention"), "mask.causal",
                                   "inference-worse-than-training"),
    "x-encoder-mask-dropped": Defect("x-transformers-encoder", mask_dropped, "mask.padding", "padding-mask-ignored"),
    "local-attention-batch-mixed": Defect("local-attention", batch_mixed("token_emb"), "batch.independence",
                                          "sample-depends-on-batch"),
    "palm-causal-off": Defect("palm", causal_off("Attention"), "mask.causal", "inference-worse-than-training"),
    "perceiver-mask-dropped": Defect("perceiver-lm", mask_dropped, "mask.padding", "padding-mask-ignored"),
    "linear-attention-batch-mixed": Defect("linear-attention", batch_mixed("token_emb"), "batch.independence",
                                           "sample-depends-on-batch"),
    "performer-batch-mixed": Defect("performer", batch_mixed("token_emb"), "batch.independence",
                                    "sample-depends-on-batch"),
    "simple-transformer-trg-mask-dropped": Defect("simple-transformer", trg_mask_dropped, "mask.causal",
                                                  "inference-worse-than-training"),
    "rotary-decoder-causal-off": Defect("rotary-decoder", causal_off("RotaryBlock"), "mask.causal",
                                        "inference-worse-than-training", {"kind": "decoder"}),
}


@pytest.mark.parametrize("name", DEFECTS)
def test_one_injected_defect_is_caught_by_the_right_check(name):
    defect = DEFECTS[name]
    member = _member(defect.member)
    model = load(member.spec).model
    defect.inject(model)
    result = tfcheck.run_checks(model, only=[defect.check], **defect.declared).models[0].result(defect.check)
    assert result.status is Status.FAIL, str(result)
    assert result.findings[0].row == defect.row, str(result)


def test_every_corpus_package_has_a_defect_that_is_caught():
    covered = {CORPUS[d.member].package for d in DEFECTS.values()}
    assert covered == {m.package for m in CORPUS.values()}
