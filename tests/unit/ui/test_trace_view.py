"""How a trace reads in a REPL, a notebook and a terminal: a one-line repr, the tree folded at a depth, names
relative to the calling module, keyword arguments without their Nones, and the unique parameter count with
the tied weights named."""
from __future__ import annotations

import html

import pytest
import torch
import torch.nn as nn

import tfcheck
from reference_model import TransformerLM
from tfcheck.ui.render import to_string


def wide(trace) -> str:
    """The tree with no line wrapped."""
    return to_string(trace, width=400)


@pytest.fixture(scope="module")
def lm():
    return TransformerLM().eval()


@pytest.fixture(scope="module")
def lm_trace(lm):
    return tfcheck.trace_shapes(lm, torch.randint(1, 101, (2, 5)))


def test_repr_is_one_short_line_with_calls_parameters_and_state(lm, lm_trace):
    params = sum(p.numel() for p in lm.parameters())
    assert repr(lm_trace) == f"<Trace TransformerLM: {len(lm_trace.calls)} calls, {params:,} parameters (ok)>"


def test_repr_of_a_failed_trace_names_where_and_the_row():
    trace = tfcheck.trace_shapes("reference_model.broken:LinearInFeaturesMismatch")
    assert repr(trace).endswith("(failed in 'layers.0.ffn.w_2': mat1-mat2-shapes)>") and "\n" not in repr(trace)


def test_a_notebook_gets_the_tree_as_escaped_preformatted_text(lm_trace):
    page = lm_trace._repr_html_()
    assert page.startswith("<pre>") and page.endswith("</pre>")
    assert html.unescape(page[len("<pre>"):-len("</pre>")]) == str(lm_trace)
    assert "&lt;root&gt;" in page and "<root>" not in page


def test_the_tree_names_a_call_relative_to_the_module_it_ran_in(lm_trace):
    text = wide(lm_trace)
    assert "── layers.0 (EncoderLayer)" in text
    assert "── self_attn (MultiHeadAttention)" in text and "── w_q (Linear)" in text
    assert "layers.0.self_attn" not in text  # the full path stays in the data
    assert "layers.0.self_attn.w_q" in {c.path for c in lm_trace.calls}


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, hidden_states, attention_mask=None, cache=None, position_ids=None, use_cache=False):
        return self.proj(hidden_states), None


class KeywordCaller(nn.Module):
    """Calls its layer the Hugging Face way: every argument by keyword, most of them None."""

    def __init__(self):
        super().__init__()
        self.layer = Inner()

    def forward(self, x):
        positions = torch.arange(x.shape[1])[None]
        out, _ = self.layer(hidden_states=x, attention_mask=None, cache=None, position_ids=positions, use_cache=True)
        return out


def test_keyword_arguments_are_shown_briefly_without_their_nones():
    text = wide(tfcheck.trace_shapes(KeywordCaller(), torch.zeros(2, 3, 4)))
    line = next(line for line in text.splitlines() if "layer (Inner)" in line)
    assert "(hidden_states=(2, 3, 4) float32, position_ids=(1, 3) int64, use_cache=True)" in line, line
    assert "attention_mask" not in text and "cache=None" not in text and "{" not in line


def test_depth_folds_the_deeper_calls_into_a_count_and_keeps_every_call(lm, lm_trace):
    tokens = torch.randint(1, 101, (2, 5))
    folded = tfcheck.trace_shapes(lm, tokens, depth=1)
    text = wide(folded)
    assert "self_attn" not in text and "matmul" not in text
    below = sum(1 for c in lm_trace.calls if c.path.startswith("layers.0."))
    assert "── layers.0 (EncoderLayer)" in text and f"[{below} calls inside]" in text
    assert len(text.splitlines()) < len(wide(lm_trace).splitlines()) // 3
    assert len(folded.calls) == len(lm_trace.calls) and folded.to_dict()["calls"] == lm_trace.to_dict()["calls"]
    only_model = wide(tfcheck.trace_shapes(lm, tokens, depth=0))
    assert "<root> (TransformerLM)" in only_model and "embed" not in only_model


class TakesDepth(nn.Module):
    """A forward with an argument named like a trace option."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.seen = []

    def forward(self, x, depth=0, scale=1.0):
        self.seen.append(depth)
        return self.proj(x) * scale


def test_depth_is_an_option_never_passed_to_forward_and_forward_kwargs_reaches_forward():
    model = TakesDepth()
    trace = tfcheck.trace_shapes(model, torch.zeros(2, 4), depth=1)
    assert model.seen == [0]  # forward's own default: depth=1 was the tree's
    assert any("forward_kwargs={'depth': ...}" in note for note in trace.notes), trace.notes
    trace = tfcheck.trace_shapes(model, torch.zeros(2, 4), depth=0, forward_kwargs={"depth": 5})
    assert model.seen == [0, 5] and not trace.notes


@pytest.mark.parametrize("depth", [-1, "2", True, 1.5])
def test_a_bad_depth_is_refused_with_what_to_give(depth):
    with pytest.raises(tfcheck.UsageError, match="depth is a whole number >= 0"):
        tfcheck.trace_shapes(TakesDepth(), torch.zeros(2, 4), depth=depth)


def test_a_keyword_given_directly_and_in_forward_kwargs_is_refused():
    with pytest.raises(tfcheck.UsageError, match="scale both as a keyword and in forward_kwargs"):
        tfcheck.trace_shapes(TakesDepth(), torch.zeros(2, 4), scale=2.0, forward_kwargs={"scale": 3.0})


class TiedHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(11, 8)
        self.block = nn.Linear(8, 8)
        self.lm_head = nn.Linear(8, 11, bias=False)
        self.lm_head.weight = self.embed.weight

    def forward(self, x):
        return self.lm_head(self.block(self.embed(x)))


def test_the_header_counts_a_tied_weight_once_and_says_so_where_torchinfo_counts_it_twice():
    model = TiedHead()
    trace = tfcheck.trace_shapes(model, torch.zeros(2, 5, dtype=torch.long))
    unique = 11 * 8 + 8 * 8 + 8
    assert trace.total_params == unique and trace.tied == [("embed.weight", "lm_head.weight")]
    assert f"{unique:,} parameters (tied: lm_head.weight = embed.weight, counted once)" in wide(trace)
    assert trace.to_dict()["tied_params"] == [["embed.weight", "lm_head.weight"]]
    assert trace.summary().total_params == unique + 11 * 8  # torchinfo: once per module that holds it
