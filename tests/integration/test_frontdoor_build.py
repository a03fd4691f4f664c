"""The front door, construction part (issue 14): hand-written Transformers in the conventions people use
(nanoGPT's config dataclass, Llama's ModelArgs, minGPT's get_default_config, a book's module-level dict, a
module-level instance, the Annotated Transformer's make_model, positional and pattern-named arguments) build
with zero declarations, small, and run the whole battery with no failure and every warning explained; each with
one defect injected is caught by the right check. The fixtures are tests/support/frontdoor_build/."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

import tfcheck
from tfcheck import Status
from tfcheck.engine.runner import load_subject

HERE = Path(__file__).resolve().parents[1] / "support" / "frontdoor_build"


def spec(file: str, attr: str) -> str:
    return f"{HERE / file}:{attr}"


@dataclass
class Convention:
    file: str
    model: str
    defective: str
    catches: str  # the check that catches the defect
    source: str  # a piece of where the config came from ("" when the constructor takes no config)
    #: check -> why the correct model warns there (and must)
    explained: dict[str, str] = field(default_factory=dict)


CONVENTIONS = {
    "nanogpt-dataclass": Convention("nanogpt_style.py", "GPT", "LeakyGPT", "mask.causal", "GPTConfig (a config class"),
    "llama-model-args": Convention("llama_style.py", "Transformer", "LeakyTransformer", "mask.causal",
                                   "ModelArgs (a config class"),
    "mingpt-default-config": Convention("mingpt_style.py", "GPT", "LeakyGPT", "mask.causal",
                                        "GPT.get_default_config()"),
    "classmethod-default-config": Convention(
        "default_config_encoder.py", "TextEncoder", "MisscaledTextEncoder", "attention.scale",
        "TextEncoder.get_default_config()"),
    "book-module-dict": Convention("book_style.py", "GPTModel", "LeakyGPTModel", "mask.causal",
                                   "GPT_CONFIG_124M (a module-level config"),
    "main-block-dict": Convention("main_block_style.py", "GPTModel", "LeakyGPTModel", "mask.causal",
                                  "GPT_CONFIG_124M (a config in the __main__ block"),
    "module-level-instance": Convention("book_instance_style.py", "Encoder", "MisscaledEncoder", "attention.scale",
                                        "HP (a module-level config"),
    "annotated-make-model": Convention("annotated_style.py", "make_model", "make_leaky_model", "mask.causal", ""),
    "positional-names": Convention("positional_names_style.py", "Transformer", "LeakyTransformer", "mask.causal", ""),
    "pattern-names-large-defaults": Convention(
        "shared_weights_style.py", "Transformer", "LeakyTransformer", "mask.causal", "",
        explained={"embedding.scale": "the design as written (scale_emb_or_prj='prj'): the lookup is not multiplied "
                                      "by sqrt(d_model), so xavier-initialised tokens drown in the sinusoids"}),
}


@pytest.mark.parametrize("name", CONVENTIONS)
def test_a_hand_written_transformer_runs_with_zero_declarations_and_no_failure(name):
    c = CONVENTIONS[name]
    full = tfcheck.run_checks(spec(c.file, c.model))
    report, rendered = full.models[0], str(full)
    assert not [r.check for r in report.results if r.status in (Status.FAIL, Status.ERROR)], rendered
    not_passed = {r.check: r.status for r in report.results if r.status is not Status.PASS}
    assert not_passed == dict.fromkeys(c.explained, Status.WARN), rendered
    assert sum(r.status is Status.PASS for r in report.results) >= 12, rendered  # the battery ran


@pytest.mark.parametrize("name", CONVENTIONS)
def test_it_is_built_small_and_says_how(name):
    c = CONVENTIONS[name]
    subject = load_subject(spec(c.file, c.model))
    assert sum(p.numel() for p in subject.model.parameters()) < 100_000
    assert subject.facts.d_model in (None, 32)
    loaded = subject.loaded
    widths = {"n_embd", "dim", "hidden_size", "emb_dim", "d_model"}
    chosen = {**loaded.filled, **loaded.config_filled, **{k: v[1] for k, v in loaded.shrunk.items()}}
    assert 32 in [chosen[w] for w in widths & set(chosen)], chosen
    if c.source:
        assert any(c.source in where for where in loaded.config_sources.values()), loaded.config_sources
    stated = {a.key: a for a in subject.assumptions}
    if loaded.shrunk:
        assert "→32" in str(stated["constructor arguments shrunk"].value)


@pytest.mark.parametrize("name", CONVENTIONS)
def test_one_defect_is_caught_by_the_right_check(name):
    c = CONVENTIONS[name]
    result = tfcheck.run_checks(spec(c.file, c.defective), only=[c.catches]).models[0].result(c.catches)
    # the kind is never declared: a decoder says it is one in its source, so its leak fails
    assert result.status is Status.FAIL, result
    if c.catches == "mask.causal":
        assert "causal leak" in result.findings[0].message


def test_the_annotated_transformer_is_checked_at_small_sizes_not_its_defaults():
    subject = load_subject(spec("annotated_style.py", "make_model"))
    assert subject.loaded.filled == {"src_vocab": 101, "tgt_vocab": 101}
    assert subject.loaded.shrunk == {"N": (6, 2), "d_model": (512, 32), "d_ff": (2048, 64), "h": (8, 4)}
    shrunk = next(a for a in subject.assumptions if a.key == "constructor arguments shrunk")
    assert shrunk.value == "N 6→2, d_model 512→32, d_ff 2048→64, h 8→4" and "shrink=false" in shrunk.source


def test_pattern_named_arguments_keep_their_invariants():
    subject = load_subject(spec("shared_weights_style.py", "Transformer"))
    small = {k: v[1] for k, v in subject.loaded.shrunk.items()}
    assert small["d_model"] == small["d_word_vec"] == small["n_head"] * small["d_k"]  # the model asserts the first
    assert small["d_k"] == small["d_v"] >= 4 and small["n_head"] >= 2
    assert subject.loaded.filled == {"n_src_vocab": 101, "n_trg_vocab": 101, "src_pad_idx": 0, "trg_pad_idx": 0}


def test_positional_names_are_filled_and_the_device_is_the_runs():
    subject = load_subject(spec("positional_names_style.py", "Transformer"))
    filled = subject.loaded.filled
    assert filled == {"device": "cpu", "src_pad_idx": 0, "trg_pad_idx": 0, "trg_sos_idx": 1, "enc_voc_size": 101,
                      "dec_voc_size": 101, "d_model": 32, "n_head": 4, "max_len": 64, "ffn_hidden": 64, "n_layers": 2,
                      "drop_prob": 0.1}
    assert subject.model.enc_emb.encoding.device.type == "cpu"  # a plain tensor, made where the run is
