"""How a test is named in an expectations file: the forms of one test's id and the patterns
that select tests.

A test is known by its node id (``tests/test_ops.py::TestOps::test_add[cpu-float32]``) and by
every shorter form a person writes: the path from any ``/`` on (``test_ops.py::...``), any run
of its ``::`` parts (``TestOps::test_add``, ``test_add``, ``TestOps``), with or without the
parametrization in brackets, and the file or class alone (every test in it). A test made by
PyTorch's ``instantiate_device_type_tests`` (class ``TestFooCUDA``, test
``test_bar_cuda_float32``) is also known by its generic names, as its source writes them:
``TestFoo::test_bar`` selects every instance on every device type and dtype, and
``TestFoo::test_bar_cuda_float32`` or ``TestFooCUDA::test_bar`` one of them.

A pattern is one of these forms, or a glob of them: ``*`` is any text (``::`` and ``/``
included), ``?`` one character; ``[`` is literal (parametrization ids use it).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class TestName:
    """One test as an expectations file can name it (``__test__``: not a pytest test class)."""

    __test__ = False

    nodeid: str
    generic_class: str | None = None
    """PyTorch's generic class of a generated device class (``TestFoo`` for ``TestFooCUDA``)."""
    generic_test: str | None = None
    """The generic test function's name of a generated test (``test_bar``)."""

    @functools.cached_property
    def forms(self) -> frozenset[str]:
        """Every name this test is known by (see the module's docstring)."""
        path, sep, rest = self.nodeid.partition("::")
        if not sep:
            return frozenset(_path_suffixes(path))
        variants = _variants(rest.split("::"), self.generic_class, self.generic_test)
        found: set[str] = set()
        for parts in variants:
            for start in range(len(parts)):
                for end in range(start + 1, len(parts) + 1):
                    found.add("::".join(parts[start:end]))
        for suffix in _path_suffixes(path):
            found.add(suffix)
            for parts in variants:
                for end in range(1, len(parts) + 1):
                    found.add(suffix + "::" + "::".join(parts[:end]))
        return frozenset(found)

    @property
    def path(self) -> str:
        return self.nodeid.partition("::")[0]


def _path_suffixes(path: str) -> list[str]:
    segments = path.split("/")
    return ["/".join(segments[i:]) for i in range(len(segments))]


def _variants(parts: list[str], generic_class: str | None, generic_test: str | None
              ) -> list[tuple[str, ...]]:
    """The ``::`` parts as written, without the parametrization, and with PyTorch's generic
    class and test names in place of the generated ones."""
    last = parts[-1]
    lasts = {last, last.partition("[")[0]}
    if generic_test:
        lasts.add(generic_test)
    classes: set[str | None] = {parts[-2]} if len(parts) >= 2 else {None}
    if generic_class and len(parts) >= 2:
        classes.add(generic_class)
    head = parts[:-2]
    variants: set[tuple[str, ...]] = set()
    for cls in classes:
        for name in lasts:
            variants.add(tuple([*head, *([cls] if cls is not None else []), name]))
    return sorted(variants)


GLOB_CHARACTERS = frozenset("*?")


def is_glob(pattern: str) -> bool:
    return any(ch in GLOB_CHARACTERS for ch in pattern)


@functools.lru_cache(maxsize=4096)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """``*`` any text, ``?`` one character, everything else literal (``[`` included)."""
    parts = []
    for ch in pattern:
        parts.append(".*" if ch == "*" else "." if ch == "?" else re.escape(ch))
    return re.compile("".join(parts), re.DOTALL)


def selects(pattern: str, name: TestName) -> bool:
    """Whether ``pattern`` (a form or a glob of forms) selects the test ``name``."""
    if not is_glob(pattern):
        return pattern in name.forms
    regex = glob_regex(pattern)
    return any(regex.fullmatch(form) for form in name.forms)


def names_a_file(pattern: str) -> str | None:
    """The file a pattern names (``test_ops.py`` of ``test_ops.py::test_add``), else None: such
    a pattern is judged stale only when that file was collected."""
    head = pattern.partition("::")[0]
    return head if head.endswith(".py") and not is_glob(head) else None


def file_collected(path: str, collected: Iterable[str]) -> bool:
    """Whether ``path`` (as a pattern writes it) is one of the ``collected`` node-id paths, on a
    ``/`` boundary."""
    return any(seen == path or seen.endswith("/" + path) for seen in collected)


def pytorch_generic_names(class_name: str, device_type: str | None, test_name: str,
                          function_name: str | None) -> tuple[str | None, str | None]:
    """The generic class and test of a test PyTorch generated for ``device_type``
    (``TestFooCUDA``, ``test_bar_cuda_float32`` -> ``TestFoo``, ``test_bar``), from the class's
    ``device_type`` and the generated function's ``__name__`` (``functools.wraps`` keeps the
    generic one); (None, None) for any other test."""
    if not device_type:
        return None, None
    # a PrivateUse1 class is named before its setUpClass renames its device_type
    suffix = next((s for s in (device_type.upper(), "PRIVATEUSE1")
                   if class_name.endswith(s) and len(class_name) > len(s)), None)
    if suffix is None:
        return None, None
    generic_test = function_name if function_name and function_name != test_name and \
        test_name.startswith(function_name) else None
    return class_name[: -len(suffix)], generic_test
