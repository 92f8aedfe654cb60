"""devcaps check: capability table, suites run per device, the matrix, the exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_devcaps.commands.main import main


@pytest.fixture(scope="module")
def kernels_check(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, dict[str, Any]]:
    """One ``devcaps check`` of the kernels suite's error tests: exit code, output, JSON report."""
    report = tmp_path_factory.mktemp("check") / "check.json"
    done = subprocess.run([sys.executable, "-m", "pytest_devcaps.commands.main", "check", "--suite", "kernels",
                           "--json", str(report), "--", "-k", "test_errors"],
                          capture_output=True, text=True, timeout=600)
    return done.returncode, done.stdout + done.stderr, json.loads(report.read_text())


def test_check_runs_a_suite_and_prints_the_matrix(kernels_check: tuple[int, str, dict[str, Any]]) -> None:
    status, out, data = kernels_check
    assert status == 0, out
    assert "devcaps: 1 device(s)" in out  # the capability table comes first
    assert "[1/1] suite kernels ..." in out
    # one progress line per suite (tests done / total, elapsed), not every test's line
    assert "test_errors.py::test_invalid_input_raises[cpu-meta_device] PASSED" not in out
    progress = next(line for line in out.splitlines() if line.startswith("[1/1] suite kernels: "))
    done, _, total = progress.split()[3].partition("/")
    assert done == total and int(total) > 10 and progress.endswith(f"{total} passed")
    row = next(line for line in out.splitlines() if line.startswith("kernels  cpu"))
    passed = int(row.split()[2])
    assert passed > 10 and row.split()[3:6] == ["0", "0", "0"]
    assert "devcaps check: all suites passed" in out
    assert data["format"] == 1 and data["kind"] == "check" and data["passed"] is True
    suite = data["suites"][0]
    assert suite["suite"] == "kernels" and suite["counts"]["cpu"]["passed"] == passed
    assert len(suite["tests"]) == passed and {t["outcome"] for t in suite["tests"]} == {"passed"}
    assert [d["type"] for d in data["devices"]] == ["cpu"] and data["capabilities"]


def test_check_verbose_shows_every_test_and_a_failure_its_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "-v", "--suite", "kernels", "--", "-k", "test_invalid_input_raises"]) == 0
    # the child's -v output is live on our stdout (not through sys.stdout): only our lines here
    out = capsys.readouterr().out
    assert "[1/1] suite kernels ..." in out and "devcaps check: all suites passed" in out
    from pytest_devcaps.commands.check import failure_lines

    log = "x\n=== short test summary info ===\nFAILED a.py::t - boom\n1 failed in 1s\n"
    assert failure_lines(log) == ["    === short test summary info ===",
                                  "    FAILED a.py::t - boom", "    1 failed in 1s"]


def test_check_json_matches_the_schema(kernels_check: tuple[int, str, dict[str, Any]]) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="the test extra installs jsonschema")
    from pytest_devcaps.commands.report import schema_text

    schema = json.loads(schema_text())
    jsonschema.validate(kernels_check[2], {"$defs": schema["$defs"], "$ref": "#/$defs/check"})


def test_check_fails_when_a_suite_fails(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["check", "--suite", "kernels", "--", "-k", "fp8 and test_errors or e4m3fn",
                   "--devcaps-set=dtype.fp8_e4m3fn=unsupported", "--devcaps-require=dtype.fp8_e4m3fn"])
    out = capsys.readouterr().out
    assert status == 1
    row = next(line for line in out.splitlines() if line.startswith("kernels  cpu"))
    assert int(row.split()[4]) > 0  # errors: required capability missing
    assert "devcaps check: FAILED in kernels" in out
    assert "    ERROR " in out and "short test summary info" in out  # why, from the suite's log


def test_check_unknown_suite(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--suite", "dynamoo"]) == 2
    assert "unknown suite 'dynamoo' (did you mean 'dynamo'?)" in capsys.readouterr().err


def test_check_fails_when_a_suite_runs_no_tests(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--suite", "kernels", "--", "-k", "no_such_test_name"]) == 1
    out = capsys.readouterr().out
    assert "kernels  -        collected no tests (pytest exit code 5)" in out
    assert "devcaps check: FAILED in kernels" in out


def test_check_passes_relative_paths_to_suites_that_run_elsewhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The suites run in a temporary folder: a relative --overrides path reaches them resolved,
    and a file a suite writes there (a relative --junitxml) is reported, not lost silently."""
    (tmp_path / "ov.yaml").write_text("devcaps: 1\noverrides:\n  - match: {type: cpu}\n    set:\n"
                                      "      dtype.fp8_e4m3fn: {level: unsupported, reason: lab policy}\n")
    monkeypatch.chdir(tmp_path)
    status = main(["check", "--suite", "kernels", "--overrides", "ov.yaml", "--",
                   "-k", "test_fp8_e4m3fn", "--junitxml=junit.xml"])
    captured = capsys.readouterr()
    assert status == 0, captured.out
    row = next(line for line in captured.out.splitlines() if line.startswith("kernels  cpu"))
    assert row.split()[2:6] == ["0", "0", "0", "1"]  # skipped for the capability the override set
    assert ("devcaps check: suite kernels wrote junit.xml into its temporary working folder, which is "
            "deleted now; give paths in pytest arguments as absolute paths") in captured.err


@pytest.mark.parametrize("target", ["directory", "device", "under-a-file"])
def test_check_json_path_that_is_not_a_regular_file_exits_2_before_running(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str) -> None:
    import os

    path = {"directory": str(tmp_path), "device": os.devnull,
            "under-a-file": str(tmp_path / "notes.txt" / "out.json")}[target]
    (tmp_path / "notes.txt").write_text("x")
    assert main(["check", "--suite", "kernels", "--json", path]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("devcaps: error: --json: ")
    assert "[1/1] suite kernels" not in captured.out  # refused before any suite ran


def test_matrix_explains_every_row_and_gives_seconds_once() -> None:
    from collections import Counter

    from pytest_devcaps.commands.check import SuiteResult, count_outcomes, format_matrix

    tests = [{"nodeid": "a", "device": "cpu", "outcome": "passed"},
             {"nodeid": "b", "device": None, "outcome": "passed"},
             {"nodeid": "c", "device": "cuda:0", "outcome": "failed"}]
    result = SuiteResult("fsdp", 1, 12.34, counts=count_outcomes(tests), hardware=Counter(generic=3))
    lines = format_matrix([result])
    rows = [line for line in lines if line.startswith("fsdp ")]
    assert [row.split()[1] for row in rows] == ["cpu", "cuda:0", "no-device"]
    assert sum("12.3" in row for row in rows) == 1 and rows[0].endswith("12.3")
    text = "\n".join(lines)
    assert "no-device: tests that take no device" in text
    assert "seconds = the whole suite's wall time" in text and "skip:cap = " in text
