"""Probes: functions that try a capability on a device, and the isolating runner.

Importing this package is cheap: probe modules import torch only when a probe runs.
"""

from __future__ import annotations

from pytest_devcaps.probes import attention, collectives, compile, dtypes, matmul, runtime_ops
from pytest_devcaps.probes.base import ProbeFunction, ProbeSpec
from pytest_devcaps.probes.runner import run_probe_in_this_process, run_probes

__all__ = ["ProbeFunction", "ProbeSpec", "builtin_probes", "run_probe_in_this_process",
           "run_probes"]

_BUILTIN: dict[str, ProbeFunction] = {
    "dtype.fp64": dtypes.probe_fp64,
    "dtype.fp16": dtypes.probe_fp16,
    "dtype.bf16": dtypes.probe_bf16,
    "dtype.tf32": dtypes.probe_tf32,
    "dtype.fp8_e4m3fn": dtypes.probe_fp8_e4m3fn,
    "dtype.fp8_e5m2": dtypes.probe_fp8_e5m2,
    "dtype.fp8_e4m3fnuz": dtypes.probe_fp8_e4m3fnuz,
    "dtype.fp8_e5m2fnuz": dtypes.probe_fp8_e5m2fnuz,
    "dtype.fp4_e2m1": dtypes.probe_fp4_e2m1,
    "mm.scaled": matmul.probe_scaled_mm,
    "mm.scaled_rowwise": matmul.probe_scaled_mm_rowwise,
    "mm.scaled_mx": matmul.probe_scaled_mm_mx,
    "mm.grouped": matmul.probe_grouped_mm,
    "mm.int8": matmul.probe_int_mm,
    "attention.flash": attention.probe_flash,
    "attention.mem_efficient": attention.probe_mem_efficient,
    "attention.cudnn": attention.probe_cudnn,
    "attention.flex": attention.probe_flex,
    "runtime.graphs": runtime_ops.probe_graphs,
    "runtime.streams": runtime_ops.probe_streams,
    "runtime.events": runtime_ops.probe_events,
    "runtime.memory_stats": runtime_ops.probe_memory_stats,
    "runtime.pinned_memory": runtime_ops.probe_pinned_memory,
    "runtime.sleep": runtime_ops.probe_sleep,
    "compile.inductor": compile.probe_inductor,
    "compile.triton": compile.probe_triton,
    "dist.gloo": collectives.probe_gloo,
    "dist.nccl": collectives.probe_nccl,
    "dist.xccl": collectives.probe_xccl,
    "dist.hccl": collectives.probe_hccl,
    "dist.mpi": collectives.probe_mpi,
}


def builtin_probes() -> dict[str, ProbeSpec]:
    """One isolated probe per built-in capability, keyed by the capability name."""
    return {name: ProbeSpec(name, function) for name, function in _BUILTIN.items()}
