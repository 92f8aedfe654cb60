"""The marks pytest would see on a test, read from the objects themselves (``pytestmark`` of the
function, every class of its MRO and its module), for code that runs without pytest's
collection: the unittest bridge. ``Mark`` is pytest's mark record, the one type every mark
reader of ours takes."""

from __future__ import annotations

import sys
from typing import Any

from pytest import Mark

__all__ = ["Mark", "marks_of"]


def _module_marks(obj: Any) -> list[Mark]:
    return _unpack(getattr(sys.modules.get(getattr(obj, "__module__", "") or ""), "pytestmark", []))


def _unpack(value: Any) -> list[Mark]:
    values = value if isinstance(value, list) else [value]
    unpacked = (getattr(v, "mark", v) for v in values)
    return [mark for mark in unpacked if isinstance(mark, Mark)]


def marks_of(function: Any, cls: type | None) -> list[Mark]:
    """The marks pytest would see on this test, closest first: the function's, its class's
    (every class of its MRO, as pytest reads them) and its module's."""
    marks = _unpack(getattr(function, "pytestmark", []))
    if cls is not None:
        for klass in reversed(cls.__mro__):
            marks += _unpack(klass.__dict__.get("pytestmark", []))
    return marks + _module_marks(cls if cls is not None else function)
