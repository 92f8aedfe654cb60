"""Report documents as pytest --devcaps-json, devcaps check --json and devcaps probe --json write
them, for a small fleet: node1 (two NVIDIA GPUs, one torchrun rank each), node2 (an AMD GPU,
probed twice with different answers), a CPU host with a check report.

Device keys here are data recorded on other machines, never devices of this one: the lines
naming them carry ``# devcaps: allow``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def gpu(index: int, name: str = "NVIDIA H100 80GB HBM3", vendor: str = "nvidia",
        arch: str = "sm_90") -> dict[str, Any]:
    return {"type": "cuda", "index": index, "vendor": vendor, "name": name, "arch": arch,
            "memory_bytes": 80 * 2**30, "count": 2, "torch_version": "2.13.0",
            "runtime_version": "12.8", "driver_version": "570.1", "facts": {}}


CPU = {"type": "cpu", "index": None, "vendor": "cpu", "name": "AMD EPYC", "arch": "avx512",
       "memory_bytes": 2**34, "count": 1, "torch_version": "2.13.0", "runtime_version": None,
       "driver_version": None, "facts": {}}


def record(capability: str, device: str, level: str, reason: str = "probe ran it",
           source: str = "probe") -> dict[str, Any]:
    return {"capability": capability, "device": device, "level": level, "reason": reason,
            "source": source}


def entry(nodeid: str, device: str | None, outcome: str, missing: bool = False) -> dict[str, Any]:
    entry: dict[str, Any] = {"nodeid": nodeid, "device": device, "outcome": outcome,
                             "requires": [], "missing": []}
    if missing:
        entry["missing"] = [{"kind": "capability", "requirement": "dtype.fp8_e4m3fn",
                             "device": device, "found": "unsupported", "source": "probe"}]
    return entry


def node1_rank(rank: int) -> dict[str, Any]:
    """One torchrun rank's pytest report: both GPUs described, tests on cuda:<rank>."""
    device = f"cuda:{rank}"  # devcaps: allow
    tests = [entry("test_gemm.py::test_fp8[cuda]", device, "passed"),
             entry("test_gemm.py::test_bf16[cuda]", device, "passed"),
             entry("test_dist.py::test_allreduce[cuda]", device,
                        "failed" if rank == 1 else "passed"),
             entry("test_host.py::test_config", None, "passed")]
    return {"format": 2, "kind": "pytest", "mode": "run", "exitstatus": 1 if rank else 0,
            "created": "2026-11-30T10:00:00Z", "host": "node1", "rank": rank, "world_size": 2,
            "devices": [CPU, gpu(0), gpu(1)], "selected_devices": ["cuda"],
            "capabilities": [record("dtype.fp8_e4m3fn", d, "native", "sm_90 has fp8",
                                    "vendor-rule") for d in ("cuda:0", "cuda:1")]
            + [record("dtype.fp8_e4m3fn", "cpu", "emulated")],
            "meta": {}, "tests": tests}


def node2_probe(level: str) -> dict[str, Any]:
    return {"format": 1, "kind": "probe", "created": "2026-11-30T11:00:00Z", "host": "node2",
            "devcaps_version": "0.1.0",
            "devices": [gpu(0, "AMD Instinct MI300X", "amd", "gfx942")],
            "capabilities": [record("dtype.fp8_e4m3fn", "cuda:0", level),  # devcaps: allow
                             record("dtype.bf16", "cuda:0", "native")],  # devcaps: allow
            "meta": {}}


def cpu_check(outcome: str = "failed") -> dict[str, Any]:
    tests = [entry("test_scaled_mm.py::test_fp8[cpu]", "cpu", "skipped", missing=True),
             entry("test_scaled_mm.py::test_bf16[cpu]", "cpu", outcome),
             entry("test_scaled_mm.py::test_fp32[cpu]", "cpu", "passed")]
    return {"format": 1, "kind": "check", "created": "2026-11-30T12:00:00Z", "host": "cpuhost",
            "devcaps_version": "0.1.0", "passed": outcome != "failed", "devices": [CPU],
            "capabilities": [record("dtype.fp8_e4m3fn", "cpu", "unsupported", "no fp8 <cast>")],
            "meta": {}, "suites": [{"suite": "kernels", "exit_code": 1, "seconds": 3.5,
                                    "counts": {"cpu": {"passed": 1}}, "tests": tests}]}


def write(directory: Path, name: str, document: Any) -> str:
    path = directory / name
    path.write_text(json.dumps(document))
    return str(path)
