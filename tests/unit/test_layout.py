"""The package's shape: layers, no import cycle, short files and functions, tests that mirror
the folders, no pickle on the wire.

Why a test: these are what keep the codebase one a newcomer can carry on (ARCHITECTURE.md);
each fails the build the moment a change breaks it, not at the next review. The layer order
is written once, in ARCHITECTURE.md's table, and read from there: the document and the rule
cannot drift apart.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "anvil_metrics"
TESTS = REPO / "tests" / "unit"
MAX_LINES = 500
MAX_FUNCTION_LINES = 80
# Functions longer than MAX_FUNCTION_LINES, each with the reason it may be: a table written
# as code reads better whole than cut into pieces. Empty is the goal; a new entry needs a
# reason a reviewer accepts.
LONG_FUNCTIONS: dict[str, str] = {}
# Modules without a test file of their own, each with where it is tested instead.
UNTESTED: dict[str, str] = {}
# Still to be cut or renamed (issue 27): these lists may only shrink.
LONG_FILES_LEFT: set[str] = set()
LONG_FUNCTIONS_LEFT: set[str] = set()
UNTESTED_LEFT: set[str] = set()


def _modules() -> dict[str, Path]:
    mods = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
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


def _edges() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(name, path, set(mods)) for name, path in mods.items()}


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


def layers() -> list[list[str]]:
    """The layer table of ARCHITECTURE.md, bottom up: each row's folders (`wire/`) and, in
    the first row, the root's value modules (`errors`)."""
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    table = text.split("## The layers, bottom up", 1)[1].split("\n\n", 2)[1]
    out = []
    for row in table.splitlines()[2:]:
        cell = row.split("|")[2]
        out.append(re.findall(r"`([a-z_]+)/?`", cell))
    return out


def layer_of(module: str, table: list[list[str]]) -> int:
    """The row of `anvil_metrics.<folder or root module>...` in the layer table."""
    parts = module.split(".")
    if len(parts) == 1:  # the package's own __init__: a face, above nothing
        return 0
    for i, row in enumerate(table):
        if parts[1] in row:
            return i
    raise AssertionError(f"{module}: not in ARCHITECTURE.md's layer table")


def against_the_layers(edges: dict[str, set[str]], table: list[list[str]]) -> list[str]:
    """`a -> b` for each import of a module from a higher layer, or of another module of
    the root's bottom row than a value module (the root imports only the root)."""
    bad = []
    for a, targets in sorted(edges.items()):
        if a == "anvil_metrics.__main__":  # `python -m anvil_metrics`: the CLI's door
            continue
        for b in sorted(targets):
            if b != "anvil_metrics" and layer_of(b, table) > layer_of(a, table):
                bad.append(f"{a} -> {b}")
    return bad


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_the_package():
    edges = _edges()
    assert sum(map(len, edges.values())) > 50  # the walk sees the imports at all
    assert "anvil_metrics.catalog" in edges["anvil_metrics.post.derive"]
    assert "anvil_metrics.post.rawpart" in edges["anvil_metrics.post.postprocess"]
    assert _cycles(edges) == []


def test_imports_inside_functions_are_seen(tmp_path: Path):
    (tmp_path / "m.py").write_text("def f():\n    from pkg import other\n")
    # (a module's own package is not an edge: importing a sibling loads it first anyway)
    assert _imports("pkg.m", tmp_path / "m.py", {"pkg.m", "pkg.other", "pkg"}) == {
        "pkg.other"}


def test_every_folder_is_in_the_layer_table_once():
    table = layers()
    named = [n for row in table for n in row]
    assert len(named) == len(set(named)), named
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    roots = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert folders | roots == set(named)
    assert set(table[0]) == roots, "the bottom row is the root's value modules"


def test_each_layer_imports_only_the_layers_below_it():
    table = layers()
    assert against_the_layers(_edges(), table) == []


def test_the_layer_rule_can_fail():
    table = [["errors"], ["wire"], ["post"]]
    edges = {"anvil_metrics.wire.x": {"anvil_metrics.post.y", "anvil_metrics.errors"},
             "anvil_metrics.post.y": {"anvil_metrics.wire.x"},
             "anvil_metrics.errors": {"anvil_metrics.wire.x"}}
    assert against_the_layers(edges, table) == [
        "anvil_metrics.errors -> anvil_metrics.wire.x",
        "anvil_metrics.wire.x -> anvil_metrics.post.y"]


def test_no_module_over_500_lines():
    long = {str(p.relative_to(REPO)): n for p in PACKAGE.rglob("*.py")
            if (n := p.read_text(encoding="utf-8").count("\n")) > MAX_LINES}
    assert {k: v for k, v in long.items() if k not in LONG_FILES_LEFT} == {}
    assert sorted(LONG_FILES_LEFT - set(long)) == [], "a listed file is short now"


def long_functions(path: Path, root: Path = REPO) -> dict[str, int]:
    """`file:function` -> lines, for each function (methods and nested ones too) longer
    than MAX_FUNCTION_LINES, its decorators and docstring included; `file` from `root`."""
    out = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines = node.end_lineno - first + 1
            if lines > MAX_FUNCTION_LINES:
                out[f"{path.relative_to(root)}:{node.name}"] = lines
    return out


def test_no_function_over_80_lines():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        found.update(long_functions(path))
    allowed = set(LONG_FUNCTIONS) | LONG_FUNCTIONS_LEFT
    assert {k: v for k, v in found.items() if k not in allowed} == {}
    assert sorted(allowed - found.keys()) == [], "a listed function is short now"


def test_the_function_rule_can_fail(tmp_path: Path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n" + "    x = 1\n" * (MAX_FUNCTION_LINES - 1)
                 + "def g():\n" + "    x = 1\n" * MAX_FUNCTION_LINES)
    assert long_functions(f, tmp_path) == {"m.py:g": MAX_FUNCTION_LINES + 1}


def test_unit_tests_mirror_the_package():
    """tests/unit/<folder>/test_<module>[_<topic>].py for each module of a folder (the root's
    modules: tests/unit/test_<module>...): a newcomer finds a module's tests by its path, and
    a module without tests of its own shows here."""
    tests = {p.relative_to(TESTS) for p in TESTS.rglob("test_*.py")}
    modules = {p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py")
               if p.stem not in ("__init__", "__main__")}
    by_folder: dict[Path, set[str]] = {}
    for m in modules:
        by_folder.setdefault(m.parent, set()).add(m.stem)

    def subject(test: Path) -> str | None:
        """The module a test file is named for: the longest that its name starts with."""
        stem = test.stem.removeprefix("test_")
        names = by_folder.get(test.parent, set())
        fits = [m for m in names if stem == m or stem.startswith(m + "_")]
        return max(fits, key=len) if fits else None

    orphans = {str(t) for t in tests if t.name != "test_layout.py" and subject(t) is None}
    assert sorted(orphans) == [], "name each test file for a module of its folder"
    covered = {(t.parent, subject(t)) for t in tests}
    untested = {str(m) for m in modules if (m.parent, m.stem) not in covered}
    allowed = set(UNTESTED) | UNTESTED_LEFT
    assert sorted(untested - allowed) == []
    assert sorted(allowed - untested) == [], "a listed module has its tests now"


def test_nothing_a_network_separates_is_pickled():
    """Master and workers exchange plain data (`cluster/wire.py`); no `pickle` in their code,
    comments and docstrings included (the wording of the acceptance: `grep pickle`)."""
    hits = []
    paths = sorted((PACKAGE / "cluster").glob("*.py"))
    for path in paths:
        for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            if "pickle" in tok.string.lower():
                hits.append(f"{path.name}:{tok.start[0]}")
    assert paths, "the distributed modules are where they were"
    assert hits == []
