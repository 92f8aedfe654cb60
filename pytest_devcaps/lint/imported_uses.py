"""Where a test file runs the CUDA-only names it imports from its project's modules: residue
that keeps the gate in front of it (``analyze``). Which names those are is
:mod:`pytest_devcaps.lint.project_imports`'s job (it reads other files; this module reads only the
file being analysed)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Iterator, Mapping

from pytest_devcaps.lint.records import Span
from pytest_devcaps.lint.regions import Function
from pytest_devcaps.lint.source import SourceFile


@dataclass(frozen=True)
class ImportedNames:
    """The test file's view: a reference as written there -> why running it is CUDA-only.

    ``names``: ``gpu_name`` / ``gpu_utils.gpu_name`` / a class whose methods are (naming a class
    runs it, as ``regions`` reads an in-file helper class); ``bases``: a class as written -> why
    every test of a class deriving from it is CUDA-only (a ``setUp`` it inherits);
    ``methods``: a class as written -> method -> why (``self.<method>()`` in a deriving class)."""

    names: Mapping[str, str] = field(default_factory=dict)
    bases: Mapping[str, str] = field(default_factory=dict)
    methods: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.names or self.bases or self.methods)


def cuda_only_uses(source: SourceFile, imported: ImportedNames) -> Iterator[tuple[Span, str]]:
    """Where ``source`` runs a CUDA-only name it imports (a reference to it, a base class whose
    hooks are, ``self.<method>`` of such a base's CUDA-only method in a deriving class)."""
    if not imported:
        return
    bases = {id(b) for node in ast.walk(source.tree) if isinstance(node, ast.ClassDef) for b in node.bases}
    for node in ast.walk(source.tree):
        written = reference(node)
        if written is not None and id(node) not in bases and written in imported.names:
            yield source.span(node), f"the imported {written!r}: {imported.names[written]}"
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                name = reference(base)
                if name is None:
                    continue
                for member in node.body:
                    if not isinstance(member, Function):
                        continue
                    if name in imported.bases:
                        yield source.span(member), f"the base class {name!r}: {imported.bases[name]}"
                    for call in ast.walk(member):
                        if isinstance(call, ast.Attribute) and isinstance(call.value, ast.Name) \
                                and call.value.id in ("self", "cls") \
                                and call.attr in imported.methods.get(name, {}):
                            yield source.span(call), (f"{name}.{call.attr} (inherited): "
                                                      f"{imported.methods[name][call.attr]}")


def reference(node: ast.AST) -> str | None:
    """``name`` / ``module.name`` / ``package.module.name`` as written, for a name read."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
        inner = reference(node.value)
        return f"{inner}.{node.attr}" if inner is not None else None
    return None
