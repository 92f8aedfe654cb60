"""The ``triton`` backend: one generated Triton kernel per (dtypes, epilogue, reductions) shape.

The kernel is a tiled matmul (fp32 accumulator, GROUP_M swizzle) whose epilogue applies the
scales, bias and ops on the accumulator, casts, stores ``y`` and reduces the tile:

* every reduction is split into segments of ``S = gcd(group, min BLOCK_N)`` columns (a power
  of two dividing every autotune config's BLOCK_N, so ``tl.reshape`` can split any tile and
  the partials do not depend on the config picked); each tile writes its segment partials to
  an fp32 workspace ``[M, ceil(N / S)]`` (masked columns add 0, so a ragged last group or tile
  is exact). When ``S == group`` that workspace is the result; otherwise a small second pass
  reduces ``group // S`` partials per group. No atomics, so the result is deterministic.
* fp8 operands: where Triton's backend for the target takes that fp8 type in ``tl.dot``
  (``fp8_dot_types``) they are loaded through fp8 pointers and go to ``tl.dot`` as fp8 (the
  target's fp8 MMA); otherwise they are loaded as bytes (the interpreter mis-reads fp8 loads)
  and each tile is decoded with integer ops to bf16 (exact), which compiles on every target
  (Triton's fp8 converts need sm89+ and reject fnuz on NVIDIA) and under the interpreter.
* accumulation is fp32 (``a.float() @ b.float()``): where the target's ``tl.dot`` keeps native
  fp8 products in a reduced-precision accumulator by default (``fp8_dot_imprecise``: NVIDIA
  sm_90, whose Triton default ``max_num_imprecise_acc`` is ``2**30``), the dot passes
  ``max_num_imprecise_acc=BLOCK_K``, so Triton adds each BLOCK_K partial into the fp32
  accumulator (the WGMMA lowering's ``requireAddAccumulator``), as cuBLAS does without
  ``use_fast_accum``. ``fast_accum=True`` leaves Triton's default in place.
* every offset is int64 (rows, columns and K), so ``K * stride`` past 2**31 elements of a
  strided view addresses the right element.
* tiles, warps and stages are autotuned per target and dtype family (configs that do not fit
  the target's shared memory are not candidates), keyed on M's power-of-two bucket
  (:mod:`devcaps_kernels.triton_configs`).

The plan (:mod:`devcaps_kernels.triton_plan`) and source (:mod:`devcaps_kernels.triton_source`)
are the ones the cross-compilation checks for every GPU target
(:mod:`devcaps_kernels.cross_compile`). The source is generated because the op list is
arbitrary; generated modules are written to a per-process directory so ``triton.jit`` can read
their source (also under TRITON_INTERPRET=1).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from types import ModuleType
from typing import Any

import torch

from .problem import Problem
from .reductions import Reduce, finish_mean, grouped
from .reference import Result
from .triton_configs import AUTOTUNE_KEY, prune_for_m, triton_configs
from .triton_plan import interpreting, plan_for, target_of
from .triton_source import KernelPlan, LaunchInputs, launch_arguments, source

_MODULES: dict[str, ModuleType] = {}  # by source digest: plans that differ only in configs share one
_KERNELS: dict[KernelPlan, Any] = {}
_SOURCE_DIR: str | None = None


def kernel_module(plan: KernelPlan) -> ModuleType:
    """The plan's generated module (written to a per-process directory, imported once)."""
    global _SOURCE_DIR
    text = source(plan)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    module = _MODULES.get(digest)
    if module is not None:
        return module
    if _SOURCE_DIR is None:
        _SOURCE_DIR = tempfile.mkdtemp(prefix="devcaps_kernels_")
    path = os.path.join(_SOURCE_DIR, f"fused_scaled_mm_{digest}.py")
    with open(path, "w") as handle:
        handle.write(text)
    name = f"devcaps_kernels._generated_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton resolves the kernel's globals through its module
    spec.loader.exec_module(module)
    _MODULES[digest] = module
    return module


def _autotuned_kernel(plan: KernelPlan) -> Any:
    """The plan's ``@triton.jit`` kernel under ``triton.autotune`` (one autotuner per plan)."""
    kernel = _KERNELS.get(plan)
    if kernel is None:
        import triton

        kernel = triton.autotune(configs=triton_configs(plan.configs), key=list(AUTOTUNE_KEY),
                                 prune_configs_by={"early_config_prune": prune_for_m},
                                 )(kernel_module(plan).fused_scaled_mm)
        _KERNELS[plan] = kernel
    return kernel


def plan(p: Problem) -> KernelPlan:
    """The plan this process launches for ``p`` (its Triton target, or the interpreter)."""
    return plan_for(p, target_of(p.device))


def _operand_tensor(t: torch.Tensor, plan: KernelPlan) -> torch.Tensor:
    """fp8 operands the kernel decodes are passed as bytes; native fp8 as fp8."""
    return t.view(torch.uint8) if plan.loads_bytes(t.dtype) else t


def launch_inputs(p: Problem, plan: KernelPlan, y: torch.Tensor | None,
                  workspaces: list[torch.Tensor]) -> LaunchInputs:
    """The tensors the launch arguments are read from (dummies where the plan has none)."""
    dummy = torch.empty(1, dtype=torch.float32, device=p.device)
    return LaunchInputs(p=p, a=_operand_tensor(p.a, plan), b=_operand_tensor(p.b, plan),
                        y=y if y is not None else dummy,
                        scale_a=p.scale_a if p.scale_a is not None else dummy,
                        scale_b=p.scale_b if p.scale_b is not None else dummy,
                        bias=p.bias if p.bias is not None else dummy, workspaces=tuple(workspaces))


def _finish_reduction(ws: torch.Tensor, r: Reduce, n: int, seg: int) -> torch.Tensor:
    """The second pass: ``ws [M, ceil(N / seg)]`` segment partials -> ``[M, groups]``."""
    group = r.group_size(n)
    if seg != group:  # group // seg consecutive segments per group; a ragged last one is short
        parts = grouped(ws, group // seg)
        ws = parts.amax(-1) if r.kind == "amax" else parts.sum(-1)
    return finish_mean(ws, r, n)


def run_triton(p: Problem) -> Result:
    try:
        import triton
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError(f"backend='triton' needs the triton package: {exc}") from exc
    if p.device.type == "cpu" and not interpreting():
        raise ValueError("backend='triton' on CPU tensors needs TRITON_INTERPRET=1 "
                         "(set before triton is imported); use backend='cpu' instead")
    m, n = p.m, p.n
    if m == 0 or n == 0:
        from .reference import run_reference

        return run_reference(p)
    kernel_plan = plan(p)
    kernel = _autotuned_kernel(kernel_plan)
    y = torch.empty(m, n, dtype=p.out_dtype, device=p.device) if p.store_output else None
    workspaces = [torch.empty(m, -(-n // seg), dtype=torch.float32, device=p.device)
                  for (_, _, seg) in kernel_plan.reductions]

    def grid(meta: dict[str, int]) -> tuple[int]:
        return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)

    kernel[grid](*launch_arguments(kernel_plan, launch_inputs(p, kernel_plan, y, workspaces)))
    reduced = []
    for r, ws, (_, _, seg) in zip(p.reductions, workspaces, kernel_plan.reductions):
        out = _finish_reduction(ws, r, n, seg)
        reduced.append(out.view(m) if r.group is None else out)
    return y, tuple(reduced)
