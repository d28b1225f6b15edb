"""The package's shape: layers, no import cycle, short files and functions, tests that mirror
the folders, no pickle on the wire; and its words: every module in ARCHITECTURE.md's table,
each folder saying what it is for, prose that names only files and modules that exist.

Why a test: these are what keep the codebase one a newcomer can carry on (ARCHITECTURE.md);
each fails the build the moment a change breaks it, not at the next review. The layer order
is written once, in ARCHITECTURE.md's table, and read from there: the document and the rule
cannot drift apart.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import re
import tokenize
from collections.abc import Iterator
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


def row_modules(text: str | None = None) -> dict[str, set[str]]:
    """Each folder of the layer table -> the modules its row names (its "modules" cell)."""
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8") if text is None else text
    table = text.split("## The layers, bottom up", 1)[1].split("\n\n", 2)[1]
    out = {}
    for row in table.splitlines()[2:]:
        cells = row.split("|")
        for folder in re.findall(r"`([a-z_]+)/`", cells[2]):
            out[folder] = set(re.findall(r"`([a-z_0-9]+)`", cells[3]))
    return out


def rows_against_folders(rows: dict[str, set[str]], package: Path) -> list[str]:
    """`folder: module not in its row` and `folder: row names module, which is not there`."""
    bad = []
    for folder, named in sorted(rows.items()):
        have = {p.stem for p in (package / folder).glob("*.py")} - {"__init__", "__main__"}
        bad += [f"{folder}: {m} not in its row" for m in sorted(have - named)]
        bad += [f"{folder}: its row names {m}, which is not there" for m in sorted(named - have)]
    return bad


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


def test_every_module_is_in_its_folders_row():
    """ARCHITECTURE.md's table names each module of a folder in that folder's row, and only
    modules that are there: whoever opens a folder finds every file's job in the table, and a
    module added, renamed or removed without its row fails here."""
    rows = row_modules()
    assert len(rows) == len(layers()) - 1  # every folder's row read (the root's is above)
    assert rows_against_folders(rows, PACKAGE) == []


def test_the_row_rule_can_fail(tmp_path: Path):
    for f in ("a/x.py", "a/y.py", "a/__init__.py"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("")
    text = ("## The layers, bottom up\n\n| # | folder | modules | job |\n|---|---|---|---|\n"
            "| 1 | `a/` | `x` `z` | what they do |\n\nWhy this order\n")
    assert row_modules(text) == {"a": {"x", "z"}}
    assert rows_against_folders(row_modules(text), tmp_path) == [
        "a: y not in its row", "a: its row names z, which is not there"]


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

    orphans = {str(t) for t in tests
               if not t.name.startswith("test_layout") and subject(t) is None}
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


# Files outside this repository that the package's prose names, each with whose it is.
FOREIGN_FILES: dict[str, str] = {
    "solution.py": "the file a `coding` check's program is written to, in the sandbox",
    "vllm/benchmarks/serve.py": "vLLM's `vllm bench serve`, whose result file export writes",
    "vllm/v1/metrics/loggers.py": "vLLM's request metrics, cited by telemetry/engines.py",
    "vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py": "vLLM's NIXL metrics",
    "vllm/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py": "vLLM's offload "
    "metrics",
    "python/sglang/srt/metrics/collector.py": "SGLang's metrics, cited by telemetry/engines.py",
    **{f"llmdbenchmark/analysis/benchmark_report/{f}.py": "llm-d's Benchmark Report schema, "
       "cited by export/llmd.py" for f in ("schema_v0_2", "schema_v0_2_1", "base", "core")},
}
# Installed packages whose files the prose names by their path (`locust/runners.py`).
INSTALLED = ("locust",)
# Modules renamed or merged away: no prose names them, dotted (`dist_wire.MESSAGES`) or as a
# file (`dist_wire.py`, which the file check finds by itself). This list may only grow.
RETIRED = ("campaignchecks", "campaignrun", "dist", "dist_wire", "dist_worker",
           "jsonschemas", "rawfile", "summarychecks", "summaryio", "summarymd",
           "summarystats", "summaryverify")
# ... and as plain words, but for `dist` (also a scenario key's name: only its dotted form)
RETIRED_WORDS = re.compile(rf"\b({'|'.join(n for n in RETIRED if n != 'dist')})\b")
FILE_NAME = re.compile(r"[\w./-]*\w\.py\b")
DOTTED = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)`?")
NOT_MODULES = ("json", "jsonl", "md", "toml", "html", "py", "txt", "csv")


def prose(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of each docstring (module, class, function) and comment of a file."""
    source = path.read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            if (doc := ast.get_docstring(node, clean=False)) is not None:
                yield node.body[0].lineno, doc
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string


def _folders(package: Path) -> set[str]:
    return {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}


def file_problem(name: str, here: Path, package: Path = PACKAGE,
                 repo: Path = REPO) -> str | None:
    """Why `name`, a `*.py` named in the prose of `here` (a file of `package`), names no file
    or not one file, else None. A path (`post/verify.py`, `anvil_metrics/post/verify.py`,
    `benchmarks/soak.py`, `locust/runners.py`) must exist as written, from the package, the
    repository or an installed package; a bare name, in `here`'s folder (`here` itself is
    "this module") or, unless a folder of the package has its name (`campaign.py`), as the
    one file of that name in it."""
    if name in FOREIGN_FILES:
        return None
    if "/" in name:
        top = name.split("/", 1)[0]
        if top in INSTALLED:
            spec = importlib.util.find_spec(top)  # found, not imported: Locust patches gevent
            roots = [Path(d).parent for d in (spec.submodule_search_locations or [])] if spec \
                else []
        else:
            roots = [package, repo]
        rest = name.removeprefix(f"{package.name}/")
        return None if any((r / rest).is_file() for r in roots) else "no such file"
    if name == here.name:  # what it says of itself it says as "this module"
        return "names itself; another is meant? write its folder"
    if (here.parent / name).is_file():
        return None
    found = sorted(str(p.relative_to(package)) for p in package.rglob(name))
    if not found:
        return "no such file in the package"
    if len(found) > 1 or name.removesuffix(".py") in _folders(package):
        return f"which one? write its folder ({', '.join(found)}; or the folder {name[:-3]}/)"
    return None


def _top_names(path: Path) -> set[str]:
    """The names a module defines or imports at its top level."""
    out: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return out


def dotted_problem(ref: str, modules: dict[str, Path], here: str = "") -> str | None:
    """Why `ref`, a dotted name in backticks in the prose of module `here`, names no module
    or module attribute of the package, or None when it does or is not the package's.
    Checked: names that begin with the package, one of its folders or root modules
    (`post.stats.aggregate`, `catalog.ROW`), unless a module of `here`'s folder has it
    (`wire.MESSAGES` in `cluster/`), and any that begin with a retired module's name."""
    parts = ref.split(".")
    if parts[-1] in NOT_MODULES:  # a file: `live.json`, `summary.md`
        return None
    if parts[0] in RETIRED:
        return f"{parts[0]} is no module now"
    parts = parts[1:] if parts[0] == PACKAGE.name else parts
    folder = here.rpartition(".")[0]
    if f"{folder}.{parts[0]}" in modules and _resolve(folder, parts, modules) is None:
        return None  # (a neighbour's name that is not one may be a field's: `chat.completion`)
    if f"{PACKAGE.name}.{parts[0]}" not in modules:
        return None
    return _resolve(PACKAGE.name, parts, modules)


def _resolve(module: str, parts: list[str], modules: dict[str, Path]) -> str | None:
    """Why `parts`, read from `module` down, names no module or name it defines, or None."""
    parts = list(parts)
    while parts and f"{module}.{parts[0]}" in modules:
        module = f"{module}.{parts.pop(0)}"
    if not parts or parts[0] in _top_names(modules[module]):
        return None
    return f"{module} has no {parts[0]}"


def test_prose_names_files_and_modules_that_exist():
    """Every `*.py` and every dotted module path named in a docstring or comment of the
    package is one that exists (a moved module's old name in prose misleads whoever follows
    it): a file, in its folder or by its path; a module, or a name that module defines; and
    no retired module's name stands there, even as a plain word."""
    modules = _modules()
    bad = []
    named = 0
    for module, path in sorted(modules.items()):
        if path.name == "__init__.py":
            module += ".__init__"  # its folder is its own
        for line, text in prose(path):
            where = f"{path.relative_to(REPO)}:{line}"
            for name in FILE_NAME.findall(text):
                named += 1
                if (why := file_problem(name, path)) is not None:
                    bad.append(f"{where}: {name}: {why}")
            for ref in DOTTED.findall(text):
                if (why := dotted_problem(ref, modules, module)) is not None:
                    bad.append(f"{where}: `{ref}`: {why}")
            bad += [f"{where}: {w}: is no module now" for w in RETIRED_WORDS.findall(text)]
    assert named > 100  # the scan sees the prose at all
    assert bad == []


def test_the_prose_checks_can_fail(tmp_path: Path):
    pkg = tmp_path / "pkg"
    for f in ("a/x.py", "a/y.py", "b/y.py", "b/c.py", "c/__init__.py", "a/__init__.py",
              "b/__init__.py"):
        (pkg / f).parent.mkdir(parents=True, exist_ok=True)
        (pkg / f).write_text("")
    here = pkg / "a" / "x.py"
    assert file_problem("y.py", here, pkg, tmp_path) is None  # its own folder's
    assert file_problem("x.py", here, pkg, tmp_path).startswith("names itself")
    assert file_problem("b/y.py", here, pkg, tmp_path) is None
    assert file_problem("pkg/b/c.py", here, pkg, tmp_path) is None
    assert file_problem("y.py", pkg / "b" / "c.py", pkg, tmp_path) is None
    assert file_problem("c.py", pkg / "a" / "x.py", pkg, tmp_path).startswith("which one?")
    assert file_problem("gone.py", here, pkg, tmp_path) == "no such file in the package"
    assert file_problem("b/x.py", here, pkg, tmp_path) == "no such file"
    assert file_problem("locust/runners.py", here, pkg, tmp_path) is None
    assert file_problem("locust/nothing.py", here, pkg, tmp_path) == "no such file"
    modules = _modules()
    assert dotted_problem("post.stats.aggregate", modules) is None
    assert dotted_problem("anvil_metrics.catalog.ROW", modules) is None
    assert dotted_problem("client.saturated", modules) is None  # a document's field
    assert dotted_problem("post.stats.no_such_thing", modules) == (
        "anvil_metrics.post.stats has no no_such_thing")
    assert dotted_problem("dist_wire.MESSAGES", modules) == "dist_wire is no module now"
    assert RETIRED_WORDS.findall("as summaryio's (a dist table; summaryiox)") == ["summaryio"]
    assert dotted_problem("wire.MESSAGES", modules, "anvil_metrics.cluster.master") is None
    assert dotted_problem("wire.MESSAGES", modules, "anvil_metrics.post.verify") == (
        "anvil_metrics.wire has no MESSAGES")
    (pkg / "a" / "z.py").write_text('"""Says `x.py`."""\n\n\ndef f():\n    """`y.py`."""\n'
                                    '    return 1  # `gone.py`\n')
    assert [(line, FILE_NAME.findall(t)) for line, t in prose(pkg / "a" / "z.py")] == [
        (1, ["x.py"]), (5, ["y.py"]), (6, ["gone.py"])]


def test_each_folder_says_what_it_is_for():
    """Each folder's `__init__.py` opens with a sentence saying what the folder is for (a
    newcomer's first read), not its own name."""
    short = {}
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        first = doc.split("\n\n", 1)[0]
        if len(first.split()) < 8 or first.strip("`./ ").lower() == init.parent.name:
            short[init.parent.name] = first
    assert short == {}


def test_architecture_names_files_and_modules_that_exist():
    """ARCHITECTURE.md's names hold as the package's prose does: its dotted names
    (`post.stats.aggregate`, in the flow too) and its files (a bare name: the package's one
    file of that name, or a test helper beside conftest.py)."""
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    modules = _modules()
    bad = [f"{ref}: {why}" for ref in sorted(set(re.findall(
               rf"\b((?:{PACKAGE.name}\.)?[a-z_]+(?:\.[A-Za-z_]\w*)+)", text)))
           if (why := dotted_problem(ref, modules)) is not None]
    for name in sorted(set(FILE_NAME.findall(text))):
        if "/" in name or not (REPO / "tests" / name).is_file():
            if (why := file_problem(name, PACKAGE / "ARCHITECTURE.md")) is not None:
                bad.append(f"{name}: {why}")
    assert bad == []
