"""Vendor adapters on fakes: what each one reads and the facts it reports."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
import torch

from pytest_devcaps.backends.cpu import CpuAdapter, best_arch, isa_from_torch, parse_cpuinfo
from pytest_devcaps.backends.cuda import CudaAdapter, rocm_version, visible_nvml_indices
from pytest_devcaps.backends.hpu import gaudi_arch
from pytest_devcaps.backends.mps import apple_chip
from pytest_devcaps.backends.xpu import XpuAdapter, intel_arch

SAPPHIRE_RAPIDS = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse avx avx2 avx512f avx512bw avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8
processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
"""
GRAVITON3 = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp sve svebf16
"""


def test_cpuinfo_parsing() -> None:
    assert parse_cpuinfo(SAPPHIRE_RAPIDS) == (
        "Intel(R) Xeon(R) Platinum 8480+",
        {"avx2", "avx512", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_int8"})
    assert parse_cpuinfo(GRAVITON3) == (None, {"neon", "sve", "arm_fp16"})  # asimdhp: FEAT_FP16


@pytest.mark.parametrize(("isa", "machine", "arch"), [
    ({"avx2", "avx512", "amx_int8"}, "x86_64", "amx"),
    ({"avx2", "avx512"}, "x86_64", "avx512"),
    ({"avx2"}, "x86_64", "avx2"),
    (set(), "aarch64", "neon"),
    (set(), "x86_64", "default"),
])
def test_best_arch(isa: set[str], machine: str, arch: str) -> None:
    assert best_arch(isa, machine) == arch


def test_isa_from_torch() -> None:
    assert isa_from_torch("AVX512", {"avx512_bf16": True, "amx_fp16": False}) == {
        "avx512", "avx2", "avx512_bf16"}
    assert isa_from_torch("SVE256", {}) == {"sve"}
    assert isa_from_torch("DEFAULT", {}) == set()


def test_cpu_adapter_reads_the_given_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(SAPPHIRE_RAPIDS)
    (cpu,) = CpuAdapter(cpuinfo=cpuinfo).discover()
    assert cpu.name == "Intel(R) Xeon(R) Platinum 8480+"
    assert cpu.arch == "amx"
    assert {"amx_bf16", "amx_int8", "avx512_fp16"} <= set(cpu.facts["isa"])


class FakeNvml:
    """The slice of pynvml the adapter uses: two GPUs, an H100 and an A100."""

    GPUS = [("NVIDIA H100 80GB HBM3", 80 * 2**30, (9, 0), "GPU-aaaa-1111"),
            ("NVIDIA A100-SXM4-40GB", 40 * 2**30, (8, 0), "GPU-bbbb-2222")]

    def __init__(self) -> None:
        self.shut_down = False

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.GPUS)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return self.GPUS[handle][0].encode()

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(total=self.GPUS[handle][1])

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        return self.GPUS[handle][2]

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self.GPUS[handle][3]

    def nvmlSystemGetDriverVersion(self) -> str:
        return "560.35.03"


def test_nvidia_devices_come_from_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml = FakeNvml()
    h100, a100 = CudaAdapter(nvml_loader=lambda: nvml).discover()
    assert nvml.shut_down
    assert (h100.key, h100.vendor, h100.name, h100.arch, h100.count) == (
        "cuda:0", "nvidia", "NVIDIA H100 80GB HBM3", "sm_90", 2)
    assert h100.memory_bytes == 80 * 2**30 and h100.driver_version == "560.35.03"
    assert h100.runtime_version == torch.version.cuda  # devcaps: allow[DC007]
    facts = h100.rule_facts()
    assert (facts["compute_capability"], facts["sm"], facts["arch"]) == (9.0, 90, "sm_90")
    assert facts["cuda_version"] == torch.version.cuda and facts["nvml"] == "ok"  # devcaps: allow[DC007]
    assert "cudnn_version" in facts and "platform" in facts
    assert (a100.key, a100.facts["compute_capability"], a100.arch) == ("cuda:1", 8.0, "sm_80")


@pytest.mark.parametrize(("spec", "indices"), [
    (None, [0, 1]), ("1", [1]), ("1,0", [1, 0]), ("GPU-bbbb", [1]), ("0,7,1", [0]),
    ("", []), ("-1", []), ("0,0", [0]),
])
def test_cuda_visible_devices_maps_torch_indices_to_nvml(spec: str | None,
                                                          indices: list[int]) -> None:
    uuids = [gpu[3] for gpu in FakeNvml.GPUS]
    assert visible_nvml_indices(2, uuids, spec) == indices


def test_visible_devices_reorder_discovery(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    (only,) = CudaAdapter(nvml_loader=FakeNvml).discover()
    assert (only.key, only.arch, only.count, only.facts["nvml_index"]) == ("cuda:0", "sm_80", 1, 1)


def test_without_nvml_torch_answers_and_the_reason_is_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> Any:
        raise pynvml.NVMLError_LibraryNotFound()

    props = SimpleNamespace(name="NVIDIA L4", total_memory=24 * 2**30, major=8, minor=9)
    cuda = SimpleNamespace(device_count=lambda: 1, get_device_properties=lambda i: props)
    adapter = CudaAdapter(nvml_loader=missing, cuda_module=cuda)
    monkeypatch.setattr(adapter, "_hip", lambda: None)
    (l4,) = adapter.discover()
    assert (l4.arch, l4.facts["compute_capability"], l4.driver_version) == ("sm_89", 8.9, None)
    assert l4.facts["nvml"] == "unavailable: NVML Shared Library Not Found"


def test_rocm_devices_use_the_gcn_arch(monkeypatch: pytest.MonkeyPatch) -> None:
    props = SimpleNamespace(name="AMD Instinct MI300X", total_memory=192 * 2**30,
                            gcnArchName="gfx942:sramecc+:xnack-")
    cuda = SimpleNamespace(device_count=lambda: 8, get_device_properties=lambda i: props)
    adapter = CudaAdapter(cuda_module=cuda)
    monkeypatch.setattr(adapter, "_hip", lambda: "6.3.42131-fa1d09cbd")
    devices = adapter.discover()
    assert len(devices) == 8 and devices[7].key == "cuda:7"
    mi300 = devices[0]
    assert (mi300.vendor, mi300.arch, mi300.runtime_version) == ("amd", "gfx942",
                                                                 "6.3.42131-fa1d09cbd")
    assert mi300.facts["gcn_arch"] == "gfx942:sramecc+:xnack-"
    assert mi300.facts["rocm_version"] == "6.3"
    assert adapter.visible_devices_variable == "HIP_VISIBLE_DEVICES"


def test_rocm_version() -> None:
    assert rocm_version("6.3.42131-fa1d09cbd") == "6.3"
    assert rocm_version(None) is None


@pytest.mark.parametrize(("name", "arch", "generation"), [
    ("Intel(R) Data Center GPU Max 1550", "pvc", 1),
    ("Intel(R) Arc(TM) B580 Graphics", "bmg", 2),
    ("Intel(R) Arc(TM) 140V GPU (16GB)", "lnl", 2),
    ("Intel(R) Arc(TM) A770 Graphics", "acm", 1),
    ("Intel(R) Data Center GPU Flex 170", "acm", 1),
    ("Intel(R) Arc(TM) Graphics", "mtl", 1),
    ("Intel(R) UHD Graphics 770", "unknown", None),
])
def test_intel_arch_from_the_device_name(name: str, arch: str, generation: int | None) -> None:
    assert intel_arch(name) == (arch, generation)


def test_xpu_identity_from_properties() -> None:
    props = SimpleNamespace(name="Intel(R) Data Center GPU Max 1100", total_memory=48 * 2**30,
                            has_fp64=True, driver_version="1.3.29735")
    device = XpuAdapter()._identity(1, 2, props)
    assert (device.key, device.vendor, device.arch, device.count) == ("xpu:1", "intel", "pvc", 2)
    assert device.facts == {"arch": "pvc", "xe_generation": 1, "has_fp64": True,
                            "platform": device.facts["platform"]}
    assert device.driver_version == "1.3.29735"


@pytest.mark.parametrize(("brand", "expected"), [
    ("Apple M3 Pro", ("apple-m3", 3)), ("Apple M1", ("apple-m1", 1)),
    ("Apple M4 Max", ("apple-m4", 4)), ("arm", ("apple-unknown", None)),
])
def test_apple_chip(brand: str, expected: tuple[str, int | None]) -> None:
    assert apple_chip(brand) == expected


@pytest.mark.parametrize(("name", "expected"), [
    ("GAUDI3", ("gaudi3", 3)), ("GAUDI2", ("gaudi2", 2)), ("GAUDI", ("gaudi1", 1)),
    ("HL-325L", ("gaudi3", 3)), ("HL-225", ("gaudi2", 2)), ("mystery", ("gaudi-unknown", None)),
])
def test_gaudi_arch(name: str, expected: tuple[str, int | None]) -> None:
    assert gaudi_arch(name) == expected


def _discovered_by_every_builtin_adapter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> dict[str, list[Any]]:
    """Each builtin adapter's discovery, run on fakes of its vendor's runtime."""
    from pytest_devcaps.backends import hpu
    from pytest_devcaps.backends.hpu import HpuAdapter
    from pytest_devcaps.backends.mps import MpsAdapter
    from pytest_devcaps.backends.privateuse1 import PrivateUse1Adapter

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(SAPPHIRE_RAPIDS)
    rocm = CudaAdapter(cuda_module=SimpleNamespace(
        device_count=lambda: 1, get_device_properties=lambda i: SimpleNamespace(
            name="AMD Instinct MI300X", total_memory=2**30, gcnArchName="gfx942:sramecc+")))
    monkeypatch.setattr(rocm, "_hip", lambda: "6.3.42131-fa1d09cbd")
    gaudi = SimpleNamespace(device_count=lambda: 1, get_device_name=lambda i: "GAUDI3",
                            get_device_properties=lambda i: SimpleNamespace(total_memory=2**30))
    monkeypatch.setattr(hpu, "_hpu_module", lambda: gaudi)
    monkeypatch.setattr(PrivateUse1Adapter, "_module", lambda self: SimpleNamespace(
        device_count=lambda: 1, get_device_name=lambda i: "openreg"))
    xpu_props = SimpleNamespace(name="Intel(R) Data Center GPU Max 1550", total_memory=2**30,
                                has_fp64=True, driver_version="1.3")
    return {
        "cpu": [CpuAdapter(cpuinfo=cpuinfo), *CpuAdapter(cpuinfo=cpuinfo).discover()],
        "nvidia": [CudaAdapter(), *CudaAdapter(nvml_loader=FakeNvml).discover()],
        "amd": [rocm, *rocm.discover()],
        "xpu": [XpuAdapter(), XpuAdapter()._identity(0, 1, xpu_props)],
        "mps": [MpsAdapter(), *MpsAdapter().discover()],
        "hpu": [HpuAdapter(), *HpuAdapter().discover()],
        "privateuse1": [PrivateUse1Adapter(), *PrivateUse1Adapter().discover()],
    }


def test_every_fact_an_adapter_sets_is_one_it_declares(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Rules, overrides and profiles may name only declared facts: an adapter that set an
    undeclared one would make a valid rule look like a typo."""
    from pytest_devcaps.model import IDENTITY_FACTS

    for vendor, (adapter, *identities) in _discovered_by_every_builtin_adapter(
            tmp_path, monkeypatch).items():
        assert identities, vendor
        for identity in identities:
            assert set(identity.rule_facts()) <= set(IDENTITY_FACTS) | set(adapter.facts), vendor
            undeclared = set(identity.facts) - set(adapter.facts) - set(IDENTITY_FACTS)
            assert not undeclared, (vendor, undeclared)
