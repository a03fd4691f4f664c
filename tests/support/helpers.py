"""What the check tests share: one check's result on one model, and torch.nn Transformers used as documented."""
from __future__ import annotations

from collections.abc import Callable

import torch.nn as nn

import tfcheck
from locations import unlocated


def result(model, check: str, **declared):
    """The CheckResult of ``check`` alone on ``model`` (forward.smoke still gates it). Every problem it reports
    must say where it is, or why it cannot (the location rule, tests/support/locations.py)."""
    report = tfcheck.run_checks(model, only=[check], **declared)
    problems = unlocated(report.models[0].findings())
    assert not problems, "findings without a location:\n" + "\n".join(problems)
    return report.models[0].result(check)


def nn_encoder():
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2)


def nn_transformer():
    return nn.Transformer(d_model=32, nhead=4, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=64,
                          batch_first=True)


def pre_hook_kwargs(module: nn.Module, change: Callable[[dict], None]) -> None:
    """Inject a defect into a third-party model without copying its code: ``change`` edits the keyword arguments
    ``module`` is called with (a mask dropped, inverted, shifted)."""
    def hook(mod, args, kwargs):
        kwargs = dict(kwargs)
        change(kwargs)
        return args, kwargs
    module.register_forward_pre_hook(hook, with_kwargs=True)
