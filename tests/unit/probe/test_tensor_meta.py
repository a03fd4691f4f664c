"""tfcheck.recording.tensor_meta: the recorder's descriptions of tensors, made once per shape, dtype and device, and the
tensors inside op arguments in pytree's order; and the recorder's own reads of those shapes stay out of every
function mode (they are not the model's calls)."""
from __future__ import annotations

from collections import OrderedDict, namedtuple

import pytest
import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from tfcheck.recording.recorder import Recorder
from tfcheck.recording.tensor_meta import TensorMeta, metas, tensors_in

Pair = namedtuple("Pair", "left right")


def _pytree_tensors(value) -> list[int]:
    return [id(t) for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def test_a_description_is_the_shape_dtype_and_device_and_is_shared():
    a, b = torch.zeros(2, 3), torch.ones(2, 3)
    assert TensorMeta.of(a) is TensorMeta.of(b)
    assert TensorMeta.of(a) == TensorMeta((2, 3), "float32", "cpu")
    assert TensorMeta.of(a.half()) == TensorMeta((2, 3), "float16", "cpu")
    assert TensorMeta.of(torch.zeros(2, 3, device="meta")) == TensorMeta((2, 3), "float32", "meta")
    assert str(TensorMeta.of(torch.zeros(3, dtype=torch.long, device="meta"))) == "(3,) int64 meta"


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_a_nested_tensor_is_described_by_its_component_count():
    nested = torch.nested.nested_tensor([torch.zeros(2, 4), torch.zeros(3, 4)])
    assert TensorMeta.of(nested) == TensorMeta((2,), "nested float32", "cpu")


def test_the_tensors_of_op_arguments_come_in_pytree_order():
    x, y, z, w, v = (torch.zeros(i + 1) for i in range(5))
    calls = [
        ((x, 2, 3), {}),
        ((x, (1, 2, -1)), {}),  # a shape tuple
        (([x, y, z], 0), {}),  # a list to concatenate
        ((x, {"b": y, "a": z}), {"mask": w}),  # a dict in insertion order, and keywords
        ((x, [y, (z, [w])], torch.Size([2, 3])), {"v": v}),
        ((Pair(y, x), OrderedDict(b=z, a=w)), {}),  # containers pytree opens by their own rules
    ]
    for args, kwargs in calls:
        assert [id(t) for t in tensors_in((args, kwargs))] == _pytree_tensors([*args, *kwargs.values()])
    assert [id(t) for t in tensors_in([x, (y, z)])] == _pytree_tensors([x, (y, z)])
    assert metas(((x, (y, 3)), {})) == (TensorMeta((1,), "float32", "cpu"), TensorMeta((2,), "float32", "cpu"))


class _ShapeReads(TorchFunctionMode):
    """Counts the reads of a tensor's shape, dtype and device that reach a function mode."""

    def __init__(self):
        super().__init__()
        self.reads = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") == "__get__":
            self.reads += 1
        return func(*args, **(kwargs or {}))


def test_the_recorders_module_hooks_read_shapes_out_of_sight_of_function_modes():
    """A mode entered inside the recording sees the model's calls and no more: the recorder's module hooks run in
    the forward, and their reads of each argument's shape would otherwise reach every mode (four per tensor)."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2)))
    x = torch.zeros(3, 4)
    with _ShapeReads() as plain:
        model(x)
    with Recorder(model) as rec, _ShapeReads() as recorded:
        model(x)
    assert len(rec.recording.calls) == 6 and rec.recording.calls[-1].outputs == TensorMeta((3, 2), "float32", "cpu")
    assert recorded.reads == plain.reads
