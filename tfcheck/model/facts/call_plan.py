"""The call plan: which forward parameter gets which probe tensor (``facts.call_plan``), settled without a forward
from the facts, the names and the structure; and, when a required parameter has no tensor tfcheck can build, the
message that names what was found and the one declaration that fixes it.

Roles: ``tokens`` / ``features`` (the primary input), ``target_tokens`` / ``target_features`` (a seq2seq model's
decoder input), ``mask`` (a required padding mask), ``causal_mask`` (the look-ahead mask the caller builds, see
tfcheck.model.trial.caller_masks), ``lm_targets`` (nanoGPT's targets=None, given the inputs).
"""
from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

from tfcheck.errors import SpecError
from tfcheck.model.build.names import LOSS_TARGET_ARGS, START_POSITION_ARGS, TARGET_ARGS
from tfcheck.model.facts.required_inputs import required_at_runtime
from tfcheck.model.facts.structure import forward_params
from tfcheck.model.facts.targets import decoder_input, pattern_role
from tfcheck.model.facts.under_test import mask_spec
from tfcheck.report.report import Assumption

if TYPE_CHECKING:
    from tfcheck.model.facts.facts import PlanSlot
    from tfcheck.model.facts.under_test import ModelUnderTest


def plan_calls(subject: ModelUnderTest, params: dict[str, inspect.Parameter], features: bool) -> list[PlanSlot]:
    """The call plan of a forward taking ``params`` (see the module docstring)."""
    facts = subject.facts
    plan: list[PlanSlot] = []
    mask = mask_spec(subject)
    causal = facts.causal_mask.argument if facts.causal_mask is not None else None
    target = target_parameter(subject, params)
    items = list(params.items())
    for i, (name, param) in enumerate(items):
        required = param.default is inspect.Parameter.empty
        positional = param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD) and all(
            p.default is inspect.Parameter.empty for _, p in items[:i])
        slot = None if positional else name
        if i == 0:
            plan.append((slot, "features" if features else "tokens"))
        elif name == target or (name in TARGET_ARGS and name not in LOSS_TARGET_ARGS):
            plan.append((slot, "target_features" if features else "target_tokens"))
        elif name == causal:
            plan.append((slot, "causal_mask"))
        elif required and name == mask.argument:
            plan.append((slot, "mask"))
        elif name == "targets" and not features and facts.kind in ("decoder", None):
            # nanoGPT's forward(idx, targets=None) returns only the last position's logits without
            # targets (its generation shortcut): give the inputs as targets to get every position.
            plan.append((name, "lm_targets"))
            subject.assumptions.append(Assumption(
                "targets", "the input tokens", "forward takes targets=None (nanoGPT convention: without "
                "targets only the last position's logits come back)"))
        elif declared_extra(facts.extra, name, required):
            plan.append((slot, "fixed"))
        elif required and start_position(param) and facts.extra is None:
            facts.extra = {name: 0}
            plan.append((slot, "fixed"))
            subject.assumptions.append(Assumption(
                name, 0, f"forward requires {name} (a start position): every probe starts at the beginning, held "
                         f"fixed while the tokens are perturbed (declare extra='{{\"{name}\": N}}' to change it)"))
        elif required:
            raise SpecError(cannot_build(subject, name, items))
    refuse_runtime_required(subject, items, plan, mask.argument)
    return plan


def declared_extra(extra: object, name: str, required: bool) -> bool:
    """Whether the declared ``extra`` gives this parameter: a key of its object, or (a factory) any required one."""
    if isinstance(extra, dict):
        return name in extra
    return callable(extra) and required


def start_position(param: inspect.Parameter) -> bool:
    """A start position by name, an int (or unannotated): never a tensor of positions."""
    annotation = param.annotation
    return param.name in START_POSITION_ARGS and annotation in (inspect.Parameter.empty, int, "int")


def roles_by_parameter(subject: ModelUnderTest) -> dict[str, str]:
    """Forward parameter -> its call-plan role; the positional slots are the forward's first parameters, in order."""
    params, positional, roles = list(forward_params(subject.model)), 0, {}
    for slot, role in subject.facts.call_plan or ():
        name = slot if slot is not None else (params[positional] if positional < len(params) else None)
        positional += slot is None
        if name is not None:
            roles[name] = role
    return roles


def refuse_runtime_required(subject: ModelUnderTest, items: list[tuple[str, inspect.Parameter]], plan: list[PlanSlot],
                            mask: str | None) -> None:
    """A SpecError when the forward raises without parameters its signature defaults to None and tfcheck does not
    give (the states of another model): the probe would only show that raise, which is no bug of the model."""
    needed = required_at_runtime(subject.model.forward)
    if needed is None:
        return
    positional = sum(slot is None for slot, _ in plan)  # given in order: the first parameters of the forward
    given = {slot for slot, _ in plan if slot is not None} | {name for name, _ in items[:positional]} | {mask}
    missing = [n for n in needed.names if n not in given]
    if not missing:
        return
    raise SpecError(
        f"{subject.spec}.forward raises when {' or '.join(missing)} is None ({needed.file}:{needed.line}), "
        "although its signature defaults them to None: it runs on inputs tfcheck does not build (another model's "
        "states or embeddings), so it cannot run alone. Declare inputs=module:factory (fn(batch, length) -> (args, "
        f"kwargs)) that passes {', '.join(missing)} as the model's caller does, or check the model that produces them")


def target_parameter(subject: ModelUnderTest, params: dict[str, inspect.Parameter]) -> str | None:
    """The decoder input: by name and structure (tfcheck.model.facts.targets); on a model whose kind is seq2seq, the
    second parameter when required, or a required parameter of a decoder-input name."""
    found = decoder_input(subject.model, params)
    if found is not None:
        return found[0]
    if subject.facts.kind != "seq2seq":
        return None
    items = list(params.items())
    required = [n for n, p in items[1:] if p.default is inspect.Parameter.empty and n not in LOSS_TARGET_ARGS]
    named = [n for n in required if pattern_role(n) == "decoder input"]
    if named:
        return named[0]
    if len(items) > 1 and items[1][1].default is inspect.Parameter.empty and items[1][0] not in LOSS_TARGET_ARGS:
        return items[1][0]
    return None


def cannot_build(subject: ModelUnderTest, name: str, items: list[tuple[str, inspect.Parameter]]) -> str:
    """What tfcheck found about a required parameter it cannot build, and the one declaration that fixes it."""
    where = f"{subject.spec}.forward requires argument {name!r}"
    role = pattern_role(name)
    if role == "decoder input":
        return (f"{where}, named as a seq2seq decoder input (tgt* / trg* / dec*_in*), but nothing says the model "
                "is an encoder-decoder (it has fewer than two token embeddings): declare kind=seq2seq to give it "
                "the target tokens")
    if "mask" in name:
        return (f"{where}, named as a mask, which tfcheck cannot build without its role: declare "
                f"causal_mask={name} if it takes the look-ahead mask the caller builds, or mask={name}:keep if it "
                "is the padding mask (True = real token)")
    return (f"{where}, which tfcheck cannot build. Declare it with extra, held fixed while tfcheck builds and "
            f"perturbs the tokens (every token check still runs): extra='{{\"{name}\": VALUE}}' for a value, or "
            "extra=module:factory for tensors, e.g.\n"
            "    def factory(batch, length):\n"
            f"        return {{\"{name}\": torch.zeros(batch, length)}}  # as the model's caller builds it")
