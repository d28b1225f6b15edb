"""No attribute of the measuring path is set from outside its owner.

Why: an object whose fields anyone may set says nothing about when they change; a seam
that hands a value over is a constructor argument, a method or a property of the owner
(issue 46 made it so for the budget's hook, the master's coordinator, an observer's extras,
head and answer, SendStats). This walks every assignment in the folders a request passes
through (`wire/` to `runs/`) and finds each `x.attr = ...` whose `x` is not `self` or `cls`;
the few left are listed here with why they are allowed, so a new one fails until it is
either mended or listed.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "anvil_metrics"
MEASURING_PATH = ("wire", "prep", "load", "telemetry", "post", "live", "cluster", "runs")

# (module, the target's text up to its last dot or whole) → why it is allowed
ALLOWED: dict[tuple[str, str], str] = {
    ("post/heap.py", "mallopt"): "a foreign function's signature (ctypes)",
    ("live/memtrim.py", "trim"): "a foreign function's signature (ctypes)",
    ("post/catalogtypes.py", "Metrics.__doc__"): "a generated Struct's docstring",
    ("wire/transport.py", "silence.last_ns"): "the per-read stamp the Silence watchdog reads "
                                              "(the hot path: no call per read)",
    ("wire/client.py", "obs.last_bytes_ns"): "the per-block stamp the stuck-request watch "
                                             "reads (the hot path: no call per block)",
    ("cluster/master.py", "w"): "_Worker: the coordinator's own record of each worker",
    ("runs/plugin.py", "state"): "PluginState: the plugin's one documented mutable record",
    ("runs/plugin.py", "plugin_state(environment)"): "PluginState, as above",
    ("runs/plugin.py", "o"): "Locust's parsed options: the API key scrubbed after reading",
    ("runs/plugin.py", "environment.process_exit_code"): "Locust's own exit code field",
    ("runs/stopsignals.py", "environment.process_exit_code"): "Locust's own exit code field",
    ("runs/stopsignals.py", "env.process_exit_code"): "Locust's own exit code field",
    ("runs/stopsignals.py", "gevent.signal_handler"): "gevent's handler, wrapped",
    ("runs/locustfix.py", "*"): "the repairs to Locust: patches by design",
    ("runs/locustmain.py", "*"): "gevent's entry-point reading made one: a patch by design",
}


def outside_sets(path: Path) -> list[tuple[int, str]]:
    """(line, target) of each attribute set on something other than `self`/`cls`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(t, ast.Attribute) and not (
                        isinstance(t.value, ast.Name) and t.value.id in ("self", "cls")):
                    found.append((node.lineno, ast.unparse(t)))
    return found


def _allowed(module: str, target: str) -> bool:
    owner = target.rpartition(".")[0]
    return any((module, key) in ALLOWED for key in (target, owner, "*"))


def test_no_attribute_is_set_from_outside_its_owner() -> None:
    bad = [f"{path.relative_to(PACKAGE)}:{line}: {target}"
           for folder in MEASURING_PATH for path in sorted((PACKAGE / folder).glob("*.py"))
           for line, target in outside_sets(path)
           if not _allowed(str(path.relative_to(PACKAGE)), target)]
    assert bad == []


def test_the_rule_can_fail(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f(budget, obs):\n    budget.before_measured = g\n"
                      "    obs.http_status += 1\n    self.ok = 1\n")
    assert outside_sets(module) == [(2, "budget.before_measured"), (3, "obs.http_status")]
    assert not _allowed("live/control.py", "budget.before_measured")
