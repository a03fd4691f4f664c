"""Every reading the trial and the fact rules settle on a hand-written model (zero-config) is in the report's
assumptions with its source, under the key the report states it by: a guess nobody can see is a guess nobody can
correct. The exceptions are the ones the rules document, each checked to be what it says: a fact left unknown
(nothing read), a width that defaults to another ("same as vocab_size", shown where it differs), a capacity that
stops no probe short, a padded vocabulary no wider than the output one."""
from __future__ import annotations

import pytest
from handwritten_table import HANDWRITTEN

from tfcheck.engine.runner import load_subject, settle_facts
from tfcheck.model.trial.capacity import probe_cap

#: Facts the report states under another key: the look-ahead mask by its argument's name, a flattened output as
#: its layout.
STATED_AS = {"flat_output": ("output layout",)}


def _stated_keys(subject, key: str) -> tuple[str, ...]:
    if key == "causal_mask":
        return (subject.facts.causal_mask.argument or "", *[a.key for a in subject.assumptions
                                                           if "look-ahead mask" in str(a.value)])
    return STATED_AS.get(key, (key,))


def _documented_silence(subject, key: str, source: str) -> bool:
    facts = subject.facts
    if getattr(facts, key) is None or source.startswith("same as "):
        return True
    if key == "capacity":  # stated only where it stops the probes short of where they would go
        return facts.capacity >= min(facts.max_len or probe_cap(subject), probe_cap(subject))
    if key == "padded_vocab_size":  # stated only where the logits may be wider than the vocabulary
        return facts.output_vocab_size is not None and facts.padded_vocab_size <= facts.output_vocab_size
    return False


@pytest.mark.parametrize("name", HANDWRITTEN)
def test_every_reading_of_a_hand_written_model_is_stated_with_its_source(name):
    entry = HANDWRITTEN[name]
    subject = load_subject(entry.spec(entry.correct))
    assert settle_facts(subject) is not None and subject.trial.ran, name
    keys = {a.key for a in subject.assumptions}
    unstated = {key: source for key, source in subject.facts.sources.items()
                if not keys & set(_stated_keys(subject, key)) and not _documented_silence(subject, key, source)}
    assert not unstated, unstated
