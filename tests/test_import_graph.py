"""The package's import graph: no cycles, and no import from a lower stage to a higher one.

Every ``import`` / ``from ... import`` statement counts, including those inside functions and
``TYPE_CHECKING`` blocks. The stage order is written once, here, and in the README's pipeline
table: leaves < data < model < cpu < decoding < training < alignment < analysis < api, experiments < serving < cli.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "syntaxnmt"

# The rank of each top-level module or stage package; a module may import only modules of a
# lower rank, or modules of its own stage package (without a cycle).
STAGES: dict[str, float] = {
    "errors": 0,
    "textio": 1,
    "syntax": 1,
    "runtime": 1,
    "config": 2,
    "inputs": 3,
    "checkpoint": 3,
    "metrics": 3,
    "data": 4,
    "model": 5,
    "cpu": 5.5,  # CPU execution (syntaxnmt/cpu/): plugs into the model's seams (syntaxnmt.cpu.install), used by decoding and training; the model never imports it
    "decoding": 6,
    "training": 7,
    "alignment": 8,
    "analysis": 9,
    "api": 10,  # the Python API (syntaxnmt.Translator): translate, serve and the package's top use it
    "experiments": 10,
    "serving": 11,
    "cli": 12,
    "__main__": 13,
    "__init__": 13,  # the package itself: it re-exports the public API
}
MAX_TOP_LEVEL_MODULES = 12


def module_names() -> dict[str, Path]:
    """``{dotted name: file}`` of every module of the package (a C extension: its ``.c`` source)."""
    names = {}
    for path in [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.c")]:
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        names[name] = path
    return names


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules that ``name`` imports, anywhere in its file."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    if path.suffix == ".c":
        return found
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module for a in node.names]
        else:
            continue
        for target in targets:
            while target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in modules and target != name and target.startswith("syntaxnmt"):
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    modules = module_names()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def stage(name: str) -> str:
    parts = name.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    bad = []
    for a, targets in edges.items():
        for b in targets:
            sa, sb = stage(a), stage(b)
            if sb == "__init__" and a != "syntaxnmt.__main__":
                bad.append(f"{a} -> {b} (the package's public API)")
            elif sa != sb and STAGES[sb] >= STAGES[sa]:
                bad.append(f"{a} (stage {sa}, rank {STAGES[sa]}) -> {b} (stage {sb}, rank {STAGES[sb]})")
    return sorted(bad)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
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
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_every_module_belongs_to_a_stage():
    assert sorted({stage(n) for n in graph()} - set(STAGES)) == []


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_no_upward_imports():
    assert upward_imports(graph()) == []


def test_the_top_level_is_small():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def test_the_checker_finds_a_cycle_and_an_upward_import():
    edges = {"syntaxnmt.data.a": {"syntaxnmt.model.b"}, "syntaxnmt.model.b": {"syntaxnmt.data.a"}}
    assert cycles(edges) == [["syntaxnmt.data.a", "syntaxnmt.model.b"]]
    assert upward_imports(edges) == ["syntaxnmt.data.a (stage data, rank 4) -> syntaxnmt.model.b (stage model, rank 5)"]


def test_imports_inside_functions_count(tmp_path):
    (tmp_path / "syntaxnmt" / "data").mkdir(parents=True)
    f = tmp_path / "syntaxnmt" / "data" / "x.py"
    f.write_text("def f():\n    from syntaxnmt.training import loop\n    from ..model import y\n")
    modules = {"syntaxnmt.data.x": f, "syntaxnmt.training.loop": f, "syntaxnmt.model.y": f, "syntaxnmt.training": f, "syntaxnmt.model": f}
    assert imports_of("syntaxnmt.data.x", f, modules) == {"syntaxnmt.training.loop", "syntaxnmt.model.y"}


def test_the_model_never_imports_the_cpu_execution():
    """The CPU path plugs into the model (syntaxnmt.cpu.install); a model built by hand runs PyTorch's."""
    edges = graph()
    assert sorted(f"{a} -> {b}" for a, targets in edges.items() if stage(a) == "model" for b in targets if stage(b) == "cpu") == []
    assert any(stage(b) == "model" for b in edges["syntaxnmt.cpu"])
