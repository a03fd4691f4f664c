"""Causality read from the model's source code, for a model whose kind nothing declares or configures.

A decoder usually says it is one in its code even after its mask is gone (mask.causal must then FAIL, not ask
for the kind), and an encoder says so by saying nothing of the kind. Read statically from the classes the model
is built of (every submodule's class and its bases that are not torch's or Hugging Face's) and the module-level
functions they call by name, never from a forward's behaviour:

- a causal switch: submodules that keep a bool ``causal`` / ``is_causal`` attribute, all with one value, settle it
  (``'blocks.0.attn'.causal = True``). A source that reads such a switch without any submodule keeping one (an
  ``is_causal=causal`` passed on, an ``if self.causal:``) can be built either way, so its triangles say nothing;
- evidence of a decoder, outside any ``if`` branch (a triangle under ``if future_blocked:`` is a shared attention
  class an encoder builds too), in this order: ``is_causal=True`` written in a call, a triangle built
  (``tril``/``triu`` called), a next-token loss (a ``[..., :-1, ...]`` beside a ``[..., 1:]`` in a function that calls a
  cross-entropy), a ``block_size`` / ``n_ctx`` context length in the constructor or config (GPT's names);
- none of them: the source says nothing causal. That alone is not enough: the trial forward must also build no
  look-ahead mask (tfcheck.model.trial.own_causal_mask) before the model is read as bidirectional.
"""
from __future__ import annotations

import ast
import functools
import inspect
import os
import sys
import textwrap
from dataclasses import dataclass

import torch.nn as nn

from tfcheck.frames import short_path

#: Packages whose classes are no evidence of the user's design: torch's own modules and Hugging Face's (whose
#: configs say the kind), and tfcheck.
_LIBRARIES = ("torch", "transformers", "tfcheck")
_SWITCHES = ("causal", "is_causal")
_TRIANGLES = ("tril", "triu", "tril_", "triu_")
_LOSSES = ("cross_entropy", "CrossEntropyLoss", "nll_loss", "NLLLoss")
_CONTEXT_LENGTHS = ("block_size", "n_ctx")


@dataclass(frozen=True)
class CausalSource:
    """What the source says: True / False from a switch, True from decoder evidence, None when it says nothing or
    can be built either way; ``where`` names the evidence (file:line), ``silent`` that it says nothing at all."""

    causal: bool | None
    where: str
    silent: bool = False


def causal_source(model: nn.Module) -> CausalSource:
    """The module docstring's reading of ``model``."""
    switch = kept_switch(model)
    if switch is not None:
        return switch
    trees = list(_class_sources(model))
    if not trees:
        return CausalSource(None, "no source of its own to read: its modules are torch's or Hugging Face's")
    switched = next((site for tree in trees for site in _switch_reads(tree)), None)
    if switched is not None:
        return CausalSource(None, f"its source reads a causal switch ({switched}) that no submodule keeps: it can be "
                                  "built either way")
    for finder in (_causal_keyword, _triangle, _next_token_loss):
        found = next((site for tree in trees for site in finder(tree)), None)
        if found is not None:
            return CausalSource(True, f"its source: {found}")
    context = _context_length(model)
    if context is not None:
        return CausalSource(True, f"its source: {context}")
    conditional = next((site for tree in trees for site in _any_sign(tree)), None)
    if conditional is not None:
        return CausalSource(None, f"its source builds its mask only under a condition ({conditional}): which branch "
                                  "runs is the trial forward's to show")
    elsewhere = next((site for tree in _file_sources(model) for site in _any_sign(tree)), None)
    if elsewhere is not None:
        # another class of the same file (a decoder beside this encoder) may be what it speaks of
        return CausalSource(None, f"its classes say nothing causal, but their file does ({elsewhere})")
    files = sorted({os.path.basename(t.file) for t in _file_sources(model)})
    return CausalSource(None, f"its source ({', '.join(files)}) has no sign of a decoder: no triangle, "
                              "is_causal=True, causal switch, next-token loss or block_size / n_ctx", silent=True)


def kept_switch(model: nn.Module) -> CausalSource | None:
    """Submodules keeping a bool causal / is_causal, all agreeing (disagreeing ones: an encoder-decoder's sides)."""
    kept = {}
    for name, module in model.named_modules():
        for attr in _SWITCHES:
            value = vars(module).get(attr)
            if isinstance(value, bool):
                kept[f"'{name}'.{attr}" if name else f"model.{attr}"] = value
    if not kept or len(set(kept.values())) > 1:
        return None
    first = next(iter(kept))
    more = f" (and {len(kept) - 1} more)" if len(kept) > 1 else ""
    return CausalSource(kept[first], f"the switch its submodules keep: {first} = {kept[first]}{more}")


@dataclass(frozen=True)
class _Tree:
    file: str
    start: int  # the line the parsed text starts at
    node: ast.AST

    def at(self, node: ast.AST) -> str:
        return f"{short_path(self.file)}:{self.start + getattr(node, 'lineno', 1) - 1}"


def _user_classes(model: nn.Module) -> list[type]:
    seen: dict[type, None] = {}
    for module in model.modules():
        for cls in type(module).__mro__:
            if cls is nn.Module or cls is object:
                break
            if cls.__module__.split(".")[0] not in _LIBRARIES:
                seen.setdefault(cls)
    return list(seen)


def _class_sources(model: nn.Module) -> list[_Tree]:
    trees: list[_Tree] = []
    called: set[tuple[str, str]] = set()
    for cls in _user_classes(model):
        tree = _parsed(cls)
        if tree is None:
            continue
        trees.append(tree)
        called |= {(cls.__module__, n.func.id) for n in ast.walk(tree.node)
                   if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    for module_name, function_name in sorted(called):
        function = getattr(sys.modules.get(module_name), function_name, None)
        if inspect.isfunction(function) and function.__module__ == module_name:
            tree = _parsed(function)
            if tree is not None:
                trees.append(tree)
    return trees


def _file_sources(model: nn.Module) -> list[_Tree]:
    files = {inspect.getsourcefile(cls) for cls in _user_classes(model) if _parsed(cls) is not None}
    return [tree for file in sorted(f for f in files if f) if (tree := _parsed_file(file)) is not None]


@functools.lru_cache(maxsize=64)
def _parsed_file(file: str) -> _Tree | None:
    try:
        with open(file, encoding="utf-8") as handle:
            return _Tree(file, 1, ast.parse(handle.read()))
    except (OSError, SyntaxError, ValueError):
        return None


@functools.lru_cache(maxsize=512)
def _parsed(obj: object) -> _Tree | None:
    try:
        lines, start = inspect.getsourcelines(obj)  # type: ignore[arg-type]
        file = inspect.getsourcefile(obj) or "?"  # type: ignore[arg-type]
        return _Tree(file, start, ast.parse(textwrap.dedent("".join(lines))))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _switch_reads(tree: _Tree) -> list[str]:
    """Where a causal switch is read: passed on (``is_causal=self.causal``) or tested (``if causal:``)."""
    found = []
    for node in ast.walk(tree.node):
        # is_causal=mask is None (use the caller's mask, else the model's own) is no switch of the model's
        if isinstance(node, ast.keyword) and node.arg in _SWITCHES and _name(node.value) in _SWITCHES:
            found.append(f"{node.arg}={ast.unparse(node.value)} at {tree.at(node.value)}")
        elif isinstance(node, (ast.If, ast.IfExp)) and any(_name(n) in _SWITCHES for n in ast.walk(node.test)):
            found.append(f"if {ast.unparse(node.test)} at {tree.at(node)}")
    return found


def _unconditional(tree: _Tree) -> list[ast.AST]:
    """The nodes outside every ``if`` branch and conditional expression: a triangle under ``if future_blocked:``
    is a shared attention class that an encoder builds too (which branch runs is the trial forward's to show)."""
    inside = {id(n) for branch in ast.walk(tree.node) if isinstance(branch, (ast.If, ast.IfExp))
              for part in (branch.body, branch.orelse) for top in (part if isinstance(part, list) else [part])
              for n in ast.walk(top)}
    return [n for n in ast.walk(tree.node) if id(n) not in inside]


def _causal_keyword(tree: _Tree, anywhere: bool = False) -> list[str]:
    return [f"is_causal=True at {tree.at(node.value)}"
            for node in (ast.walk(tree.node) if anywhere else _unconditional(tree))
            if isinstance(node, ast.keyword) and node.arg == "is_causal"
            and isinstance(node.value, ast.Constant) and node.value.value is True]


def _triangle(tree: _Tree, anywhere: bool = False) -> list[str]:
    return [f"a triangle built with {_name(node.func)}() at {tree.at(node)}"
            for node in (ast.walk(tree.node) if anywhere else _unconditional(tree))
            if isinstance(node, ast.Call) and _name(node.func) in _TRIANGLES]


def _any_sign(tree: _Tree) -> list[str]:
    """Every sign, under a condition or not (what a silent source has none of)."""
    return (_switch_reads(tree) + _causal_keyword(tree, anywhere=True) + _triangle(tree, anywhere=True)
            + _next_token_loss(tree))


def _next_token_loss(tree: _Tree) -> list[str]:
    found = []
    for function in ast.walk(tree.node):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        nodes = list(ast.walk(function))
        slices = [n for n in nodes if isinstance(n, ast.Slice)]
        drops_last = any(_constant(s.upper) == -1 and s.lower is None for s in slices)
        drops_first = any(_constant(s.lower) == 1 and s.upper is None for s in slices)
        loss = next((n for n in nodes if isinstance(n, ast.Call) and _name(n.func) in _LOSSES), None)
        if drops_last and drops_first and loss is not None:
            found.append(f"a next-token loss (logits[..., :-1] against labels[..., 1:]) at {tree.at(loss)}")
    return found


def _constant(node: ast.AST | None) -> object:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return -node.operand.value  # type: ignore[operator]
    return node.value if isinstance(node, ast.Constant) else None


def _context_length(model: nn.Module) -> str | None:
    """GPT's context-length names on the model, its config, or its constructor's signature."""
    holders = ((model, "model"), (getattr(model, "config", None), "config"))
    for holder, prefix in holders:
        for name in _CONTEXT_LENGTHS:
            if holder is not None and isinstance(getattr(holder, name, None), int):
                return f"{prefix}.{name} = {getattr(holder, name)} (a GPT-style context length)"
    try:
        params = inspect.signature(type(model).__init__).parameters
    except (TypeError, ValueError):
        return None
    named = next((n for n in _CONTEXT_LENGTHS if n in params), None)
    return f"{type(model).__name__}({named}=...) (a GPT-style context length)" if named else None
