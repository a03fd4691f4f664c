"""Config literals a script writes where importing it never runs them: inside its ``if __name__ == "__main__":``
block or a module-level function (the book's ``GPT_CONFIG_124M = {...}`` under ``__main__``, a
``def main(): cfg = dict(...)``). They are read from the source with ``ast`` and never executed: running the block
would train, download or parse the command line, and only the literal is wanted.

A candidate is a name assigned a dict literal, a ``dict(...)`` call or a ``SimpleNamespace(...)`` call (or such a
value returned by a module-level function), with the ``cfg[key] = ...``, ``cfg.key = ...`` and ``cfg.update(...)``
statements that follow it in the same block applied in order, so a switch the script sets later is the one it
builds with. Each value is ``ast.literal_eval``'d. A value that is no literal (``tokenizer.n_vocab``,
``args.layers``) is known only by running the script: under a hyper-parameter name (a size, count, dropout rate or
special id) it is left unset, and tfcheck fills it with its small value as it fills every unset size; under any
other name (a switch) it is left out, so a constructor that reads that field finds no such field in this candidate
and the candidate is not used, since tfcheck never guesses a switch. A ``**spread`` or a key that is no string
literal makes the candidate unusable: which fields it has cannot be read.

The order: the ``__main__`` blocks, then ``main()``, then the other module-level functions, each in source order.
"""
from __future__ import annotations

import ast
import copy
import inspect
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tfcheck.model.build.small_sizes import quantity

#: Calls whose keyword arguments are a config's fields (``types.SimpleNamespace``, ``argparse.Namespace``).
_NAMESPACES = ("SimpleNamespace", "Namespace")
#: A value that is no literal, left unset or out (the module docstring says which).
_UNREAD = object()


class _Unusable(Exception):
    """A candidate whose fields cannot be read (a ``**spread``, a computed key)."""


@dataclass(frozen=True)
class ScriptConfig:
    """A config read from a script's source: the name it was assigned to, where (``scope``: "the __main__
    block", "main()"; ``line``: its assignment), its fields and whether the script builds a namespace of them."""

    name: str
    scope: str
    line: int
    fields: dict[str, Any]
    namespace: bool = False

    def make(self) -> Any:
        """A fresh config of the fields, as the script builds it (a dict, or a namespace read by attribute)."""
        fields = copy.deepcopy(self.fields)
        return types.SimpleNamespace(**fields) if self.namespace else fields


def script_configs(module: Any) -> list[ScriptConfig]:
    """The config literals of ``module``'s ``__main__`` blocks and module-level functions, in the order tried
    (none when its source cannot be read)."""
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError, SyntaxError, ValueError):
        return []
    main_blocks = [s for s in tree.body if isinstance(s, ast.If) and _is_main_test(s.test)]
    functions = [s for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
    functions.sort(key=lambda f: f.name != "main")  # stable: main() first, the others in source order
    out = [c for block in main_blocks for c in _in_block(block.body, "the __main__ block", None)]
    for f in functions:
        out += _in_block(f.body, f"{f.name}()", f.name)
    return out


def _is_main_test(test: ast.expr) -> bool:
    """``__name__ == "__main__"``, either way round."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) and \
        any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides)


def _in_block(body: list[ast.stmt], scope: str, function: str | None) -> Iterator[ScriptConfig]:
    """The candidates of one statement list and of the blocks nested in it (an ``if``, ``with``, ``for`` or
    ``try``), never of a nested function or class: those run only when called."""
    for i, stmt in enumerate(body):
        target, value = _assigned(stmt)
        if target is not None and value is not None:
            found = _candidate(value)
            if found is not None:
                raw, namespace = found
                try:
                    _follow(body[i + 1:], target, raw)
                except _Unusable:
                    continue
                yield ScriptConfig(target, scope, stmt.lineno, _fields(raw), namespace)
        elif isinstance(stmt, ast.Return) and stmt.value is not None and function is not None:
            found = _candidate(stmt.value)
            if found is not None:
                yield ScriptConfig(f"what {function}() returns", scope, stmt.lineno, _fields(found[0]), found[1])
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for nested in ("body", "orelse", "finalbody"):
                yield from _in_block(getattr(stmt, nested, None) or [], scope, function)
            for handler in getattr(stmt, "handlers", None) or []:
                yield from _in_block(handler.body, scope, function)


def _assigned(stmt: ast.stmt) -> tuple[str | None, ast.expr | None]:
    """The one plain name a statement assigns, and its value (``cfg = ...``, ``cfg: dict = ...``)."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id, stmt.value
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return stmt.target.id, stmt.value
    return None, None


def _candidate(node: ast.expr) -> tuple[dict[str, Any], bool] | None:
    """The fields of a config expression as written (an unread value as _UNREAD) and whether it is a namespace;
    None for no config expression or one whose fields cannot be read."""
    try:
        if isinstance(node, ast.Dict):
            return _dict_fields(node), False
        if isinstance(node, ast.Call) and not node.args and _callee(node) in _NAMESPACES:
            return _keyword_fields(node.keywords), True
        if isinstance(node, ast.Call) and _callee(node) == "dict":
            return {**_positional_dict(node.args), **_keyword_fields(node.keywords)}, False
    except _Unusable:
        return None
    return None


def _callee(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _dict_fields(node: ast.Dict) -> dict[str, Any]:
    raw = {}
    for key, value in zip(node.keys, node.values, strict=True):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            raise _Unusable  # a **spread (key None) or a computed key
        raw[key.value] = _literal(value)
    return raw


def _positional_dict(args: list[ast.expr]) -> dict[str, Any]:
    """The fields of ``dict({...})`` / ``cfg.update({...})``'s one positional dict literal (none without one)."""
    if not args:
        return {}
    if len(args) > 1 or not isinstance(args[0], ast.Dict):
        raise _Unusable  # dict(other) or update(other): fields only running the script shows
    return _dict_fields(args[0])


def _keyword_fields(keywords: list[ast.keyword]) -> dict[str, Any]:
    if any(k.arg is None for k in keywords):
        raise _Unusable  # **spread
    return {k.arg: _literal(k.value) for k in keywords if k.arg is not None}


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _UNREAD


def _fields(raw: dict[str, Any]) -> dict[str, Any]:
    """The fields with each unread value left unset (a hyper-parameter: None, which tfcheck fills) or left out
    (anything else: tfcheck never guesses it)."""
    names = list(raw)
    out: dict[str, Any] = {}
    for name, value in raw.items():
        if value is not _UNREAD:
            out[name] = value
        elif quantity(name, names) is not None:
            out[name] = None
    return out


def _follow(after: list[ast.stmt], target: str, raw: dict[str, Any]) -> None:
    """Apply to ``raw`` what the statements after the assignment set in it, up to the name's next assignment."""
    for stmt in after:
        if _assigned(stmt)[0] == target:
            return
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            place = stmt.targets[0]
            key = _set_key(place, target)
            if key is not None:
                raw[key] = _literal(stmt.value)
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and _updates(stmt.value, target):
            raw.update({**_positional_dict(stmt.value.args), **_keyword_fields(stmt.value.keywords)})


def _set_key(place: ast.expr, target: str) -> str | None:
    """The field ``cfg["key"] = ...`` or ``cfg.key = ...`` sets in ``target``; None for any other target."""
    if isinstance(place, ast.Subscript) and isinstance(place.value, ast.Name) and place.value.id == target:
        if isinstance(place.slice, ast.Constant) and isinstance(place.slice.value, str):
            return place.slice.value
        raise _Unusable  # a computed key
    if isinstance(place, ast.Attribute) and isinstance(place.value, ast.Name) and place.value.id == target:
        return place.attr
    return None


def _updates(call: ast.Call, target: str) -> bool:
    func = call.func
    return isinstance(func, ast.Attribute) and func.attr == "update" and isinstance(func.value, ast.Name) and \
        func.value.id == target


__all__ = ["ScriptConfig", "script_configs"]
