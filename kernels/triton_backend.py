"""The ``triton`` backend: one generated Triton kernel per (dtypes, epilogue, reductions) shape.

The kernel is a tiled matmul (fp32 accumulator, GROUP_M swizzle) whose epilogue applies the
scales, bias and ops on the accumulator, casts, stores ``y`` and reduces the tile:

* every reduction is split into segments of ``S = gcd(group, min BLOCK_N)`` columns (a power
  of two dividing every autotune config's BLOCK_N, so ``tl.reshape`` can split any tile and
  the partials do not depend on the config picked); each tile writes its segment partials to
  an fp32 workspace ``[M, ceil(N / S)]`` (masked columns add 0, so a ragged last group or tile
  is exact). When ``S == group`` that workspace is the result; otherwise a small second pass
  reduces ``group // S`` partials per group. No atomics, so the result is deterministic.
* fp8 operands are loaded as bytes (the interpreter mis-reads fp8 loads). Where Triton's
  backend for the current target takes that fp8 type in ``tl.dot`` (``fp8_dot_types``) they
  are bitcast and go to ``tl.dot`` as fp8; otherwise each tile is decoded with integer ops to
  bf16 (exact), which compiles on every target (Triton's fp8 converts need sm89+ and reject
  fnuz on NVIDIA) and under the interpreter.
* accumulation is fp32 (``a.float() @ b.float()``): where the target's ``tl.dot`` keeps native
  fp8 products in a reduced-precision accumulator by default (``fp8_dot_imprecise``: NVIDIA
  sm_90, whose Triton default ``max_num_imprecise_acc`` is ``2**30``), the dot passes
  ``max_num_imprecise_acc=BLOCK_K``, so Triton adds each BLOCK_K partial into the fp32
  accumulator (the WGMMA lowering's ``requireAddAccumulator``), as cuBLAS does without
  ``use_fast_accum``. ``fast_accum=True`` leaves Triton's default in place.
* every offset is int64 (rows, columns and K), so ``K * stride`` past 2**31 elements of a
  strided view addresses the right element.
* tiles, warps and stages are autotuned per vendor and dtype family, keyed on M's power-of-two
  bucket (:mod:`devcaps_kernels.triton_configs`).

The source is generated because the op list is arbitrary; generated modules are written to a
per-process directory so ``triton.jit`` can read their source (also under TRITON_INTERPRET=1).
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import sys
import tempfile
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from .dtypes import FP8_DTYPES
from .problem import Problem
from .reductions import Reduce, finish_mean, grouped
from .reference import Result
from .triton_configs import (AUTOTUNE_KEY, INTERPRETER, TileConfig, configs_for, m_bucket, prune_for_m,
                             segment_base, triton_configs)
from .triton_support import fp8_dot_imprecise, fp8_dot_types, target_vendor, triton_drives

# Triton's name of each torch fp8 type (``tl.float8e4nv.name == "fp8e4nv"``...).
_TRITON_FP8 = {
    torch.float8_e4m3fn: "fp8e4nv",
    torch.float8_e5m2: "fp8e5",
    torch.float8_e4m3fnuz: "fp8e4b8",
    torch.float8_e5m2fnuz: "fp8e5b16",
}
_TL_OUT_DTYPE = {torch.bfloat16: "tl.bfloat16", torch.float16: "tl.float16",
            torch.float32: "tl.float32"}

_HEADER = '''
import triton
import triton.language as tl


@triton.jit
def _tanh(x):
    # exp-based so it also runs under the interpreter; saturates to +-1, keeps NaN.
    t = tl.exp(-2.0 * tl.abs(x))
    r = (1.0 - t) / (1.0 + t)
    return tl.where(x < 0, -r, r)


@triton.jit
def _nanmax(a, b):
    return tl.where((a > b) | (a != a), a, b)


# fp8 decoding with integer ops only: compiles on every target (Triton's own fp8 converts need
# sm89+ on NVIDIA and reject the fnuz types there) and runs under the interpreter.
@triton.jit
def _fp8_magnitude(u, MBITS: tl.constexpr, BIAS: tl.constexpr, SUBNORMAL: tl.constexpr):
    e = (u >> MBITS) & ((1 << (7 - MBITS)) - 1)
    m = u & ((1 << MBITS) - 1)
    bits = ((e + (127 - BIAS)) << 23) | (m << (23 - MBITS))
    mag = tl.where(e == 0, m.to(tl.float32) * SUBNORMAL, bits.to(tl.float32, bitcast=True))
    return tl.where((u & 128) != 0, -mag, mag), e, m


@triton.jit
def _special(u, bits: tl.constexpr):
    return (u * 0 + bits).to(tl.float32, bitcast=True)


@triton.jit
def _decode_e4m3fn(u):
    u = u.to(tl.int32)
    v, e, m = _fp8_magnitude(u, 3, 7, 0.001953125)
    return tl.where((e == 15) & (m == 7), _special(u, 0x7FC00000), v)


@triton.jit
def _decode_e5m2(u):
    u = u.to(tl.int32)
    v, e, m = _fp8_magnitude(u, 2, 15, 0.0000152587890625)
    inf = tl.where((u & 128) != 0, -_special(u, 0x7F800000), _special(u, 0x7F800000))
    return tl.where(e == 31, tl.where(m == 0, inf, _special(u, 0x7FC00000)), v)


@triton.jit
def _decode_e4m3fnuz(u):
    u = u.to(tl.int32)
    v, e, m = _fp8_magnitude(u, 3, 8, 0.0009765625)
    return tl.where(u == 128, _special(u, 0x7FC00000), v)


@triton.jit
def _decode_e5m2fnuz(u):
    u = u.to(tl.int32)
    v, e, m = _fp8_magnitude(u, 2, 16, 0.00000762939453125)
    return tl.where(u == 128, _special(u, 0x7FC00000), v)
'''

_KERNEL = '''
@triton.jit
def fused_scaled_mm(A, B, Y, SA, SB, BIAS{operand_params}{workspace_params},
                    M, N, K, M_BUCKET, stride_am, stride_ak, stride_bk, stride_bn, stride_ym, stride_yn,
                    stride_sa, stride_sb, stride_bias{scalar_params},
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    rows = offs_m.to(tl.int64)
    cols = offs_n.to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K).to(tl.int64)  # K * stride may pass 2**31
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        mask_k = kk < K
        a = tl.load(A + rows[:, None] * stride_am + kk[None, :] * stride_ak,
                    mask=mask_m[:, None] & mask_k[None, :], other=0)
        b = tl.load(B + kk[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=mask_k[:, None] & mask_n[None, :], other=0)
{convert}
        acc = tl.dot(a, b, acc{dot_kwargs})

    mask = mask_m[:, None] & mask_n[None, :]
    x = acc
{epilogue}
    y = x.to({out_dtype})  # not Y's dtype: Y is a dummy when y is not stored
{store}
{reductions}
'''


@dataclass(frozen=True)
class _Plan:
    """Everything the generated source depends on (its cache key)."""

    a_dtype: torch.dtype
    b_dtype: torch.dtype
    native_fp8: bool
    out_dtype: torch.dtype
    scale_a: bool
    scale_b: bool
    bias: bool
    ops: tuple[tuple[str, str, str], ...]  # (kind, operand form "t"/"c"/"", gelu approx)
    clamp_bounds: tuple[tuple[bool, bool], ...]
    reductions: tuple[tuple[str, str, int], ...]  # (kind, source, segment S)
    store: bool
    configs: tuple[TileConfig, ...]  # autotune candidates; S divides every BLOCK_N
    promote_fp8_acc: bool  # pass max_num_imprecise_acc=BLOCK_K to tl.dot (see the docstring)
    interpret: bool


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _native_fp8(p: Problem) -> bool:
    if p.a.dtype != p.b.dtype or p.a.dtype not in FP8_DTYPES or _interpreting():
        return False
    return triton_drives(p.device) and _TRITON_FP8[p.a.dtype] in fp8_dot_types()


def _family(a_dtype: torch.dtype, b_dtype: torch.dtype, native_fp8: bool) -> str:
    """The autotune family: operands as ``tl.dot`` sees them."""
    if native_fp8:
        return "fp8"
    return "fp32" if a_dtype == torch.float32 else "16bit"


def _tile_configs(p: Problem, native_fp8: bool) -> tuple[TileConfig, ...]:
    if _interpreting():
        return INTERPRETER
    return configs_for(target_vendor(), _family(p.a.dtype, p.b.dtype, native_fp8), p.n)


def _dot_operand_dtype(dtype: torch.dtype, plan: _Plan) -> str | None:
    """The Triton dtype an operand is converted to before ``tl.dot`` (None: as loaded)."""
    if dtype in FP8_DTYPES and plan.native_fp8:
        return None
    if plan.interpret and dtype in FP8_DTYPES + (torch.bfloat16,):
        # The interpreter's tl.dot returns garbage for bf16 operands (triton 3.9); fp32 with
        # ieee precision is exact for bf16/fp8 products, so results do not change.
        return "tl.float32"
    return "tl.bfloat16" if dtype in FP8_DTYPES else None


def _convert(name: str, dtype: torch.dtype, plan: _Plan) -> str:
    line = f"        {name} = {name}"
    if dtype in FP8_DTYPES and plan.native_fp8:
        line += f".to(tl.float8{_TRITON_FP8[dtype].removeprefix('fp8')}, bitcast=True)"
    elif dtype in FP8_DTYPES:
        line = f"        {name} = _decode_{str(dtype).split('_', 1)[1]}({name})"
    target = _dot_operand_dtype(dtype, plan)
    if target is not None:
        line += f".to({target})"
    return "" if line.endswith(f"= {name}") else line


def _op_source(i: int, kind: str, form: str, approx: str, bounds: tuple[bool, bool]) -> str:
    if kind == "relu":
        return "    x = tl.where(x < 0, 0.0, x)"
    if kind == "gelu" and approx == "tanh":
        return ("    x = 0.5 * x * (1.0 + _tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))")
    if kind == "gelu":
        return "    x = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))"
    if kind == "silu":
        return "    x = x * (1.0 / (1.0 + tl.exp(-x)))"
    if kind == "sigmoid":
        return "    x = 1.0 / (1.0 + tl.exp(-x))"
    if kind == "tanh":
        return "    x = _tanh(x)"
    if kind == "clamp":
        lines = []
        if bounds[0]:
            lines.append(f"    x = tl.where(x < lo{i}, lo{i}, x)")
        if bounds[1]:
            lines.append(f"    x = tl.where(x > hi{i}, hi{i}, x)")
        return "\n".join(lines)
    symbol = "+" if kind == "add" else "*"
    if form == "c":
        return f"    x = x {symbol} c{i}"
    return (f"    t{i} = tl.load(T{i} + rows[:, None] * stride_t{i}m + cols[None, :] * stride_t{i}n,"
            f" mask=mask, other=0).to(tl.float32)\n    x = x {symbol} t{i}")


def _reduction_source(j: int, kind: str, source: str, seg: int) -> str:
    value = "y.to(tl.float32)" if source == "output" else "x"
    if kind in ("sumsq", "meansq"):
        prep = f"v{j} * v{j}"
    elif kind == "amax":
        prep = f"tl.abs(v{j})"
    else:
        prep = f"v{j}"
    combine = f"tl.reduce(v{j}, 2, _nanmax)" if kind == "amax" else f"tl.sum(v{j}, 2)"
    return (f"    v{j} = {value}\n"
            f"    v{j} = tl.where(mask, {prep}, 0.0)\n"
            f"    v{j} = tl.reshape(v{j}, (BLOCK_M, BLOCK_N // {seg}, {seg}))\n"
            f"    p{j} = {combine}\n"
            f"    segs{j} = pid_n * (BLOCK_N // {seg}) + tl.arange(0, BLOCK_N // {seg})\n"
            f"    tl.store(W{j} + rows[:, None] * stride_w{j} + segs{j}[None, :], p{j},"
            f" mask=mask_m[:, None] & (segs{j}[None, :] < (N + {seg - 1}) // {seg}))")


def _source(plan: _Plan) -> str:
    operand_params, scalar_params, epilogue = [], [], []
    if plan.scale_a:
        epilogue.append("    x = x * tl.load(SA + rows * stride_sa, mask=mask_m, other=0)[:, None]")
    if plan.scale_b:
        epilogue.append("    x = x * tl.load(SB + cols * stride_sb, mask=mask_n, other=0)[None, :]")
    if plan.bias:
        epilogue.append("    x = x + tl.load(BIAS + cols * stride_bias, mask=mask_n, other=0)"
                        ".to(tl.float32)[None, :]")
    for i, ((kind, form, approx), bounds) in enumerate(zip(plan.ops, plan.clamp_bounds)):
        if form == "t":
            operand_params.append(f"T{i}")
            scalar_params += [f"stride_t{i}m", f"stride_t{i}n"]
        elif form == "c":
            scalar_params.append(f"c{i}")
        if kind == "clamp":
            scalar_params += [f"{name}{i}" for name, used in zip(("lo", "hi"), bounds) if used]
        epilogue.append(_op_source(i, kind, form, approx, bounds))
    workspace_params = [f"W{j}" for j in range(len(plan.reductions))]
    scalar_params += [f"stride_w{j}" for j in range(len(plan.reductions))]
    convert = "\n".join(filter(None, [_convert("a", plan.a_dtype, plan),
                                      _convert("b", plan.b_dtype, plan)]))
    fp32_dot_operands = "tl.float32" in (_dot_operand_dtype(plan.a_dtype, plan),
                                         _dot_operand_dtype(plan.b_dtype, plan)) or plan.a_dtype == torch.float32
    dot_kwargs = ', input_precision="ieee"' if fp32_dot_operands else ""
    if plan.promote_fp8_acc:
        dot_kwargs += ", max_num_imprecise_acc=BLOCK_K"
    return _HEADER + _KERNEL.format(
        out_dtype=_TL_OUT_DTYPE[plan.out_dtype],
        operand_params="".join(f", {name}" for name in operand_params),
        workspace_params="".join(f", {name}" for name in workspace_params),
        scalar_params="".join(f", {name}" for name in scalar_params),
        convert=convert or "        pass",
        dot_kwargs=dot_kwargs,
        epilogue="\n".join(epilogue) or "    pass",
        store=("    tl.store(Y + rows[:, None] * stride_ym + cols[None, :] * stride_yn, y,"
               " mask=mask)") if plan.store else "",
        reductions="\n".join(_reduction_source(j, kind, source, seg)
                             for j, (kind, source, seg) in enumerate(plan.reductions)),
    )


_MODULES: dict[str, ModuleType] = {}  # by source digest: plans that differ only in configs share one
_KERNELS: dict[_Plan, Any] = {}
_SOURCE_DIR: str | None = None


def _autotuned_kernel(plan: _Plan) -> Any:
    """The plan's ``@triton.jit`` kernel under ``triton.autotune`` (one autotuner per plan)."""
    kernel = _KERNELS.get(plan)
    if kernel is None:
        import triton

        kernel = triton.autotune(configs=triton_configs(plan.configs), key=list(AUTOTUNE_KEY),
                                 prune_configs_by={"early_config_prune": prune_for_m},
                                 )(_kernel_module(plan).fused_scaled_mm)
        _KERNELS[plan] = kernel
    return kernel


def _kernel_module(plan: _Plan) -> ModuleType:
    global _SOURCE_DIR
    source = _source(plan)
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    module = _MODULES.get(digest)
    if module is not None:
        return module
    if _SOURCE_DIR is None:
        _SOURCE_DIR = tempfile.mkdtemp(prefix="devcaps_kernels_")
    path = os.path.join(_SOURCE_DIR, f"fused_scaled_mm_{digest}.py")
    with open(path, "w") as handle:
        handle.write(source)
    name = f"devcaps_kernels._generated_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton resolves the kernel's globals through its module
    spec.loader.exec_module(module)
    _MODULES[digest] = module
    return module


def _plan(p: Problem) -> _Plan:
    ops, bounds = [], []
    for op, operand in zip(p.epilogue, p.operands):
        form = "" if operand is None else ("c" if operand.full is None else "t")
        ops.append((op.kind, form, op.approximate))
        bounds.append((op.lo is not None, op.hi is not None))
    native_fp8 = _native_fp8(p)
    configs = _tile_configs(p, native_fp8)
    base = segment_base(configs)
    reductions = tuple((r.kind, r.source, math.gcd(r.group_size(p.n), base)) for r in p.reductions)
    return _Plan(a_dtype=p.a.dtype, b_dtype=p.b.dtype, native_fp8=native_fp8,
                 out_dtype=p.out_dtype, scale_a=p.scale_a is not None,
                 scale_b=p.scale_b is not None, bias=p.bias is not None, ops=tuple(ops),
                 clamp_bounds=tuple(bounds), reductions=reductions, store=p.store_output,
                 configs=configs, promote_fp8_acc=native_fp8 and not p.fast_accum and _fp8_imprecise(),
                 interpret=_interpreting())


def _fp8_imprecise() -> bool:
    """The target accumulates native fp8 dots imprecisely unless told (never under the
    interpreter, whose tl.dot upcasts to fp16 and multiplies in numpy)."""
    return not _interpreting() and fp8_dot_imprecise()


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype in FP8_DTYPES else t


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
    if p.device.type == "cpu" and not _interpreting():
        raise ValueError("backend='triton' on CPU tensors needs TRITON_INTERPRET=1 "
                         "(set before triton is imported); use backend='cpu' instead")
    m, n, k = p.m, p.n, p.k
    dev = p.device
    y = torch.empty(m, n, dtype=p.out_dtype, device=dev) if p.store_output else None
    if m == 0 or n == 0:
        from .reference import run_reference

        return run_reference(p)
    plan = _plan(p)
    kernel = _autotuned_kernel(plan)
    workspaces = [torch.empty(m, -(-n // seg), dtype=torch.float32, device=dev)
                  for (_, _, seg) in plan.reductions]
    dummy = torch.empty(1, dtype=torch.float32, device=dev)
    sa = p.scale_a if p.scale_a is not None else dummy
    sb = p.scale_b if p.scale_b is not None else dummy
    bias = p.bias if p.bias is not None else dummy
    args: list[object] = [_as_bytes(p.a), _as_bytes(p.b), y if y is not None else dummy,
                          sa, sb, bias]
    scalars: list[object] = []
    for op, operand in zip(p.epilogue, p.operands):
        if operand is not None and operand.full is not None:
            args.append(operand.full)
            scalars += [operand.full.stride(0), operand.full.stride(1)]
        elif operand is not None:
            scalars.append(operand.number)
        if op.kind == "clamp":
            scalars += [bound for bound in (op.lo, op.hi) if bound is not None]
    args += workspaces
    y_strides = (y.stride(0), y.stride(1)) if y is not None else (0, 0)
    args += [m, n, k, m_bucket(m), p.a.stride(0), p.a.stride(1), p.b.stride(0), p.b.stride(1), *y_strides,
             sa.stride(0) if sa.shape[0] != 1 else 0,
             sb.stride(-1) if sb.shape[-1] != 1 else 0,
             bias.stride(0) if p.bias is not None else 0]
    args += scalars
    args += [ws.stride(0) for ws in workspaces]

    def grid(meta: dict[str, int]) -> tuple[int]:
        return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)

    kernel[grid](*args)
    reduced = []
    for r, ws, (_, _, seg) in zip(p.reductions, workspaces, plan.reductions):
        out = _finish_reduction(ws, r, n, seg)
        reduced.append(out.view(m) if r.group is None else out)
    return y, tuple(reduced)
