"""Whether the model's own forward says that its mask argument is unused.

tfcheck takes a forward argument named ``attention_mask`` for the padding mask by its name. Some models take that
argument only to share an interface and say in their forward that they ignore it (RWKV's
``logger.warning_once("`attention_mask` was passed, but it is unused in this model.")``): such a model takes no
padding mask, and mask.padding, which measures whether the mask it is given keeps pads out, does not apply. The
statement is read from the forward's source (a string literal or its docstring naming the argument and saying
it is unused), the way a declaration is read, never from how the model behaves with the mask.
"""
from __future__ import annotations

import ast
import inspect
import io
import re
import textwrap
import tokenize

#: Words that say an argument has no effect.
UNUSED = re.compile(r"\b(unused|not used|has no effect|dummy)\b", re.IGNORECASE)


def said_unused(model, argument: str) -> str | None:
    """'path:line: "the sentence"' where ``model``'s forward, or that of the first submodule whose forward takes
    ``argument`` too (the base model a head wraps and hands it to), says ``argument`` is unused; None where neither
    does (or its source cannot be read)."""
    said = _said_in(type(model), argument)
    if said is not None:
        return said
    inner = next((m for m in list(model.modules())[1:] if argument in _parameters(type(m))), None)
    return _said_in(type(inner), argument) if inner is not None else None


def _parameters(cls) -> set[str]:
    try:
        return set(inspect.signature(cls.forward).parameters)
    except (TypeError, ValueError, AttributeError):
        return set()


def _said_in(cls, argument: str) -> str | None:
    forward = inspect.unwrap(getattr(cls, "forward", None) or (lambda: None))
    try:
        lines, start = inspect.getsourcelines(forward)
        tree = ast.parse(textwrap.dedent("".join(lines)))
        path = inspect.getsourcefile(forward) or "?"
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    source = textwrap.dedent("".join(lines))
    for line, comment in _parameter_comments(tree, source, argument):
        if UNUSED.search(comment):
            return f'{path}:{start + line - 1}: "{comment.strip()[:160]}"'
    for node in ast.walk(tree):
        for text in _texts(node):
            if argument in text and UNUSED.search(_sentence(text, argument)):
                return f'{path}:{start + getattr(node, "lineno", 1) - 1}: "{text.strip()[:160]}"'
    return None


def _parameter_comments(tree: ast.AST, source: str, argument: str) -> list[tuple[int, str]]:
    """The comments on the line that declares the parameter ``argument`` (``attention_mask=None,  # dummy ...``)."""
    function = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if function is None:
        return []
    declared = {a.lineno for a in (*function.args.args, *function.args.kwonlyargs) if a.arg == argument}
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return []
    return [(t.start[0], t.string.lstrip("# ")) for t in tokens
            if t.type == tokenize.COMMENT and t.start[0] in declared]


def _texts(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return ["".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))]
    return []


def _sentence(text: str, argument: str) -> str:
    """The sentence of ``text`` that names ``argument`` (a docstring documents many arguments; only its own counts)."""
    return next((s for s in re.split(r"(?<=[.!?])\s+|\n\s*\n", text) if argument in s), "")
