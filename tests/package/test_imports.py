"""The import rules of the layered package (docs/architecture.md), read from the source with ``ast``. Every import
counts: at module level, inside a function, and under ``if TYPE_CHECKING:`` (a type-only import is still a
dependency of the code that reads it).

- no module imports a layer above its own (``LAYERS``, lowest first);
- no import cycle between tfcheck's modules, nor between its packages;
- no module imports another's ``_private`` name (``from tfcheck.x import _y``, or ``x._y`` where ``x`` is an
  imported tfcheck module);
- no ``importlib.import_module("tfcheck...")`` / ``__import__("tfcheck...")``: the only dynamic import is the
  battery loader, ``tfcheck/checks/__init__.py``, whose edges go to every module under ``tfcheck/checks/``;
- every import of ``tfcheck.something`` names a module that exists.

There is no exemption: data prints itself through ``tfcheck.display``, whose views ``tfcheck.ui.views``
registers, and the battery is loaded by the front ends (``tfcheck.battery``), never by the engine.

Importing ``tfcheck.a.b`` is an edge to the module ``tfcheck.a.b`` only, not to the package ``__init__`` files
above it (Python runs them too, but counting them would make false cycles through every re-exporting
``__init__``); a package ``__init__`` that re-exports is an ordinary module, as are the public shims
``tfcheck/*.py``. The detector itself is tested on synthetic packages at the end of this file.
"""
from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "tfcheck"

BATTERY = "checks"

#: The layers, lowest first: a module may import its own layer and those below, never one above. A module belongs
#: to the layer of the longest prefix naming it. The model layer is itself in stages (build < facts < inputs <
#: trial < subject): each stage is typed against ``model.facts.under_test.ModelUnderTest``, never the Subject.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("errors", "version", "frames", "progress", "display")),
    ("report", ("report",)),
    ("recording", ("recording",)),
    ("model.build", ("model", "model.build", "model.strategies")),
    ("model.facts", ("model.facts",)),
    ("model.inputs", ("model.inputs",)),
    ("model.trial", ("model.trial",)),
    ("model.subject", ("model.subject",)),
    ("probe", ("probe",)),
    ("explainers", ("explainers",)),
    ("engine", ("engine",)),
    ("tools", ("tools",)),
    ("checks", ("checks",)),
    ("ui", ("ui",)),
    ("front ends", ("", "__main__", "api", "battery", "cli", "plugin", "pytest_plugin",
                    "flow", "leakmap", "recorded_probe", "registry", "shrinking", "strategies", "training")),
)
DYNAMIC_IMPORTERS = frozenset({"import_module", "__import__"})


@dataclass(frozen=True)
class Edge:
    source: str  # importing module
    target: str  # imported module
    file: str  # path relative to the package's parent
    line: int
    local: bool  # inside a function body
    how: str  # the statement, as written (roughly)
    type_only: bool = False  # under ``if TYPE_CHECKING:``

    def site(self) -> str:
        where = " (inside a function)" if self.local else " (type-only)" if self.type_only else ""
        return f"{self.file}:{self.line}{where}: {self.how}"


@dataclass
class Graph:
    package: str
    modules: dict[str, Path]
    edges: list[Edge] = field(default_factory=list)
    private: list[str] = field(default_factory=list)
    dynamic: list[str] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)
    unparsable: list[str] = field(default_factory=list)

    def successors(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {m: set() for m in self.modules}
        for e in self.edges:
            out[e.source].add(e.target)
        return out

    def edge(self, source: str, target: str) -> Edge:
        """The first statement (by line) that makes ``source`` import ``target``."""
        return min((e for e in self.edges if e.source == source and e.target == target), key=lambda e: e.line)


def module_names(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under the package directory ``root``."""
    package = root.name
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join((package, *parts))] = path
    return out


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _is_type_checking(test: ast.AST) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _string_prefix(node: ast.AST) -> str | None:
    """The literal text of a string constant, or the literal start of an f-string."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return str(node.values[0].value)
    return None


class _ModuleScan:
    """One module's imports, walked with the context each statement runs in."""

    def __init__(self, graph: Graph, name: str, path: Path, rel: str):
        self.graph, self.name, self.path, self.rel = graph, name, path, rel
        self.package = graph.package
        self.is_package = path.name == "__init__.py"
        #: local name -> tfcheck module it is bound to by an import
        self.aliases: dict[str, str] = {}

    # -- resolution

    def _absolute(self, module: str | None, level: int) -> str | None:
        if level == 0:
            return module
        base = self.name.split(".")
        if not self.is_package:
            base = base[:-1]
        if level > 1:
            base = base[:-(level - 1)] if level - 1 < len(base) else []
        if not base:
            return None
        return ".".join(base + ([module] if module else []))

    def _ours(self, module: str | None) -> bool:
        return module is not None and (module == self.package or module.startswith(self.package + "."))

    def _add(self, target: str, node: ast.AST, local: bool, type_only: bool, how: str) -> None:
        if target not in self.graph.modules:
            self.graph.unresolved.append(f"{self.rel}:{node.lineno}: {how} (no module {target} in the package)")
            return
        if target == self.name:
            return
        self.graph.edges.append(Edge(self.name, target, self.rel, node.lineno, local, how, type_only))

    # -- the walk

    def scan(self, tree: ast.Module) -> None:
        self._walk(tree.body, local=False, type_only=False)
        self._attributes(tree)
        if self.name == f"{self.package}.{BATTERY}":  # the battery loader: every check module, dynamically
            calls = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and
                     (getattr(n.func, "attr", None) or getattr(n.func, "id", None)) in DYNAMIC_IMPORTERS]
            for target in sorted(self.graph.modules):
                if target.startswith(self.name + "."):
                    self.graph.edges.append(Edge(self.name, target, self.rel, min(calls, default=1), False,
                                                 f"the battery loader imports {target}"))

    def _walk(self, body: list[ast.stmt], local: bool, type_only: bool) -> None:
        for node in body:
            self._statement(node, local, type_only)

    def _statement(self, node: ast.AST, local: bool, type_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            self._walk(node.body, local, type_only=True)  # never runs, yet the code it types depends on it
            self._walk(node.orelse, local, type_only)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for expr in [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults]:
                if expr is not None:
                    self._expressions(expr, local, type_only)
            self._walk(node.body, local=True, type_only=type_only)
            return
        if isinstance(node, ast.ClassDef):
            for expr in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
                self._expressions(expr, local, type_only)
            self._walk(node.body, local, type_only)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if self._ours(alias.name):
                    self._add(alias.name, node, local, type_only, f"import {alias.name}")
                    if alias.asname:
                        self.aliases[alias.asname] = alias.name
            return
        if isinstance(node, ast.ImportFrom):
            self._import_from(node, local, type_only)
            return
        # any other statement: its expressions (dynamic imports), then nested statement bodies
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                self._statement(child, local, type_only)
            elif isinstance(child, ast.excepthandler):
                self._walk(child.body, local, type_only)
            elif isinstance(child, ast.match_case):
                self._walk(child.body, local, type_only)
            elif isinstance(child, ast.withitem):
                self._expressions(child.context_expr, local, type_only)
            elif isinstance(child, ast.expr):
                self._expressions(child, local, type_only)

    def _import_from(self, node: ast.ImportFrom, local: bool, type_only: bool) -> None:
        base = self._absolute(node.module, node.level)
        if not self._ours(base):
            return
        assert base is not None
        dots = "." * node.level
        for alias in node.names:
            how = f"from {dots}{node.module or ''} import {alias.name}"
            submodule = f"{base}.{alias.name}"
            if alias.name != "*" and submodule in self.graph.modules:
                self._add(submodule, node, local, type_only, how)
                self.aliases[alias.asname or alias.name] = submodule
            else:
                self._add(base, node, local, type_only, how)
            if _is_private(alias.name):
                self.graph.private.append(f"{self.rel}:{node.lineno}: {how} (a private name of {base})")

    def _expressions(self, expr: ast.AST, local: bool, type_only: bool) -> None:
        """importlib.import_module / __import__ of one of the package's modules."""
        for node in ast.walk(expr):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if called not in DYNAMIC_IMPORTERS:
                continue
            arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "name"), None)
            text = _string_prefix(arg) if arg is not None else None
            if text is None or not self._ours(text.rstrip(".")) and not text.startswith(self.package + "."):
                continue
            how = f"{_dotted(func) or called}({ast.unparse(arg)})"
            if self.name != f"{self.package}.{BATTERY}":
                self.graph.dynamic.append(f"{self.rel}:{node.lineno}: {how}")
            if isinstance(arg, ast.Constant):
                self._add(text, node, local, type_only, how)

    def _attributes(self, tree: ast.Module) -> None:
        """``x._y`` where ``x`` is an imported tfcheck module (``import tfcheck.a as x``, ``from tfcheck import a``,
        or the dotted ``tfcheck.a._y`` after ``import tfcheck.a``)."""
        bound_package = any(isinstance(n, ast.Import) and any(a.asname is None and self._ours(a.name) for a in n.names)
                            for n in ast.walk(tree))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not _is_private(node.attr):
                continue
            dotted = _dotted(node.value)
            if dotted is None:
                continue
            root, _, rest = dotted.partition(".")
            if root in self.aliases:
                module = self.aliases[root] + (f".{rest}" if rest else "")
            elif root == self.package and bound_package:
                module = dotted
            else:
                continue
            if module in self.graph.modules and module != self.name:
                self.graph.private.append(f"{self.rel}:{node.lineno}: {dotted}.{node.attr} "
                                          f"(a private name of {module})")


def analyse(root: Path) -> Graph:
    """The import graph of the package in directory ``root`` (its name is the package's name)."""
    graph = Graph(root.name, module_names(root))
    for name, path in graph.modules.items():
        rel = path.relative_to(root.parent).as_posix()
        try:
            tree = ast.parse(path.read_text("utf-8"), filename=str(path))
        except SyntaxError as exc:
            graph.unparsable.append(f"{rel}:{exc.lineno}: {exc.msg}")
            continue
        _ModuleScan(graph, name, path, rel).scan(tree)
    return graph


def strongly_connected(successors: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(successors.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            out.append(sorted(component))

    for v in sorted(successors):
        if v not in index:
            visit(v)
    return sorted(out)


def find_cycles(successors: dict[str, set[str]]) -> list[list[str]]:
    """Import cycles, as paths ``[a, b, ..., a]``: for every module in a cycle, one shortest cycle through
    it, each written from its smallest module, without repeats. Every module in a cycle appears in one."""
    cycles: set[tuple[str, ...]] = set()
    for component in strongly_connected(successors):
        members = set(component)
        if len(component) == 1 and component[0] not in successors.get(component[0], ()):
            continue
        for start in component:
            parent: dict[str, str] = {}
            queue = deque([start])
            found = None
            while queue and found is None:
                v = queue.popleft()
                for w in sorted(successors[v] & members):
                    if w == start:
                        found = v
                        break
                    if w not in parent:
                        parent[w] = v
                        queue.append(w)
            assert found is not None, start
            path = [found]
            while path[-1] != start:
                path.append(parent[path[-1]])
            path.reverse()  # start ... found
            i = path.index(min(path))
            cycles.add(tuple(path[i:] + path[:i]))
    return [[*c, c[0]] for c in sorted(cycles)]


def describe_cycle(graph: Graph, cycle: list[str]) -> str:
    lines = ["  " + " -> ".join(cycle)]
    for a, b in zip(cycle, cycle[1:]):
        lines.append(f"      {graph.edge(a, b).site()}")
    return "\n".join(lines)


def cycle_report(graph: Graph) -> list[str]:
    """Each cycle with the statement behind each of its edges, then the edges most cycles share (breaking
    one of those breaks them all)."""
    cycles = find_cycles(graph.successors())
    out = [describe_cycle(graph, c) for c in cycles]
    shared: dict[tuple[str, str], int] = {}
    for c in cycles:
        for pair in set(zip(c, c[1:])):
            shared[pair] = shared.get(pair, 0) + 1
    common = sorted(((n, pair) for pair, n in shared.items() if n > 1), key=lambda t: (-t[0], t[1]))
    if common:
        out.append("  edges in more than one of these cycles:\n" + "\n".join(
            f"    in {n} of {len(cycles)}: {graph.edge(*pair).site()}" for n, pair in common))
    return out


def layer_of(module: str, package: str = "tfcheck") -> tuple[int, str]:
    """(rank, name) of the layer ``module`` belongs to: the longest prefix of ``LAYERS`` naming it."""
    inner = module.removeprefix(package).removeprefix(".")
    best: tuple[int, int, str] | None = None
    for rank, (name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if inner == prefix or (prefix and inner.startswith(prefix + ".")) or (not prefix and inner == ""):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), rank, name)
    if best is None:
        raise KeyError(f"{module} is in no layer: add it to LAYERS (and to docs/architecture.md)")
    return best[1], best[2]


def upward_imports(graph: Graph) -> list[str]:
    """Each import of a layer above the importer's own, with its statement."""
    out = []
    for e in sorted(graph.edges, key=lambda e: (e.file, e.line)):
        (low, below), (high, above) = layer_of(e.source, graph.package), layer_of(e.target, graph.package)
        if high > low:
            out.append(f"{e.site()}  ({below} imports {above}, a layer above it)")
    return out


def package_of(module: str, modules: dict[str, Path]) -> str:
    """The package a module lives in (a package's ``__init__`` is its own package). A module beside subpackages is
    a node of its own: at the root, everything imports ``errors`` and the front ends import everything; in
    ``model/``, ``inputs`` sits between the facts and the trial stage and ``subject`` above every stage."""
    if modules[module].name == "__init__.py":
        return module
    parent = module.rpartition(".")[0]
    has_subpackages = any(m.startswith(parent + ".") and modules[m].name == "__init__.py" for m in modules)
    return module if has_subpackages else parent


def package_successors(graph: Graph) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for e in graph.edges:
        a, b = package_of(e.source, graph.modules), package_of(e.target, graph.modules)
        out.setdefault(a, set())
        out.setdefault(b, set())
        if a != b:
            out[a].add(b)
    return out


def _failure(title: str, items: list[str], rule: str) -> str:
    return f"{len(items)} {title} ({rule}):\n" + "\n".join(items)


# --- the rules, on the real package ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def graph() -> Graph:
    return analyse(PACKAGE_ROOT)


def test_the_real_package_is_scanned(graph):
    assert {"tfcheck", "tfcheck.engine.registry", "tfcheck.checks", "tfcheck.report.report"} <= set(graph.modules)
    assert not graph.unparsable, _failure("modules that do not parse", graph.unparsable, "a file mid-edit?")
    assert len(graph.edges) > 50


def test_every_module_is_in_a_layer(graph):
    missing = []
    for module in graph.modules:
        try:
            layer_of(module)
        except KeyError as exc:
            missing.append(str(exc))
    assert not missing, "\n".join(missing)


def test_no_upward_imports(graph):
    upward = upward_imports(graph)
    assert not upward, _failure(
        "imports of a layer above the importer's", upward,
        "LAYERS, lowest first; move the shared code down a layer, or pass the dependency in from above")


def test_no_package_cycles(graph):
    cycles = find_cycles(package_successors(graph))
    assert not cycles, f"{len(cycles)} cycles between packages:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_import_cycles(graph):
    cycles = find_cycles(graph.successors())
    assert not cycles, (
        f"{len(cycles)} import cycles (function-local imports count; break each one by moving the shared code "
        "down a layer, or by passing the dependency in):\n" + "\n".join(cycle_report(graph)))


def test_no_private_imports(graph):
    assert not graph.private, _failure(
        "imports of another module's private names", graph.private,
        "make the name public (drop the underscore) where it is shared, or move it to the module that uses it")


def test_no_dynamic_imports_of_the_package(graph):
    assert not graph.dynamic, _failure(
        "dynamic imports of tfcheck modules", graph.dynamic,
        "only tfcheck/checks/__init__.py, the battery loader, imports modules by name; import statically")


def test_every_import_of_the_package_resolves(graph):
    assert not graph.unresolved, _failure("imports of modules that do not exist", graph.unresolved,
                                          "a path left over from before the move?")


def test_the_battery_loader_reaches_every_check_module(graph):
    loaded = {e.target for e in graph.edges if e.source == "tfcheck.checks"}
    assert "tfcheck.checks.training.train_loss_at_init" in loaded
    assert all(m in loaded for m in graph.modules if m.startswith("tfcheck.checks."))


# --- the detector, on synthetic packages -----------------------------------------------------------------------

def make_package(tmp_path: Path, files: dict[str, str]) -> Path:
    """A package ``tfcheck`` under tmp_path with the given files (relative paths -> source); every folder
    gets an ``__init__.py`` unless one is given."""
    root = tmp_path / "tfcheck"
    for rel, source in {"__init__.py": "", **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, "utf-8")
    for folder in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        (folder / "__init__.py").touch()
    return root


def cycles_of(root: Path) -> list[list[str]]:
    return find_cycles(analyse(root).successors())


def test_detector_finds_a_module_level_cycle(tmp_path):
    root = make_package(tmp_path, {"a.py": "import tfcheck.b\n", "b.py": "from tfcheck.a import thing\n",
                                   "c.py": "from tfcheck import a\n"})
    graph = analyse(root)
    assert find_cycles(graph.successors()) == [["tfcheck.a", "tfcheck.b", "tfcheck.a"]]
    report = "\n".join(cycle_report(graph))
    assert "tfcheck/a.py:1: import tfcheck.b" in report and "tfcheck/b.py:1: from tfcheck.a import thing" in report


def test_detector_finds_a_cycle_through_a_function_local_import(tmp_path):
    root = make_package(tmp_path, {
        "engine/runner.py": "from tfcheck.model.subject import Subject\n",
        "model/subject.py": "class Subject:\n    def run(self):\n        from tfcheck.engine import runner\n"
                            "        return runner\n",
    })
    graph = analyse(root)
    assert find_cycles(graph.successors()) == [["tfcheck.engine.runner", "tfcheck.model.subject",
                                                "tfcheck.engine.runner"]]
    assert "tfcheck/model/subject.py:3 (inside a function): from tfcheck.engine import runner" in \
        "\n".join(cycle_report(graph))


def test_detector_reports_one_cycle_per_module_in_a_cycle(tmp_path):
    # the shape of explainers/shrinking <-> the mask checks: one hub, three cycles through it
    root = make_package(tmp_path, {
        "hub.py": "def f():\n    from tfcheck import x, y\n    import tfcheck.z\n",
        "x.py": "from tfcheck.hub import f\n", "y.py": "from tfcheck.hub import f\n",
        "z.py": "from . import hub\n",
    })
    assert cycles_of(root) == [["tfcheck.hub", "tfcheck.x", "tfcheck.hub"], ["tfcheck.hub", "tfcheck.y", "tfcheck.hub"],
                               ["tfcheck.hub", "tfcheck.z", "tfcheck.hub"]]


def test_detector_finds_a_longer_cycle_and_resolves_relative_imports(tmp_path):
    root = make_package(tmp_path, {"p/a.py": "from .b import x\n", "p/b.py": "from ..q import c\n",
                                   "q/c.py": "from tfcheck.p.a import y\n"})
    assert cycles_of(root) == [["tfcheck.p.a", "tfcheck.p.b", "tfcheck.q.c", "tfcheck.p.a"]]


def test_importing_a_submodule_is_no_edge_to_its_package_init(tmp_path):
    root = make_package(tmp_path, {"report/__init__.py": "from tfcheck.report.report import Report\n",
                                   "report/report.py": "import tfcheck.report.findings\n",
                                   "report/findings.py": "from tfcheck.report.status import Status\n",
                                   "report/status.py": ""})
    graph = analyse(root)
    assert find_cycles(graph.successors()) == []
    assert {(e.source, e.target) for e in graph.edges} == {
        ("tfcheck.report", "tfcheck.report.report"), ("tfcheck.report.report", "tfcheck.report.findings"),
        ("tfcheck.report.findings", "tfcheck.report.status")}


def test_a_re_exporting_package_init_counts_normally(tmp_path):
    root = make_package(tmp_path, {"report/__init__.py": "from tfcheck.report.report import Report\n",
                                   "report/report.py": "from tfcheck.ui.render import show\n",
                                   "ui/render.py": "from tfcheck.report import Report\n"})
    assert cycles_of(root) == [["tfcheck.report", "tfcheck.report.report", "tfcheck.ui.render", "tfcheck.report"]]


def test_detector_counts_imports_under_type_checking(tmp_path):
    root = make_package(tmp_path, {
        "a.py": "import tfcheck.b\n",
        "b.py": "from typing import TYPE_CHECKING\nimport typing\nif TYPE_CHECKING:\n    from tfcheck.a import A\n"
                "if typing.TYPE_CHECKING:\n    import tfcheck.a\n",
        "c.py": "import tfcheck.d\n",
        "d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    pass\nelse:\n    import tfcheck.c\n",
    })
    graph = analyse(root)
    assert find_cycles(graph.successors()) == [["tfcheck.a", "tfcheck.b", "tfcheck.a"], ["tfcheck.c", "tfcheck.d",
                                                                                        "tfcheck.c"]]
    assert "tfcheck/b.py:4 (type-only): from tfcheck.a import A" in "\n".join(cycle_report(graph))


@pytest.mark.parametrize("module,source", [
    # at module level
    ("report/report.py", "from tfcheck.ui.render import render_report\n"),
    # in a display dunder: no exemption
    ("report/report.py",
     "class Report:\n    def __str__(self):\n        from tfcheck.ui.render import render_report\n"),
    # type-only
    ("report/report.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tfcheck.ui import render\n"),
    # from the engine to the battery, inside a function
    ("engine/runner.py", "def run():\n    import tfcheck.checks.mask.causal\n"),
    # a model stage typed against the Subject, which sits above it
    ("model/trial/capacity.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                "    from tfcheck.model.subject import Subject\n"),
])
def test_detector_finds_upward_imports(tmp_path, module, source):
    files = {module: source, "ui/render.py": "", "checks/mask/causal.py": "", "model/subject.py": ""}
    upward = upward_imports(analyse(make_package(tmp_path, files)))
    assert [u.split(":")[0] for u in upward] == ["tfcheck/" + module]
    assert "a layer above it" in upward[0]


def test_detector_allows_imports_down_and_within_a_layer(tmp_path):
    root = make_package(tmp_path, {
        "ui/render.py": "from tfcheck.report.report import Report\nfrom tfcheck.ui import styles\n",
        "ui/styles.py": "",
        "report/report.py": "from tfcheck.display import text_view\nfrom tfcheck.errors import E\n",
        "display.py": "", "errors.py": "",
        "cli.py": "import tfcheck.checks.mask.causal\nimport tfcheck.api\n", "api.py": "",
        "checks/mask/causal.py": "from tfcheck.tools.shrinking import Property\n", "tools/shrinking.py": "",
    })
    assert upward_imports(analyse(root)) == []


def test_every_module_of_a_package_needs_a_layer(tmp_path):
    graph = analyse(make_package(tmp_path, {"newfolder/thing.py": ""}))
    with pytest.raises(KeyError, match="tfcheck.newfolder is in no layer"):
        [layer_of(m) for m in graph.modules]


def test_detector_finds_cycles_between_packages(tmp_path):
    # no module cycle, but the probe and model packages import each other
    root = make_package(tmp_path, {
        "model/observed.py": "from tfcheck.probe.recorder import Recording\n", "probe/recorder.py": "",
        "probe/recorded.py": "from tfcheck.model.subject import Subject\n", "model/subject.py": "",
        "api.py": "import tfcheck.errors\n", "errors.py": "import tfcheck.version\n", "version.py": "",
    })
    graph = analyse(root)
    assert find_cycles(graph.successors()) == []
    assert find_cycles(package_successors(graph)) == [["tfcheck.model", "tfcheck.probe", "tfcheck.model"]]


def test_detector_finds_private_imports(tmp_path):
    root = make_package(tmp_path, {
        "a.py": "_hidden = 1\n__version__ = '0'\ndef _f(): pass\n",
        "b.py": "from tfcheck.a import _hidden, __version__\n",
        "c.py": "def g():\n    from tfcheck.a import _f as f\n    return f\n",
        "d.py": "import tfcheck.a as a\nx = a._hidden\ny = a.__name__\n",
        "e.py": "from tfcheck import a\nimport tfcheck.a\nx = a._f\ny = tfcheck.a._hidden\n",
        "f.py": "class C:\n    _own = 1\n    def m(self):\n        return self._own + C._own\n",
        "g.py": "from . import _private_module\n",
        "_private_module.py": "",
    })
    private = analyse(root).private
    assert sorted(p.split(":")[0] + ":" + p.split(":")[1] for p in private) == [
        "tfcheck/b.py:1", "tfcheck/c.py:2", "tfcheck/d.py:2", "tfcheck/e.py:3", "tfcheck/e.py:4", "tfcheck/g.py:1"]
    assert "tfcheck/b.py:1: from tfcheck.a import _hidden (a private name of tfcheck.a)" in private
    assert not any("__version__" in p for p in private)


def test_detector_finds_dynamic_imports_except_the_battery_loader(tmp_path):
    root = make_package(tmp_path, {
        "a.py": "import importlib\nm = importlib.import_module('tfcheck.b')\n",
        "b.py": "def f(name):\n    __import__(f'tfcheck.{name}')\n    import importlib\n"
                "    return importlib.import_module('torch')\n",
        "checks/__init__.py": "import importlib, pkgutil\n"
                              "for m in pkgutil.walk_packages(__path__, prefix=f'{__name__}.'):\n"
                              "    importlib.import_module(m.name)\n",
        "checks/shape/forward.py": "from tfcheck.engine.registry import check\n",
        "engine/registry.py": "",
    })
    graph = analyse(root)
    assert [d.split(":")[0] for d in graph.dynamic] == ["tfcheck/a.py", "tfcheck/b.py"]
    edges = {(e.source, e.target) for e in graph.edges}
    assert ("tfcheck.a", "tfcheck.b") in edges  # a constant name is an edge too
    assert {("tfcheck.checks", "tfcheck.checks.shape"), ("tfcheck.checks", "tfcheck.checks.shape.forward")} <= edges


def test_the_battery_loader_closes_cycles_through_the_checks(tmp_path):
    root = make_package(tmp_path, {
        "checks/__init__.py": "import importlib\n",
        "checks/mask/causal.py": "from tfcheck.explainers.shrinking import search\n",
        "explainers/shrinking.py": "def search():\n    import tfcheck.checks\n",
    })
    assert cycles_of(root) == [["tfcheck.checks", "tfcheck.checks.mask.causal", "tfcheck.explainers.shrinking",
                                "tfcheck.checks"]]


def test_detector_reports_unresolved_and_unparsable_modules(tmp_path):
    root = make_package(tmp_path, {"a.py": "import tfcheck.gone\nfrom tfcheck.old.place import x\n",
                                   "b.py": "def broken(:\n"})
    graph = analyse(root)
    assert [u.split(":")[1] for u in graph.unresolved] == ["1", "2"]
    assert [u.split(":")[0] for u in graph.unparsable] == ["tfcheck/b.py"]
