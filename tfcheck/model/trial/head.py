"""A head outside forward: forward returns d_model-wide states and the loss applies the head itself (the
Annotated Transformer's ``generator``: ``loss(generator(model(src, tgt, ...)), y)``). Found by structure: the
one module the trial forward never called whose first nn.Linear maps d_model to the vocabulary, whatever it is
named; declared with ``head=ATTR`` when several could be. Every check then reads ``head(forward(x))``
(``tfcheck.model.trial.outputs.as_checks_read``), so train.grad_flow sees the head's parameters used."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch.nn as nn

from tfcheck.errors import UsageError
from tfcheck.model.trial.observed import Observed
from tfcheck.model.trial.outputs import returned_output
from tfcheck.report.report import Assumption

if TYPE_CHECKING:
    from tfcheck.model.facts.under_test import ModelUnderTest


def adopt_head(subject: ModelUnderTest, observed: Observed) -> None:
    """Settle ``head``: the declaration, else the only candidate when forward returns d_model-wide states;
    several candidates are named among the assumptions, with the declaration that picks one."""
    facts = subject.facts
    declared = subject.declared.get("head")
    if declared is not None:
        value = str(declared.value)
        try:
            subject.model.get_submodule(value)
        except AttributeError:
            names = ", ".join(candidates(subject.model, observed.called, facts.d_model, facts.output_vocab_size))
            raise UsageError(f"head={value} ({declared.source}) names no submodule of {type(subject.model).__name__}; "
                             "declare the dotted attribute name of the module that maps forward's output to logits"
                             + (f" (modules forward never calls that map d_model to the vocabulary: {names})"
                                if names else "")) from None
        facts.set("head", value, declared.source)
        subject.assumptions.append(Assumption("head", value, f"{declared.source}: every check reads "
                                              f"{value}(forward(x))"))
        return
    d_model, vocab = facts.d_model, facts.output_vocab_size
    if d_model is None or vocab is None or not returns_states(subject, observed):
        return
    found = candidates(subject.model, observed.called, d_model, vocab)
    if len(found) == 1:
        name = found[0]
        module = subject.model.get_submodule(name)
        subject.facts.set("head", name, "the only module forward never calls that maps d_model to vocab_size")
        subject.assumptions.append(Assumption("head", name, (
            f"forward returns d_model={d_model}-wide states and '{name}' ({type(module).__name__}, an nn.Linear "
            f"{d_model} → {vocab} = vocab_size) is the only module the trial forward never called that maps them "
            f"to the vocabulary: every check reads {name}(forward(x)), as the loss does")))
    elif found:
        subject.assumptions.append(Assumption("head", None, head_choice(d_model, vocab, found)))


def returns_states(subject: ModelUnderTest, observed: Observed) -> bool:
    """Whether the trial's output is d_model wide (and d_model is not also the vocabulary's size)."""
    d_model, vocab = subject.facts.d_model, subject.facts.output_vocab_size
    out = returned_output(subject, observed.returned)
    return out is not None and bool(out.shape) and d_model is not None and d_model != vocab \
        and out.shape[-1] == d_model


def outside_forward(subject: ModelUnderTest) -> list[str]:
    """The heads forward never calls, for a model whose forward returns d_model-wide states (the trial's
    reading; empty before it): the one every check applies and the others, which the loss applies (several
    heads) and train.grad_flow does not call unused."""
    trial = subject.trial
    observed = trial.observed if trial is not None else None
    if observed is None or not returns_states(subject, observed):
        return []
    return candidates(subject.model, observed.called, subject.facts.d_model, subject.facts.output_vocab_size)


def head_choice(d_model: int, vocab: int, found: list[str]) -> str:
    """What to declare when several modules could be the head."""
    return (f"forward returns d_model={d_model}-wide states and {len(found)} modules the trial forward never "
            f"called map them to vocab_size={vocab} ({', '.join(found)}): checks read forward's own output; "
            f"declare head=ATTR (e.g. head={found[0]}) for the one the loss applies")


def candidates(model: nn.Module, called: frozenset[str], d_model: int | None, vocab: int | None) -> list[str]:
    """The outermost modules no part of which ran in the trial forward and whose first nn.Linear maps d_model
    to vocab (by structure; their names say nothing)."""
    if d_model is None or vocab is None:
        return []
    found: list[str] = []
    for name, module in model.named_modules():
        if not name or any(name.startswith(f + ".") for f in found):
            continue
        if isinstance(module, (nn.ModuleList, nn.ModuleDict)):
            continue  # a container is never called itself: its members are the candidates
        parts = [name] + [f"{name}.{sub}" for sub, _ in module.named_modules() if sub]
        if any(p in called for p in parts):
            continue
        linear = next((m for m in module.modules() if isinstance(m, nn.Linear)), None)
        if linear is not None and linear.in_features == d_model and linear.out_features == vocab:
            found.append(name)
    return found
