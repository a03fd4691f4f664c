"""Hypothesis strategies for property tests of Transformer models: batch sizes, lengths, padding patterns,
token ids and padded batches (``tfcheck.strategies`` adds ready-made forward inputs for a model as tfcheck
sees it, ``model_inputs``).

tfcheck draws from these itself when a mask or batch check fails, to shrink the failure to the smallest
input that still shows it (tfcheck.tools.shrinking). They are public so that your own ``@given`` tests draw
inputs the same way::

    from hypothesis import given
    from tfcheck import strategies as tst

    @given(tst.padded_batches(vocab_size=101, pad_id=0, max_batch=3, max_len=8))
    def test_no_nan_at_real_positions(batch):
        out = model(batch.tokens, attention_mask=batch.keep)
        assert out[batch.keep].isfinite().all()

Conventions, as everywhere in tfcheck: a keep mask is ``True`` at real tokens and ``False`` at pads; every
sample keeps at least one real token; real token ids are never the pad id. Every strategy shrinks towards
the simplest input: the smallest batch and length, the fewest pads (a single pad shrinks to the end of the
sequence), token id 0 (or 1 when 0 is the pad id).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st

from tfcheck.errors import UsageError

SIDES = ("any", "right", "left")
#: Seeds of tfcheck's own token and noise generators: small, so they shrink to 0 in a few steps.
MAX_SEED = 2**16 - 1


def batch_sizes(min_batch: int = 1, max_batch: int = 4) -> st.SearchStrategy[int]:
    """Batch sizes from ``min_batch`` to ``max_batch``, shrinking to ``min_batch``."""
    require(1 <= min_batch <= max_batch, f"batch_sizes(min_batch={min_batch}, max_batch={max_batch}): "
             "need 1 <= min_batch <= max_batch")
    return st.integers(min_batch, max_batch)


def lengths(min_len: int = 1, max_len: int = 16) -> st.SearchStrategy[int]:
    """Sequence lengths from ``min_len`` to ``max_len``, shrinking to ``min_len``."""
    require(1 <= min_len <= max_len, f"lengths(min_len={min_len}, max_len={max_len}): need 1 <= min_len <= max_len")
    return st.integers(min_len, max_len)


def seeds() -> st.SearchStrategy[int]:
    """Seeds for a ``torch.Generator`` (random content drawn by seed shrinks to seed 0)."""
    return st.integers(0, MAX_SEED)


def padding_patterns(length: int, *, side: str = "any", min_pads: int = 0) -> st.SearchStrategy[tuple[bool, ...]]:
    """One sample's keep pattern of ``length`` positions (True = real token), with at least one real token
    and at least ``min_pads`` pads.

    ``side``: ``"right"`` pads at the end (the Hugging Face tokenizers' default), ``"left"`` at the start
    (decoder-only batches for generation), ``"any"`` anywhere, in any number of runs.
    """
    require(side in SIDES, f"padding_patterns(side={side!r}): side is one of {', '.join(SIDES)}")
    require(length >= 1, f"padding_patterns(length={length}): length must be at least 1")
    require(0 <= min_pads <= length - 1, f"padding_patterns(length={length}, min_pads={min_pads}): at most "
             f"{length - 1} pads fit beside one real token")
    if side == "right":
        return st.integers(min_pads, length - 1).map(lambda pads: (True,) * (length - pads) + (False,) * pads)
    if side == "left":
        return st.integers(min_pads, length - 1).map(lambda pads: (False,) * pads + (True,) * (length - pads))
    # Drawn as "is a pad" flags: False is the simpler choice, so shrinking removes pads and moves a
    # remaining one to the end.
    is_pad = st.lists(st.booleans(), min_size=length, max_size=length)
    return is_pad.filter(lambda flags: not all(flags) and sum(flags) >= min_pads).map(
        lambda flags: tuple(not f for f in flags))


def padding_masks(batch: int, length: int, *, side: str = "any", min_pads: int = 0) -> st.SearchStrategy[torch.Tensor]:
    """(batch, length) bool keep masks, True = real token: one ``padding_patterns`` per sample, drawn
    independently (samples padded differently is where a mask laid out for the wrong sample shows)."""
    require(batch >= 1, f"padding_masks(batch={batch}): batch must be at least 1")
    rows = st.lists(padding_patterns(length, side=side, min_pads=min_pads), min_size=batch, max_size=batch)
    return rows.map(lambda r: torch.tensor(r, dtype=torch.bool))


def token_ids(batch: int, length: int, vocab_size: int, *, pad_id: int | None = None,
              keep: torch.Tensor | None = None) -> st.SearchStrategy[torch.Tensor]:
    """(batch, length) int64 token ids below ``vocab_size``: real ids are never ``pad_id``; where ``keep``
    (a (batch, length) bool mask) is False the id is ``pad_id``."""
    require(vocab_size >= 2 or (vocab_size >= 1 and pad_id is None),
             f"token_ids(vocab_size={vocab_size}): the vocabulary needs at least one id besides pad_id")
    require(pad_id is None or 0 <= pad_id < vocab_size,
             f"token_ids(pad_id={pad_id}): pad_id must be an id of the vocabulary (0 <= pad_id < {vocab_size})")
    if keep is not None:
        require(tuple(keep.shape) == (batch, length), f"token_ids: keep has shape {tuple(keep.shape)}, "
                 f"expected ({batch}, {length})")
        require(pad_id is not None or bool(keep.all()), "token_ids: keep has pads but pad_id is None; give pad_id")
    real = st.integers(0, vocab_size - 1 - (pad_id is not None))
    if pad_id is not None:  # skip the pad id: ids at and above it move up by one
        real = real.map(lambda i: i + (i >= pad_id))
    flat = st.lists(real, min_size=batch * length, max_size=batch * length)

    def to_tensor(ids: list[int]) -> torch.Tensor:
        tokens = torch.tensor(ids, dtype=torch.long).reshape(batch, length)
        if keep is not None and pad_id is not None:
            tokens = torch.where(keep.to(torch.bool), tokens, torch.full_like(tokens, pad_id))
        return tokens

    return flat.map(to_tensor)


@dataclass(frozen=True)
class PaddedBatch:
    """Token ids with their keep mask (True = real token)."""

    tokens: torch.Tensor  # (batch, length) int64
    keep: torch.Tensor  # (batch, length) bool

    @property
    def batch(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def length(self) -> int:
        return int(self.tokens.shape[1])


def padded_batches(vocab_size: int, *, pad_id: int, min_batch: int = 1, max_batch: int = 4, min_len: int = 1,
                   max_len: int = 16, side: str = "any", min_pads: int = 0) -> st.SearchStrategy[PaddedBatch]:
    """Padded batches: a batch size, a length, a padding pattern per sample and real token ids, the pads
    holding ``pad_id``. ``min_pads`` pads at least per sample (so at least ``min_pads + 1`` positions)."""
    require(pad_id is not None, "padded_batches: give pad_id (the id the pads hold)")

    @st.composite
    def draw_batch(draw: Any) -> PaddedBatch:
        b = draw(batch_sizes(min_batch, max_batch))
        n = draw(lengths(max(min_len, min_pads + 1), max(max_len, min_pads + 1)))
        keep = draw(padding_masks(b, n, side=side, min_pads=min_pads))
        return PaddedBatch(draw(token_ids(b, n, vocab_size, pad_id=pad_id, keep=keep)), keep)

    return draw_batch()


def require(ok: bool, message: str) -> None:
    """Refuse a bad argument of a strategy with a message (not an assert: python -O strips those)."""
    if not ok:
        raise UsageError(message)
