"""probe.pooled_output: how a (batch, C) output lost its length axis, read off a recorded forward: the ops of the
model that pool the positions (one taken, a reduction over them, attention weights over them), told from a fold of
the positions into the features and from a reduction that keeps them."""
import pytest
import torch
import torch.nn as nn

from tfcheck.probe.pooled_output import read
from tfcheck.recording.recorder import Recorder

BATCH, LENGTH, D = 3, 7, 16

POOLS = {
    "the first position": (lambda h: h[:, 0], "one position taken per sample"),
    "the last position": (lambda h: h[:, -1], "one position taken per sample"),
    "a mean over the positions": (lambda h: h.mean(1), "a reduction over the positions (mean)"),
    "a max over the positions": (lambda h: h.amax(dim=1), "a reduction over the positions (amax)"),
    "attention weights over the positions": (lambda h: (h[:, :1] @ h.transpose(1, 2)).softmax(-1).bmm(h)[:, 0],
                                             "the positions weighed (bmm)"),
}
NOT_POOLS = {
    "flattened per sample": lambda h: h.flatten(1),
    "reshaped per sample": lambda h: h.reshape(h.shape[0], -1),
}


class _Head(nn.Module):
    def __init__(self, pool):
        super().__init__()
        self.emb, self.ffn, self.pool = nn.Embedding(50, D), nn.Linear(D, D), pool

    def forward(self, ids):
        h = self.emb(ids)
        return self.pool(h + self.ffn(h))


def _axis(pool):
    model = _Head(pool)
    recorder = Recorder(model, aten=False, track_ids=True)
    with recorder, torch.no_grad():
        out = model(torch.randint(0, 50, (BATCH, LENGTH)))
    return read(recorder.recording, tuple(out.shape), BATCH, LENGTH)


@pytest.mark.parametrize("name", POOLS)
def test_an_op_that_pools_the_positions_is_read_with_its_line(name):
    pool, how = POOLS[name]
    axis = _axis(pool)
    assert axis is not None and axis.pooled, axis
    assert axis.main.how.startswith(how) and axis.main.file.endswith("test_pooled_output.py")
    assert axis.main.source[:2] == (BATCH, LENGTH) and axis.width == D


@pytest.mark.parametrize("name", NOT_POOLS)
def test_the_positions_folded_into_the_features_are_no_pooling(name):
    axis = _axis(NOT_POOLS[name])
    assert axis is not None and not axis.pooled and axis.folded_by, axis
    assert axis.folded_by[0].result == (BATCH, LENGTH * D)


def test_a_reduction_that_keeps_the_positions_says_nothing():
    axis = _axis(lambda h: h.mean(-1))  # (b, s): the features reduced, the length axis kept
    assert axis is not None and axis.pooled_by == () == axis.folded_by
