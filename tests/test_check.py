"""devcaps check: capability table, suites run per device, the matrix, the exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_devcaps.cli import main


def test_check_runs_a_suite_and_prints_the_matrix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "check.json"
    status = main(["check", "--suite", "kernels", "--json", str(report), "--", "-k", "test_errors"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "devcaps: 1 device(s)" in out  # the capability table comes first
    assert "[1/1] suite kernels ..." in out
    row = next(line for line in out.splitlines() if line.startswith("kernels  cpu"))
    passed = int(row.split()[2])
    assert passed > 10 and row.split()[3:6] == ["0", "0", "0"]
    assert "devcaps check: all suites passed" in out
    data = json.loads(report.read_text())
    assert data[0]["suite"] == "kernels" and data[0]["counts"]["cpu"]["passed"] == passed


def test_check_fails_when_a_suite_fails(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["check", "--suite", "kernels", "--", "-k", "fp8 and test_errors or e4m3fn",
                   "--devcaps-set=dtype.fp8_e4m3fn=unsupported", "--devcaps-require=dtype.fp8_e4m3fn"])
    out = capsys.readouterr().out
    assert status == 1
    row = next(line for line in out.splitlines() if line.startswith("kernels  cpu"))
    assert int(row.split()[4]) > 0  # errors: required capability missing
    assert "devcaps check: FAILED in kernels" in out


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
