"""The JSON report tells the same story as the terminal: every kind of outcome, counted as
pytest counts it, serially and under xdist."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_devcaps.commands.check import count_outcomes
from pytest_devcaps.session.reporting import record_outcome

EVERY_OUTCOME = """
import pathlib
import pytest

@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown broke")

@pytest.fixture
def broken_setup():
    raise RuntimeError("setup broke")

def test_pass():
    pass

def test_fail():
    assert False

def test_skip():
    pytest.skip("plain skip")

@pytest.mark.requires_capability("runtime.graphs")
def test_skip_capability(device):
    pass

@pytest.mark.xfail(reason="known bug")
def test_xfail():
    assert False

@pytest.mark.xfail(reason="maybe fixed")
def test_xpass():
    pass

@pytest.mark.xfail(reason="strict", strict=True)
def test_xpass_strict():
    pass

def test_setup_error(broken_setup):
    pass

def test_pass_teardown_error(broken_teardown):
    pass

def test_fail_teardown_error(broken_teardown):
    assert False

@pytest.mark.flaky(reruns=2)
def test_flaky():
    attempted = pathlib.Path("flaky-attempted")
    if not attempted.exists():
        attempted.write_text("1")
        assert False, "first attempt fails"

@pytest.mark.flaky(reruns=1)
def test_always_fails():
    assert False
"""

TERMINAL_NAMES = {"error": "errors"}  # the terminal's summary line pluralizes errors


def _run(pytester: pytest.Pytester, *args: str) -> tuple[dict[str, int], dict[str, Any]]:
    pytest.importorskip("pytest_rerunfailures", reason="the rerun outcome needs pytest-rerunfailures "
                        "(in the test extra)")
    pytester.makepyfile(test_every_outcome=EVERY_OUTCOME, test_broken_import="import no_such_module_xyz\n")
    flags = ("--devcaps-devices=cpu", "--devcaps-set=runtime.graphs=unsupported",
             "--continue-on-collection-errors", "--devcaps-json=report.json", *args)
    result = pytester.runpytest_subprocess(*flags) if args else pytester.runpytest(*flags)
    terminal = result.parseoutcomes()
    terminal.pop("warnings", None)
    data = json.loads((pytester.path / "report.json").read_text())
    assert data["exitstatus"] == result.ret == pytest.ExitCode.TESTS_FAILED
    return terminal, data


def _check_story(terminal: dict[str, int], data: dict[str, Any]) -> None:
    summary = {TERMINAL_NAMES.get(k, k): v for k, v in data["summary"].items()}
    assert summary == terminal
    # Every kind is there: a collection error, a setup error and two teardown errors.
    assert terminal == {"passed": 3, "failed": 4, "skipped": 2, "xfailed": 1, "xpassed": 1,
                        "errors": 4, "rerun": 2}
    assert [e["nodeid"] for e in data["collection_errors"]] == ["test_broken_import.py"]
    tests = {t["nodeid"].split("::")[1]: t for t in data["tests"]}
    outcomes = {name: (t["outcome"], t.get("teardown"), t.get("reruns")) for name, t in tests.items()}
    assert outcomes == {
        "test_pass": ("passed", None, None),
        "test_fail": ("failed", None, None),
        "test_skip": ("skipped", None, None),
        "test_skip_capability[cpu]": ("skipped", None, None),
        "test_xfail": ("xfailed", None, None),
        "test_xpass": ("xpassed", None, None),
        "test_xpass_strict": ("failed", None, None),
        "test_setup_error": ("error", None, None),
        "test_pass_teardown_error": ("passed", "error", None),
        "test_fail_teardown_error": ("failed", "error", None),
        "test_flaky": ("passed", None, 1),
        "test_always_fails": ("failed", None, 1),
    }
    assert tests["test_skip_capability[cpu]"]["missing"][0]["requirement"] == "runtime.graphs"
    # devcaps check's matrix counts from the same entries; it agrees with the terminal too.
    counts = count_outcomes(data["tests"])["no-device"]
    assert (counts["passed"], counts["failed"], counts["error"]) == (3, 4, 3)  # + 1 collection error
    assert (counts["xfailed"], counts["xpassed"]) == (1, 1)


def test_json_counts_match_the_terminal(pytester: pytest.Pytester) -> None:
    _check_story(*_run(pytester))


def test_json_counts_match_the_terminal_under_xdist(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    _check_story(*_run(pytester, "-n", "2"))


@pytest.mark.parametrize(("reports", "expected"), [
    ([("setup", ""), ("call", "rerun"), ("teardown", ""), ("setup", ""), ("call", "passed"),
      ("teardown", "")], {"outcome": "passed", "reruns": 1}),
    ([("setup", "error"), ("teardown", "error")], {"outcome": "error", "teardown": "error"}),
    ([("setup", "skipped"), ("teardown", "")], {"outcome": "skipped"}),
    ([("setup", ""), ("call", "xfailed"), ("teardown", "")], {"outcome": "xfailed"}),
])
def test_record_outcome_folds_phases_as_pytest_counts_them(reports: list[tuple[str, str]],
                                                           expected: dict[str, Any]) -> None:
    entry: dict[str, Any] = {"nodeid": "t", "outcome": None}
    for when, category in reports:
        record_outcome(entry, when, category)
    assert entry == {"nodeid": "t", **expected}
