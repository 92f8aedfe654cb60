"""``devcaps lint``: find hardcoded device checks that keep a suite from running on other backends.

It reads Python files as syntax trees (strings and comments never match) and reports:

- ``DC001`` a call of ``torch.cuda.is_available`` (ask the registry or ``torch.accelerator``)
- ``DC002`` a call of a tensor's or module's ``cuda`` method (move with ``.to(device)``)
- ``DC003`` a ``"cuda"`` / ``"cuda:N"`` device literal in ``device=`` or ``torch.device(...)``
- ``DC004`` any other ``torch.cuda.*`` call (``torch.accelerator`` or ``pytest_devcaps.runtime``)

A line ending in ``# devcaps: allow`` is exempt (a backend adapter that implements CUDA support).
"""

from __future__ import annotations

import ast
import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence

ALLOW_PRAGMA = "# devcaps: allow"
DEVICE_LITERALS = ("cuda",)


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    column: int
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}: {self.code} {self.message}"


def _dotted(node: ast.AST) -> str:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _is_device_literal(node: ast.AST) -> bool:
    if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
        return False
    kind = node.value.split(":", 1)[0]
    return kind in DEVICE_LITERALS


class _Visitor(ast.NodeVisitor):
    def __init__(self, path: str) -> None:
        self.path = path
        self.findings: list[Finding] = []

    def _add(self, node: ast.AST, code: str, message: str) -> None:
        self.findings.append(Finding(self.path, getattr(node, "lineno", 0),
                                     getattr(node, "col_offset", 0) + 1, code, message))

    def visit_Call(self, node: ast.Call) -> None:
        name = _dotted(node.func)
        if name.endswith("cuda.is_available"):
            self._add(node, "DC001", f"{name}() hardcodes CUDA; ask the capability registry "
                      "(devcaps fixture, requires_capability) or torch.accelerator")
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "cuda" and not node.args:
            self._add(node, "DC002", "calling .cuda hardcodes the device; use .to(device)")
        elif name.startswith("torch.cuda."):
            self._add(node, "DC004", f"{name}() is CUDA-only; use torch.accelerator or "
                      "pytest_devcaps.runtime")
        if name in ("torch.device", "device") and node.args and _is_device_literal(node.args[0]):
            self._add(node.args[0], "DC003", f"device literal {node.args[0].value!r}; "  # type: ignore[attr-defined]
                      "use the device fixture")
        for keyword in node.keywords:
            if keyword.arg in ("device", "device_type") and _is_device_literal(keyword.value):
                self._add(keyword.value, "DC003", f"device literal {keyword.value.value!r}; "  # type: ignore[attr-defined]
                          "use the device fixture")
        self.generic_visit(node)


def lint_source(source: str, path: str = "<string>") -> list[Finding]:
    """Findings in one file's source, minus lines carrying the allow pragma."""
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        return [Finding(path, exc.lineno or 0, exc.offset or 0, "DC000", f"cannot parse: {exc.msg}")]
    visitor = _Visitor(path)
    visitor.visit(tree)
    lines = source.splitlines()
    return [f for f in visitor.findings
            if not (0 < f.line <= len(lines) and lines[f.line - 1].rstrip().endswith(ALLOW_PRAGMA))]


def iter_python_files(paths: Iterable[str | Path], exclude: Sequence[str] = ()) -> Iterator[Path]:
    for root in paths:
        root = Path(root)
        candidates = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for path in candidates:
            text = path.as_posix()
            if any(fnmatch.fnmatch(text, pattern) or fnmatch.fnmatch(path.name, pattern) for pattern in exclude):
                continue
            yield path


def lint_paths(paths: Iterable[str | Path], exclude: Sequence[str] = ()) -> list[Finding]:
    findings: list[Finding] = []
    for path in iter_python_files(paths, exclude):
        findings.extend(lint_source(path.read_text(encoding="utf-8"), path.as_posix()))
    return findings
