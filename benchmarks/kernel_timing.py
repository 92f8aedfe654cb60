"""Shared by the kernel benchmarks: the machine's name for result files, interleaved timing.

``cpu_model_and_isa()`` reads /proc/cpuinfo (every result file is named after the CPU model and
its widest vector ISA: ``AMD-EPYC-AVX2``); ``interleaved`` times several functions in the same
rounds, one after another, so load from other processes hits them alike, and keeps every time
(medians are reported, with the load average).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Callable

import torch

ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_int8", "amx_fp16", "amx_tile")


def cpu_model_and_isa() -> tuple[str, list[str]]:
    """The CPU's model name and which of :data:`ISA_FLAGS` it has."""
    model, flags = platform.processor() or "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return model, [f for f in ISA_FLAGS if f in flags]


def amd_core(family: int, model: int) -> str | None:
    """The Zen generation of an AMD CPU family / model (a VM often names only "AMD EPYC"):
    family 17h is Zen / Zen+ (models 00h-2Fh) and Zen 2; 19h is Zen 3 except models 10h-1Fh
    (Genoa), 60h-7Fh and A0h-AFh (Bergamo / Siena), which are Zen 4; 1Ah is Zen 5 (AMD's
    processor programming references, one per family)."""
    if family == 0x17:
        return "Zen" if model < 0x30 else "Zen2"
    if family == 0x19:
        return "Zen4" if 0x10 <= model <= 0x1F or 0x60 <= model <= 0x7F or 0xA0 <= model <= 0xAF else "Zen3"
    if family == 0x1A:
        return "Zen5"
    return None


def _amd_family_model() -> tuple[int, int] | None:
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if not line.strip():
                    break  # the first processor is enough
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        return None
    if fields.get("vendor_id") != "AuthenticAMD":
        return None
    try:
        return int(fields["cpu family"]), int(fields["model"])
    except (KeyError, ValueError):
        return None


def machine_tag() -> str:
    """``AMD-EPYC-Zen4-AVX512BF16``: the first two words of the model, the Zen generation on
    AMD, and the widest ISA (for file names)."""
    model, isa = cpu_model_and_isa()
    widest = next((name for flag, name in (("amx_tile", "AMX"), ("avx512_bf16", "AVX512BF16"),
                                           ("avx512f", "AVX512"), ("avx2", "AVX2")) if flag in isa), "noSIMD")
    words = [w for w in model.replace("(R)", "").replace("(TM)", "").split() if w.isalnum()][:2]
    amd = _amd_family_model()
    core = amd_core(*amd) if amd is not None else None
    return "-".join(words + ([core] if core and core not in words else []) + [widest])


def load_average() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def interleaved(fns: dict[str, Callable[[], object]], rounds: int, warmup: int = 1) -> dict[str, list[float]]:
    """Every function's wall times (ms) over ``rounds`` rounds; each round runs each function
    once, in order (after ``warmup`` untimed calls each)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) * 1e3)
    return times


def median(values: list[float]) -> float:
    return statistics.median(values)


def header(title: str) -> str:
    model, isa = cpu_model_and_isa()
    return (f"# {title}, {time.strftime('%Y-%m-%d %H:%M')}, torch {torch.__version__}, {model}; isa "
            f"{' '.join(isa) or 'none'}; ATen capability {torch.backends.cpu.get_cpu_capability()}; "
            f"{torch.get_num_threads()} threads; load average {load_average():.1f}")


def load_kernels_copy(folder: str, name: str = "devcaps_kernels_baseline") -> ModuleType:
    """Another copy of ``kernels/`` (e.g. ``git archive <commit> kernels | tar -x -C DIR``, then
    ``DIR/kernels``) imported beside the installed ``devcaps_kernels`` as ``name``, so a before /
    after runs in the same interleaved rounds of one process (the package imports only itself
    relatively)."""
    init = Path(folder) / "__init__.py"
    if not init.is_file():
        raise SystemExit(f"--baseline-kernels {folder}: no __init__.py there (pass the kernels/ folder itself)")
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(init.parent)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
