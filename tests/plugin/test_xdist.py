"""pytest-xdist: probe once in the controller; outcomes, summary and JSON equal a serial run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from _acme import acme_conftest

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
    registrar.capability("test.counted", "a capability whose probe counts its runs")
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
                                   "4 test(s) skipped: 4 for missing capabilities, 0 for other reasons"])
    def strip(d):
        return sorted((t["nodeid"], t["outcome"], t.get("device"), tuple(t.get("requires", ()))) for t in d["tests"])
    assert strip(serial_json) == strip(parallel_json)
    assert serial_json["capabilities"] == parallel_json["capabilities"]


def test_works_without_xdist(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE.replace('"test.counted"', '"dist.gloo"'))
    result = pytester.runpytest("-p", "no:xdist", "--devcaps-set=runtime.graphs=unsupported")
    result.assert_outcomes(passed=7, skipped=4)


def test_lazy_registry_is_built_once_by_the_first_worker_that_needs_it(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No devcaps option: nobody builds at start; both workers need the registry (--dist each),
    the first builds it (one probe run, cold cache) and the other reads what it published."""
    log = tmp_path / "probes.log"
    monkeypatch.setenv("PROBE_LOG", str(log))
    monkeypatch.setenv("PYTEST_DEVCAPS_CACHE_DIR", str(tmp_path / "cold-cache"))
    pytester.makeconftest(COUNTING_CONFTEST)
    pytester.makepyfile(SUITE)
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "each", "-p", "pytest_devcaps")
    result.assert_outcomes(passed=14, skipped=8)  # every test on both workers
    assert len(log.read_text().splitlines()) == 1, log.read_text()
    result.stdout.fnmatch_lines(["devcaps: * device(s)*"])  # the controller's header, after collection


def test_torch_free_suite_under_xdist_builds_nothing(pytester: pytest.Pytester, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "probes.log"
    monkeypatch.setenv("PROBE_LOG", str(log))
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    pytester.makeconftest(COUNTING_CONFTEST.replace("from pytest_devcaps import Level, ProbeOutcome",
                                                    "from pytest_devcaps.model import Level, ProbeOutcome"))
    pytester.makepyfile(
        """
        import sys
        import pytest

        @pytest.mark.parametrize("i", range(4))
        def test_free(i):
            assert "torch" not in sys.modules
        """
    )
    result = pytester.runpytest_subprocess("-n", "2")
    result.assert_outcomes(passed=4)
    assert not log.exists()
    result.stdout.no_fnmatch_line("devcaps: * device(s)*")


WHERE_TEST = """
import os
import subprocess
import sys

def test_where(device, devcaps):
    # what a rank spawned from this worker (the distributed harness) would see
    child = subprocess.check_output([sys.executable, "-c",
                                     "import os; print(os.environ.get('ACME_VISIBLE_DEVICES'))"],
                                    text=True).strip()
    with open(os.environ["PIN_LOG"], "a") as out:
        out.write(f"{os.environ['PYTEST_XDIST_WORKER']} device={device} "
                  f"visible={os.environ.get('ACME_VISIBLE_DEVICES')} child={child} "
                  f"count={devcaps.identity.count}\\n")
"""


def _pinned_run(pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                variable: str | None) -> tuple[pytest.RunResult, set[str]]:
    log = tmp_path / "pin.log"
    monkeypatch.setenv("PIN_LOG", str(log))
    pytester.makeconftest(acme_conftest(count=4, variable=variable))
    pytester.makepyfile(WHERE_TEST)
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "each", "--devcaps-pin-workers",
                                           "--devcaps-devices=acme", "--devcaps-probe-timeout=20")
    return result, set(log.read_text().splitlines()) if log.exists() else set()


def test_pin_workers_gives_each_worker_its_slice(pytester: pytest.Pytester, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACME_VISIBLE_DEVICES", raising=False)
    result, lines = _pinned_run(pytester, tmp_path, monkeypatch, "ACME_VISIBLE_DEVICES")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["devcaps: acme split between 2 workers by ACME_VISIBLE_DEVICES: "
                                 "gw0=0,1; gw1=2,3"])
    # each worker sees its own two devices, renumbered from 0, and so do the ranks it spawns
    assert lines == {"gw0 device=acme:0 visible=0,1 child=0,1 count=2",
                     "gw1 device=acme:0 visible=2,3 child=2,3 count=2"}


def test_pin_workers_splits_the_value_the_user_set(pytester: pytest.Pytester, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACME_VISIBLE_DEVICES", "5,7,9,11")
    result, lines = _pinned_run(pytester, tmp_path, monkeypatch, "ACME_VISIBLE_DEVICES")
    result.assert_outcomes(passed=2)
    assert lines == {"gw0 device=acme:0 visible=5,7 child=5,7 count=2",
                     "gw1 device=acme:0 visible=9,11 child=9,11 count=2"}


def test_pin_workers_error_is_reported_once_by_the_controller(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACME_VISIBLE_DEVICES", "0,1,1")
    result, lines = _pinned_run(pytester, tmp_path, monkeypatch, "ACME_VISIBLE_DEVICES")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert errors == ["ERROR: pytest-devcaps: ACME_VISIBLE_DEVICES environment variable: "
                      "--devcaps-pin-workers: ACME_VISIBLE_DEVICES='0,1,1' names 3 entries but 4 "
                      "acme device(s) are visible, so it cannot be split between workers (set one "
                      "index or UUID per device, or unset it)"], result.stderr.str()
    assert not lines  # no worker ran anything
    assert "crashed" not in result.stdout.str() + result.stderr.str()


def test_pin_workers_without_a_variable_uses_set_device(pytester: pytest.Pytester, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACME_VISIBLE_DEVICES", raising=False)
    result, lines = _pinned_run(pytester, tmp_path, monkeypatch, None)
    result.assert_outcomes(passed=2)
    # each worker's current device is the first of its share (devices 0-1 and 2-3)
    result.stdout.fnmatch_lines(["devcaps: acme split between 2 workers by set_device *: gw0=0; gw1=2"])
    assert {"gw0 set_device 0", "gw1 set_device 2"} <= lines
    assert {"gw0 device=acme:0 visible=None child=None count=4",
            "gw1 device=acme:2 visible=None child=None count=4"} <= lines
