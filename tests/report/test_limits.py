"""devcaps report never answers with a traceback: hostile JSON (deep nesting, huge integers,
NaN, malformed fleet documents) and outputs it cannot write are clear errors, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_devcaps.commands.main import main
from pytest_devcaps.commands.report import merged

import fleet_data as data


def _fails_cleanly(argv: list[str], capsys: pytest.CaptureFixture[str], expected: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("devcaps: error: ") and expected in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("text, expected", [
    ("[" * 100_000 + "]" * 100_000, "nested deeper than 64 levels: not read"),
    ('{"a":' * 70 + "1" + "}" * 70, "nested deeper than 64 levels: not read"),
    ('{"format": 1, "kind": "probe", "n": ' + "9" * 5000 + "}",
     "an integer of 5000 digits (at most 40 are read)"),
    ('{"format": 1, "kind": "probe", "n": NaN}', "NaN is not JSON"),
    ('{"format": 1, "kind": "probe", "n": 1e999}', "the number 1e999 is out of range"),
    ('{"format": 1, "kind": "probe"', "not JSON: Expecting"),
    (b"\xff\xfe{}".decode("latin-1"), "cannot be read"),
])
def test_hostile_json_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       text: str, expected: str) -> None:
    path = tmp_path / "hostile.json"
    path.write_bytes(text.encode("latin-1"))
    for command in ("merge", "html"):
        _fails_cleanly(["report", command, str(path), "-o", str(tmp_path / "out")], capsys,
                       str(path))
        assert not (tmp_path / "out").exists()
    assert main(["report", "merge", str(path), "-o", "-"]) == 2
    assert expected in capsys.readouterr().err


def test_deep_json_in_a_subprocess_has_no_traceback(tmp_path: Path) -> None:
    """The command line as a user runs it, Python's recursion limit included."""
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    done = subprocess.run([sys.executable, "-m", "pytest_devcaps.commands.main", "report", "html",
                           str(path), "-o", str(tmp_path / "x.html")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "nested deeper than 64 levels" in done.stderr


def _fleet(tmp_path: Path) -> dict[str, Any]:
    return merged([data.write(tmp_path, "c.json", data.cpu_check())])


@pytest.mark.parametrize("spoil, expected", [
    (lambda f: f["summary"].update(reports="<script>alert(1)</script>"),
     "summary.reports: expected integer, got str"),
    (lambda f: f["summary"].pop("failed_reports"), "summary: missing required key 'failed_reports'"),
    (lambda f: f.update(passed="yes"), "passed: expected boolean"),
    (lambda f: f["suites"][0]["counts"].update(passed=True), "suites[0].counts.passed: expected integer"),
    (lambda f: f["cells"][0].update(level="<b>"), "cells[0].level: expected one of"),
    (lambda f: f.update(format=1), "format 1 does not record exit statuses or ranks"),
    (lambda f: f.update(format=99), "format 99 is newer than this pytest-devcaps reads"),
    (lambda f: f.update(format="2"), "format '2' is not a fleet format"),
    (lambda f: f.update(suites={"a": 1}), "suites: expected array, got dict"),
])
def test_a_malformed_fleet_is_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              spoil: Any, expected: str) -> None:
    fleet = _fleet(tmp_path)
    spoil(fleet)
    path = data.write(tmp_path, "fleet.json", fleet)
    _fails_cleanly(["report", "html", path, "-o", str(tmp_path / "p.html")], capsys, expected)
    assert not (tmp_path / "p.html").exists()


def _read_only_dir(tmp_path: Path) -> Path:
    """A directory this process cannot create files in (root ignores modes: /proc then)."""
    if os.geteuid() == 0:
        return Path("/proc/self")
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    return folder


def test_unwritable_outputs_are_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = data.write(tmp_path, "c.json", data.cpu_check())
    a_file = tmp_path / "plain"
    a_file.write_text("x")
    targets = [(str(_read_only_dir(tmp_path) / "fleet.json"), "cannot write: "),
               (str(a_file / "fleet.json"), "cannot write: "),
               ("/dev/null", "cannot write: '/dev/null' exists and is not a regular file (a "
                "character device)"),
               (str(tmp_path), "cannot write: ")]
    for target, expected in targets:
        for command in ("merge", "html"):
            _fails_cleanly(["report", command, report, "-o", target], capsys,
                           f"{target}: {expected}")
    assert a_file.read_text() == "x"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    json.loads(Path(report).read_text())  # the input is untouched
