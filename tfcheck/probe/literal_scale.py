"""Whether a number an op received is written as a constant in the user's source.

A scale hard-coded for one head size (``scores / 8.0``, ``* 0.125``, ``scale=1 / 8``) and one computed from the
head size (``/ math.sqrt(q.size(-1))``, ``* self.d_k ** -0.5``) measure the same at the one size where they agree,
and tfcheck builds models small: ``/ 8.0`` written for d_k = 64 then equals 1/d_k of the small model's d_k = 8,
and passes for another design. So the statement that applied or passed the value is read with ``ast``: the value
is *written* when an operand of a product or quotient, or an argument of a call, is a numeric literal or
arithmetic (``1 / 8``, ``64 ** -0.5``, ``math.sqrt(64)``) of literals only, and evaluates to it. A name, an
attribute or a call on anything else (``math.sqrt(self.d_k)``, ``q.size(-1) ** -0.5``) is computed, not written.

Plain source reading: importing it imports no torch.
"""
from __future__ import annotations

import ast
import linecache
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass

#: Functions of literals that still make a constant: math.sqrt(64) is as hard-coded as 8.0.
_FUNCTIONS: dict[str, Callable[..., float]] = {"sqrt": math.sqrt, "pow": math.pow}
_MODULES = ("math", "np", "numpy")
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.Pow: operator.pow, ast.FloorDiv: operator.floordiv}
_SCALINGS = (ast.Mult, ast.Div)


@dataclass(frozen=True)
class Literal:
    """A constant as written: the expression's text, its value and where it starts."""

    text: str
    value: float
    file: str
    line: int


def written_constant(file: str | None, line: int | None, value: float) -> Literal | None:
    """The constant equal to ``value`` that the statement at ``file:line`` writes as an operand of ``*`` or ``/``
    (also ``*=``, ``/=``) or as an argument of a call; None where the statement computes it, or where its source
    cannot be read (a model built from a string, a file changed since)."""
    if not file or not line or not math.isfinite(value):
        return None
    source = "".join(linecache.getlines(file))
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    statement = _statement_at(tree, line)
    if statement is None:
        return None
    for node in _candidates(statement):
        found = _evaluate(node)
        if found is not None and math.isclose(found, value, rel_tol=1e-9):
            text = ast.get_source_segment(source, node) or ast.unparse(node)
            return Literal(text, found, file, node.lineno)
    return None


def _statement_at(tree: ast.AST, line: int) -> ast.stmt | None:
    """The innermost statement spanning ``line`` (a frame's line may be any line of a wrapped statement)."""
    spanning = [node for node in ast.walk(tree) if isinstance(node, ast.stmt)
                and node.lineno <= line <= (node.end_lineno or node.lineno)]
    return min(spanning, key=lambda n: (n.end_lineno or n.lineno) - n.lineno, default=None)


def _candidates(statement: ast.stmt) -> list[ast.expr]:
    """The expressions in the positions a scale is applied or passed from: the operands of a product or quotient
    and the arguments of a call. A header's body is left out: only its own line is the statement's."""
    nodes = [statement] if not hasattr(statement, "body") else \
        [n for n in ast.iter_child_nodes(statement) if isinstance(n, ast.expr)]
    out: list[ast.expr] = []
    for root in nodes:
        for node in ast.walk(root):
            if isinstance(node, ast.BinOp) and isinstance(node.op, _SCALINGS):
                out += [node.left, node.right]
            elif isinstance(node, ast.AugAssign) and isinstance(node.op, _SCALINGS):
                out.append(node.value)
            elif isinstance(node, ast.Call):
                out += [*node.args, *(k.value for k in node.keywords)]
    return out


def _evaluate(node: ast.expr) -> float | None:
    """The value of an expression made of numeric literals only; None for anything that reads a name."""
    try:
        value = _value(node)
    except (ArithmeticError, ValueError, TypeError):
        return None
    return float(value) if value is not None and isinstance(value, (int, float)) and math.isfinite(value) else None


def _value(node: ast.expr) -> float | None:
    if isinstance(node, ast.Constant):
        number = node.value
        return float(number) if isinstance(number, (int, float)) and not isinstance(number, bool) else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _value(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _value(node.left), _value(node.right)
        return None if left is None or right is None else _OPERATORS[type(node.op)](left, right)
    if isinstance(node, ast.Call) and not node.keywords:
        func = node.func
        if isinstance(func, ast.Attribute):
            # math.sqrt / np.sqrt; never a method of a computed value (q.size(-1).sqrt()) or of the model
            name = func.attr if isinstance(func.value, ast.Name) and func.value.id in _MODULES else None
        else:
            name = getattr(func, "id", None)
        args = [_value(a) for a in node.args]
        if name in _FUNCTIONS and args and all(a is not None for a in args):
            return _FUNCTIONS[name](*args)
    return None
