"""tfcheck.recording.hooks.hooked: every hook it installs is gone after the block, however the block ends, and
also when installing a later hook fails half-way (the model is left as it was found)."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from tfcheck.recording.hooks import Hook, hooked


def _hook_count(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_hooks_run_inside_the_block_and_are_removed_after_a_raise():
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    seen = []
    with pytest.raises(RuntimeError, match="from the block"):
        with hooked([Hook(model[0], lambda m, a: seen.append("pre"), pre=True),
                     Hook(model[0], lambda m, a, k, out: seen.append(sorted(k)), with_kwargs=True)]):
            model(torch.zeros(1, 2))
            assert _hook_count(model) == 2
            raise RuntimeError("from the block")
    assert seen == ["pre", []] and _hook_count(model) == 0


def test_hooks_installed_before_a_failing_one_are_removed():
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())

    def hooks():
        yield Hook(model[0], lambda m, a, out: None)
        raise ValueError("cannot build the next hook")

    with pytest.raises(ValueError):
        with hooked(hooks()):
            pass
    assert _hook_count(model) == 0
