"""Whether a number an op received is written as a constant in the user's source.

A scale hard-coded for one head size (``scores / 8.0``, ``* 0.125``, ``scale=1 / 8``) and one computed from the
head size (``/ math.sqrt(q.size(-1))``, ``* self.d_k ** -0.5``) measure the same at the one size where they agree,
and tfcheck builds models small: ``/ 8.0`` written for d_k = 64 then equals 1/d_k of the small model's d_k = 8,
and passes for another design. So the statement that applied or passed the value is read with ``ast``: the value
is *written* when an operand of a product or quotient, or an argument of a call, is a numeric literal or
arithmetic (``1 / 8``, ``64 ** -0.5``, ``math.sqrt(64)``) of literals only, and evaluates to it. A name, an
attribute or a call on anything else (``math.sqrt(self.d_k)``, ``q.size(-1) ** -0.5``) is computed, not written.

A constant is also written where the operand is a name the source assigns literals only: an attribute of
``self`` (``self.scale = 0.125`` in ``__init__``, followed through the class, its base classes and subclasses in
the same file), a local variable or a module-level constant (``SCALE = 64 ** -0.5``). Every assignment must be
literal-only and give the same value; one computed assignment (``self.scale = self.head_dim ** -0.5``), a
parameter of that name, or a binding that assigns no single expression (a loop variable, an unpacking) makes it
computed. Only the name at the statement is followed, one step: ``math.sqrt(self.d_k)`` stays computed whatever
``self.d_k`` holds (a head size fixed in the source makes the scale follow it).

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
    name: str | None = None  # the name the scaling statement reads it through (self.scale, SCALE), if any

    @property
    def shown(self) -> str:
        """The constant as the source writes it: ``0.125``, or its assignment ``self.scale = 0.125``."""
        return f"{self.name} = {self.text}" if self.name else self.text


def written_constant(file: str | None, line: int | None, value: float) -> Literal | None:
    """The constant equal to ``value`` that the statement at ``file:line`` writes as an operand of ``*`` or ``/``
    (also ``*=``, ``/=``) or as an argument of a call; None where the statement computes it, or where its source
    cannot be read (a model built from a string, a file changed since)."""
    if not file or not line or not math.isfinite(value):
        return None
    parsed = _parse(file)
    statement = _statement_at(parsed.tree, line) if parsed is not None else None
    if parsed is None or statement is None:
        return None
    for node in _candidates(statement):
        found = _evaluate(node)
        if found is not None and math.isclose(found, value, rel_tol=1e-9):
            text = ast.get_source_segment(parsed.source, node) or ast.unparse(node)
            return Literal(text, found, file, node.lineno)
        named = _named(node, parsed, file)
        if named is not None and math.isclose(named.value, value, rel_tol=1e-9):
            return named
    return None


@dataclass(frozen=True)
class _Parsed:
    source: str
    tree: ast.Module
    parents: dict[ast.AST, ast.AST]


#: The files parsed last: attention.scale reads every site's statement, and the sites of a model share a file.
_PARSED: dict[str, _Parsed] = {}
_KEPT = 8


def _parse(file: str) -> _Parsed | None:
    source = "".join(linecache.getlines(file))
    kept = _PARSED.get(file)
    if kept is not None and kept.source == source:
        return kept
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    if len(_PARSED) >= _KEPT:
        _PARSED.pop(next(iter(_PARSED)))
    _PARSED[file] = parsed = _Parsed(source, tree, parents)
    return parsed


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


# ----- a name the statement scales by, followed to its assignments ------------------------------------------

#: Nodes that open a scope of their own: the names bound inside them are not the enclosing scope's.
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_FUNCTIONS_DEF = (ast.FunctionDef, ast.AsyncFunctionDef)


def _named(node: ast.expr, parsed: _Parsed, file: str) -> Literal | None:
    """The constant behind a name or ``self`` attribute whose every assignment is literal-only and the same."""
    if isinstance(node, ast.Name):
        name, values = node.id, _name_values(node, parsed)
    elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        name, values = f"{node.value.id}.{node.attr}", _attribute_values(node, node.value.id, parsed)
    else:
        return None
    if not values:
        return None
    found = [_evaluate(v) for v in values]
    first, value = values[0], found[0]
    if value is None or any(f is None or not math.isclose(f, value, rel_tol=1e-9) for f in found):
        return None
    text = ast.get_source_segment(parsed.source, first) or ast.unparse(first)
    return Literal(text, value, file, first.lineno, name)


def _enclosing(node: ast.AST, parsed: _Parsed, kinds: tuple[type, ...]) -> ast.AST | None:
    current = parsed.parents.get(node)
    while current is not None and not isinstance(current, kinds):
        current = parsed.parents.get(current)
    return current


def _parameters(function: ast.AST) -> set[str]:
    args = getattr(function, "args", None)
    if args is None:
        return set()
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, *(a for a in (args.vararg, args.kwarg) if a)]
    return {a.arg for a in every}


def _own_nodes(scope: ast.AST):
    """The nodes of ``scope``, not those of the functions and classes nested in it."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, _SCOPES):
            stack.extend(ast.iter_child_nodes(node))


def _assigned(target: ast.expr, parsed: _Parsed) -> ast.expr | None:
    """The expression a store target is assigned, None where it gets no single one (``for``, unpacking, ``+=``)."""
    parent = parsed.parents.get(target)
    if isinstance(parent, ast.Assign) and any(t is target for t in parent.targets):
        return parent.value
    if isinstance(parent, ast.AnnAssign) and parent.target is target:
        return parent.value
    return None


def _bindings(scope: ast.AST, name: str, parsed: _Parsed) -> tuple[bool, list[ast.expr] | None]:
    """Whether ``scope`` binds ``name`` itself, and what it assigns (None: a binding of no single expression)."""
    values: list[ast.expr] = []
    bound = False
    for node in _own_nodes(scope):
        if not (isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store)):
            continue
        parent = parsed.parents.get(node)
        if isinstance(parent, ast.AnnAssign) and parent.value is None:
            continue  # a bare annotation binds nothing
        bound, value = True, _assigned(node, parsed)
        if value is None:
            return True, None
        values.append(value)
    return bound, values


def _name_values(node: ast.Name, parsed: _Parsed) -> list[ast.expr] | None:
    """A local variable's assignments, else a module-level name's; None for a parameter (a value passed in is
    followed to the call that passed it, tfcheck.checks.numerics.value_origin) or a name bound otherwise."""
    function = _enclosing(node, parsed, (*_FUNCTIONS_DEF, ast.Lambda))
    if function is not None:
        if node.id in _parameters(function):
            return None
        bound, values = _bindings(function, node.id, parsed)
        if bound:
            return values
    bound, values = _bindings(parsed.tree, node.id, parsed)
    return values if bound else None


def _attribute_values(node: ast.Attribute, owner: str, parsed: _Parsed) -> list[ast.expr] | None:
    """Every assignment of ``self.<attr>`` (``owner`` the method's first parameter) in the method's class, its base
    classes and its subclasses in the file (any of them may set what the method reads), and the class attributes
    of that name; None where one assigns no single expression or the method is no method."""
    method = _enclosing(node, parsed, _FUNCTIONS_DEF)
    cls = parsed.parents.get(method) if method is not None else None
    first = getattr(method, "args", None)
    if not isinstance(cls, ast.ClassDef) or not first or not first.args or first.args[0].arg != owner:
        return None
    values: list[ast.expr] = []
    for related in _related(cls, parsed.tree):
        bound, assigned = _bindings(related, node.attr, parsed)  # a class attribute read through self
        if bound and assigned is None:
            return None
        values += assigned or []
        for function in (f for f in related.body if isinstance(f, _FUNCTIONS_DEF) and f.args.args):
            this = function.args.args[0].arg
            for store in ast.walk(function):
                if isinstance(store, ast.Attribute) and isinstance(store.ctx, ast.Store) and \
                        store.attr == node.attr and isinstance(store.value, ast.Name) and store.value.id == this:
                    value = _assigned(store, parsed)
                    if value is None:
                        return None
                    values.append(value)
    return values


def _related(cls: ast.ClassDef, tree: ast.Module) -> list[ast.ClassDef]:
    """``cls``, the classes of the file it derives from and the classes of the file that derive from it."""
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    by_name: dict[str, list[ast.ClassDef]] = {}
    for c in classes:
        by_name.setdefault(c.name, []).append(c)

    def bases(c: ast.ClassDef) -> list[ast.ClassDef]:
        return [b for base in c.bases if isinstance(base, ast.Name) for b in by_name.get(base.id, [])]

    def closure(start: list[ast.ClassDef], step) -> list[ast.ClassDef]:
        seen: list[ast.ClassDef] = []
        frontier = list(start)
        while frontier:
            c = frontier.pop()
            if all(c is not s for s in seen):
                seen.append(c)
                frontier += step(c)
        return seen

    up = closure([cls], bases)
    down = closure([cls], lambda c: [d for d in classes if any(b is c for b in bases(d))])
    return [*up, *(c for c in down if all(c is not u for u in up))]
