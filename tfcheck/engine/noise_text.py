"""What the report says of eval-mode randomness: the assumption when the flow checks ran with the random ops
neutralised, and why a flow check is inconclusive when they cannot be."""
from __future__ import annotations

from tfcheck.engine.registry import registered
from tfcheck.probe import deterministic

#: The assumption the report shows when the flow checks ran with eval mode's random ops neutralised.
NEUTRALISED = "random ops neutralised"


def neutralised_why() -> str:
    flow = ", ".join(c.id for c in registered() if c.flow)
    return (f"random ops run in eval mode (dropout.eval reports them); the checks that compare forwards ({flow}) ran "
            "them as eval mode would: dropout with training=False, SDPA with dropout_p=0, Bernoulli draws as "
            "their probabilities")


def noise_reason(measured: deterministic.Determinism, check_id: str) -> str:
    left = measured.random_ops(measured.left) or "drawn in no call tfcheck sees: a kernel that draws inside"
    if measured.neutralised:
        how = (f"with {measured.random_ops(measured.neutralised)} run as in eval mode, the forward still drew random "
               f"numbers from the {' and '.join(measured.moved)} generator ({left})")
    elif measured.moved:
        how = (f"{measured.what} differ by {measured.change:.3g} (tolerance {measured.tolerance:.3g}), from randomness "
               f"tfcheck cannot switch off ({left})")
    else:
        how = (f"{measured.what} differ by {measured.change:.3g} (tolerance {measured.tolerance:.3g}) and no random "
               "generator moved: the forward keeps state from one call to the next, or reads a source of its own")
    return (f"in eval mode {how}, so {check_id}'s comparison of forwards would measure that, not the model's "
            "dependences (dropout.eval reports it). Make two eval-mode forwards on one input agree and rerun")
