"""The package's shape: no import cycle, no module over 600 lines, no pickle on the wire.

Why a test: these are what keep the codebase one a newcomer can carry on (ARCHITECTURE.md);
each fails the build the moment a change breaks it, not at the next review.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "anvil_metrics"
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    mods = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    return mods


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules `name` imports anywhere in its file (function bodies too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        found |= {t for t in targets if t in known and t != name
                  and not name.startswith(t + ".")}
    return found


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return groups


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_the_package():
    mods = _modules()
    known = set(mods)
    edges = {name: _imports(name, path, known) for name, path in mods.items()}
    assert sum(map(len, edges.values())) > 50  # the walk sees the imports at all
    assert "anvil_metrics.catalog" in edges["anvil_metrics.post.derive"]
    assert "anvil_metrics.post.rawpart" in edges["anvil_metrics.post.postprocess"]
    assert _cycles(edges) == []


def test_imports_inside_functions_are_seen(tmp_path: Path):
    (tmp_path / "m.py").write_text("def f():\n    from pkg import other\n")
    # (a module's own package is not an edge: importing a sibling loads it first anyway)
    assert _imports("pkg.m", tmp_path / "m.py", {"pkg.m", "pkg.other", "pkg"}) == {
        "pkg.other"}


def test_no_module_over_600_lines():
    long = {str(p.relative_to(PACKAGE.parent)): n for p in PACKAGE.rglob("*.py")
            if (n := p.read_text(encoding="utf-8").count("\n")) > MAX_LINES}
    assert long == {}


def test_nothing_a_network_separates_is_pickled():
    """Master and workers exchange plain data (`dist_wire.py`); no `pickle` in their code,
    comments and docstrings included (the wording of the acceptance: `grep pickle`)."""
    hits = []
    for path in sorted((PACKAGE / "dist").glob("*.py")):
        for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            if "pickle" in tok.string.lower():
                hits.append(f"{path.name}:{tok.start[0]}")
    assert sorted((PACKAGE / "dist").glob("*.py")), "the distributed modules are where they were"
    assert hits == []


def test_test_files_have_unique_basenames():
    """pytest imports test files by basename (tests/ has no packages): two files of one name
    in different folders stop the whole collection (it happened: test_restoration.py)."""
    tests = Path(__file__).resolve().parents[1]
    names = [p.name for p in tests.rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []
