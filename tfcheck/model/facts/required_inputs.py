"""Forward parameters that default to None in the signature but that the forward refuses to run without.

A head that runs on another model's states (Gemma 4's assistant takes the main model's key-value states and
embeddings) declares them ``shared_kv_states=None`` and raises ``if inputs_embeds is None or shared_kv_states is
None``: the signature says optional, the body says required. Read from the forward's source (no forward is run): an
``if`` among the forward's own statements (not inside another block, which runs only on some calls) whose test is
``P is None`` or an ``or`` of such tests, for parameters P of the forward, and whose body raises. An ``and`` of them
(one of input_ids or inputs_embeds is needed) or any other test says nothing about a single parameter, so it is not
read.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RequiredAtRuntime:
    """Parameters the forward raises without, and the line of the ``if`` that raises."""

    names: tuple[str, ...]
    file: str
    line: int


def required_at_runtime(forward: Callable[..., Any]) -> RequiredAtRuntime | None:
    """The first ``if P is None [or Q is None ...]: raise`` among ``forward``'s statements, over its own
    parameters, or None."""
    function = inspect.unwrap(forward)
    try:
        lines, start = inspect.getsourcelines(function)
        tree = ast.parse(textwrap.dedent("".join(lines)))
        params = set(inspect.signature(function).parameters)
        file = inspect.getsourcefile(function) or ""
    except (OSError, TypeError, ValueError, SyntaxError):
        return None
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.FunctionDef | ast.AsyncFunctionDef) else []
    for node in body:
        if isinstance(node, ast.If) and node.body and isinstance(node.body[0], ast.Raise):
            names = _none_tests(node.test)
            if names and set(names) <= params:
                return RequiredAtRuntime(tuple(names), file, start + node.lineno - 1)
    return None


def _none_tests(test: ast.expr) -> list[str] | None:
    """[P, Q, ...] for ``P is None or Q is None ...``; None for any other test."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) else [test]
    names = []
    for part in parts:
        if not (isinstance(part, ast.Compare) and isinstance(part.left, ast.Name) and len(part.ops) == 1
                and isinstance(part.ops[0], ast.Is) and isinstance(part.comparators[0], ast.Constant)
                and part.comparators[0].value is None):
            return None
        names.append(part.left.id)
    return names
