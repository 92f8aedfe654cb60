"""Which helper functions can be given a device: a module-level function whose CUDA code needs
one (``def _make(): return Model().cuda()``), or that calls such a helper, gets a keyword-only
``device`` parameter when every use of it is a call from code that has a device (a pytest test
or function-scoped fixture, a function with a ``device`` parameter, another helper given one);
each caller then passes ``device=device``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from pytest_devcaps.lint.scopes import fixture_scope, parameters

Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Owner:
    """A function whose body may call a helper: ``has_device`` when it has a ``device`` or can
    take the fixture; ``helper`` when it is a module-level function (one we may thread)."""

    name: str
    node: Function
    has_device: bool
    helper: bool


def _owners(tree: ast.Module, without_device: Callable[[ast.AST], bool]) -> Iterator[Owner]:
    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield Owner(statement.name, statement, _takes_device(statement, pytest_style=True)
                        and not without_device(statement), True)
        elif isinstance(statement, ast.ClassDef):
            pytest_style = statement.name.startswith("Test") and not statement.bases
            for member in statement.body:
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield Owner(f"{statement.name}.{member.name}", member,
                                _takes_device(member, pytest_style=pytest_style) and not without_device(member),
                                False)


def _takes_device(function: Function, *, pytest_style: bool) -> bool:
    if "device" in parameters(function):
        return True
    scope = fixture_scope(function)
    return pytest_style and (scope == "function" or scope is None and function.name.startswith("test"))


def _calls(owner: Owner, names: set[str]) -> Iterator[tuple[str, bool]]:
    """(helper name, is a plain call without device=/**kwargs) for each use inside ``owner``."""
    plain = {id(n.func) for n in ast.walk(owner.node) if isinstance(n, ast.Call)
             and not any(k.arg is None or k.arg == "device" for k in n.keywords)}
    for node in ast.walk(owner.node):
        if isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, ast.Load):
            yield node.id, id(node) in plain


def threadable(tree: ast.Module, needing: Iterable[str], exclude: Iterable[str] = (),
               without_device: Callable[[ast.AST], bool] = lambda node: False) -> frozenset[str]:
    """The helpers (by name) to give a ``device`` parameter, from those whose code needs one;
    ``without_device``: functions that cannot lend one (a test a kept gate holds as it was)."""
    owners = {o.name: o for o in _owners(tree, without_device)}
    helpers = {n for n, o in owners.items() if o.helper and not o.has_device} - set(exclude)
    uses: dict[str, list[tuple[str, bool]]] = {n: [] for n in helpers}
    for owner in owners.values():
        for name, plain in _calls(owner, helpers):
            uses[name].append((owner.name, plain))
    outside = {n.id for s in tree.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
               for n in ast.walk(s) if isinstance(n, ast.Name)}
    chosen = set(needing) & helpers
    grown = True
    while grown:  # a helper that calls a chosen helper needs a device to pass on
        callers = {owner for name in chosen for owner, _ in uses[name] if owner in helpers}
        grown = not callers <= chosen
        chosen |= callers
    shrunk = True
    while shrunk:  # every use must be a plain call from code that has (or gets) a device
        keep = {name for name in chosen if name not in outside and uses[name] and all(
            plain and owner != name and (owner in chosen or owners[owner].has_device)
            for owner, plain in uses[name])}
        shrunk = keep != chosen
        chosen = keep
    return frozenset(chosen)
