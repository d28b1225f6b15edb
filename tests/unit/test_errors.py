"""errors: each exception's one line and exit code, as the CLI prints them.

Why: the CLI prints `str(exc)` and exits with `exc.exit_code`; a message that loses the
field, the value or the fix leaves the user with nothing to act on.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from anvil_metrics import errors
from anvil_metrics.errors import (
    MISSING,
    AnvilError,
    RawFileError,
    ScenarioError,
    TransportUnsupported,
    UsageError,
    VerifyError,
    WireError,
    shorten,
)


def test_exit_codes_follow_the_hierarchy() -> None:
    assert AnvilError("x").exit_code == 1
    assert UsageError("x").exit_code == 2
    assert ScenarioError("f", 1, "y").exit_code == 2
    assert TransportUnsupported("1", "a", ">=2").exit_code == 2
    assert isinstance(RawFileError("p", "r"), AnvilError)
    assert not isinstance(RawFileError("p", "r"), UsageError)


def test_scenario_error_names_source_field_value_and_what_is_allowed() -> None:
    e = ScenarioError("rate", "fast", "a number > 0")
    assert str(e) == "scenario: rate = 'fast' is not allowed; use a number > 0"
    assert (e.field, e.value, e.allowed, e.source) == ("rate", "fast", "a number > 0", None)


def test_raw_file_error_names_the_line_and_the_fix() -> None:
    assert str(RawFileError("r.jsonl", "bad json", line=3, fix="rerun")) == (
        "cannot read raw records r.jsonl:3: bad json; rerun")
    assert str(RawFileError("r.jsonl", "empty")) == "cannot read raw records r.jsonl: empty"


@pytest.mark.parametrize(("value", "want"), [
    (b"secret", "<6 bytes>"),
    ({"a": 1}, "<a dict of 1 field>"),
    ({}, "<a dict of 0 fields>"),
    ("ab", "'ab'"),
    ("x" * 100, "'" + "x" * 56 + "..."),
])
def test_shorten(value: object, want: str) -> None:
    assert shorten(value) == want


def test_wire_error_shows_a_missing_field_and_hides_a_secret() -> None:
    assert str(WireError("anvil_hello", "key", MISSING, "a string")) == (
        "anvil_hello: key is missing; expected a string")
    assert str(WireError("anvil_hello", "key", "hunter2", "a string", secret=True)) == (
        "anvil_hello: key = <a str> is not allowed; expected a string")


def test_verify_error_shows_the_first_problem_and_the_count() -> None:
    e = VerifyError(["a differs", "b differs", "c differs"], source="b.json")
    assert str(e).startswith("b.json failed verification: a differs (and 2 more); rebuild")
    assert e.problems == ["a differs", "b differs", "c differs"]
    assert "no details" in str(VerifyError([]))


def test_the_readmes_exit_code_table_is_the_exit_code_enum() -> None:
    """One table: the README's rows are exactly `ExitCode`'s values, in order."""
    import re
    from pathlib import Path

    from anvil_metrics.errors import ExitCode

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    table = readme.split("| exit code | meaning", 1)[1].split("\n\n", 1)[0]
    codes = [int(m) for m in re.findall(r"^\| (\d+) \|", table, re.M)]
    assert codes == [int(c) for c in ExitCode]


PACKAGE = Path(errors.__file__).resolve().parent
TREE_LINE = re.compile(r"^    (?P<lead>(?:[│ ]   )*(?:[├└]── )?)(?P<name>[A-Z]\w*)\s+"
                       r"(?:\(in `(?P<module>[\w.]+)`\))?")


def error_tree(doc: str) -> dict[str, tuple[str | None, str]]:
    """The class tree of errors.py's docstring: class -> (its parent in the tree, the module
    it lives in: `(in `x`)`, else "errors"). A class's depth is where its name starts."""
    out: dict[str, tuple[str | None, str]] = {}
    parents: list[str] = []
    lines = doc.split("    AnvilError", 1)[1].split("\n\n", 1)[0].splitlines()
    for line in ["    AnvilError" + lines[0], *lines[1:]]:
        m = TREE_LINE.match(line)
        if m is None or (out and not m["lead"].endswith("── ")):  # goes on the line above
            continue
        depth = len(m["lead"]) // 4
        parents[depth:] = [m["name"]]
        assert m["name"] not in out, f"{m['name']} twice in the tree"
        out[m["name"]] = (parents[depth - 1] if depth else None, m["module"] or "errors")
    return out


def error_classes(package: Path = PACKAGE) -> dict[str, tuple[str | None, str]]:
    """Every subclass of AnvilError in the package's source, read without importing it:
    class -> (its base, its module without the package's name)."""
    defined: dict[str, list[tuple[list[str], str]]] = {}
    for path in sorted(package.rglob("*.py")):
        module = ".".join(path.relative_to(package).with_suffix("").parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        alias = {a.asname: a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                 for a in node.names if a.asname}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = [b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
                         if isinstance(b, ast.Name | ast.Attribute)]
                defined.setdefault(node.name, []).append(
                    ([alias.get(b, b) for b in bases], module))
    found: dict[str, tuple[str | None, str]] = {"AnvilError": (None, "errors")}
    grown = True
    while grown:
        grown = False
        for name, places in defined.items():
            for bases, module in places:
                base = next((b for b in bases if b in found), None)
                if base is not None and name not in found:
                    assert len(places) == 1, f"{name}: two classes of that name"
                    found[name] = (base, module)
                    grown = True
    return found


def test_the_error_tree_lists_every_error_class():
    """errors.py's tree is the package's AnvilError family, each class under its base and
    with its module: read from the source, so a subclass in a module no test imports shows."""
    classes = error_classes()
    assert {"UsageError", "CampaignError", "TraceError"} <= set(classes)  # the walk sees them
    assert error_tree(errors.__doc__ or "") == classes


def test_every_loaded_error_class_is_in_the_tree():
    """The same, from the classes themselves: each AnvilError subclass, once its module is
    imported, is in the tree under its real base and module."""
    tree = error_tree(errors.__doc__ or "")
    for _, module in tree.values():
        importlib.import_module(f"anvil_metrics.{module}")
    todo, seen = [AnvilError], []
    while todo:
        cls = todo.pop()
        seen.append(cls)
        todo.extend(cls.__subclasses__())
        parent = next((b.__name__ for b in cls.__bases__ if issubclass(b, AnvilError)), None)
        assert tree.get(cls.__name__) == (parent, cls.__module__.removeprefix(
            "anvil_metrics.")), cls
    assert len(seen) == len(tree)


def test_the_tree_reader_can_fail(tmp_path: Path):
    doc = """x.

    AnvilError        base
    ├── UsageError    bad input
    │   └── OneError  (in `a.b`) one line
    │       Goes      on, at a depth's column
    └── OtherError    other
"""
    assert error_tree(doc) == {"AnvilError": (None, "errors"),
                               "UsageError": ("AnvilError", "errors"),
                               "OneError": ("UsageError", "a.b"),
                               "OtherError": ("AnvilError", "errors")}
    (tmp_path / "errors.py").write_text("class AnvilError(Exception): ...\n")
    (tmp_path / "m.py").write_text("from errors import AnvilError as E\n"
                                   "class A(E): ...\nclass B(A): ...\nclass C(ValueError): ...\n")
    family = {"AnvilError": (None, "errors"), "A": ("AnvilError", "m"), "B": ("A", "m")}
    assert error_classes(tmp_path) == family  # through an alias too
    (tmp_path / "m.py").write_text("import errors\nclass A(errors.AnvilError): ...\n"
                                   "class B(A): ...\nclass C(ValueError): ...\n")
    assert error_classes(tmp_path) == family
