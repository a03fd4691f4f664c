"""tfcheck.explain and tfcheck.watch on real errors from really broken code: each message maps to its row
with a message that names the culprit, and watch leaves the model as it found it."""
from __future__ import annotations

import random
import warnings
from dataclasses import dataclass

import pytest
import torch
import torch.nn as nn

import tfcheck
from reference_model import TransformerLM, broken
from tfcheck.cli import EXIT_FAIL, EXIT_OK, main
from tfcheck.errors import UsageError
from tfcheck.tools.watch import NonFiniteError, NonFiniteWarning


def raised(fn, *args) -> Exception:
    with pytest.raises(Exception) as info:
        fn(*args)
    return info.value


def watched(model: nn.Module, *args, **options) -> tuple[Exception, tfcheck.tools.watch.Watch]:
    """Call ``model(*args)`` inside watch; return the exception that came out and the watch."""
    w = tfcheck.watch(model, **options)
    with pytest.raises(Exception) as info:
        with w:
            model(*args)
    return info.value, w


@dataclass
class GPTConfig:
    vocab_size: int = 50
    block_size: int = 8
    n_embd: int = 16


class TinyGPT(nn.Module):
    """A nanoGPT-shaped LM: learned position embedding of block_size rows, no length check."""

    def __init__(self):
        super().__init__()
        self.config = GPTConfig()
        self.wte = nn.Embedding(self.config.vocab_size, self.config.n_embd)
        self.wpe = nn.Embedding(self.config.block_size, self.config.n_embd)
        self.head = nn.Linear(self.config.n_embd, self.config.vocab_size)

    def forward(self, idx):
        return self.head(self.wte(idx) + self.wpe(torch.arange(idx.size(1))))


class RegisteredCausalMask(nn.Module):
    """A causal mask registered for block_size positions and sliced to the input, as nanoGPT does."""

    def __init__(self):
        super().__init__()
        self.config = GPTConfig()
        self.register_buffer("bias", torch.tril(torch.ones(8, 8)))

    def forward(self, x):
        s = x.size(1)
        return (x @ x.transpose(-2, -1)).masked_fill(self.bias[:s, :s] == 0, float("-inf"))


class HalfMask(nn.Module):
    def forward(self, scores, mask):
        return scores.masked_fill(mask, -1e9)


class ExpandedAttention(nn.Module):
    """Self-attention over a stride-0 input: the (b, h, s, s) scores are the first real allocation."""

    num_heads = 4

    def forward(self, x):
        b, s, d = x.shape
        q = x.unsqueeze(1).expand(b, self.num_heads, s, d)
        return (q @ q.transpose(-2, -1)).softmax(-1) @ q


# ----- explain on exceptions raised inside a watched model --------------------------------------------

def test_mat1_mat2_names_the_linear_its_sizes_and_the_config_values():
    exc, w = watched(broken.LinearInFeaturesMismatch().eval(), torch.randint(1, 101, (2, 5)))
    e = w.explanation
    assert e.rows == ["mat1-mat2-shapes"] and e.location.module == "layers.0.ffn.w_2"
    assert "Linear expects in_features=32, got last dim 64" in e.message
    assert "config.d_ff=64" in e.message and "config.d_model=32" in e.message
    assert "built with d_model where d_ff was meant" in e.message
    assert e.location.file.endswith("layers.py")


def test_residual_width_mismatch_gives_both_sizes_the_dimension_and_their_names():
    exc, w = watched(broken.ResidualWidthMismatch().eval(), torch.randint(1, 101, (2, 5)))
    e = w.explanation
    assert e.row == "tensor-size-mismatch" and e.location.module == "layers.0"
    assert "have 32 and 64 in dimension 2" in e.message and "64 is config.d_ff=64" in e.message


def test_a_positional_table_shorter_than_the_config_promises_is_a_size_mismatch():
    exc, w = watched(broken.PositionalTableTooShort().eval(), torch.randint(1, 101, (2, 30)))
    e = w.explanation
    assert e.row == "tensor-size-mismatch" and e.location.module == "pos"
    assert "covers 16 positions" in e.message and "config.max_len=64 allows" in e.message


def test_a_mask_buffer_shorter_than_the_input_is_max_len_exceeded():
    exc, w = watched(RegisteredCausalMask(), torch.randn(2, 12, 4))
    e = w.explanation
    assert e.row == "max-len-exceeded"
    assert "the input has 12 positions but the model was built for 8 (config.block_size=8)" in e.message


def test_a_position_embedding_shorter_than_the_input_is_max_len_exceeded():
    exc, w = watched(TinyGPT(), torch.randint(0, 50, (2, 12)))
    assert isinstance(exc, IndexError) and str(exc).startswith("index out of range in self")
    e = w.explanation
    assert e.row == "max-len-exceeded" and e.location.module == "wpe"
    assert "num_embeddings=8 (config.block_size=8)" in e.message and "position ids up to 11" in e.message


@pytest.mark.parametrize("ids,needle", [(torch.tensor([[3, 59]]), "received the token id 59; ids must be below 50"),
                                        (torch.tensor([[3, -100]]), "received the negative id -100")])
def test_token_ids_outside_the_vocabulary(ids, needle):
    exc, w = watched(TinyGPT(), ids)
    assert w.explanation.row == "embedding-index-out-of-range" and w.explanation.location.module == "wte"
    assert needle in w.explanation.message


def test_input_longer_than_the_reference_models_max_len():
    exc, w = watched(TransformerLM().eval(), torch.randint(1, 101, (1, 80)))
    assert isinstance(exc, ValueError) and w.explanation.row == "max-len-exceeded"
    assert "(length 80, limit 64)" in w.explanation.message


def test_device_mismatch_names_the_devices_of_parameters_and_inputs():
    exc, w = watched(nn.Linear(4, 4).to("meta"), torch.randn(2, 4))
    e = w.explanation
    assert e.row == "device-mismatch" and "has parameters on meta and received inputs on cpu" in e.message


@pytest.mark.parametrize("model,x", [(nn.Linear(4, 4), torch.randn(2, 4).half())])
def test_dtype_mismatch_names_the_dtypes(model, x):
    exc, w = watched(model, x)
    assert str(exc).startswith("mat1 and mat2 must have the same dtype")
    e = w.explanation
    assert e.row == "dtype-mismatch" and "has float32 parameters and received float16 inputs" in e.message


def test_half_overflow_points_at_finfo_min():
    scores, mask = torch.randn(2, 2).half(), torch.ones(2, 2, dtype=torch.bool)
    exc, w = watched(HalfMask(), scores, mask)
    assert "without overflow" in str(exc)
    e = w.explanation
    assert e.row == "half-overflow" and any("torch.finfo(scores.dtype).min" in item for item in e.look_at)


def test_out_of_memory_estimates_the_attention_scores_and_what_fits_the_budget():
    x = torch.zeros(1, 1, 8).expand(2, 2**18, 8)  # no memory: stride 0
    exc, w = watched(ExpandedAttention(), x, budget="8GiB")
    e = w.explanation
    assert e.row == "out-of-memory" and e.evidence["scores_bytes"] == 2 * 4 * 2**36 * 4
    assert "b·h·s²·bytes = 2·4·262144·262144·4 = 2.00 TiB" in e.message
    assert e.evidence["length_that_fits"] ** 2 * 1 * 4 * 4 <= 8 * 2**30
    assert any("even batch 1 does not fit 8.00 GiB" in item for item in e.look_at)


# ----- explain on text and exceptions alone ------------------------------------------------------------

@pytest.mark.parametrize("make,row,needle", [
    (lambda: nn.Linear(32, 32)(torch.randn(3, 7, 64)), "mat1-mat2-shapes",
     "expects 32 input features (in_features=32, out_features=32) received a last dimension of 64"),
    (lambda: torch.randn(3, 7, 32) + torch.randn(3, 7, 64), "tensor-size-mismatch", "have 32 and 64 in dimension 2"),
    (lambda: nn.Embedding(16, 8)(torch.arange(20)), "embedding-index-out-of-range", "a position id >= max_len"),
    (lambda: torch.randn(2, 2).half() @ torch.randn(2, 2), "dtype-mismatch", "dtypes Half and float"),
    (lambda: torch.randn(2, device="meta") + torch.randn(2), "device-mismatch", "tensors on cpu and meta"),
    (lambda: torch.randn(2, 2).half().masked_fill(torch.ones(2, 2, dtype=torch.bool), -1e9), "half-overflow",
     "does not fit (the largest Half magnitude is 65504)"),
    (lambda: torch.empty(2**50, dtype=torch.uint8), "out-of-memory", "one allocation of 1024.00 TiB failed"),
])
def test_explain_an_exception_you_caught(make, row, needle):
    e = tfcheck.explain(raised(make))
    assert e.row == row and needle in e.message, e.message
    assert e.location.file.endswith("test_watch_explain.py")


def test_explain_plain_text_reads_the_numbers_in_it():
    e = tfcheck.explain("CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 79.15 GiB "
                        "of which 1.00 GiB is free.")
    assert e.rows == ["out-of-memory"] and "one allocation of 4.00 GiB failed with 1.00 GiB free" in e.message
    assert any("divide the batch by 4" in item and "the length by 2" in item for item in e.look_at)
    size = tfcheck.explain("The size of tensor a (64) must match the size of tensor b (16) at non-singleton "
                           "dimension 1")
    assert size.rows == ["tensor-size-mismatch", "max-len-exceeded"]


def test_explanation_renders_as_text_rich_and_dict():
    e = tfcheck.explain("RuntimeError: mat1 and mat2 shapes cannot be multiplied (21x64 and 32x32)")
    text = str(e)
    assert text.startswith("RuntimeError: mat1 and mat2") and "troubleshooting [mat1-mat2-shapes]" in text
    data = e.to_dict()
    assert data["rows"] == ["mat1-mat2-shapes"] and data["matched"] and data["evidence"]["in_features"] == 32
    from rich.console import Console

    console = Console(width=100, record=True, file=open("/dev/null", "w"))
    console.print(e)
    assert "look at:" in console.export_text()


def test_unknown_text_matches_no_row_and_says_so():
    e = tfcheck.explain("my dataloader [broke] today")
    assert e.rows == [] and not e.matched and "no troubleshooting row matches" in str(e)
    assert "[broke]" in str(e)  # user text is not rich markup
    with pytest.raises(UsageError, match="exception or an error message"):
        tfcheck.explain(42)


def test_cli_explain_exits_0_on_a_match_and_1_without(capsys):
    assert main(["explain", "RuntimeError: expected scalar type Float but found Half"]) == EXIT_OK
    assert "troubleshooting [dtype-mismatch]" in capsys.readouterr().out
    assert main(["explain", "something", "odd"]) == EXIT_FAIL
    assert "no troubleshooting row matches" in capsys.readouterr().out


def test_cli_explain_reads_a_pasted_traceback_from_stdin(capsys, monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO('Traceback (most recent call last):\n  File "x.py", line 3\n'
                                                 "IndexError: index out of range in self\n"))
    assert main(["explain", "-"]) == EXIT_OK
    assert capsys.readouterr().out.startswith("IndexError: index out of range in self")


# ----- watch -------------------------------------------------------------------------------------------

def test_watch_reraises_the_same_exception_with_the_explanation_as_a_note():
    model = broken.LinearInFeaturesMismatch().eval()
    exc, w = watched(model, torch.randint(1, 101, (2, 5)))
    assert type(exc) is RuntimeError and str(exc).startswith("mat1 and mat2 shapes cannot be multiplied")
    assert any("troubleshooting [mat1-mat2-shapes]" in note and "layers.0.ffn.w_2" in note for note in exc.__notes__)
    assert tfcheck.explain(exc) is w.explanation


def test_watch_locates_the_first_nan_at_its_module_and_line():
    model = broken.CausalMaskHidesDiagonal().eval()
    with tfcheck.watch(model, on_nonfinite="record") as w:
        out = model(torch.randint(1, 101, (2, 5)))
    assert not torch.isfinite(out).all()
    found = w.first_nonfinite
    assert found.module == "layers.0.self_attn" and found.module_class == "_NegInfAttention"
    assert found.entered == "layers.0.self_attn.dropout" and found.kinds == ("NaN",)
    assert "broken" in found.file and "softmax" in found.code and found.row == "loss-nan"


def test_watch_warns_once_and_can_raise_instead():
    model = broken.CausalMaskHidesDiagonal().eval()
    tokens = torch.randint(1, 101, (2, 5))
    with pytest.warns(NonFiniteWarning, match="layers.0.self_attn") as record, tfcheck.watch(model):
        model(tokens)
        model(tokens)
    assert len([r for r in record if r.category is NonFiniteWarning]) == 1
    with pytest.raises(NonFiniteError, match="came out of 'layers.0.self_attn'"), \
            tfcheck.watch(model, on_nonfinite="raise"):
        model(tokens)


def test_nan_in_the_batch_is_reported_as_coming_from_outside():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with tfcheck.watch(model, on_nonfinite="record") as w:
        model(torch.tensor([[1.0, float("nan"), 0.0, 0.0]]))
    assert w.first_nonfinite.from_input and w.first_nonfinite.module == ""


def test_watch_removes_every_hook_and_leaves_the_model_unchanged():
    model = broken.CausalMaskHidesDiagonal().eval()
    model.layers[0].norm1.train()  # a mixed mode must stay mixed; no dropout runs, so no RNG is drawn
    state = {k: v.clone() for k, v in model.state_dict().items()}
    modes = [m.training for m in model.modules()]
    tokens = torch.randint(1, 101, (2, 5))
    torch.manual_seed(3), random.seed(3)
    expected_rng = (torch.rand(1), random.random())
    torch.manual_seed(3), random.seed(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonFiniteWarning)
        with pytest.raises(ValueError):
            with tfcheck.watch(model):
                with torch.no_grad():
                    model(tokens)
                raise ValueError("the user's own error")
    assert (torch.rand(1), random.random()) == expected_rng
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert [m.training for m in model.modules()] == modes


def test_watch_does_not_blame_a_module_for_an_error_outside_it():
    model = nn.Linear(4, 4)
    with pytest.raises(RuntimeError) as info, tfcheck.watch(model) as w:
        with pytest.raises(RuntimeError):
            model(torch.randn(2, 3))  # caught by the user: leaves the Linear on the stack
        torch.randn(3) + torch.randn(4)
    assert w.explanation.location.module is None and "raised during the watched block" in w.explanation.message
    assert info.value.__notes__


def test_watch_rejects_bad_arguments():
    with pytest.raises(UsageError, match="nn.Module"):
        tfcheck.watch("model")
    with pytest.raises(UsageError, match="expected one of warn, raise, record, off"):
        tfcheck.watch(nn.Linear(2, 2), on_nonfinite="explode")


class _StrRaises(Exception):
    def __str__(self):
        raise RuntimeError("this __str__ is broken")


class _RaisesUnprintable(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        raise _StrRaises()


def test_an_exception_whose_str_raises_leaves_watch_as_itself():
    # Explaining it called str(exc): the user's exception was replaced by tfcheck's RuntimeError.
    model = _RaisesUnprintable()
    with pytest.raises(_StrRaises):
        with tfcheck.watch(model):
            model(torch.zeros(2, 4))
    assert "str() of this _StrRaises raised RuntimeError" in tfcheck.explain(_StrRaises()).message
