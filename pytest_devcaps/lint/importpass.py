"""LibCST's import visitors, run on only what they can change: the same result as running them
on the whole module, without copying and walking a long file three times each.

- :func:`add_imports`: ``AddImportsVisitor`` reads and writes only the module's first
  statements (a docstring or ``__strict__``, the block of import lines at the top and the
  statement after it, which may get a blank line); it is given those, and the rest of the
  body is put back after them as it was.
- :func:`remove_imports`: ``RemoveImportsVisitor`` needs LibCST's scope analysis of the whole
  file only where the fate of an import is in doubt. Where its name is bound once in the whole
  file, by that import at module level, the import surely stays when the name is read somewhere
  (the removal is dropped) and surely goes when it is read nowhere, not even in a string
  (``__all__``, string annotations): then the visitor is run on the top-level import lines alone
  (the other statements replaced by a place holder), where it decides the same. Anything less
  certain (a dotted ``import a.b``, a name bound twice, a nested import) is left to the
  visitor over the whole module.

Imported only through :mod:`pytest_devcaps.lint.transform` (LibCST is the ``lint`` extra).
"""

from __future__ import annotations

import ast
from collections import Counter
from typing import Optional, Tuple

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor

Removal = Tuple[str, Optional[str], Optional[str]]  # (module, name or None, asname), as LibCST takes it


def _import_line(statement: cst.BaseStatement) -> bool:
    """The statements ``AddImportsVisitor`` counts as its import block: one import a line."""
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
        and isinstance(statement.body[0], (cst.Import, cst.ImportFrom))


def add_imports(context: CodemodContext, module: cst.Module) -> cst.Module:
    """``AddImportsVisitor(context).transform_module(module)``, walking only the head."""
    body = list(module.body)
    end = 1  # the first statement, a docstring or not, then the imports after it
    while end < len(body) and _import_line(body[end]):
        end += 1
    end = min(end + 1, len(body))  # and the statement after them
    head = AddImportsVisitor(context).transform_module(module.with_changes(body=body[:end]))
    return module.with_changes(body=[*head.body, *body[end:]])


class _Uses:
    """What the file binds and reads, to know an import's fate before LibCST's scope analysis."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.bound: Counter[str] = Counter()  # every name the file may bind (a superset)
        self.read: set[str] = set()
        self.strings: list[str] = []  # ``__all__`` entries and string annotations are in these
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                if isinstance(node.ctx, ast.Load):
                    self.read.add(node.id)
                else:
                    self.bound[node.id] += 1
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                self.bound.update(node.names)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                self.strings.append(node.value)
            for field in ("name", "asname", "arg", "rest"):  # a keyword argument's name counts too
                value = getattr(node, field, None)
                if isinstance(value, str):
                    self.bound[value] += 1
                    if "." in value:
                        self.bound[value.split(".")[0]] += 1

    def _only_binding(self, removal: Removal) -> str | None:
        """The name the import binds, when that import, at module level, is its only binding."""
        name = _bound_name(removal)
        if name is None or self.bound[name] != 1 or not _imported_at_top(self.tree, removal):
            return None
        return name

    def surely_read(self, removal: Removal) -> bool:
        name = self._only_binding(removal)
        return name is not None and name in self.read

    def surely_unread(self, removal: Removal) -> bool:
        name = self._only_binding(removal)
        return name is not None and name not in self.read and not any(name in s for s in self.strings)


def _bound_name(removal: Removal) -> str | None:
    module, name, asname = removal
    if asname:
        return asname
    if name is not None:
        return name
    return None if "." in module else module  # ``import a.b`` binds ``a``: left to LibCST


def _imported_at_top(tree: ast.Module, removal: Removal) -> bool:
    module, name, asname = removal
    for statement in tree.body:
        if isinstance(statement, ast.ImportFrom) and name is not None and statement.module == module \
                and not statement.level:
            if any(a.name == name and a.asname == asname for a in statement.names):
                return True
        elif isinstance(statement, ast.Import) and name is None:
            if any(a.name == module and a.asname == asname for a in statement.names):
                return True
    return False


def _visitor(removals: list[Removal]) -> RemoveImportsVisitor:
    context = CodemodContext()
    for module_name, name, asname in removals:
        RemoveImportsVisitor.remove_unused_import(context, module_name, name, asname)
    return RemoveImportsVisitor(context)


def remove_imports(module: cst.Module, removals: list[Removal], tree: ast.Module | None = None) -> cst.Module:
    """``RemoveImportsVisitor`` with ``removals`` scheduled, over ``module``: the same result.
    A removal of an import that is surely read is dropped (the visitor keeps it); when every
    other one is surely unread (and so goes), the visitor is run on the top-level import lines
    alone (in one small module), where it decides the same; otherwise on the whole module.
    ``tree``: ``module``'s code as parsed by ``ast`` where the caller has it (None: parsed here)."""
    try:
        uses = _Uses(tree if tree is not None else ast.parse(module.code))
    except SyntaxError:
        return _visitor(removals).transform_module(module) if removals else module
    removals = [r for r in removals if not uses.surely_read(r)]
    if not removals:
        return module
    plain = [m for m, name, _ in removals if name is None]  # the visitor keeps one alias a module
    if len(plain) != len(set(plain)) or PLACE in uses.read or not all(uses.surely_unread(r) for r in removals):
        return _visitor(removals).transform_module(module)
    # one small module: the import lines as they are, every other statement a place holder (the
    # visitor never removes one, and the names it decides on are read nowhere anyway)
    lines = [s if _holds_import(s) else _PLACE for s in module.body]
    kept = _visitor(removals).transform_module(module.with_changes(body=lines)).body
    others = iter(s for s in module.body if not _holds_import(s))
    return module.with_changes(body=[next(others) if _is_place(s) else s for s in kept])


PLACE = "__devcaps_place__"
_PLACE = cst.SimpleStatementLine(body=[cst.Expr(cst.Name(PLACE))])


def _holds_import(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) \
        and any(isinstance(s, (cst.Import, cst.ImportFrom)) for s in statement.body)


def _is_place(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
        and isinstance(statement.body[0], cst.Expr) and isinstance(statement.body[0].value, cst.Name) \
        and statement.body[0].value.value == PLACE
