"""The package's shape, checked statically (no import is executed): no import cycle between its
modules (imports inside functions included), stages import downward only, no module too long.

Stages, bottom to top, in the order data flows (docs/development.md, "Repository layout and architecture"):
metricbank -> collectors -> evaluators -> dashboards -> sdk.  A module may import its own stage
and the stages below it.  The one error hierarchy lives in the bottom stage
(``autometrics.metricbank.errors``) and imports nothing, so every stage may raise it.  Modules are
split by concern; the line cap only catches one that has grown several."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGES = ["metricbank", "collectors", "evaluators", "dashboards", "sdk"]
ERRORS = "autometrics.metricbank.errors"
MAX_LINES = 800

if sys.version_info < (3, 11):  # tomllib
    pytest.skip("needs Python 3.11's tomllib", allow_module_level=True)
import tomllib  # noqa: E402


def _modules() -> dict[str, Path]:
    pdir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    out: dict[str, Path] = {}
    for name, folder in sorted(pdir.items(), key=lambda kv: len(kv[0])):  # deeper mappings win
        for p in (ROOT / folder).rglob("*.py"):
            rel = p.relative_to(ROOT / folder).with_suffix("")
            parts = [x for x in rel.parts if x != "__init__"]
            if any(x in ("tests",) for x in parts):
                continue
            out[".".join([name, *parts])] = p
    # a file reachable from two mappings (sdk/ holds the root): keep its longest name
    by_file: dict[Path, str] = {}
    for m, p in out.items():
        if p not in by_file or len(m) > len(by_file[p]):
            by_file[p] = m
    return {m: p for p, m in by_file.items()}


def _graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        pkg = m if p.name == "__init__.py" else m.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in mods:
                    t = t.rsplit(".", 1)[0] if "." in t else ""
                # importing one's own package (its __init__) is not a cycle through the module
                if t and t != m and not m.startswith(t + "."):
                    graph[m].add(t)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for v in graph:
        if v not in index:
            visit(v)
    return found


MODS = _modules()
GRAPH = _graph(MODS)


def _stage(m: str) -> str:
    return MODS[m].relative_to(ROOT).parts[0]


def test_the_checker_sees_the_package():
    assert len(MODS) > 50
    assert "autometrics.evaluators.fit" in MODS and "autometrics.collectors.store" in MODS
    # lazy imports inside functions are seen: the fit entry point imports the judge pipeline lazily
    assert "autometrics.evaluators.judges.pipeline" in GRAPH["autometrics.evaluators.fit"]


def test_no_import_cycle_lazy_imports_included():
    assert _cycles(GRAPH) == []


def test_a_planted_cycle_is_found():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(g) == [["a", "b", "c"]]


def test_stages_import_downward_only():
    upward = sorted(f"{m} -> {t}" for m, ts in GRAPH.items() for t in ts
                    if STAGES.index(_stage(t)) > STAGES.index(_stage(m)))
    assert upward == []


def test_the_error_hierarchy_imports_nothing_of_the_package():
    assert GRAPH[ERRORS] == set()


def test_no_module_over_the_line_limit():
    long = {str(p.relative_to(ROOT)): n for p in MODS.values() if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}
