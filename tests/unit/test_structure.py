"""The layout stays the one docs/architecture.md maps (issue 27): no import cycle among
tracekit's modules, at most 15 modules directly in ``tracekit/``, no module over 400 lines.

Static: the modules are parsed with :mod:`ast`, never imported. Every import counts, at the top
of a module, inside a function or under ``TYPE_CHECKING``: a function-level import from a
module that imports its caller back is a cycle all the same, only deferred."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Folders of the repository and the package each installs as (pyproject.toml's package-dir).
FOLDERS = {"tracekit": "tracekit", "analyses": "tracekit.analyses", "capture": "tracekit.capture"}
MAX_TOP_MODULES = 15
MAX_LINES = 400


def modules(suffix: str = ".py") -> dict[str, tuple[Path, bool]]:
    """``{dotted name: (file, is a package's __init__)}`` of every module of the three folders
    (``suffix=".c"``: the C extensions', built as ``tracekit.read._kineto``...)."""
    found = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob(f"*{suffix}")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            is_pkg = parts[-1] == "__init__"
            name = ".".join([package, *parts[:-1]] if is_pkg else [package, *parts])
            found[name] = (path, is_pkg)
    return found


def imported(name: str, path: Path, is_pkg: bool, known: set[str]) -> set[str]:
    """The modules of ``known`` that the module ``name`` imports, anywhere in its text: ``from
    P import n`` is module ``P.n`` when that is a module, else ``P`` itself."""
    package = name if is_pkg else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for a in node.names:
                sub = f"{base}.{a.name}"
                if sub in known:
                    out.add(sub)
                elif base in known:
                    out.add(base)
    out.discard(name)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_among_tracekits_modules():
    mods = modules()
    known = set(mods) | set(modules(".c"))  # an extension imports nothing of tracekit
    graph = {name: imported(name, path, is_pkg, known) for name, (path, is_pkg) in mods.items()}
    graph |= {name: set() for name in known - set(mods)}
    assert len(graph) > 80 and "tracekit.read.reader" in graph["tracekit.analysis"]
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_finds_a_deferred_cycle(tmp_path):
    """The check can fail: a function-level import that closes a circle is found."""
    (tmp_path / "a.py").write_text("import x\n\ndef f():\n    from . import b\n")
    (tmp_path / "b.py").write_text("from .a import f\n")
    (tmp_path / "c.py").write_text("from . import a\n")
    known = {"p.a", "p.b", "p.c", "x"}
    graph = {f"p.{m}": imported(f"p.{m}", tmp_path / f"{m}.py", False, known) for m in "abc"}
    assert graph == {"p.a": {"x", "p.b"}, "p.b": {"p.a"}, "p.c": {"p.a"}}
    assert cycles(graph | {"x": set()}) == [["p.a", "p.b"]]


def test_at_most_fifteen_modules_at_the_top_of_tracekit():
    top = sorted(p.name for p in (ROOT / "tracekit").glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, f"{len(top)} modules directly in tracekit/: {top}"


def test_no_module_over_400_lines():
    long = []
    for name, (path, _) in modules().items():
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_LINES:
            long.append(f"{path.relative_to(ROOT)}: {n} lines")
    assert not long, "\n".join(long)
