"""probe.leak_origin: the first op whose output at a position moves when a position it must not see moves."""
import inspect

import torch
import torch.nn as nn

from tfcheck.probe.leak_origin import LeakOrigin, Perturbation
from tfcheck.recording.recorder import Recorder

N, D, H = 9, 8, 2


class CausalAttention(nn.Module):
    def __init__(self, merge_with_transpose: bool):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.merge_with_transpose = merge_with_transpose

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (t.view(b, s, H, D // H).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        scores = (q @ k.transpose(-2, -1)).masked_fill(~torch.ones(s, s, dtype=torch.bool).tril(), float("-inf"))
        heads = scores.softmax(-1) @ v  # (b, h, s, d_k)
        if self.merge_with_transpose:
            return heads.transpose(1, 2).reshape(b, s, D)
        return heads.reshape(b, s, D)  # leak born here


def _rows() -> tuple[torch.Tensor, list[int]]:
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(1, N, D, generator=gen)
    changed = list(range(N))
    perturbed = base.repeat(N, 1, 1)
    perturbed[torch.arange(N), changed] += torch.randn(N, D, generator=gen)
    return torch.cat([base, perturbed]), changed


def _origin(model: nn.Module) -> LeakOrigin:
    x, changed = _rows()
    origin = LeakOrigin(Perturbation.one_position_each(N, changed))
    with Recorder(model, aten=False, on_op=origin), torch.no_grad():
        model(x)
    return origin


def _marked_line() -> int:
    lines, start = inspect.getsourcelines(CausalAttention.forward)
    return start + next(i for i, text in enumerate(lines) if "leak born here" in text)


def test_the_reshape_that_merges_heads_without_a_transpose_is_where_the_leak_is_born():
    origin = _origin(CausalAttention(merge_with_transpose=False).eval())
    assert origin.first is not None and origin.first.line == _marked_line()
    assert origin.first.file == __file__ and origin.largest > origin.tolerance


def test_a_causal_attention_gives_no_origin():
    origin = _origin(CausalAttention(merge_with_transpose=True).eval())
    assert origin.first is None


def test_a_torch_nn_models_ops_are_the_models_and_a_probe_hooks_ops_are_tfchecks():
    # A torch.nn model's ops are called by torch's modules, which tfcheck calls: still the model's. The noise a
    # probe's hook adds to an embedding is tfcheck's, whatever line the model called the embedding from.
    from tfcheck.engine.context import CheckContext
    from tfcheck.engine.runner import load_subject
    from tfcheck.probe import layer_capture

    layer = nn.TransformerEncoderLayer(D, H, 16, dropout=0.0, batch_first=True)
    ctx = CheckContext(load_subject(nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)))
    _, recording = ctx.record((torch.randn(2, N, D),), {}, "a forward")
    ops = [e for e in recording.ops if e.level == "function"]
    assert ops and not any(e.by_tfcheck for e in ops)

    embed = nn.Embedding(11, D)
    tokens = torch.randint(0, 11, (2, N))
    with Recorder(embed, aten=False) as recorder, layer_capture.perturbed_embedding(embed, tokens, tokens > 5, 0):
        embed(tokens)
    made = {e.short_name: e.by_tfcheck for e in recorder.recording.ops if e.level == "function"}
    assert made["embedding"] is False and made["randn"] is True
