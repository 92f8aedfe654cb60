"""pytest-xdist: probe once in the controller; outcomes, summary and JSON equal a serial run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("xdist")

COUNTING_CONFTEST = """
import os
import pytest
from pytest_devcaps import Level, ProbeOutcome

def probe_counted(device):
    with open(os.environ["PROBE_LOG"], "a") as log:
        log.write(f"{os.getpid()} {device}\\n")
    return ProbeOutcome(Level.NATIVE, "counted probe ran")

@pytest.hookimpl(optionalhook=True)
def pytest_devcaps_register_capabilities(registrar):
    registrar.capability("test.counted", "a capability whose probe counts its runs", probe="test.counted")
    registrar.probe("test.counted", probe_counted, isolated=False)
"""

SUITE = """
import pytest

@pytest.mark.requires_capability("test.counted")
@pytest.mark.parametrize("i", range(6))
def test_counted(device, i):
    pass

@pytest.mark.requires_capability("runtime.graphs")
@pytest.mark.parametrize("i", range(4))
def test_graphs(device, i):
    pass

def test_plain():
    pass
"""


def _run(pytester: pytest.Pytester, tmp_path: Path, *args: str) -> tuple[pytest.RunResult, dict]:
    report = tmp_path / f"report{len(args)}.json"
    result = pytester.runpytest_subprocess("--devcaps-set=runtime.graphs=unsupported", f"--devcaps-json={report}",
                                           "-p", "pytest_devcaps", *args)
    return result, json.loads(report.read_text())


def test_xdist_matches_serial_and_probes_once(pytester: pytest.Pytester, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "probes.log"
    monkeypatch.setenv("PROBE_LOG", str(log))
    monkeypatch.setenv("PYTEST_DEVCAPS_CACHE_DIR", str(tmp_path / "cache"))
    pytester.makeconftest(COUNTING_CONFTEST)
    pytester.makepyfile(SUITE)

    serial, serial_json = _run(pytester, tmp_path, "--devcaps-reprobe")
    serial.assert_outcomes(passed=7, skipped=4)
    assert len(log.read_text().splitlines()) == 1
    log.write_text("")

    parallel, parallel_json = _run(pytester, tmp_path, "--devcaps-reprobe", "-n", "2")
    parallel.assert_outcomes(passed=7, skipped=4)
    # One probe run, in the controller: workers got the snapshot through workerinput.
    assert len(log.read_text().splitlines()) == 1
    parallel.stdout.fnmatch_lines(["    4  runtime.graphs on cpu: unsupported (cli)",
                                   "4 test(s) skipped for missing capabilities"])
    strip = lambda d: sorted((t["nodeid"], t["outcome"], t.get("device"), tuple(t.get("requires", ())))
                             for t in d["tests"])
    assert strip(serial_json) == strip(parallel_json)
    assert serial_json["capabilities"] == parallel_json["capabilities"]


def test_works_without_xdist(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE.replace('"test.counted"', '"dist.gloo"'))
    result = pytester.runpytest("-p", "no:xdist", "--devcaps-set=runtime.graphs=unsupported")
    result.assert_outcomes(passed=7, skipped=4)
