"""emu in real processes: the CLI, a pytest run, xdist workers (each a fresh interpreter whose
``import torch`` runs the autoload). Skipped, with the reason, where nothing can compile."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any, Callable

import pytest

EmuEnv = Callable[[int], None]

GENERIC_TESTS = '''
import os
import pytest
import torch

def test_add(device):
    x = torch.arange(6.0, device=device).reshape(2, 3)
    assert x.device.type == torch.device(device).type
    assert (x * 2 + 1).sum().item() == 36.0

@pytest.mark.hardware("accelerator")
def test_accelerator_only(device):
    assert torch.accelerator.current_accelerator().type == "emu"
    y = torch.ones(4, device=device).to("cpu")
    assert y.tolist() == [1.0, 1.0, 1.0, 1.0]
'''


def _devcaps(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "import sys; from pytest_devcaps.commands.main import main; "
               "sys.exit(main(sys.argv[1:]))", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)


def _records(report: dict[str, Any], device: str) -> dict[str, dict[str, Any]]:
    return {r["capability"]: r for r in report["capabilities"] if r["device"] == device}


def test_torch_sees_emu_devices(emu_env: EmuEnv) -> None:
    emu_env(2)
    script = ("import torch; a = torch.accelerator; x = torch.ones(3, device='emu:1'); "
              "print(a.is_available(), a.current_accelerator(), a.device_count(), "
              "(x + x).to('emu:0').device, x.cpu().sum().item(), torch.emu.device_count())")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "emu", "2", "emu:0", "3.0", "2"]


def test_probe_lists_emu_devices_truthfully(emu_env: EmuEnv) -> None:
    emu_env(2)
    done = _devcaps("probe", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    keys = [d["type"] if d["index"] is None else f"{d['type']}:{d['index']}"
            for d in report["devices"]]
    assert keys == ["cpu", "emu:0", "emu:1"]
    emu = _records(report, "emu:1")
    # compute ran, through the CPU fallback: emulated, said by the emu plugin's hook
    assert emu["dtype.fp64"]["level"] == "emulated"
    assert emu["dtype.fp64"]["source"] == "hook:devcaps-emu"
    # what emu has not: each with torch's own refusal as the reason
    assert emu["runtime.pinned_memory"]["level"] == "unsupported"
    assert emu["runtime.graphs"]["level"] == "unsupported"
    assert emu["compile.inductor"]["level"] == "unsupported"
    assert "no codegen backend for emu" in emu["compile.inductor"]["reason"]
    assert emu["dist.gloo"]["level"] == "unsupported"  # gloo takes CPU tensors only
    # what emu does, each answered by a probe that ran on emu:
    # events time the host clock and allocator statistics are counted: native
    for capability in ("runtime.events", "runtime.memory_stats"):
        assert (emu[capability]["level"], emu[capability]["source"]) == ("native", "probe")
    assert "memory_stats reports" in emu["runtime.memory_stats"]["reason"]
    # (probed once per device model: emu:0 speaks for emu:1)
    # streams order work but never run concurrently; emuccl moves tensors through gloo over
    # host memory: the probe ran on emu, the emu plugin's hook says emulated and why
    for capability, probe_said, why in (
            ("runtime.streams", "two ordered streams on emu:0", "no two run concurrently"),
            ("dist.emuccl", "1-rank emuccl group all-reduced a tensor on emu:0",
             "no device interconnect")):
        record = emu[capability]
        assert (record["level"], record["source"]) == ("emulated", "hook:devcaps-emu")
        assert probe_said in record["reason"] and why in record["reason"]
    # the CPU keeps gloo
    cpu = _records(report, "cpu")
    assert cpu["dist.gloo"]["level"] == "native"
    assert cpu["runtime.streams"]["level"] == "unsupported"


def test_generic_file_runs_on_cpu_and_emu(emu_env: EmuEnv, pytester: pytest.Pytester) -> None:
    emu_env(1)
    pytester.makepyfile(test_generic=GENERIC_TESTS)
    result = pytester.runpytest_subprocess("-p", "pytest_devcaps", "-v", "-rs",
                                           "--devcaps-json=report.json")
    # An accelerator-class test runs on emu and is skipped on the CPU, naming its class.
    result.assert_outcomes(passed=3, skipped=1)
    result.stdout.fnmatch_lines_random([
        "*test_add?cpu? PASSED*", "*test_add?emu? PASSED*", "*test_accelerator_only?emu? PASSED*",
        "*test_accelerator_only?cpu? SKIPPED*", "*hardware class*accelerator*",
        "devcaps: hardware classes: generic 2, accelerator 2*"])
    report = json.loads((pytester.path / "report.json").read_text())
    assert {d["type"] for d in report["devices"]} == {"cpu", "emu"}
    assert {t["device"] for t in report["tests"]} == {"cpu", "emu:0"}


def test_pin_workers_splits_emu_devices(emu_env: EmuEnv, pytester: pytest.Pytester) -> None:
    emu_env(2)
    pytester.makepyfile(test_seen='''
        import os
        import torch

        def test_a(tmp_path_factory):
            _record(tmp_path_factory)

        def test_b(tmp_path_factory):
            _record(tmp_path_factory)

        def _record(factory):
            worker = os.environ["PYTEST_XDIST_WORKER"]
            seen = f"{os.environ.get('EMU_VISIBLE_DEVICES')} {torch.emu.device_count()}"
            (factory.getbasetemp().parent.parent / f"seen-{worker}").write_text(seen)
    ''')
    result = pytester.runpytest_subprocess("-p", "pytest_devcaps", "-n", "2",
                                           "--dist", "each", "--devcaps-pin-workers")
    result.assert_outcomes(passed=4)
    seen = sorted(p.read_text() for p in pytester.path.parent.rglob("seen-gw*"))
    assert seen == ["0 1", "1 1"]
