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
                                   "4 test(s) skipped for missing capabilities"])
    strip = lambda d: sorted((t["nodeid"], t["outcome"], t.get("device"), tuple(t.get("requires", ())))
                             for t in d["tests"])
    assert strip(serial_json) == strip(parallel_json)
    assert serial_json["capabilities"] == parallel_json["capabilities"]


def test_works_without_xdist(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE.replace('"test.counted"', '"dist.gloo"'))
    result = pytester.runpytest("-p", "no:xdist", "--devcaps-set=runtime.graphs=unsupported")
    result.assert_outcomes(passed=7, skipped=4)


PIN_CONFTEST = """
import os
import types

import pytest
import torch
from pytest_devcaps import DeviceIdentity

torch.utils.rename_privateuse1_backend("acme")
# A stand-in device module: records which device each worker was pinned to.
torch.acme = types.SimpleNamespace(
    set_device=lambda index: open(os.environ["PIN_LOG"], "a").write(
        f"{os.environ.get('PYTEST_XDIST_WORKER')} set_device {index}\\n"),
)


class AcmeBackend:
    type = "acme"
    visible_devices_variable = "ACME_VISIBLE_DEVICES"

    def is_available(self):
        return True

    def discover(self):
        return [DeviceIdentity(type="acme", index=0, vendor="acme", name="Acme N1", arch="n1", count=2)]


@pytest.hookimpl(optionalhook=True)
def pytest_devcaps_register_backends(registrar):
    registrar.add(AcmeBackend())
"""


def test_pin_workers_one_accelerator_each(pytester: pytest.Pytester, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "pin.log"
    monkeypatch.setenv("PIN_LOG", str(log))
    pytester.makeconftest(PIN_CONFTEST)
    pytester.makepyfile(
        """
        import os

        def test_where(device):
            with open(os.environ["PIN_LOG"], "a") as out:
                out.write(f"{os.environ['PYTEST_XDIST_WORKER']} device {device}\\n")
        """
    )
    result = pytester.runpytest_subprocess("-n", "2", "--devcaps-pin-workers", "--devcaps-devices=acme",
                                           "--devcaps-probe-timeout=20")
    result.assert_outcomes(passed=1)
    lines = set(log.read_text().splitlines())
    assert {"gw0 set_device 0", "gw1 set_device 1"} <= lines
    ran = [line for line in lines if " device " in line]
    assert ran in (["gw0 device acme:0"], ["gw1 device acme:1"])
