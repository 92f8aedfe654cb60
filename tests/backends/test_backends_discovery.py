"""Adapters and discovery on this machine, written device-generically."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
import torch

from pytest_devcaps.backends import (
    BackendAdapter,
    CpuAdapter,
    CudaAdapter,
    HpuAdapter,
    PrivateUse1Adapter,
    builtin_backends,
    describe_build,
    discover_devices,
)
from pytest_devcaps.backends.base import TorchDeviceAdapter
from pytest_devcaps.errors import DevcapsWarning
from pytest_devcaps.model import DeviceIdentity

ISA_VOCABULARY = {"avx2", "avx512", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_int8",
                  "amx_fp16", "neon", "sve"}


def test_builtin_adapters_follow_the_protocol() -> None:
    adapters = builtin_backends()
    assert [a.type for a in adapters[:5]] == ["cpu", "cuda", "xpu", "mps", "hpu"]
    assert isinstance(adapters[-1], PrivateUse1Adapter)
    for adapter in adapters:
        assert isinstance(adapter, BackendAdapter)
    variables = {a.type: a.visible_devices_variable for a in adapters[:5]}
    assert variables["cpu"] is None and variables["mps"] is None
    assert variables["xpu"] == "ZE_AFFINITY_MASK"
    assert variables["hpu"] == "HABANA_VISIBLE_MODULES"
    assert variables["cuda"] in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


def test_availability_matches_torch_accelerator_and_is_cheap() -> None:
    accelerator = torch.accelerator.current_accelerator(check_available=True)
    started = time.perf_counter()
    available = {a.type for a in builtin_backends() if a.is_available()}
    assert time.perf_counter() - started < 2.0
    assert "cpu" in available
    assert available - {"cpu"} == ({accelerator.type} if accelerator else set())


def test_discovery_lists_the_cpu_first_then_every_available_accelerator() -> None:
    devices = discover_devices(builtin_backends())
    assert devices[0].key == "cpu"
    accelerator = torch.accelerator.current_accelerator(check_available=True)
    accelerator_devices = [d for d in devices[1:] if d.type == getattr(accelerator, "type", None)]
    assert len(accelerator_devices) == (torch.accelerator.device_count() if accelerator else 0)
    for device in devices:
        assert device.torch_version == torch.__version__
        assert device.name and device.arch and device.vendor
        assert device.facts.get("arch", device.arch) == device.arch


@pytest.mark.parametrize(("compiled", "found", "expected"), [
    (None, ["cpu"], "CPU build"),
    ("cuda", ["cpu"], "CUDA build, no device"),  # devcaps: allow[DC003]
    ("cuda", ["cpu", "cuda"], "CUDA build"),  # devcaps: allow[DC003]
    ("xpu", ["cpu"], "XPU build, no device"),
])
def test_the_build_says_whether_its_accelerator_has_a_device(
        monkeypatch: pytest.MonkeyPatch, compiled: str | None, found: list[str], expected: str) -> None:
    """torch.accelerator.current_accelerator() answers the compiled-in accelerator, usable or
    not: the header says when the machine has none of it (a CPU-only machine)."""
    monkeypatch.setattr(torch.accelerator, "current_accelerator",
                        lambda check_available=False: None if compiled is None else torch.device(compiled))
    monkeypatch.setattr(torch.version, "hip", None)
    devices = [DeviceIdentity(kind, None if kind == "cpu" else 0, "v", "n", "a") for kind in found]
    assert describe_build(devices) == f"torch {torch.__version__}: {expected}"


def test_this_build_is_described_as_what_discovery_found() -> None:
    described = describe_build(discover_devices(builtin_backends()))
    assert described is not None and described.startswith(f"torch {torch.__version__}: ")
    compiled = torch.accelerator.current_accelerator()
    usable = torch.accelerator.current_accelerator(check_available=True)
    assert described.endswith("CPU build") is (compiled is None)
    assert described.endswith(", no device") is (compiled is not None and usable is None)


def test_cpu_identity_on_this_machine() -> None:
    (cpu,) = CpuAdapter().discover()
    assert (cpu.type, cpu.index, cpu.vendor, cpu.count) == ("cpu", None, "cpu", 1)
    assert cpu.memory_bytes and cpu.memory_bytes > 2**28
    assert set(cpu.facts["isa"]) <= ISA_VOCABULARY
    assert cpu.facts["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert cpu.facts["cores"] >= 1
    assert cpu.arch in ("amx", "avx512", "avx2", "neon", "default")
    if cpu.arch in ("avx512", "avx2"):
        assert cpu.arch in cpu.facts["isa"]


def test_cpu_identity_without_proc_cpuinfo(tmp_path) -> None:
    (cpu,) = CpuAdapter(cpuinfo=tmp_path / "missing").discover()
    assert cpu.name  # from torch or platform instead
    assert set(cpu.facts["isa"]) <= ISA_VOCABULARY


class _Fixed(TorchDeviceAdapter):
    def __init__(self, kind: str, *keys: int | None, fail: bool = False) -> None:
        self.type = kind
        self.keys = keys
        self.fail = fail

    def is_available(self) -> bool:
        if self.fail:
            raise RuntimeError("driver exploded")
        return True

    def discover(self) -> list[DeviceIdentity]:
        return [DeviceIdentity(self.type, k, "v", "n", "a") for k in self.keys]


def test_a_failing_adapter_is_skipped_with_a_warning() -> None:
    adapters = [_Fixed("xpu", 0, 1), _Fixed("hpu", 0, fail=True), _Fixed("cpu", None)]
    with pytest.warns(DevcapsWarning, match="skipping the hpu backend: RuntimeError: driver exploded"):
        devices = discover_devices(adapters)
    assert [d.key for d in devices] == ["cpu", "xpu:0", "xpu:1"]


def test_a_device_claimed_twice_is_listed_once() -> None:
    devices = discover_devices([_Fixed("cpu", None), _Fixed("xpu", 0), _Fixed("xpu", 0, 1)])
    assert [d.key for d in devices] == ["cpu", "xpu:0", "xpu:1"]


def test_optional_vendor_stacks_absent_here_are_quietly_unavailable() -> None:
    for adapter in (HpuAdapter(), PrivateUse1Adapter()):
        if not adapter.is_available():
            assert adapter.discover() == []


def test_cuda_adapter_is_unavailable_without_a_gpu_and_answers_fast() -> None:
    started = time.perf_counter()
    available = CudaAdapter().is_available()
    assert time.perf_counter() - started < 1.0
    accelerator = torch.accelerator.current_accelerator(check_available=True)
    assert available is (getattr(accelerator, "type", None) == "cuda")  # devcaps: allow[DC003]


def test_a_renamed_privateuse1_backend_is_discovered() -> None:
    # Renaming PrivateUse1 cannot be undone in a process: do it in a fresh one.
    code = textwrap.dedent("""
        import types, torch
        torch.utils.rename_privateuse1_backend("devcapsdev")
        module = types.ModuleType("devcapsdev")
        module.is_available = lambda: True
        module.device_count = lambda: 2
        module.get_device_name = lambda index: f"Fake NPU {index}"
        torch._register_device_module("devcapsdev", module)
        from pytest_devcaps.backends import PrivateUse1Adapter, discover_devices, CpuAdapter
        adapter = PrivateUse1Adapter()
        print(adapter.type, adapter.is_available())
        for d in discover_devices([adapter, CpuAdapter()]):
            print(d.key, d.name, d.vendor, d.count)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[0] == "devcapsdev True"
    assert out[1].startswith("cpu ")
    assert out[2:] == ["devcapsdev:0 Fake NPU 0 devcapsdev 2", "devcapsdev:1 Fake NPU 1 devcapsdev 2"]
