"""Who shifts the labels of a model that computes its own loss: the model itself (GPT-2's ``labels = input_ids``,
scored as logits[t] against labels[t + 1]) or its caller (labels[t] is the target of logits[t], already token
t + 1: nanoGPT's ``targets``, BART's ``*ForCausalLM``). Declared (``label_shift=inside|caller``), else read from
the label argument's own documentation in the forward docstring, else from the model's own file where its code
prepares them (a wrapper that assigns ``x, labels = x[:, :-1], x[:, 1:]`` before calling it: the package's caller
shifts), else the argument's name decides (LABEL_ARGS).

It is never read from what train.target_leak measures: a loss that forgot to shift and a loss documented not to
shift both learn to copy their input when given labels = input_ids. Only the model's own words (its documentation,
or the code its authors wrote beside it to call it) tell a contract from a bug, so only they (or the user) move a
model off the convention its argument's name implies.
"""
from __future__ import annotations

import ast
import functools
import inspect
import re
from typing import TYPE_CHECKING

import torch.nn as nn

from tfcheck.frames import short_path
from tfcheck.model.facts.structure import forward_params
from tfcheck.report.report import Assumption

if TYPE_CHECKING:
    from tfcheck.model.facts.under_test import ModelUnderTest

#: Forward arguments through which a model computes its own loss, and who shifts them when nothing else says:
#: Hugging Face ``labels`` are the input ids, shifted inside the model; nanoGPT / minGPT ``targets`` are the next
#: tokens, shifted by the caller.
LABEL_ARGS = {"labels": "inside", "lm_labels": "inside", "targets": "caller"}
#: How a parameter's documentation says the model leaves its labels as given ("The labels are **not shifted**
#: inside the model", read with the markdown emphasis dropped).
NOT_SHIFTED = re.compile(r"\bnot\s+shifted\b", re.IGNORECASE)
#: A sentence ends at '.', ';' or ':' followed by a space (not inside "[0, ..., config.vocab_size]").
SENTENCE_END = re.compile(r"(?<=[.;:])\s+")


def label_parameter(model: nn.Module) -> str | None:
    """The forward argument, by its name, through which the model computes its own loss."""
    params = forward_params(model)
    return next((name for name in LABEL_ARGS if name in params), None)


def parameter_doc(doc: str, name: str) -> str | None:
    """The documentation of parameter ``name`` in a docstring, as one line: its header line (``labels (`...`):``,
    ``labels: ...``, ``labels : Tensor``, ``:param labels: ...``) and the lines indented under it."""
    header = re.compile(rf"(:param\s+)?{re.escape(name)}\s*[(:]")
    lines = doc.expandtabs().splitlines()
    for i, line in enumerate(lines):
        text = line.lstrip()
        if not header.match(text):
            continue
        indent = len(line) - len(text)
        body = [text]
        for following in lines[i + 1:]:
            if following.strip() and len(following) - len(following.lstrip()) <= indent:
                break
            body.append(following.strip())
        return " ".join(part for part in body if part)
    return None


def documented_shift(model: nn.Module) -> tuple[str, str] | None:
    """("caller", where it is written) when the label argument's documentation in forward's own docstring says
    the labels are not shifted; None when it says nothing of the kind. An overriding forward without a docstring
    says nothing: the words of the forward it replaced describe another function."""
    name = label_parameter(model)
    forward = getattr(type(model), "forward", None)
    doc = getattr(forward, "__doc__", None)
    if name is None or not isinstance(doc, str):
        return None
    documented = parameter_doc(doc, name)
    if documented is None:
        return None
    plain = documented.replace("*", "").replace("`", "")
    sentence = next((s for s in SENTENCE_END.split(plain) if NOT_SHIFTED.search(s)), None)
    if sentence is None:
        return None
    where = getattr(forward, "__qualname__", f"{type(model).__name__}.forward")
    return "caller", f"{where} docstring: '{sentence.rstrip('.;:')}'"


def caller_shift_in_file(model: nn.Module) -> tuple[str, str] | None:
    """("caller", where) when code written beside the model to call it (a class or function of its file, not the
    model's own, that names the model's class: a wrapper typed ``transformer: RecurrentMemoryTransformer``, a
    training step that builds it) assigns the label argument's name from a slice that drops the first position
    (``labels = tokens[:, 1:]``, ``x, labels = x[:, :-1], x[:, 1:]``): its authors hand it the next tokens. A shift
    inside the model's own classes is the inside convention and says nothing here."""
    name = label_parameter(model)
    try:
        file = inspect.getsourcefile(type(model)) if name is not None else None
    except TypeError:  # a class with no file (defined in exec'd code, a notebook cell): nothing to read
        return None
    tree = _parsed_file(file) if file else None
    if name is None or tree is None:
        return None
    for caller in _callers(tree, type(model)):
        for node in ast.walk(caller):
            if isinstance(node, ast.Assign) and _assigns_next_tokens(node, name):
                return "caller", (f"{short_path(file or '')}:{node.lineno}: '{ast.unparse(node)}' in "
                                  f"{caller.name} prepares {name} as the next tokens before the model is called")
    return None


def _callers(tree: ast.AST, cls: type) -> list[ast.ClassDef | ast.FunctionDef]:
    """The top-level classes and functions of a file, other than ``cls`` and its bases, that name ``cls``."""
    own = {c.__name__ for c in cls.__mro__}
    return [node for node in getattr(tree, "body", []) if isinstance(node, (ast.ClassDef, ast.FunctionDef))
            and node.name not in own and any(isinstance(n, ast.Name) and n.id == cls.__name__ for n in ast.walk(node))]


def _assigns_next_tokens(node: ast.Assign, name: str) -> bool:
    """``name = t[..., 1:]`` or ``a, name = b, t[:, 1:]``: ``name`` gets a slice from position 1 to the end."""
    for target in node.targets:
        pairs = list(zip(target.elts, node.value.elts)) if isinstance(target, ast.Tuple) and \
            isinstance(node.value, ast.Tuple) else [(target, node.value)]
        if any(isinstance(t, ast.Name) and t.id == name and _from_second_position(v) for t, v in pairs):
            return True
    return False


def _from_second_position(value: ast.expr) -> bool:
    if not isinstance(value, ast.Subscript):
        return False
    index = value.slice.elts[-1] if isinstance(value.slice, ast.Tuple) and value.slice.elts else value.slice
    return isinstance(index, ast.Slice) and index.upper is None and index.step is None and \
        isinstance(index.lower, ast.Constant) and index.lower.value == 1


@functools.lru_cache(maxsize=64)
def _parsed_file(file: str) -> ast.AST | None:
    try:
        with open(file, encoding="utf-8") as handle:
            return ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return None


def settle(subject: ModelUnderTest) -> None:
    """The label convention declared, else where the model documents it: stated among the assumptions with its
    declaration or the sentence it was read from; nothing where neither says it."""
    declared = subject.declared.get("label_shift")
    if declared is not None:
        subject.facts.set("label_shift", declared.value, declared.source)
        subject.assumptions.append(Assumption("label_shift", declared.value, declared.source))
        return
    found = documented_shift(subject.model) or caller_shift_in_file(subject.model)
    if found is None:
        return
    shift, where = found
    subject.facts.set("label_shift", shift, where)
    subject.assumptions.append(Assumption(
        "label_shift", shift, f"{where}: labels[t] is the target of logits[t], so tfcheck passes the next tokens as "
        "labels and your training must too (declare label_shift=inside if the model shifts them)"))
