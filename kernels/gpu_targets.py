"""The GPU targets the fused kernel is compiled and checked for, with the vendors' numbers.

Each :class:`GpuTarget` names a Triton ``GPUTarget`` (backend, arch, warp size) and the facts the
cross-compilation checks (:mod:`devcaps_kernels.cross_compile`) hold its machine code to:

* ``shared_limit``: the most shared memory (NVIDIA) / LDS (AMD) one block may use, in bytes.
  NVIDIA: the CUDA C++ Programming Guide, "Technical Specifications per Compute Capability",
  row "Maximum amount of shared memory per thread block" (the opt-in maximum a kernel gets with
  ``cudaFuncAttributeMaxDynamicSharedMemorySize``, which Triton's launcher requests): 8.0:
  163 KB; 8.6 / 8.9: 99 KB; 9.0 / 10.0: 227 KB; 12.0: 99 KB (1 KB = 1024 bytes). CUTLASS keeps
  the same figures (``cutlass/utils/smem_capacity.py``: ``"sm_90": (228 - 1) * 1024``...;
  ``cutlass/arch/arch.h``: ``sm100_smem_capacity_bytes = 232448``, ``sm120_smem_capacity_bytes
  = 101376``). AMD: the LDS a workgroup may allocate, 64 KiB on CDNA3 (gfx942, AMD Instinct
  MI300 ISA reference: "64 KB of LDS per CU") and 160 KiB on CDNA4 (gfx950, AMD Instinct MI355X
  / CDNA4 ISA: LDS raised to 160 KB); LLVM's AMDGPU backend enforces exactly these
  (``llvm/test/CodeGen/AMDGPU/lds-limit-diagnostics*.ll``: "local memory (163844) exceeds limit
  (163840)" for gfx950, 65536 for gfx942).
* ``fp8_mma``: the native fp8 matrix instruction a fp8 ``tl.dot`` must lower to (a regular
  expression over the PTX / AMDGCN), None where the target has none. PTX ISA: ``mma.sync``
  with ``.e4m3`` / ``.e5m2`` needs sm_89 (also sm_120); ``wgmma.mma_async ... .e4m3`` sm_90a;
  ``tcgen05.mma ... kind::f8f6f4`` sm_100a. AMD: CDNA3 ISA ``v_mfma_f32_*_fp8_fp8`` (fnuz
  formats); CDNA4 ISA ``v_mfma_f32_*_f8f6f4`` (OCP formats). sm_80 has no fp8 MMA: fp8
  operands take the decoded (bf16) family there.
* ``fp8_dtype``: the e4m3 format that target's fp8 MMA reads (OCP ``e4m3fn``; the ``fnuz``
  variant on gfx942, the format torch._scaled_mm takes on MI300).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch

KB = 1024


@dataclass(frozen=True)
class GpuTarget:
    """One compilation target and the vendor facts its machine code is checked against."""

    name: str                      # "sm_90", "gfx942"
    backend: str                   # Triton's backend name: "cuda" or "hip"
    arch: int | str                # 90 or "gfx942"
    warp_size: int
    shared_limit: int              # bytes per block (see the module docstring)
    shared_source: str
    fp8_dtype: torch.dtype | None  # the e4m3 format of its fp8 MMA; None: no fp8 MMA
    fp8_mma: str | None            # regex of that instruction in the assembly
    mma_16bit: str                 # regex of its bf16 / fp16 MMA instruction
    example: str                   # a GPU of this arch, for people reading a report

    @property
    def vendor(self) -> str:
        return self.backend

    def triton_target(self) -> Any:
        """Triton's ``GPUTarget`` for this target (imports triton)."""
        from triton.backends.compiler import GPUTarget as TritonTarget

        return TritonTarget(self.backend, self.arch, self.warp_size)

    def find_fp8_mma(self, assembly: str) -> str:
        """The first native fp8 MMA instruction in ``assembly`` ("" when there is none)."""
        return _first(self.fp8_mma, assembly) if self.fp8_mma else ""

    def find_16bit_mma(self, assembly: str) -> str:
        return _first(self.mma_16bit, assembly)


def _first(pattern: str, text: str) -> str:
    found = re.search(pattern, text)
    return found.group(0) if found else ""


_CUDA_GUIDE = ("CUDA C++ Programming Guide, Technical Specifications per Compute Capability: "
               "max shared memory per thread block (opt-in), compute capability {cc}")
_NV_MMA_16 = r"(?:wgmma\.mma_async|mma\.sync|tcgen05\.mma)[\w.:]*(?:bf16|f16)[\w.:]*"
_AMD_MMA_16 = r"v_mfma_f32_\w*(?:bf16|f16)\w*"

TARGETS: dict[str, GpuTarget] = {t.name: t for t in (
    GpuTarget("sm_80", "cuda", 80, 32, 163 * KB, _CUDA_GUIDE.format(cc="8.0"), None, None,
              r"mma\.sync[\w.]*\.bf16\.bf16[\w.]*", "A100"),
    GpuTarget("sm_89", "cuda", 89, 32, 99 * KB, _CUDA_GUIDE.format(cc="8.9"), torch.float8_e4m3fn,
              r"mma\.sync\.aligned\.\w+\.row\.col\.f32\.e[45]m[32]\.e[45]m[32]\.f32", _NV_MMA_16, "L40S, RTX 4090"),
    GpuTarget("sm_90", "cuda", 90, 32, 227 * KB, _CUDA_GUIDE.format(cc="9.0"), torch.float8_e4m3fn,
              r"wgmma\.mma_async[\w.]*\.e[45]m[32]\.e[45]m[32]", _NV_MMA_16, "H100, H200"),
    GpuTarget("sm_100", "cuda", 100, 32, 227 * KB, _CUDA_GUIDE.format(cc="10.0"), torch.float8_e4m3fn,
              r"tcgen05\.mma[\w.:]*kind::f8f6f4", _NV_MMA_16, "B200"),
    GpuTarget("sm_120", "cuda", 120, 32, 99 * KB, _CUDA_GUIDE.format(cc="12.0"), torch.float8_e4m3fn,
              r"mma\.sync\.aligned\.\w+\.row\.col\.f32\.e[45]m[32]\.e[45]m[32]\.f32", _NV_MMA_16,
              "RTX 5090, RTX PRO 6000"),
    GpuTarget("gfx942", "hip", "gfx942", 64, 64 * KB,
              "AMD CDNA3 (MI300) ISA: 64 KB LDS per workgroup; LLVM AMDGPU LDS limit 65536",
              torch.float8_e4m3fnuz, r"v_mfma_f32_\w+_fp8_fp8", _AMD_MMA_16, "MI300X, MI325X"),
    GpuTarget("gfx950", "hip", "gfx950", 64, 160 * KB,
              "AMD CDNA4 (MI355X) ISA: 160 KB LDS; LLVM AMDGPU LDS limit 163840",
              torch.float8_e4m3fn, r"v_mfma_f32_\w+_f8f6f4", _AMD_MMA_16, "MI350X, MI355X"),
)}
DEFAULT_TARGETS = tuple(TARGETS)

#: Per-block shared memory of NVIDIA compute capabilities we do not compile for in CI but may
#: run on (same table as above), for picking the runtime autotune list on such a GPU.
_OTHER_NVIDIA = {86: 99 * KB, 87: 163 * KB, 103: 227 * KB, 121: 99 * KB}
_OTHER_AMD = {"gfx90a": 64 * KB, "gfx940": 64 * KB, "gfx941": 64 * KB}


def target(name: str) -> GpuTarget:
    """The target called ``name``; ``ValueError`` naming the known ones otherwise."""
    found = TARGETS.get(name)
    if found is None:
        raise ValueError(f"unknown GPU target {name!r}; known: {', '.join(TARGETS)}")
    return found


def shared_limit(backend: str, arch: int | str) -> int | None:
    """The per-block shared memory of a Triton target (``GPUTarget.backend`` / ``.arch``);
    None for an arch this table does not know (then no config is dropped for it)."""
    for t in TARGETS.values():
        if t.backend == backend and str(t.arch).split(":")[0] == str(arch).split(":")[0]:
            return t.shared_limit
    if backend == "cuda" and isinstance(arch, int):
        return _OTHER_NVIDIA.get(arch)
    if backend == "hip":
        return _OTHER_AMD.get(str(arch).split(":")[0])
    return None
