"""One table of environment variables (``_util.environ.VARIABLES``): a misspelt
``PYTEST_DEVCAPS_*`` name is a usage error naming the closest valid one, under pytest, the
``devcaps`` command and the unittest bridge; the table, the package's source and the README agree.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from pathlib import Path

import pytest

import pytest_devcaps
from pytest_devcaps._util import environ
from pytest_devcaps.commands.main import main
from pytest_devcaps.errors import ConfigError, DevcapsDeprecationWarning

PACKAGE = Path(pytest_devcaps.__file__).resolve().parent
README = PACKAGE.parent / "README.md"
TYPO = "PYTEST_DEVCAPS_HARDWRE"
MESSAGE = (f"unknown environment variable {TYPO} (did you mean 'PYTEST_DEVCAPS_HARDWARE'?): "
           "pytest-devcaps reads no such variable; fix the name or unset it (README, "
           "'Environment variables')")
PLAIN = "def test_plain():\n    pass\n"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No PYTEST_DEVCAPS_* variable but the shared probe cache (tests/conftest.py)."""
    for name in environ.unknown_names(os.environ):
        monkeypatch.delenv(name)
    for name in environ.VARIABLES:
        if name != environ.ENV_CACHE_DIR:
            monkeypatch.delenv(name, raising=False)
    return monkeypatch


# -- the check -------------------------------------------------------------------------------

def test_a_typo_names_the_closest_valid_variable() -> None:
    with pytest.raises(ConfigError) as error:
        environ.check_names({TYPO: "cuda", "PYTEST_DEVCAPS_DEVICES": "cpu"})
    assert str(error.value) == MESSAGE


@pytest.mark.parametrize("name", sorted(environ.VARIABLES))
def test_every_variable_with_one_letter_dropped_suggests_itself(name: str) -> None:
    """The suggestion is found after the shared prefix, so it works for every entry (compared
    whole, every name would look like every other)."""
    suffix = name[len(environ.PREFIX):]
    for cut in range(len(suffix)):
        typo = environ.PREFIX + suffix[:cut] + suffix[cut + 1:]
        if typo not in environ.VARIABLES:
            assert environ.closest_name(typo) == name, typo


def test_several_typos_are_named_together_and_nothing_close_gets_no_suggestion() -> None:
    with pytest.raises(ConfigError) as error:
        environ.check_names({"PYTEST_DEVCAPS_ZZZ": "1", "pytest_devcaps_require": "dtype.bf16"})
    assert str(error.value).startswith(
        "unknown environment variables PYTEST_DEVCAPS_ZZZ, pytest_devcaps_require (did you mean "
        "'PYTEST_DEVCAPS_REQUIRE'?): ")


def test_an_empty_value_is_still_a_misspelt_name() -> None:
    with pytest.raises(ConfigError, match=f"^unknown environment variable {TYPO} "):
        environ.check_names({TYPO: ""})


def test_known_names_old_names_and_other_tools_devcaps_variables_pass() -> None:
    """Only the old names in RENAMED are ours; another DEVCAPS_* variable is not ours to judge."""
    env = {**dict.fromkeys(environ.VARIABLES, "x"), **dict.fromkeys(environ.RENAMED.values(), "x"),
           "DEVCAPS_SOMETHING_ELSE": "1", "PYTEST_ADDOPTS": "-q", "MY_PYTEST_DEVCAPS_X": "1"}
    environ.check_names(env)
    assert environ.unknown_names(env) == []


def test_configure_reads_every_name_of_ours_but_those_read_where_used() -> None:
    """A pytest session reads its settings at configure time only where a variable it reads or
    refuses is set: a typo, a setting, an old name; the cache folder, the emu count and the
    Dynamo suite's variables (and their old names) are read where they are used."""
    assert not environ.configure_reads({"PATH": "/bin", "DEVCAPS_SOMETHING_ELSE": "1",
                                        **dict.fromkeys(environ.READ_WHERE_USED, "x"),
                                        "DEVCAPS_DYNAMO_ORDER": "reversed"})
    for name in (TYPO, "pytest_devcaps_require", "PYTEST_DEVCAPS_DEVICES", "DEVCAPS_DIST_REUSE",
                 "PYTEST_DEVCAPS_DIST_TIMEOUT"):
        assert environ.configure_reads({name: ""}), name
    assert environ.READ_WHERE_USED <= set(environ.VARIABLES)


# -- the three entry points ------------------------------------------------------------------

def test_pytest_exits_with_a_usage_error_naming_the_closest(
        pytester: pytest.Pytester, clean_env: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(PLAIN)
    clean_env.setenv(TYPO, "cuda")
    result = pytester.runpytest("-p", "no:randomly")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.lines[0] == f"ERROR: pytest-devcaps: {MESSAGE}", result.stderr.lines
    assert result.stderr.str().count("PYTEST_DEVCAPS_HARDWARE") == 1  # one line, no traceback
    result.stdout.no_fnmatch_line("*passed*")


def test_pytest_honours_a_known_variable_and_an_old_name(
        pytester: pytest.Pytester, clean_env: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(PLAIN)
    clean_env.setenv("PYTEST_DEVCAPS_HARDWARE", "generic")
    clean_env.setenv("DEVCAPS_DIST_REUSE", "0")
    clean_env.setenv("DEVCAPS_SOMETHING_ELSE", "1")
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*selected generic (PYTEST_DEVCAPS_HARDWARE environment variable)*"])
    clean_env.setenv("PYTEST_DEVCAPS_HARDWARE", "accelerator")
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=0, deselected=1)


def test_the_old_name_still_reaches_its_reader_with_a_warning(
        clean_env: pytest.MonkeyPatch) -> None:
    from pytest_devcaps.distributed import settings

    clean_env.setenv("DEVCAPS_DIST_REUSE", "0")
    environ.check_names()
    with pytest.warns(DevcapsDeprecationWarning, match="set PYTEST_DEVCAPS_DIST_REUSE instead"):
        assert settings.reuse_worlds() is False


def test_the_devcaps_command_refuses_a_typo_before_any_work(
        clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    clean_env.setenv(TYPO, "cuda")
    assert main(["probe"]) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", f"devcaps: error: {MESSAGE}\n")


def test_library_code_outside_pytest_refuses_a_typo(clean_env: pytest.MonkeyPatch) -> None:
    """``library.default_registry()`` outside any session checks the names as pytest does."""
    from pytest_devcaps import library
    from pytest_devcaps.errors import ConfigError

    clean_env.setenv(TYPO, "cuda")
    library._built_default.cache_clear()
    try:
        with pytest.raises(ConfigError, match="did you mean 'PYTEST_DEVCAPS_HARDWARE'"):
            library._built_default()
    finally:
        library._built_default.cache_clear()


def test_the_unittest_bridge_errors_every_test_on_a_typo(
        pytester: pytest.Pytester, clean_env: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_bridge="""
        from pytest_devcaps import DevcapsTestCase

        class TestBridge(DevcapsTestCase):
            def test_a(self):
                pass

            def test_b(self):
                pass
        """)
    clean_env.setenv(TYPO, "cuda")
    result = pytester.run(sys.executable, "-m", "unittest", "-v", "test_bridge", timeout=300)
    output = result.stderr.str()
    assert result.ret == 1 and "FAILED (errors=2)" in output, output
    assert output.count(MESSAGE) == 2, output


# -- the table, the source and the README agree ----------------------------------------------

def _constants() -> dict[str, str]:
    """The ``ENV_*`` constants of ``_util.environ``: identifier -> variable name."""
    return {key: value for key, value in vars(environ).items()
            if key.startswith("ENV_") and isinstance(value, str)}


def test_the_constants_are_the_table() -> None:
    assert sorted(_constants().values()) == sorted(environ.VARIABLES)
    assert all(name.startswith(environ.PREFIX) and variable.name == name and variable.meaning
               and "\n" not in variable.meaning for name, variable in environ.VARIABLES.items())
    assert all(old == "DEVCAPS_" + new[len(environ.PREFIX):]
               for new, old in environ.RENAMED.items())


def _reads_in_functions(tree: ast.AST, identifiers: set[str], names: set[str]) -> set[str]:
    """Identifiers of ``identifiers`` loaded, and strings of ``names`` written, inside function
    bodies (default values included): a module-level alias or a docstring reads nothing."""
    found: set[str] = set()
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = function.body[1:] if ast.get_docstring(function) else function.body
        nodes = [*body, *function.args.defaults, *function.args.kw_defaults]
        for node in (n for top in nodes if top is not None for n in ast.walk(top)):
            if isinstance(node, ast.Name) and node.id in identifiers:
                found.add(node.id)
            elif isinstance(node, ast.Attribute) and node.attr in identifiers:
                found.add(node.attr)
            elif isinstance(node, ast.Constant) and node.value in names:
                found.add(str(node.value))
    return found


def test_every_variable_in_the_table_is_read_somewhere() -> None:
    """A table entry nobody reads is a lie. Read: its constant used in a function of another
    module, or (probes and lint, which name variables themselves) its name as a string there."""
    constants = _constants()
    read: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        if path == Path(environ.__file__).resolve():
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for found in _reads_in_functions(tree, set(constants), set(environ.VARIABLES)):
            read.add(constants.get(found, found))
    assert sorted(set(environ.VARIABLES) - read) == []


_NAME = re.compile(r"PYTEST_DEVCAPS_[A-Z0-9_]*")


def _names_in(text: str) -> list[str]:
    """Every ``PYTEST_DEVCAPS_*`` name in ``text``; a family or the prefix (``PYTEST_DEVCAPS_DIST_*``,
    ``PYTEST_DEVCAPS_<NAME>``: ends with ``_``) must be the start of some name of the table."""
    names = []
    for match in _NAME.finditer(text):
        name = match.group()
        if name.endswith("_"):
            assert any(known.startswith(name) for known in environ.VARIABLES), name
        else:
            names.append(name)
    return names


def test_every_variable_named_in_the_package_is_in_the_table() -> None:
    """Code, docstrings and data files, probes and lint included (the one misspelling on
    purpose is the example in ``_util.environ``'s docstring)."""
    unknown = set()
    for path in PACKAGE.rglob("*"):
        if path.suffix in (".py", ".yaml", ".cpp", ".md", ".txt") and path.is_file():
            for name in _names_in(path.read_text(encoding="utf-8")):
                if name not in environ.VARIABLES:
                    unknown.add(f"{path.relative_to(PACKAGE).as_posix()}: {name}")
    assert sorted(unknown) == [f"_util/environ.py: {TYPO}"]


def _readme_section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Environment variables\n")
    return text[start:text.index("\n## ", start + 1)]


def test_the_readme_lists_exactly_the_table() -> None:
    rows = re.findall(r"^\| `(PYTEST_DEVCAPS_\w+)` \| (?:`(DEVCAPS_\w+)`)? *\| (.+) \|$",
                      _readme_section(), flags=re.MULTILINE)
    assert rows == [(v.name, v.old or "", v.meaning) for v in environ.VARIABLES.values()]


def test_every_variable_the_readme_names_is_in_the_table() -> None:
    """The one misspelling on purpose is the example of the refusal."""
    names = set(_names_in(README.read_text(encoding="utf-8")))
    assert sorted(names - set(environ.VARIABLES)) == [TYPO]
