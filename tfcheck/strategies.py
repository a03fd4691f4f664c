"""The public hypothesis strategies, ``tfcheck.strategies``: the building blocks of
``tfcheck.model.strategies`` (batch sizes, lengths, padding patterns and masks, token ids, padded batches)
and ``model_inputs``, ready-made forward inputs for a model as tfcheck sees it (it loads the model the way
``tfcheck.run_checks`` does, so it lives here, above the engine, rather than in the model layer).

    from hypothesis import given
    from tfcheck import strategies as tst

    @given(tst.model_inputs("mymodel:GPT", max_batch=3, max_len=8))
    def test_no_nan_at_real_positions(inputs):
        out = model(*inputs.args, **inputs.kwargs)
        assert out[inputs.keep].isfinite().all()
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st

from tfcheck.errors import UsageError
from tfcheck.model.strategies import (
    MAX_SEED,
    SIDES,
    PaddedBatch,
    batch_sizes,
    lengths,
    padded_batches,
    padding_masks,
    padding_patterns,
    require,
    seeds,
    token_ids,
)

__all__ = ["MAX_SEED", "SIDES", "ModelInputs", "PaddedBatch", "batch_sizes", "lengths", "model_inputs",
           "padded_batches", "padding_masks", "padding_patterns", "seeds", "token_ids"]


@dataclass(frozen=True)
class ModelInputs:
    """One forward's inputs for a model, laid out as its forward takes them: ``model(*args, **kwargs)``.
    ``tokens`` (or features) and ``keep`` are the batch before conversion to the model's mask convention;
    ``target`` the decoder input of a seq2seq model."""

    args: tuple
    kwargs: dict
    tokens: torch.Tensor
    keep: torch.Tensor
    target: torch.Tensor | None = None


def model_inputs(model_or_subject: Any, *, min_batch: int = 1, max_batch: int = 4, min_len: int = 1,
                 max_len: int = 16, padding: bool = True, side: str = "any",
                 **declarations: Any) -> st.SearchStrategy[ModelInputs]:
    """Forward inputs for a model, as tfcheck builds them: what the model takes (token ids or features, a
    target for seq2seq models), its padding mask in the model's own convention (keep, pad or additive,
    or pad ids where the model builds the mask from pad_id), from what tfcheck reads off the model and
    the ``declarations`` (the keyword arguments of ``tfcheck.run_checks``).

    ``model_or_subject``: a spec string, a module class or factory, an instance, or a tfcheck Subject.
    With ``padding=False``, or for a model that takes no padding, every position is real.
    """
    subject = _subject(model_or_subject, declarations)
    can_pad = padding and _pads_reach(subject)

    @st.composite
    def draw_inputs(draw) -> ModelInputs:
        b = draw(batch_sizes(min_batch, max_batch))
        n = draw(lengths(min_len, max_len))
        keep = draw(padding_masks(b, n, side=side)) if can_pad and n > 1 else torch.ones(b, n, dtype=torch.bool)
        gen = torch.Generator().manual_seed(draw(seeds()))
        primary = subject.random_primary(b, n, gen)
        pad_id = subject.facts.pad_id
        if pad_id is not None and not primary.is_floating_point():
            primary = torch.where(keep.to(primary.device), primary, torch.full_like(primary, pad_id))
        target = None
        if subject.takes_target:
            target = subject.random_primary(b, n, gen)
        args, kwargs = subject.to_model_layout(*subject.inputs_for(primary, target, keep=keep.to(primary.device)))
        return ModelInputs(args, kwargs, primary, keep, target)

    return draw_inputs()


def _subject(model_or_subject: Any, declarations: dict):
    from tfcheck.model.subject import Subject

    if isinstance(model_or_subject, Subject):
        require(not declarations, "model_inputs: declarations go to the Subject when it is built, not here")
        return model_or_subject
    from tfcheck.engine.runner import load_declared

    subject = load_declared(model_or_subject, declarations, "model_inputs() argument")
    if subject.facts.inputs is not None or subject.kind == "attention":
        raise UsageError(f"model_inputs: {subject.spec} takes inputs tfcheck does not build (a declared 'inputs' "
                         "factory, or a bare attention module); draw its inputs with your own strategy")
    return subject


def _pads_reach(subject) -> bool:
    """Whether padding can be given to the model: a mask argument, or pad ids it builds its mask from."""
    mask = subject.facts.mask
    if mask is not None and mask.argument is not None:
        return True
    if mask is not None and mask.convention == "none" and "mask" in subject.declared:
        return False  # declared: the model takes no padding
    return subject.facts.pad_id is not None and not subject.facts.takes_features
