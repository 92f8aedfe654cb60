"""One way for a package to serve names imported on first use (PEP 562).

A package that must stay cheap to import (the plugin is autoloaded into every pytest session; a
probe child or a rank imports the package before torch) declares where each public name lives and
hands the table to :func:`lazy_names`::

    __getattr__, __dir__ = lazy_names(__name__, {"merge": ".fleet", "render_html": ".html:render"})

A target is ``module`` or ``module:attribute`` (the attribute defaults to the exported name); a
module that starts with ``.`` is relative to the package. ``tests/test_architecture.py`` resolves
every table, so a moved module cannot leave a stale entry behind.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Mapping


def target(package: str, name: str, where: str) -> tuple[str, str]:
    """(absolute module, attribute) of one table entry."""
    module, _, attribute = where.partition(":")
    if module.startswith("."):
        module = package + module
    return module, attribute or name


def lazy_names(
    package: str, table: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` serving ``table``'s names on first use."""

    def __getattr__(name: str) -> Any:
        where = table.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attribute = target(package, name, where)
        return getattr(importlib.import_module(module), attribute)

    def __dir__() -> list[str]:
        # The module's own names too: pluggy finds a plugin's hooks (``pytest_addhooks``) by dir().
        return sorted(set(vars(sys.modules[package])) | set(table))

    return __getattr__, __dir__
