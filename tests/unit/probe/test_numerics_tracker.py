"""The NaN tracker judges ops by their outputs: an op that only allocates (empty, empty_like) hands out whatever
the memory held, NaN at random (F.dropout's mask starts as empty_like before bernoulli_ fills it), so it is
never named the first NaN producer; the op that writes the NaN is."""
from __future__ import annotations

import torch

from tfcheck.probe.numerics import NonFiniteTracker
from tfcheck.recording.recorder import OpEvent


def _event(index: int, name: str) -> OpEvent:
    return OpEvent(index=index, level="aten", name=name, call=None, module="attn", inputs=(), outputs=(),
                   scalars={}, file=None, line=None, phase="forward")


def test_uninitialised_memory_is_not_a_nan_producer_but_the_op_that_writes_nan_is():
    tracker = NonFiniteTracker()
    garbage = torch.tensor([float("nan"), 1.0])  # what empty_like may hand out
    tracker(_event(0, "aten.empty_like.default"), (torch.ones(2),), {}, garbage)
    assert tracker.nan is None
    tracker(_event(1, "aten.div.Tensor"), (torch.zeros(2), torch.zeros(2)), {}, torch.zeros(2) / torch.zeros(2))
    assert tracker.nan is not None and tracker.nan.event.name == "aten.div.Tensor"
