"""The model layer (tfcheck/model/): one module per idea, and one table of names that fills a constructor,
settles a fact and explains an error alike."""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from tfcheck.engine.runner import load_subject
from tfcheck.explainers import model_facts
from tfcheck.model.build import names
from tfcheck.model.build.small_sizes import small_value
from tfcheck.model.build.spec import SMALL_VALUES

MODEL_LAYER = Path(__file__).resolve().parents[3] / "tfcheck" / "model"
MAX_LINES = 400


def test_no_module_of_the_model_layer_is_over_400_lines():
    long = {p.name: n for p in MODEL_LAYER.glob("*.py") if (n := len(p.read_text("utf-8").splitlines())) > MAX_LINES}
    assert not long, f"split these by idea: {long}"


# ----- the names, once -----------------------------------------------------------------------------------

def test_every_name_a_fact_is_read_from_is_a_name_tfcheck_fills_with_that_quantity():
    # A constructor tfcheck fills as d_model (32) must be read back as d_model, and so on for every fact.
    small = {"vocab_size": 101, "target_vocab_size": 101, "output_vocab_size": 101, "pad_id": 0, "max_len": 64,
             "d_model": 32, "padded_vocab_size": 101}
    for fact, read_from in names.CONFIG_NAMES.items():
        # exact names, and the padded vocabulary's, which the vocabulary's name pattern fills
        assert {n: SMALL_VALUES.get(n, small_value(n)) for n in read_from} == dict.fromkeys(read_from, small[fact]), \
            fact


def test_the_explainers_read_the_model_layers_tables():
    assert model_facts.MAX_LEN_NAMES is names.MAX_LEN
    assert model_facts.HEAD_NAMES is names.NUM_HEADS


class _Recurrent(nn.Module):
    """No embedding table of tfcheck's names: its sizes are only in attributes named as in the word-language
    model tutorial (ntokens, ninp) and a seq_len."""

    def __init__(self, ntokens: int, ninp: int, seq_len: int):
        super().__init__()
        self.ntokens, self.ninp, self.seq_len = ntokens, ninp, seq_len
        self.table = nn.Parameter(torch.randn(ntokens, ninp))
        self.proj = nn.Linear(ninp, ninp)

    def forward(self, x):
        return self.proj(x)


def test_names_tfcheck_fills_are_read_back_as_facts():
    subject = load_subject(_Recurrent, {})
    assert subject.loaded.filled == {"ntokens": 101, "ninp": 32, "seq_len": 64}
    facts = subject.facts
    assert (facts.vocab_size, facts.d_model, facts.max_len) == (101, 32, 64)
    assert (subject.source_of("vocab_size"), subject.source_of("d_model"), subject.source_of("max_len")) == \
        ("model.ntokens", "model.ninp", "model.seq_len")


def test_a_hugging_face_configs_max_length_is_a_generation_setting_not_the_capacity():
    from tfcheck.model.subject import build_subject

    subject = load_subject("transformers:T5ForConditionalGeneration", {})
    subject.model.config.max_length = 20  # transformers < 5 sets it on every config
    rebuilt = build_subject(subject.loaded, {})
    assert rebuilt.facts.max_len is None


# ----- torch.nn.Transformer's calling convention, in one place --------------------------------------------

def test_torch_transformers_masks_are_built_by_the_model_layer():
    from helpers import nn_transformer
    from tfcheck.model.inputs import with_memory_padding_mask, with_torch_causal_mask

    subject = load_subject(nn_transformer, {})
    keep = torch.tensor([[True, True, False]])
    kwargs = with_memory_padding_mask(subject, {"src_key_padding_mask": ~keep}, keep)
    assert torch.equal(kwargs["memory_key_padding_mask"], ~keep)  # torch's convention: True = padding
    causal = with_torch_causal_mask(subject, {}, 3)["tgt_mask"]
    assert torch.equal(causal, nn.Transformer.generate_square_subsequent_mask(3))
    lm = load_subject("reference_model:TransformerLM", {})
    assert with_torch_causal_mask(lm, {}, 3) == {} and with_memory_padding_mask(lm, {}, keep) == {}
