"""Which token each output position of a model's own loss is trained on, read off one forward and one backward.

The gradient of a cross-entropy loss with respect to its logits is (softmax - onehot(y_t)) / N: at each position
the only negative entry is the class y_t that position is trained on, and a position the loss leaves out has a
zero row. Comparing y_t with the tokens of the batch tells an unshifted target (y_t = the token fed at t, which
the position sees and can copy) from a correct one (y_t = the next token) without training anything: exact and
deterministic, on the model itself, whose parameters, gradients and mode stay as they are (the gradient is taken
with respect to the output only).

The readout is its own control: it decides only when at least READ_SHARE of the positions the loss scores are
trained on one of the two candidates. Anything else (a loss that is not a cross-entropy of these logits, logits
left out of the loss graph by a fused or chunked loss, flattened or transposed rows) leaves the decision to the
stepping version of train.target_leak, with the reason.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from tfcheck.probe.training import batch_size, labelled_batch, loss_outputs, own_loss

#: Share of the scored positions that must be trained on the same candidate for the readout to decide.
READ_SHARE = 0.9


@dataclass
class Readout:
    """What the readout found; ``trained_on`` is "fed" (unshifted), "next" (correct) or None (undecided)."""

    trained_on: str | None
    why: str
    evidence: dict = field(default_factory=dict)


def read_targets(ctx, label) -> Readout:
    """One forward with labels in ``label``'s convention and the gradient of the model's own loss with respect to
    its output: the class each position is trained on, against the tokens fed and the next tokens."""
    subject = ctx.subject
    batch, length = batch_size(subject)
    args, kwargs, fed, following = labelled_batch(subject, label, batch, length, torch.Generator().manual_seed(1))
    raw = ctx.call(args, kwargs, "one forward with labels, to read which token each position is trained on",
                   tokens=batch * length, grad=True)
    loss, logits = own_loss(raw), _logits(subject, raw, batch, length)
    if loss is None:
        return Readout(None, f"called with {label.name}=..., the model returned no loss")
    if not (isinstance(logits, torch.Tensor) and logits.requires_grad and loss.requires_grad):
        return Readout(None, "the loss or the output carries no graph (no trainable parameter reaches them)")
    (grad,) = torch.autograd.grad(loss, [logits], allow_unused=True)
    ctx.count_backward(batch * length)
    if grad is None:
        return Readout(None, "the output is not in the loss's graph (a fused or chunked loss, or rows tfcheck "
                       "reshaped)")
    if grad.shape[:2] != (batch, length) or grad.dim() != 3:
        return Readout(None, f"the output's shape {tuple(grad.shape)} is not (batch, length, vocab)")
    return _judged(grad.detach().float(), fed, following)


def _logits(subject, raw, batch: int, length: int) -> torch.Tensor | None:
    """The output as the checks read it; for a model whose return changes shape when it is given labels (the
    logits alone without, ``(logits, loss)`` with), the one (batch, length, vocab) tensor of that return."""
    try:
        return subject.extract_output(raw)
    except Exception:  # noqa: BLE001 - the output rule was settled on a return without labels
        shaped = [t for t in loss_outputs(raw)
                  if t.dim() == 3 and tuple(t.shape) == (batch, length, subject.facts.output_vocab_size)]
        return shaped[0] if len(shaped) == 1 else None


def _judged(grad: torch.Tensor, fed: torch.Tensor, following: torch.Tensor) -> Readout:
    scored = grad.abs().amax(dim=-1) > 0  # a zero row: a position the loss leaves out
    trained = grad.argmin(dim=-1)
    telling = scored & (fed != following)  # a position whose next token repeats it tells nothing
    counts = {"fed": int((trained == fed)[telling].sum()), "next": int((trained == following)[telling].sum())}
    total = int(telling.sum())
    evidence = {"positions_scored": int(scored.sum()), "positions_left_out": int((~scored).sum()),
                "trained_on_the_token_fed": counts["fed"], "trained_on_the_next_token": counts["next"],
                "positions_compared": total,
                "tolerance": f">= {READ_SHARE:.0%} of the compared positions on one of the two"}
    if total == 0:
        return Readout(None, "the loss scores no position whose next token differs from its own", evidence)
    for trained_on in ("fed", "next"):
        if counts[trained_on] >= READ_SHARE * total:
            return Readout(trained_on, f"{counts[trained_on]} of {total} positions", evidence)
    return Readout(None, f"of {total} positions, {counts['fed']} are trained on the token fed and {counts['next']} "
                   "on the next token: neither is the loss's target throughout", evidence)
