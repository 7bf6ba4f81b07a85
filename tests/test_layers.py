"""The layer rule, checked on the source: lower layers never import higher ones, and no import cycles.

Layers, lowest first: wire -> capture -> verbs -> fabric -> tools -> live -> viz -> lab -> scapy -> cli
(docs/architecture.md).  The rule is the one the project's review applies
(``/work/shared/tools/imports.py``, not part of the repository): every ``import`` of an ``rdmalab``
module counts, also inside functions; imports under ``if TYPE_CHECKING:`` count for cycles but
not as upward imports; a package ``__init__`` that re-exports its children and is imported by
them is not a cycle.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "rdmalab"
LAYERS = ["wire", "capture", "verbs", "fabric", "tools", "live", "viz", "lab", "scapy", "cli"]


def _modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(PKG.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _target(name: str) -> str:
    """The module an imported name lives in (``rdmalab.wire.ib.BTH`` -> ``rdmalab.wire.ib``)."""
    while name and name not in MODULES:
        name = name.rsplit(".", 1)[0] if "." in name else ""
    return name


def _imports(module: str, path: Path) -> list[tuple[str, bool]]:
    """(imported rdmalab module, whether it is a type-only import) for every import in ``module``."""
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, type_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = type_only or (isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test))
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = module if is_pkg else module.rsplit(".", 1)[0]
                    for _ in range(child.level - 1):
                        base = base.rsplit(".", 1)[0]
                    mod = f"{base}.{child.module}" if child.module else base
                else:
                    mod = child.module or ""
                names = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod for a in child.names]
            else:
                visit(child, inner)
                continue
            for n in names:
                t = _target(n) if n.startswith("rdmalab") else ""
                if t and t != module:
                    found.append((t, type_only))

    visit(tree, False)
    return found


GRAPH: dict[str, set[str]] = defaultdict(set)
UPWARD: list[str] = []


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


for _m, _p in MODULES.items():
    for _t, _type_only in _imports(_m, _p):
        GRAPH[_m].add(_t)
        a, b = _layer(_m), _layer(_t)
        if not _type_only and a is not None and b is not None and b > a:
            UPWARD.append(f"{_m} -> {_t}")


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(set(MODULES) | set(graph)):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    real = []
    for comp in out:  # drop a package's own __init__ (the re-export idiom); keep what still loops
        inner = [x for x in comp if not any(y.startswith(x + ".") for y in comp)]
        if len(inner) > 1 and any(graph.get(x, set()) & set(inner) for x in inner):
            real.append(comp)
    return real


def test_the_layers_are_the_top_level_packages() -> None:
    subpackages = {p.name for p in PKG.iterdir() if (p / "__init__.py").exists()}
    assert subpackages == set(LAYERS), "a new subpackage needs its place in LAYERS and docs/architecture.md"


def test_no_upward_imports() -> None:
    assert not UPWARD, "lower layers import higher ones:\n" + "\n".join(sorted(set(UPWARD)))


def test_no_import_cycles() -> None:
    found = _cycles(GRAPH)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


@pytest.mark.parametrize(("source", "expect"), [
    ("from rdmalab.viz import ladder\n", ["rdmalab.viz.ladder"]),
    ("from ..wire.ib import BTH\n", ["rdmalab.wire.ib"]),
    ("def f():\n    import rdmalab.cli.decode\n", ["rdmalab.cli.decode"]),
])
def test_the_checker_sees_imports(tmp_path: Path, source: str, expect: list[str]) -> None:
    # the checker itself: module-level, relative and function-level imports are all found
    path = tmp_path / "mod.py"
    path.write_text(source)
    assert [t for t, _ in _imports("rdmalab.fabric.mod", path)] == expect


def test_the_checker_finds_a_cycle() -> None:
    graph = {"rdmalab.lab.core": {"rdmalab.lab.checkers.x"}, "rdmalab.lab.checkers.x": {"rdmalab.lab.core"}}
    assert _cycles(graph) == [["rdmalab.lab.checkers.x", "rdmalab.lab.core"]]
