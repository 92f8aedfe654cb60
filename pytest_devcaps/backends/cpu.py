"""The host CPU: always present; arch is its best vector ISA."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any, Mapping

from pytest_devcaps.backends.base import (
    PLATFORM_FACT,
    TorchDeviceAdapter,
    torch_version,
    total_ram_bytes,
)
from pytest_devcaps.model import DeviceIdentity, Fact

#: Facts vocabulary for ``isa``, with the /proc/cpuinfo flags that show each one.
_CPUINFO_FLAGS: Mapping[str, str] = {
    "avx2": "avx2", "avx512f": "avx512", "avx512_bf16": "avx512_bf16",
    "avx512_fp16": "avx512_fp16", "amx_bf16": "amx_bf16", "amx_int8": "amx_int8",
    "amx_fp16": "amx_fp16", "asimd": "neon", "sve": "sve",
    "asimdhp": "arm_fp16", "bf16": "arm_bf16",  # Arm FEAT_FP16 / FEAT_BF16 (Features line)
}
#: The same from ``torch.cpu.get_capabilities()`` (torch >= 2.10).
_TORCH_CAPABILITIES: Mapping[str, str] = {
    "avx2": "avx2", "avx512_f": "avx512", "avx512_bf16": "avx512_bf16",
    "avx512_fp16": "avx512_fp16", "amx_bf16": "amx_bf16", "amx_int8": "amx_int8",
    "amx_fp16": "amx_fp16",
}
_ISA_ORDER = ("avx2", "avx512", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_int8",
              "amx_fp16", "neon", "sve", "arm_fp16", "arm_bf16")


def parse_cpuinfo(text: str) -> tuple[str | None, set[str]]:
    """(model name, ISA vocabulary names) from /proc/cpuinfo text (x86 ``flags``, arm ``Features``)."""
    name: str | None = None
    isa: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key == "model name" and name is None:
            name = value.strip() or None
        elif key in ("flags", "features"):
            isa |= {_CPUINFO_FLAGS[f] for f in value.split() if f in _CPUINFO_FLAGS}
    return name, isa


def isa_from_torch(capability: str, capabilities: Mapping[str, Any]) -> set[str]:
    """ISA names from torch's dispatch level (``AVX512``, ``SVE256``) and ``get_capabilities()``."""
    isa = {name for key, name in _TORCH_CAPABILITIES.items() if capabilities.get(key) is True}
    level = capability.upper()
    if level.startswith("AVX512"):
        isa |= {"avx512", "avx2"}
    elif level == "AVX2":
        isa.add("avx2")
    elif level.startswith("SVE"):
        isa.add("sve")
    return isa


def best_arch(isa: set[str], machine: str) -> str:
    """amx > avx512 > avx2 > neon > default."""
    if {"amx_bf16", "amx_int8"} & isa:
        return "amx"
    if "avx512" in isa:
        return "avx512"
    if "avx2" in isa:
        return "avx2"
    if "neon" in isa or machine.lower() in ("arm64", "aarch64"):
        return "neon"
    return "default"


def ordered_isa(isa: set[str]) -> list[str]:
    return [name for name in _ISA_ORDER if name in isa]


class CpuAdapter(TorchDeviceAdapter):
    """The host CPU (``cpu``), one device without an index."""

    type = "cpu"
    visible_devices_variable = None
    facts: Mapping[str, Fact] = {
        "isa": Fact(f"vector/matrix ISA extensions: {', '.join(_ISA_ORDER)}"),
        "cpu_capability": Fact("torch.backends.cpu.get_cpu_capability(): DEFAULT, AVX2, AVX512..."),
        "cores": Fact("os.cpu_count()"),
        "machine": Fact("platform.machine(): x86_64, aarch64, arm64..."),
        "platform": PLATFORM_FACT,
    }

    def __init__(self, cpuinfo: Path = Path("/proc/cpuinfo")) -> None:
        self.cpuinfo = cpuinfo

    def is_available(self) -> bool:
        return True

    def discover(self) -> list[DeviceIdentity]:
        import torch

        try:
            text = self.cpuinfo.read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        name, isa = parse_cpuinfo(text)
        capability = torch.backends.cpu.get_cpu_capability()
        get_capabilities = getattr(torch.cpu, "get_capabilities", None)
        capabilities = get_capabilities() if get_capabilities else {}
        isa |= isa_from_torch(capability, capabilities)
        machine = platform.machine()
        if machine.lower() in ("arm64", "aarch64"):
            isa.add("neon")  # mandatory in ARMv8-A
        name = name or capabilities.get("cpu_name") or platform.processor() or machine or "cpu"
        return [DeviceIdentity(
            type="cpu", index=None, vendor="cpu", name=str(name), arch=best_arch(isa, machine),
            memory_bytes=total_ram_bytes(), count=1, torch_version=torch_version(),
            facts={"isa": ordered_isa(isa), "cpu_capability": capability,
                   "cores": os.cpu_count() or 1, "machine": machine, "platform": sys.platform},
        )]
