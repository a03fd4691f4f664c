"""The shortest sequence a model accepts, read from its declarations and its config (pooling blocks, a
downsampling rate), never from a forward: the fact rules and the shape checks both ask here."""
from __future__ import annotations

from tfcheck.model.build import names
from tfcheck.model.facts.under_test import ModelUnderTest


def min_length(subject: ModelUnderTest) -> tuple[int, str]:
    """The shortest sequence the model accepts and what says it: the min_len declaration, else a config whose
    blocks pool the sequence by 2 (each pooling halves it; a position kept apart, Funnel's separate_cls, comes
    on top), else 1."""
    declared = subject.declared.get("min_len")
    if declared is not None:
        return subject.accepted_length(int(declared.value)), f"declared ({declared.source})"
    multiple = subject.declared.get("length_multiple")
    if multiple is not None and int(multiple.value) > 1:
        return int(multiple.value), f"length_multiple declared ({multiple.source})"
    pooling = sequence_pooling(subject)
    if pooling is None:
        return downsampling(subject) or (1, "nothing pools the sequence")
    poolings, kept, where = pooling
    return 2 ** poolings + int(kept), where


def sequence_pooling(subject: ModelUnderTest) -> tuple[int, bool, str] | None:
    """(poolings by 2, whether one position is kept out of them, the config fields that say so) for a config whose
    blocks pool the sequence between each other (tfcheck.model.build.names.POOLING_BLOCKS); None for any other."""
    config = getattr(subject.model, "config", None)
    name = next((n for n in names.POOLING_BLOCKS if isinstance(getattr(config, n, None), (list, tuple))), None)
    blocks = getattr(config, name) if name is not None else ()
    if len(blocks) < 2:
        return None
    kept = next((n for n in names.SEPARATE_CLS if getattr(config, n, False) is True), None)
    where = f"config.{name} = {list(blocks)}: {len(blocks) - 1} poolings by 2"
    return len(blocks) - 1, kept is not None, where + (f", config.{kept} = True keeps one position out" if kept else "")


def downsampling(subject: ModelUnderTest) -> tuple[int, str] | None:
    """A config's downsampling rate (names.DOWNSAMPLING_RATES): a window of that many positions pooled into one,
    so a shorter sequence leaves nothing to pool."""
    config = getattr(subject.model, "config", None)
    for name in names.DOWNSAMPLING_RATES:
        rate = getattr(config, name, None)
        if isinstance(rate, int) and not isinstance(rate, bool) and rate > 1:
            return rate, f"config.{name} = {rate}: the sequence is pooled in windows of {rate} positions"
    return None
