"""The fused kernel's Triton source and its parameter list, both derived from one plan.

:class:`KernelPlan` holds everything the generated source depends on (it is the cache key).
:func:`kernel_params` turns a plan into the kernel's parameter list: each :class:`KernelParam`
has a name (the source's parameter) and a getter (the launch argument), so the order of the
``def`` and of the launch cannot drift apart, and an op's operands and scalars come from its one
definition (:class:`devcaps_kernels.epilogue.OpDef`). :func:`source` writes the module.

The kernel is a tiled matmul (fp32 accumulator, GROUP_M swizzle) whose epilogue applies the
scales, bias and ops on the accumulator, casts, stores ``y`` and reduces the tile (see
:mod:`devcaps_kernels.triton_backend` for the reduction segments, accumulation and offsets).
fp8 operands go to ``tl.dot`` as fp8 where the target's MMA takes them (``native_fp8``): loaded
through fp8 pointers, so Triton pipelines them into shared memory like any other type;
otherwise they are loaded as bytes and decoded with integer ops to bf16 (exact; compiles on
every target and under the interpreter, which mis-reads fp8 loads).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from .dtypes import FP8_DTYPES
from .epilogue import OpDef
from .triton_configs import TileConfig

# Triton's name of each torch fp8 type (``tl.float8e4nv.name == "fp8e4nv"``...).
TRITON_FP8 = {
    torch.float8_e4m3fn: "fp8e4nv",
    torch.float8_e5m2: "fp8e5",
    torch.float8_e4m3fnuz: "fp8e4b8",
    torch.float8_e5m2fnuz: "fp8e5b16",
}
_TL_OUT_DTYPE = {torch.bfloat16: "tl.bfloat16", torch.float16: "tl.float16", torch.float32: "tl.float32"}
CONSTEXPRS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")


@dataclass(frozen=True)
class OpPlan:
    """One epilogue op as the source sees it: its definition and statics (options by value,
    operands / scalars by form, see :meth:`devcaps_kernels.epilogue.EpiOp.statics`)."""

    definition: OpDef
    statics: tuple[tuple[str, object], ...]


@dataclass(frozen=True)
class KernelPlan:
    """Everything the generated source depends on (its cache key)."""

    a_dtype: torch.dtype
    b_dtype: torch.dtype
    native_fp8: bool
    out_dtype: torch.dtype
    scale_a: bool
    scale_b: bool
    bias: bool
    ops: tuple[OpPlan, ...]
    reductions: tuple[tuple[str, str, int], ...]  # (kind, source, segment S)
    store: bool
    configs: tuple[TileConfig, ...]  # autotune candidates; S divides every BLOCK_N
    promote_fp8_acc: bool  # pass max_num_imprecise_acc=BLOCK_K to tl.dot
    interpret: bool

    def loads_bytes(self, dtype: torch.dtype) -> bool:
        """fp8 operands are loaded as uint8 where they are decoded with integer ops, and under
        the interpreter (which mis-reads fp8 loads; native fp8 is then bitcast from the bytes)."""
        return dtype in FP8_DTYPES and (not self.native_fp8 or self.interpret)


@dataclass(frozen=True)
class LaunchInputs:
    """What the launch arguments are read from (a ``Problem`` and the tensors made for it)."""

    p: Any                     # devcaps_kernels.problem.Problem
    a: Any
    b: Any
    y: Any                     # y, or a dummy when y is not stored
    scale_a: Any
    scale_b: Any
    bias: Any
    workspaces: tuple[Any, ...]


@dataclass(frozen=True)
class KernelParam:
    """One parameter of the kernel: its name in the source and how its argument is read."""

    name: str
    get: Callable[[LaunchInputs], object]


def _stride_of(t: Any, dim: int) -> int:
    return int(t.stride(dim)) if t.shape[dim] != 1 else 0


def _core_params() -> list[KernelParam]:
    return [KernelParam("A", lambda s: s.a), KernelParam("B", lambda s: s.b), KernelParam("Y", lambda s: s.y),
            KernelParam("SA", lambda s: s.scale_a), KernelParam("SB", lambda s: s.scale_b),
            KernelParam("BIAS", lambda s: s.bias)]


def _shape_params() -> list[KernelParam]:
    from .triton_configs import m_bucket

    return [KernelParam("M", lambda s: s.p.m), KernelParam("N", lambda s: s.p.n), KernelParam("K", lambda s: s.p.k),
            KernelParam("M_BUCKET", lambda s: m_bucket(s.p.m)),
            KernelParam("stride_am", lambda s: s.a.stride(0)), KernelParam("stride_ak", lambda s: s.a.stride(1)),
            KernelParam("stride_bk", lambda s: s.b.stride(0)), KernelParam("stride_bn", lambda s: s.b.stride(1)),
            KernelParam("stride_ym", lambda s: s.y.stride(0) if s.p.store_output else 0),
            KernelParam("stride_yn", lambda s: s.y.stride(1) if s.p.store_output else 0),
            KernelParam("stride_sa", lambda s: _stride_of(s.scale_a, 0)),
            KernelParam("stride_sb", lambda s: _stride_of(s.scale_b, s.scale_b.dim() - 1)),
            KernelParam("stride_bias", lambda s: s.bias.stride(0) if s.p.bias is not None else 0)]


def _operand_getter(i: int, name: str, what: str) -> Callable[[LaunchInputs], object]:
    if what == "tensor":
        return lambda s: s.p.operands[i][name].full
    if what in ("m", "n"):
        return lambda s: s.p.operands[i][name].full.stride(0 if what == "m" else 1)
    if what == "number":
        return lambda s: s.p.operands[i][name].number
    return lambda s: s.p.epilogue[i].value(name)


def _workspace_getter(j: int, *, stride: bool) -> Callable[[LaunchInputs], object]:
    if stride:
        return lambda s: s.workspaces[j].stride(0)
    return lambda s: s.workspaces[j]


def _op_params(plan: KernelPlan) -> tuple[list[KernelParam], list[KernelParam]]:
    """(pointers, scalars) of every op: ``T_<name>_<i>`` tiles with their two strides,
    ``<name>_<i>`` numbers and scalars; absent scalars are no parameter at all."""
    pointers, scalars = [], []
    for i, op in enumerate(plan.ops):
        statics = dict(op.statics)
        for param in op.definition.runtime_params():
            form, name = statics[param.name], param.name
            if form == "t":
                pointers.append(KernelParam(f"T_{name}_{i}", _operand_getter(i, name, "tensor")))
                scalars += [KernelParam(f"stride_{name}_{i}_m", _operand_getter(i, name, "m")),
                            KernelParam(f"stride_{name}_{i}_n", _operand_getter(i, name, "n"))]
            elif form == "c":
                what = "number" if param.kind == "operand" else "scalar"
                scalars.append(KernelParam(f"{name}_{i}", _operand_getter(i, name, what)))
    return pointers, scalars


def kernel_params(plan: KernelPlan) -> tuple[KernelParam, ...]:
    """The kernel's runtime parameters in order (the ``CONSTEXPRS`` follow them)."""
    pointers, scalars = _op_params(plan)
    workspaces = [KernelParam(f"W{j}", _workspace_getter(j, stride=False)) for j in range(len(plan.reductions))]
    ws_strides = [KernelParam(f"stride_w{j}", _workspace_getter(j, stride=True)) for j in range(len(plan.reductions))]
    return tuple(_core_params() + pointers + workspaces + _shape_params() + scalars + ws_strides)


def launch_arguments(plan: KernelPlan, inputs: LaunchInputs) -> list[object]:
    """The launch arguments, read from ``inputs`` in :func:`kernel_params` order."""
    return [param.get(inputs) for param in kernel_params(plan)]


# -- the source -----------------------------------------------------------------------------------

_HEADER = '''
import triton
import triton.language as tl


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
def fused_scaled_mm({params},
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
                    mask=mask_m[:, None] & mask_k[None, :], other={a_other})
        b = tl.load(B + kk[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=mask_k[:, None] & mask_n[None, :], other={b_other})
{convert}
        acc = tl.dot(a, b, acc{dot_kwargs})

    mask = mask_m[:, None] & mask_n[None, :]
    x = acc
{epilogue}
{fp32_reductions}
    y = x.to({out_dtype})  # not Y's dtype: Y is a dummy when y is not stored
{store}
{output_reductions}
'''


def dot_operand_dtype(dtype: torch.dtype, plan: KernelPlan) -> str | None:
    """The Triton dtype an operand is converted to before ``tl.dot`` (None: as loaded)."""
    if dtype in FP8_DTYPES and plan.native_fp8:
        return None
    if plan.interpret and dtype in FP8_DTYPES + (torch.bfloat16,):
        # The interpreter's tl.dot returns garbage for bf16 operands (triton 3.9); fp32 with
        # ieee precision is exact for bf16/fp8 products, so results do not change.
        return "tl.float32"
    return "tl.bfloat16" if dtype in FP8_DTYPES else None


def _convert(name: str, dtype: torch.dtype, plan: KernelPlan) -> str:
    line = f"        {name} = {name}"
    if plan.loads_bytes(dtype) and plan.native_fp8:
        line += f".to(tl.float8{TRITON_FP8[dtype].removeprefix('fp8')}, bitcast=True)"
    elif plan.loads_bytes(dtype):
        line = f"        {name} = _decode_{str(dtype).split('_', 1)[1]}({name})"
    target = dot_operand_dtype(dtype, plan)
    if target is not None:
        line += f".to({target})"
    return "" if line.endswith(f"= {name}") else line


def _op_source(i: int, op: OpPlan) -> str:
    """The op's statements: its tensor operands loaded, its template filled with the names of
    its kernel parameters / loaded tiles, indented into the kernel."""
    statics = dict(op.statics)
    names, lines = {}, []
    for param in op.definition.runtime_params():
        form, name = statics[param.name], param.name
        if form == "t":
            lines.append(f"{name}_{i} = tl.load(T_{name}_{i} + rows[:, None] * stride_{name}_{i}_m"
                         f" + cols[None, :] * stride_{name}_{i}_n, mask=mask, other=0).to(tl.float32)")
        if form:
            names[name] = f"{name}_{i}"
    lines += op.definition.template(statics).format(**names).splitlines()
    return "\n".join("    " + line for line in lines if line.strip())


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


def _epilogue(plan: KernelPlan) -> str:
    lines = []
    if plan.scale_a:
        lines.append("    x = x * tl.load(SA + rows * stride_sa, mask=mask_m, other=0)[:, None]")
    if plan.scale_b:
        lines.append("    x = x * tl.load(SB + cols * stride_sb, mask=mask_n, other=0)[None, :]")
    if plan.bias:
        lines.append("    x = x + tl.load(BIAS + cols * stride_bias, mask=mask_n, other=0)"
                     ".to(tl.float32)[None, :]")
    lines += [_op_source(i, op) for i, op in enumerate(plan.ops)]
    return "\n".join(line for line in lines if line) or "    pass"


def _dot_kwargs(plan: KernelPlan) -> str:
    fp32_operands = plan.a_dtype == torch.float32 or "tl.float32" in (
        dot_operand_dtype(plan.a_dtype, plan), dot_operand_dtype(plan.b_dtype, plan))
    kwargs = ', input_precision="ieee"' if fp32_operands else ""
    if plan.promote_fp8_acc:
        kwargs += ", max_num_imprecise_acc=BLOCK_K"
    return kwargs


def _helpers(plan: KernelPlan) -> str:
    seen: dict[str, None] = {}
    for op in plan.ops:
        if op.definition.helpers:
            seen.setdefault(op.definition.helpers, None)
    return "".join(seen)


def source(plan: KernelPlan) -> str:
    """The plan's kernel module (``fused_scaled_mm`` plus its helpers)."""
    convert = "\n".join(filter(None, [_convert("a", plan.a_dtype, plan), _convert("b", plan.b_dtype, plan)]))
    other = {dtype: "0.0" if dtype in FP8_DTYPES and not plan.loads_bytes(dtype) else "0"
             for dtype in (plan.a_dtype, plan.b_dtype)}
    return _HEADER + _helpers(plan) + _KERNEL.format(
        params=",\n                    ".join(p.name for p in kernel_params(plan)),
        a_other=other[plan.a_dtype], b_other=other[plan.b_dtype],
        out_dtype=_TL_OUT_DTYPE[plan.out_dtype],
        convert=convert or "        pass",
        dot_kwargs=_dot_kwargs(plan),
        epilogue=_epilogue(plan),
        store=("    tl.store(Y + rows[:, None] * stride_ym + cols[None, :] * stride_yn, y,"
               " mask=mask)") if plan.store else "",
        # fp32-source reductions while x is live, then the cast: x dies before the output-source
        # reductions, so no two fp32 copies of the tile are live at once (register pressure).
        fp32_reductions="\n".join(_reduction_source(j, kind, src, seg)
                                  for j, (kind, src, seg) in enumerate(plan.reductions) if src == "fp32"),
        output_reductions="\n".join(_reduction_source(j, kind, src, seg)
                                    for j, (kind, src, seg) in enumerate(plan.reductions) if src == "output"),
    )
