"""A seq2seq model's target vocabulary, read from the table its decoder input reaches in the trial forward.

Before any forward, ``target_vocab_size`` is the config's, else the decoder side's token embedding by structure,
else vocab_size (tfcheck.model.facts.inference); each is a guess. The trial forward shows which embedding the
target tokens are indexed into (``Observed.token_tables``): its rows are how many ids the decoder input may take,
so they settle the fact, and the logits' width with it where nothing but the target vocabulary set that. A table
the target never reaches (a position table, the encoder's) says nothing about it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tfcheck.report.report import Assumption

if TYPE_CHECKING:
    from tfcheck.model.facts.under_test import ModelUnderTest
    from tfcheck.model.trial.observed import Observed


def adopt(subject: ModelUnderTest, observed: Observed) -> None:
    facts = subject.facts
    if facts.kind != "seq2seq" or facts.inputs is not None or facts.takes_features:
        return
    found = next((s for s in observed.token_tables if s.role == "target_tokens" and s.size is not None), None)
    if found is None or found.size is None:
        return
    guessed, was = facts.target_vocab_size, facts.sources.get("target_vocab_size", "")
    if found.size == guessed and not was.startswith("nn.Embedding"):
        return  # the config's, or one vocabulary for both sides: confirmed, nothing to restate
    facts.set("target_vocab_size", found.size, f"the trial forward: {found}")
    subject.assumptions[:] = [a for a in subject.assumptions if a.key != "target_vocab_size"]
    changed = f" (was {guessed}, from {was})" if found.size != guessed else ""
    subject.assumptions.append(Assumption("target_vocab_size", found.size, f"the decoder input is read by {found}"
                                          f"{changed}; its ids are drawn below it"))
    if facts.sources.get("output_vocab_size", "").startswith("same as ") and facts.output_vocab_size != found.size:
        subject.assumptions[:] = [a for a in subject.assumptions if a.key != "output_vocab_size"]
        if found.size == facts.vocab_size:
            facts.set("output_vocab_size", found.size, "same as vocab_size")
            return
        facts.set("output_vocab_size", found.size, "same as target_vocab_size (the decoder predicts target tokens)")
        subject.assumptions.append(Assumption("output_vocab_size", found.size, facts.sources["output_vocab_size"]))
