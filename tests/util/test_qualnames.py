"""pytest_devcaps._util.qualnames: functions named for a fresh interpreter, and found again there."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from pytest_devcaps._util.qualnames import NotImportableError, qualified_name, resolve, source_file


def module_level(x: int) -> int:
    return x + 1


class Holder:
    @staticmethod
    def nested(x: int) -> int:
        return x * 2


def test_a_module_level_function_round_trips() -> None:
    assert qualified_name(module_level, "t") == f"{__name__}:module_level"
    assert resolve(qualified_name(module_level, "t")) is module_level
    assert resolve(qualified_name(Holder.nested, "t"))(4) == 8
    assert source_file(module_level) == __file__
    assert source_file(len) is None  # a builtin has no source file


def _local() -> object:
    def inner() -> None:
        pass

    return inner


def _impostor() -> types.FunctionType:
    """A function named ``module_level`` that the module's ``module_level`` is not."""
    return types.FunctionType(module_level.__code__, globals())


def _from_main() -> types.FunctionType:
    fn = types.FunctionType(module_level.__code__, globals())
    fn.__module__ = "__main__"
    return fn


@pytest.mark.parametrize(("make", "why"), [
    (_local, "it is a local function or lambda; define it at module level"),
    (lambda: lambda: None, "it is a local function or lambda"),
    (_impostor, "that name does not resolve to the function passed (decorated or replaced?)"),
    (_from_main, "it lives in __main__, which a fresh interpreter does not run"),
])
def test_what_a_fresh_interpreter_cannot_import_is_refused_with_the_reason(make, why: str) -> None:
    fn = make()
    with pytest.raises(NotImportableError) as info:
        qualified_name(fn, "distributed.run")
    message = str(info.value)
    assert message.startswith(f"distributed.run: {fn.__module__}.{fn.__qualname__} cannot be "
                              "imported by name in a fresh interpreter: ")
    assert why in message and message.endswith("(a test module is fine)")


def test_a_non_function_is_refused() -> None:
    with pytest.raises(NotImportableError, match=r"probe 'x' needs a module-level function, got 3"):
        qualified_name(3, "probe 'x'")  # type: ignore[arg-type]


def test_resolve_failures_say_what_is_missing() -> None:
    with pytest.raises(NotImportableError, match="'no_colon' is not of the form module:qualname"):
        resolve("no_colon")
    with pytest.raises(NotImportableError, match=f"nothing_here not found in module {__name__}"):
        resolve(f"{__name__}:nothing_here")
    with pytest.raises(ImportError, match="devcaps_absent_module"):
        resolve("devcaps_absent_module:f")  # what the import raises propagates


def test_a_file_python_cannot_load_is_a_devcaps_error(tmp_path: Path) -> None:
    path = tmp_path / "probe.txt"  # no loader for the suffix
    path.write_text("def f(x):\n    return x\n")
    with pytest.raises(NotImportableError, match=f"cannot import devcaps_unloadable from {path}"):
        resolve("devcaps_unloadable:f", str(path))


def test_resolve_falls_back_to_the_file_under_the_same_module_name(tmp_path: Path) -> None:
    name = "devcaps_qualnames_off_path"
    path = tmp_path / "anything.py"
    path.write_text("def f(x):\n    return x * 3\n")
    try:
        fn = resolve(f"{name}:f", str(path))
        assert fn(2) == 6 and sys.modules[name].__file__ == str(path)
    finally:
        sys.modules.pop(name, None)
