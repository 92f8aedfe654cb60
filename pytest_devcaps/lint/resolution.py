"""What a name means in a file: scope analysis over the imports, so that ``import torch.cuda as
tc; tc.synchronize()``, ``from torch.cuda import is_available`` and ``from torch import cuda``
read as ``torch.cuda.*`` while a local variable or parameter named ``torch`` (or ``tc``) is not
torch.

The finder reads the file with ``ast`` (the check needs no extra package), so this is the
scope analysis LibCST's ``QualifiedNameProvider`` does, on ``ast``: module-level and in-function
imports bind qualified names; a function that binds the same name (a parameter, an assignment,
a loop or ``with`` target, its own import) shadows it in its body. Only names that mean torch,
``torch.cuda*`` or one of :data:`TRACKED_FUNCTIONS` are tracked: those are the ones the rules look up by qualified name.

:func:`qualified` is read by :func:`pytest_devcaps.lint.gating.dotted` while :func:`resolving`
is active (one file at a time, set by :func:`pytest_devcaps.lint.analyze.analyze`), and so is
:func:`file_binds` (whether the file binds a builtin's name anywhere, e.g. its own ``getattr``).
"""

from __future__ import annotations

import ast
import functools
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

from pytest_devcaps.lint import rules

SHADOWED = "<local>"
# Functions outside torch.cuda that rules look up by qualified name (lint.rules names them).
TRACKED_FUNCTIONS = frozenset({rules.CYCLES_PER_MS})
_TABLE: ContextVar[dict[int, str]] = ContextVar("devcaps_lint_names", default={})
_FILE: ContextVar[_File | None] = ContextVar("devcaps_lint_file", default=None)
Function = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _tracked(qualified: str) -> bool:
    return qualified == "torch" or qualified == "torch.cuda" or qualified.startswith("torch.cuda.") \
        or qualified in TRACKED_FUNCTIONS


def import_bindings(statements: list[ast.stmt]) -> dict[str, str]:
    """Local name -> qualified name for the imports among ``statements`` (not nested)."""
    bound: dict[str, str] = {}
    for node in statements:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    bound[head] = head
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return {name: q for name, q in bound.items() if _tracked(q)}


def _module_imports(tree: ast.Module) -> dict[str, str]:
    """Imports at module level, including those under ``if``/``try`` (not in functions/classes)."""
    found: list[ast.stmt] = []
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop(0)
        found.append(node)
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            stack.extend(getattr(node, "body", []) + getattr(node, "orelse", []) + getattr(node, "finalbody", []))
            for handler in getattr(node, "handlers", []):
                stack.extend(handler.body)
    return import_bindings(found)


def _own_nodes(function: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``function``'s body, its nested functions included."""
    if isinstance(function, ast.Lambda):
        yield from ast.walk(function.body)
        return
    for statement in getattr(function, "body", []):
        yield from ast.walk(statement)


def _locally_bound(function: ast.AST) -> set[str]:
    args = function.args  # type: ignore[attr-defined]
    names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    for node in _own_nodes(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _rebound(tree: ast.Module) -> set[str]:
    """Module-level names the module binds to something other than torch (``torch =
    FakeTorch()``, ``from mylib import fake as torch``); ``torch = pytest.importorskip("torch")``
    is torch."""
    names: set[str] = set()
    for statement in tree.body:
        if isinstance(statement, ast.Assign):
            value = statement.value
            importer = isinstance(value, ast.Call) and isinstance(value.func, (ast.Name, ast.Attribute)) and (
                getattr(value.func, "attr", getattr(value.func, "id", "")) in ("importorskip", "import_module")
                and value.args and isinstance(value.args[0], ast.Constant) and _tracked(str(value.args[0].value)))
            if not importer:
                names |= {t.id for t in statement.targets if isinstance(t, ast.Name)}
        elif isinstance(statement, ast.ImportFrom):
            names |= {a.asname or a.name for a in statement.names
                      if not _tracked(f"{statement.module}.{a.name}") and (a.asname or a.name) == "torch"}
    return names


def resolve_names(tree: ast.Module) -> dict[int, str]:
    """``id(Name node)`` -> what it means, for names bound to torch / torch.cuda* by an import
    (``SHADOWED`` where a function's own binding hides the import, or the module binds the
    name to something else)."""
    module = _module_imports(tree)
    table: dict[int, str] = {}
    rebound = _rebound(tree) & ({"torch"} | set(module))
    if rebound:
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in rebound:
                table[id(node)] = SHADOWED
        module = {k: v for k, v in module.items() if k not in rebound}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in module and module[node.id] != node.id:
            table[id(node)] = module[node.id]
    functions = [n for n in ast.walk(tree) if isinstance(n, Function)]
    for function in functions:  # outer functions first: an inner binding wins
        own_imports = import_bindings([n for n in _own_nodes(function) if isinstance(n, (ast.Import, ast.ImportFrom))])
        local = _locally_bound(function)
        for node in _own_nodes(function):
            if not isinstance(node, ast.Name):
                continue
            if node.id in own_imports:
                table[id(node)] = own_imports[node.id]
            elif node.id in local and (node.id in module or node.id == "torch"):
                table[id(node)] = SHADOWED
    return table


def bound_names(tree: ast.Module) -> frozenset[str]:
    """Every name the file binds anywhere, in any scope: assignment, loop, ``with``, walrus and
    ``del`` targets, parameters, ``def`` / ``class`` names, imports, ``except ... as`` names,
    ``match`` captures and ``type`` aliases. Names a star import brings are not known and not
    included: ``from m import *`` that exports a builtin's name is not assumed."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"}
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
    return frozenset(names)


class _File:
    """The file :func:`resolving` is reading; its bound names are collected on first use."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree

    @functools.cached_property
    def bound(self) -> frozenset[str]:
        return bound_names(self.tree)


def file_binds(name: str) -> bool:
    """Whether the file :func:`resolving` is reading binds ``name`` anywhere (then a builtin of
    that name may not be the builtin)."""
    current = _FILE.get()
    return current is not None and name in current.bound


@contextmanager
def resolving(tree: ast.Module) -> Iterator[None]:
    table, current = _TABLE.set(resolve_names(tree)), _FILE.set(_File(tree))
    try:
        yield
    finally:
        _FILE.reset(current)
        _TABLE.reset(table)


def qualified(node: ast.Name) -> str:
    """What ``node`` names: its qualified name when an import binds it, else its own name."""
    return _TABLE.get().get(id(node), node.id)
