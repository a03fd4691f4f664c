"""probe.value_copies: which ops of a recorded forward make an exact copy of a tensor (the same values at the same
positions, with the gradient path), so that the residual recognisers read the copy as the tensor it copies."""
import pytest
import torch
import torch.nn as nn

from tfcheck.probe.value_copies import Copies
from tfcheck.recording.recorder import Recorder

COPIES = {
    "clone": lambda x: x.clone(),
    "torch.clone": lambda x: torch.clone(x),
    "view to the same shape": lambda x: x.view(x.shape),
    "reshape to the same shape": lambda x: x.reshape(x.shape),
    "expand_as itself": lambda x: x.expand_as(x),
    "widening cast": lambda x: x.double(),
    "times one": lambda x: x * 1,
    "one times": lambda x: 1.0 * x,
    "divided by one": lambda x: x / 1,
    "copy_ into an empty tensor": lambda x: torch.empty_like(x).copy_(x),
    "a copy of a copy": lambda x: x.view(x.shape).clone(),
}
NOT_COPIES = {
    "detach (no gradient path)": lambda x: x.detach(),
    "transpose to the same shape": lambda x: x.transpose(1, 2),
    "contiguous of a transpose": lambda x: x.transpose(1, 2).contiguous(),
    "flip": lambda x: x.flip(1),
    "an index": lambda x: x[:, torch.tensor([1, 0, 2])],
    "narrowing cast": lambda x: x.half(),
    "times two": lambda x: x * 2,
    "one over x": lambda x: 1 / x,
    "view to another shape": lambda x: x.view(3, 9),
    "copied, then zeroed in place": lambda x: x.clone().zero_(),
    "copied, then written by index": lambda x: _set_first(x.clone()),
}


def _set_first(t: torch.Tensor) -> torch.Tensor:
    t[0] = 0.0
    return t


class Apply(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, x):
        return self.f(x)


def _source(f, x: torch.Tensor) -> tuple[int, int]:
    """(what Copies reads the output of ``f(x)`` as, id(x)) over one recording with tensor identities."""
    recorder = Recorder(Apply(f), track_ids=True)
    with recorder:
        out = recorder.model(x)
    return Copies(recorder.recording).original(id(out)), id(x)


@pytest.mark.parametrize("f", COPIES.values(), ids=COPIES.keys())
def test_an_exact_copy_is_read_as_the_tensor_it_copies(f):
    source, of = _source(f, torch.randn(3, 3, 3))
    assert source == of


def test_contiguous_of_a_strided_input_is_a_copy_of_it():
    source, of = _source(lambda x: x.contiguous(), torch.randn(3, 3, 3).mT)
    assert source == of


@pytest.mark.parametrize("f", NOT_COPIES.values(), ids=NOT_COPIES.keys())
def test_an_op_that_moves_rounds_cuts_or_overwrites_the_values_is_no_copy(f):
    source, of = _source(f, torch.randn(3, 3, 3))
    assert source != of
