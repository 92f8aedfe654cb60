"""The package's shape: no import cycles (imports inside functions count) and short functions."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"pytest_devcaps": ROOT / "pytest_devcaps", "devcaps_kernels": ROOT / "kernels"}
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for the package and the kernels (suites are test code)."""
    found: dict[str, Path] = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if "suites" in parts:
                continue
            name = ".".join((package, *parts))
            found[name.removesuffix(".__init__")] = path
    return found


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Modules of ours that ``name`` imports anywhere in its body (functions included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:  # `from pkg import submodule` imports the submodule
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in known else base)
    # Importing a.b.c runs a/__init__ and a/b/__init__ first; those are edges of Python's
    # making, not of this module's code, so only the named module counts.
    return {t for t in targets if t in known and t != name}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        if state.get(node) == 1:
            return path[path.index(node):] + [node]
        if state.get(node) == 2:
            return None
        state[node] = 1
        for target in sorted(graph[node]):
            found = visit(target, [*path, node])
            if found:
                return found
        state[node] = 2
        return None

    for node in sorted(graph):
        found = visit(node, [])
        if found:
            return found
    return None


def test_no_import_cycles() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert "pytest_devcaps.registry.build" in graph["pytest_devcaps.registry"]  # the walk sees imports
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_kernels_do_not_import_the_test_plugin() -> None:
    modules = _modules()
    for name, path in modules.items():
        if name.startswith("devcaps_kernels"):
            plugin_imports = {t for t in _imports(name, path, modules) if t.startswith("pytest_devcaps")}
            assert not plugin_imports, (name, plugin_imports)


def test_no_function_is_longer_than_sixty_lines() -> None:
    long: list[str] = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno is not None
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    assert not long, "functions over 60 lines:\n" + "\n".join(long)
