"""The probe core (recorder) and trace_shapes: what they see, that they leave nothing behind, and the
trace's rendered output against golden files (fixed width, colour off)."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from torch.overrides import _get_current_function_mode_stack
from torch.utils._python_dispatch import _get_current_dispatch_mode

import tfcheck
from reference_model import TransformerLM, broken
from tfcheck.probe.attention_view import visible_attention
from tfcheck.recording.recorder import Recorder

GOLDEN = Path(__file__).resolve().parents[2] / "support" / "golden"
UPDATE = os.environ.get("TFCHECK_UPDATE_GOLDEN") == "1"


def assert_golden(name: str, text: str) -> None:
    """Compare text with tests/support/golden/<name>. A missing golden file fails (it would otherwise be written and
    compared with itself); TFCHECK_UPDATE_GOLDEN=1 writes or rewrites it and passes."""
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text, encoding="utf-8")
        return
    if not path.exists():
        pytest.fail(
            f"golden file {path} is missing; create it by running this test with TFCHECK_UPDATE_GOLDEN=1 "
            f"(e.g. TFCHECK_UPDATE_GOLDEN=1 pytest tests/unit/probe/test_recorder_trace.py), check its content and "
            f"commit it"
        )
    assert text == path.read_text(encoding="utf-8"), f"{name} differs; TFCHECK_UPDATE_GOLDEN=1 rewrites it"


class TwiceAndTied(nn.Module):
    """One block called twice; the output head tied to the embedding."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(11, 8)
        self.block = nn.Linear(8, 8)
        self.head = nn.Linear(8, 11, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, x):
        return self.head(self.block(self.block(self.embed(x))))


def nothing_left(model: nn.Module) -> bool:
    hooks = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
    return hooks == 0 and not _get_current_function_mode_stack() and _get_current_dispatch_mode() is None


def test_module_calls_in_order_twice_called_twice_tied_counted_once():
    model = TwiceAndTied()
    with Recorder(model) as rec:
        model(torch.zeros(2, 5, dtype=torch.long))
    paths = [c.path for c in rec.recording.calls]
    assert paths == ["", "embed", "block", "block", "head"]
    assert rec.recording.calls[0].params == 11 * 8 + 8 * 8 + 8  # the tied weight once
    assert nothing_left(model)


def test_function_and_aten_ops_with_modules_scalars_and_lines():
    model = TransformerLM().eval()
    with torch.no_grad(), Recorder(model) as rec:
        model(torch.randint(1, 101, (3, 7)))
    softmax = next(o for o in rec.recording.ops if o.level == "function" and o.short_name == "softmax")
    assert softmax.module == "layers.0.self_attn" and softmax.scalars["dim"] == -1
    assert softmax.file.endswith("attention.py") and softmax.line > 0
    fill = next(o for o in rec.recording.ops if o.short_name == "masked_fill" and o.level == "function")
    assert fill.scalars["positional"][2] == torch.finfo(torch.float32).min
    assert any(o.level == "aten" and o.short_name == "bmm" for o in rec.recording.ops)


def test_fused_attention_internals_and_backward_are_seen():
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 3, 8, requires_grad=True)
    with visible_attention(), Recorder(mha) as rec:
        out, _ = mha(x, x, x)
        torch.autograd.grad(out.sum(), x)
    names = {o.short_name for o in rec.recording.ops}
    assert "multi_head_attention_forward" in names and names & {"_safe_softmax", "_softmax"}
    assert any(o.phase == "backward" for o in rec.recording.ops)
    assert torch.backends.mha.get_fastpath_enabled()  # restored
    assert nothing_left(mha)


def test_recorder_is_removed_when_the_model_raises():
    model = broken.LinearInFeaturesMismatch().eval()
    with pytest.raises(RuntimeError, match="mat1 and mat2"), Recorder(model) as rec:
        model(torch.randint(1, 101, (3, 7)))
    assert rec.recording.calls[-1].raised and rec.recording.calls[-1].path == "layers.0.ffn.w_2"
    assert nothing_left(model)


def test_trace_of_the_reference_lm_matches_its_golden_output():
    trace = tfcheck.trace_shapes("reference_model:TransformerLM")
    assert trace.ok
    assert_golden("trace_TransformerLM.txt", str(trace))
    assert "view(3, 7, 4, 8)" in str(trace) and "transpose(1, 2)  (3, 7, 4, 8) → (3, 4, 7, 8)" in str(trace)


def test_trace_of_hugging_face_gpt2_matches_its_golden_output():
    pytest.importorskip("transformers")
    trace = tfcheck.trace_shapes("transformers:GPT2LMHeadModel")
    assert trace.ok
    # Source lines of transformers change between its releases; the shapes must not.
    text = re.sub(r"  [\w.]+\.py:\d+", "", str(trace))
    assert_golden("trace_GPT2LMHeadModel.txt", text)
    assert "scaled_dot_product_attention" in text or "matmul" in text


def test_trace_with_given_inputs_and_to_json():
    model = TransformerLM().eval()
    tokens = torch.randint(1, 101, (2, 5))
    trace = tfcheck.trace_shapes(model, tokens)
    data = json.loads(trace.to_json())
    assert data["calls"][0]["outputs"]["shape"] == [2, 5, 101]
    assert data["total_params"] == sum(p.numel() for p in model.parameters())
    assert trace.summary().total_params == data["total_params"]  # torchinfo agrees


def test_partial_trace_of_a_crashing_model_names_the_module_and_row():
    trace = tfcheck.trace_shapes("reference_model.broken:LinearInFeaturesMismatch")
    assert not trace.ok and trace.error.module == "layers.0.ffn.w_2" and trace.error.row == "mat1-mat2-shapes"
    text = str(trace)
    assert "── w_2 (Linear)  ((3, 7, 64) float32) → raised" in text and "FAILED" in text  # w_2 of layers.0.ffn
    with pytest.raises(tfcheck.UsageError, match="mat1 and mat2"):
        trace.raise_if_failed()


def test_meta_trace_allocates_nothing_and_reports_data_dependent_ops():
    with torch.device("meta"):
        big = TransformerLM(num_layers=4, d_model=1024, num_heads=16, d_ff=4096, vocab_size=32000)
    trace = tfcheck.trace_shapes(big, device="meta")
    assert trace.ok and trace.calls[0].outputs.shape == (3, 7, 32000) and trace.calls[0].outputs.device == "meta"

    class DataDependent(nn.Module):
        def forward(self, x):
            return x[: int(x.sum().item())]

    failed = tfcheck.trace_shapes(DataDependent(), torch.ones(3, 4), device="meta")
    assert not failed.ok and "needs tensor data" in failed.error.message


def test_trace_leaves_the_model_as_it_was():
    model = TransformerLM()
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tokens = torch.randint(1, 101, (2, 5))
    torch.manual_seed(3)
    expected = torch.rand(1)
    torch.manual_seed(3)
    tfcheck.trace_shapes(model, tokens)  # dropout is on (train mode): it draws random numbers
    assert torch.rand(1) == expected and model.training and nothing_left(model)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


def test_a_tutorial_style_model_is_traced_with_the_mask_layout_its_forward_takes():
    trace = tfcheck.trace_shapes("zoo_families:TutorialEncoder")  # forward(x, src_mask) wants (b, 1, 1, s)
    assert trace.error is None, trace.error
    assert "(3, 1, 1, 7) bool" in str(trace)


def test_a_keyword_forward_does_not_take_is_refused_not_passed_to_forward():
    # torchinfo's col_names= went to forward(), whose TypeError read as the model's failure.
    model = TransformerLM()
    with pytest.raises(tfcheck.UsageError, match="TransformerLM.forward, which takes tokens, not col_names"):
        tfcheck.trace_shapes(model, torch.zeros(2, 5, dtype=torch.long), col_names=["input_size"])


@pytest.mark.parametrize("family", ["BertModel", "GPT2LMHeadModel"])
def test_a_hugging_face_model_on_meta_traces_without_a_value_read(family):
    """inputs_for asked a meta mask whether every token was real (keep.all()), which a meta tensor cannot
    answer: every Hugging Face model with an attention_mask failed to trace on meta."""
    transformers = pytest.importorskip("transformers")
    config = {"BertModel": transformers.BertConfig, "GPT2LMHeadModel": transformers.GPT2Config}[family](
        vocab_size=101, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        n_embd=32, n_layer=1, n_head=2)
    with torch.device("meta"):
        model = getattr(transformers, family)(config)
    trace = tfcheck.trace_shapes(model, device="meta")
    assert "(3, 7) int64 meta" in str(trace)


def test_events_built_without_init_read_every_field():
    """The recorder makes OpEvent and ModuleCall with object.__new__ (hundreds per forward) and sets the fields it
    has; the others read their class-level defaults. A field with a default_factory has none: it would raise only
    when read, so none may have one."""
    import dataclasses

    from tfcheck.recording.recorder import ModuleCall, OpEvent

    for cls in (OpEvent, ModuleCall):
        factories = [f.name for f in dataclasses.fields(cls) if f.default_factory is not dataclasses.MISSING]
        assert not factories, f"{cls.__name__}: {factories} have a default_factory"
    recorder = Recorder(nn.Linear(2, 2))
    with recorder:
        recorder.model(torch.ones(1, 2))
    for record in (*recorder.recording.ops, *recorder.recording.calls):
        for f in dataclasses.fields(record):
            getattr(record, f.name)
