"""The ``cpu`` backend: row-blocked GEMM whose blocks are finished and reduced while in cache.

Each block of rows goes through one oneDNN call (``torch.ops.mkldnn._linear_pointwise``) that
already applies the bias and the first activation when no scale precedes them (or, through its
``binary`` overload, a first add / mul / scale whose value the GEMM's dtype holds exactly:
oneDNN computes post-ops in f32 on the accumulator and rounds once); the rest of
the epilogue, the cast into ``y`` (in place) and every reduction then run on that block while
it is hot. Blocks run one after another on the calling thread, each op with torch's own
intra-op threads (its OpenMP team): a block is split the same way across the team by every op
on it, so each core keeps reading its own part of the block from its own cache. torch's thread
settings are never changed, and no thread of ours runs torch ops except the one that stands in
for a forked child's stale OpenMP team (below).

Why not a pool of single-threaded workers, one block each (the design before issue 30's item
7): inside a model a fused call follows other torch ops, whose OpenMP team threads keep
spinning on the cores for a while after their parallel region ends; workers of our own then
share the cores with them and lose. Measured on a 2-core Zen 4 VM in the same interleaved
rounds (``benchmarks/bench_epilogue_ops_cpu.py --baseline-kernels``, results in
``benchmarks/results/epilogue_ops_cpu_2026-12-03_AMD-EPYC-Zen4-AVX512BF16.txt``): 1024x1024x512
fp32 took 1.13-1.80x the faster of Inductor and eager with the pool, 0.73-1.06x on the calling
thread.

Precision: the GEMM runs in bf16 only on a CPU where that is the fast GEMM (native bf16 and
oneDNN's bf16 linear, :func:`bf16_gemm_problem`), and only when its rounded output *is* the
final ``y`` (bf16 out, no scales, no fp32-source reduction, the first op inside oneDNN's GEMM
or none, and nothing left to apply but ops that commute with the rounding, such as relu, which
then run on ``y``) or when ``fast_accum=True``
allows one more rounding; otherwise it runs in fp32 on upcast inputs, so the accumulator is
exactly the reference's ``a.float() @ b.float()`` up to summation order. That fp32 GEMM is
pinned to IEEE fp32 (:mod:`devcaps_kernels.precision`), whatever
``torch.set_float32_matmul_precision`` says, except in one exact case: inputs that are bf16
values (fp8 of any format, bf16) on a CPU with native bf16 (AMX-BF16 / AVX512-BF16) run it with
oneDNN's bf16 fpmath mode: the fp32 inputs are rounded to bf16 (exactly: they are bf16 values),
multiplied by the bf16 units and accumulated and returned in fp32. That path is checked once per
process against an fp32 sum that bf16 cannot hold (:func:`bf16_fpmath_problem`). A weight (``b``)
that needs converting (fp8 -> bf16/fp32, bf16 -> fp32) is converted once, to the ``[N, K]``
layout oneDNN reads fastest, and cached while the tensor lives and its version is unchanged
(:mod:`devcaps_kernels.weight_cache`).

Where ``torch.ops.mkldnn._linear_pointwise`` is missing or fails for the compute dtype (checked
once per dtype), blocks run ``torch.mm`` in fp32 and the eager epilogue; ``last_backend()``
then says so in its ``reason``.
"""

from __future__ import annotations

import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

from .dtypes import FP8_DTYPES
from .precision import fp32_matmul_precision
from .problem import Problem
from .reductions import Reduce, finish_mean, grouped
from .reference import Result, finish_block, run_reference
from .weight_cache import converted_weight

# Aim for blocks of about this many output elements per intra-op thread (a block's ops split it
# across torch's threads). Measured best on a 2-core Zen 4 VM, i.e. blocks of 512K outputs there:
# fewer small ops per output beat strict L2 residency. Scaling with the thread count keeps each
# thread's share the same on a larger machine, rather than splitting a 2-core block 64 ways.
_BLOCK_ELEMENTS_PER_THREAD = 1 << 18
_BF16_EXACT = FP8_DTYPES + (torch.bfloat16,)
# Up to this many rows, the GEMM reads the whole weight for little work (decode-size M): a
# row-major b is then cached as a dense [N, K] copy, which oneDNN reads ~1.4x faster.
_DENSE_WEIGHT_ROWS = 64


# -- what this torch build offers (each checked once) ------------------------------------------

@functools.lru_cache(maxsize=None)
def onednn_problem(dtype: torch.dtype) -> str:
    """"" when ``torch.ops.mkldnn._linear_pointwise`` runs ``dtype`` here, else why not.

    The op is private: it may be absent from a build (no mkldnn) or fail for a dtype the CPU
    lacks kernels for. A 2x2 call with a bias and a gelu post-op finds out, once per dtype.
    """
    if not torch.backends.mkldnn.is_available():  # type: ignore[no-untyped-call]
        return "torch was built without oneDNN (torch.backends.mkldnn.is_available() is False)"
    op = getattr(getattr(torch.ops, "mkldnn", None), "_linear_pointwise", None)
    if op is None:
        return "torch.ops.mkldnn._linear_pointwise does not exist in this torch build"
    x = torch.ones(2, 2, dtype=dtype)
    try:
        out = op(x, x, x[0], "gelu", [], "tanh")
    except Exception as exc:  # noqa: BLE001 - any failure means "do not use it"
        return f"torch.ops.mkldnn._linear_pointwise fails for {dtype}: {str(exc).splitlines()[0]}"
    if out.shape != (2, 2) or out.dtype != dtype:
        return f"torch.ops.mkldnn._linear_pointwise returned {out.dtype} {tuple(out.shape)} for {dtype}"
    return ""


@functools.lru_cache(maxsize=None)
def onednn_binary_problem(dtype: torch.dtype) -> str:
    """"" when ``torch.ops.mkldnn._linear_pointwise.binary`` runs ``dtype`` here with the
    ``other`` shapes the backend passes (``[1, 1]`` and ``[M, 1]`` broadcast, ``[M, N]``) and
    gives the exact small-integer results, else why not. Checked once per dtype."""
    if onednn_problem(dtype):
        return onednn_problem(dtype)
    op = getattr(torch.ops.mkldnn._linear_pointwise, "binary", None)
    if op is None:
        return "torch.ops.mkldnn._linear_pointwise.binary does not exist in this torch build"
    x = torch.ones(2, 2, dtype=dtype)
    cases = ((torch.full((1, 1), 2.0, dtype=dtype), "mul", [[6.0, 6.0], [6.0, 6.0]]),
             (torch.tensor([[1.0], [2.0]], dtype=dtype), "add", [[4.0, 4.0], [5.0, 5.0]]),
             (torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=dtype), "mul", [[3.0, 6.0], [9.0, 12.0]]))
    for other, attr, want in cases:  # (x @ x.T + 1) post-op other: 3 everywhere before it
        try:
            out = op(x, other, x, x[0], attr)
        except Exception as exc:  # noqa: BLE001 - any failure means "do not use it"
            return f"torch.ops.mkldnn._linear_pointwise.binary fails for {dtype}: {str(exc).splitlines()[0]}"
        if out.dtype != dtype or out.float().tolist() != want:
            return (f"torch.ops.mkldnn._linear_pointwise.binary {attr} with a {list(other.shape)} other "
                    f"gave {out.float().tolist()} for {dtype}, not {want}")
    return ""


def _native_bf16() -> bool:
    """This CPU multiplies bf16 in hardware (AMX-BF16 or AVX512-BF16), as torch reads it."""
    checks = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)


@functools.lru_cache(maxsize=None)
def bf16_fpmath_problem() -> str:
    """"" when oneDNN's bf16 fpmath mode gives an exact fp32 GEMM of bf16-valued fp32 inputs
    here (bf16 products, fp32 accumulation and output), else why the fp32 GEMM runs instead.

    Checked once: ``[1, 2^-9] . [1, 1] = 1 + 2^-9`` needs 10 significant bits (bf16 keeps 8),
    and 64 fp8 e4m3 products must sum as the float64 sum does to fp32 accuracy.
    """
    if onednn_problem(torch.float32):
        return onednn_problem(torch.float32)
    if not _native_bf16():
        return "this CPU has no native bf16 (AMX-BF16 or AVX512-BF16)"
    op = torch.ops.mkldnn._linear_pointwise
    x = torch.tensor([[1.0, 2.0 ** -9]])
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(4, 64, generator=gen).to(torch.float8_e4m3fn).float()
    w = torch.randn(8, 64, generator=gen).to(torch.float8_e4m3fn).float()
    try:
        with fp32_matmul_precision("bf16"):
            tiny = op(x, torch.ones(1, 2), None, "none", [], "")
            wide = op(a, w, None, "none", [], "")
    except Exception as exc:  # noqa: BLE001 - any failure means "do not use it"
        return f"oneDNN bf16 fpmath fails: {str(exc).splitlines()[0]}"
    exact = (a.double() @ w.double().t())
    if tiny.dtype != torch.float32 or tiny.item() != 1.0 + 2.0 ** -9:
        return f"oneDNN bf16 fpmath rounded 1 + 2^-9 to {tiny.item()!r}"
    if not torch.allclose(wide.double(), exact, rtol=1e-6, atol=1e-6):
        return "oneDNN bf16 fpmath differs from the float64 sum of 64 fp8 products"
    return ""


def _fallback_reason(compute: torch.dtype) -> str:
    """Why a call whose GEMM runs in ``compute`` runs slower than its usual path ("" when it
    does not)."""
    problem = onednn_problem(compute)
    if problem:
        return f"{problem}; ran torch.mm in {str(compute).removeprefix('torch.')} and the eager epilogue per block"
    return ""


# -- blocks ---------------------------------------------------------------------------------

def block_rows(m: int, n: int, threads: int) -> int:
    """Rows per block: about ``_BLOCK_ELEMENTS_PER_THREAD`` outputs per intra-op thread and at
    least 256 rows (the weight is re-read once per block), evened out over the blocks, so a call
    needs one oneDNN primitive, not a second one for a short last block (M = N = 3000 on 2
    threads: twelve blocks of 250 rows, not eleven of 256 and one of 184)."""
    n = max(n, 1)
    rows = max(1, min(m, max(_BLOCK_ELEMENTS_PER_THREAD * max(threads, 1) // n, 256)))
    blocks = -(-m // rows)
    return -(-m // blocks)


_scratch = threading.local()


_SCRATCH_KEPT = 1 << 21  # fp32 elements (8 MiB) a thread keeps between calls at most


def _fp32_scratch(rows: int, n: int, use: str = "upcast") -> torch.Tensor:
    """A per-thread fp32 ``[rows, n]`` buffer for one ``use`` (each use has its own, so the
    upcast output a reduction reads is not the buffer another one writes), reused across
    blocks and calls (up to ``_SCRATCH_KEPT`` elements; a larger one, e.g. a single huge block,
    is not kept)."""
    if rows * n > _SCRATCH_KEPT:
        return torch.empty(rows, n, dtype=torch.float32)
    buffers: dict[str, torch.Tensor] | None = getattr(_scratch, "buffers", None)
    if buffers is None:
        buffers = _scratch.buffers = {}
    buf = buffers.get(use)
    if buf is None or buf.numel() < rows * n:
        buf = buffers[use] = torch.empty(rows * n, dtype=torch.float32)
    return buf[: rows * n].view(rows, n)


# -- reductions ----------------------------------------------------------------------------

_FAMILY = {"sum": "sum", "mean": "sum", "sumsq": "sq", "meansq": "sq", "amax": "abs"}


def _raw_partial(src: torch.Tensor, family: str, g: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Sum / sum of squares / max-abs of each group of ``g`` columns of ``src``, fp32 (a short
    last group when ``g`` does not divide the width: ``Reduce(ragged=True)``)."""
    rows, n = src.shape
    full = n // g
    if n % g:
        head = [_raw_partial(src[:, :full * g], family, g)] if full else []
        parts = torch.cat([*head, _raw_partial(src[:, full * g:], family, n - full * g)], dim=1)
        return parts if out is None else out.copy_(parts)
    v = src.view(rows, full, g)
    if family == "sum":
        return torch.sum(v, -1, dtype=torch.float32, out=out)
    if family == "sq":
        # One pass instead of square-then-sum; sqrt/square cost ~1 ulp.
        norm: torch.Tensor = torch.linalg.vector_norm(v, 2, -1, dtype=torch.float32, out=out)
        return norm.square_()
    # |v| into a scratch block, then its max: ~15x faster than vector_norm(v, inf) in one pass
    # (0.05 vs 0.75 ms on a 512x1024 fp32 block, torch 2.13 on Zen 4), exact either way (NaN
    # propagates through both).
    magnitude = torch.abs(v, out=_fp32_scratch(rows, full * g, use="abs").view(rows, full, g))
    return torch.amax(magnitude, -1) if out is None else torch.amax(magnitude, -1, out=out)


@dataclass(frozen=True)
class _Step:
    """One reduction of a block, planned once per call (the order and derivations are the
    same for every block)."""

    index: int                  # the output it writes
    reduce: Reduce
    key: tuple[str, str, int]   # (family, source, group) of the raw partial it makes or reads
    finer: int | None           # the finer group its raw partial is derived from (None: the source)
    computes: bool              # first step with this key: computes the raw partial
    groups: int


def reduction_steps(reductions: tuple[Reduce, ...], n: int) -> tuple[_Step, ...]:
    """The reductions in group order. A reduction whose group is a multiple of an already
    computed finer one (same family and source) is derived from those partials:
    ``Reduce("sum")`` next to ``Reduce("sum", group=64)`` costs a pass over N/64 values, not
    over the block; a second reduction with the same partial (``sum`` and ``mean``) reuses it."""
    steps: list[_Step] = []
    made: set[tuple[str, str, int]] = set()
    for i in sorted(range(len(reductions)), key=lambda i: reductions[i].group_size(n)):
        r = reductions[i]
        key = (_FAMILY[r.kind], r.source, r.group_size(n))
        computes = key not in made
        finer = max((fg for (f, src, fg) in made if (f, src) == key[:2] and key[2] % fg == 0),
                    default=None) if computes else None
        made.add(key)
        steps.append(_Step(i, r, key, finer, computes, r.groups(n)))
    return tuple(steps)


def _reduce_block(sources: dict[str, torch.Tensor], steps: tuple[_Step, ...],
                  outs: tuple[torch.Tensor, ...], rows: slice) -> None:
    """Write every reduction of one block into its output rows (``out=`` where no mean
    division follows, to save small ops per block)."""
    partials: dict[tuple[str, str, int], torch.Tensor] = {}
    for step in steps:
        (family, source, g), r = step.key, step.reduce
        out = outs[step.index][rows].view(-1, step.groups)
        is_mean = r.kind in ("mean", "meansq")
        if step.computes:
            target = None if is_mean else out
            if step.finer is not None:
                part = grouped(partials[(family, source, step.finer)], g // step.finer)
                raw = (torch.amax(part, -1, out=target) if family == "abs"
                       else torch.sum(part, -1, out=target))
            else:
                raw = _raw_partial(sources[source], family, g, out=target)
            partials[step.key] = raw
            if not is_mean:
                continue  # written in place
        raw = partials[step.key]
        n = sources[source].shape[1]
        if not is_mean:
            out.copy_(raw)
        elif n % g == 0:
            torch.div(raw, g, out=out)
        else:
            out.copy_(finish_mean(raw, r, n))


# -- one call --------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class _Plan:
    """What every block of one call shares."""

    compute: torch.dtype
    a: torch.Tensor                      # [M, K] contiguous, compute dtype
    w: torch.Tensor                      # [N, K], compute dtype (oneDNN's weight layout)
    bias: torch.Tensor | None            # dense, for oneDNN
    onednn: bool                         # _linear_pointwise runs the block GEMM
    attr: str
    scalars: list[float]
    algorithm: str
    inside: bool                         # oneDNN applies the bias and fused_ops ops (no scales)
    binary: str                          # the binary post-op of epilogue[0] ("" for none)
    other: torch.Tensor | None           # its value in the compute dtype: [1, 1], [1, N], [M, 1], [M, N]
    fused_ops: int                       # epilogue ops oneDNN applies inside the GEMM
    gemm_is_output: bool                 # the GEMM's rounded output is y itself (after on_output ops)
    on_output: int                       # trailing epilogue ops applied to the rounded output
    steps: tuple[_Step, ...]             # the reductions, planned once
    needs_output: bool                   # a reduction reads the rounded output
    precision: str                       # fp32 GEMM precision: "ieee", or exact "bf16" fpmath


@functools.lru_cache(maxsize=None)
def bf16_gemm_problem() -> str:
    """"" when a bf16 GEMM is the fast one here (native bf16 and oneDNN's bf16 linear runs),
    else why the GEMM of bf16 values runs in fp32 (exact; and on a CPU without bf16 units it is
    the faster one: ATen's bf16 ``mm`` at 1024^3 took 6.8 s against 0.11 s for the fp32 oneDNN
    linear on an AVX2 EPYC, where oneDNN's bf16 linear does not run at all)."""
    if not _native_bf16():
        return "this CPU has no native bf16 (AMX-BF16 or AVX512-BF16)"
    return onednn_problem(torch.bfloat16)


def _on_output(p: Problem, first: int) -> bool:
    """Every op from ``p.epilogue[first]`` on commutes with the rounding to ``p.out_dtype``
    (:attr:`OpDef.commutes_with_rounding`: relu, a clamp to representable bounds), so it may run
    on the rounded output instead of the fp32 value, with the same result."""
    return all(op.definition.commutes_with_rounding(op, p.out_dtype) for op in p.epilogue[first:])


def _bf16_gemm_is_y(p: Problem, binary: tuple[str, torch.Tensor] | None) -> bool:
    """A bf16 GEMM's rounded output is ``y`` itself: bf16 out, no scales, no fp32-source
    reduction, and after the GEMM (whose oneDNN post-ops add the bias and may apply the first
    activation, or ``binary``, the first op's bf16 binary post-op) only ops that commute with
    the rounding (applied to ``y``: bias + relu runs as a bf16 GEMM with the bias inside and
    relu on its output)."""
    if (p.out_dtype != torch.bfloat16 or p.scale_a is not None or p.scale_b is not None
            or any(r.source == "fp32" for r in p.reductions)):
        return False
    # the first activation runs before the rounding only inside oneDNN's GEMM: without oneDNN
    # (a build without it, or one failing bf16) a gelu after a bf16 GEMM would round twice
    inside = (_onednn_activation(p) is not None and not onednn_problem(torch.bfloat16)
              or binary is not None)
    return _on_output(p, 1 if inside else 0)


def _plan_choice(p: Problem) -> tuple[torch.dtype, tuple[str, torch.Tensor] | None]:
    """The GEMM's dtype: bf16 when its rounding is the one allowed (see the module docstring)
    and the bf16 GEMM is the fast one here (:func:`bf16_gemm_problem`), else fp32; with a bf16
    GEMM, the first op's binary post-op where one applies (:func:`_onednn_binary`, worked out
    once for both questions)."""
    if not (p.a.dtype in _BF16_EXACT and p.b.dtype in _BF16_EXACT) or bf16_gemm_problem():
        return torch.float32, None
    binary = _onednn_binary(p, torch.bfloat16)
    if p.fast_accum or _bf16_gemm_is_y(p, binary):
        return torch.bfloat16, binary
    return torch.float32, None


def _plan_dtype(p: Problem) -> torch.dtype:
    """The GEMM's dtype (:func:`_plan_choice`)."""
    return _plan_choice(p)[0]


def _onednn_activation(p: Problem) -> tuple[str, list[float], str] | None:
    """The oneDNN post-op ``(attr, scalars, algorithm)`` for ``p.epilogue[0]`` when it can run
    inside the GEMM (the op's definition says which, :attr:`OpDef.onednn`)."""
    if p.scale_a is not None or p.scale_b is not None or not p.epilogue:
        return None
    op = p.epilogue[0]
    return op.definition.onednn(op)


def _onednn_binary(p: Problem, compute: torch.dtype) -> tuple[str, torch.Tensor] | None:
    """``(attr, other)`` for ``torch.ops.mkldnn._linear_pointwise.binary`` when oneDNN computes
    ``p.epilogue[0]`` exactly inside a GEMM in ``compute`` (add / mul / scale: the op's
    definition says which, :attr:`OpDef.onednn_binary`). ``other`` must have the compute dtype,
    so it is used only where it holds the reference's fp32 value exactly: a tensor operand of
    that dtype (a bf16 operand of a bf16 GEMM, an fp32 one of an fp32 GEMM), or a number whose
    fp32 value the compute dtype holds (scale(0.5) in bf16; not 0.1), with no bias or a bias of
    the compute dtype. ``other`` is [1, 1] (a number, a 0-d operand), [1, N] (a row) or [M, N]
    (a column operand as its expanded view, a full one as given)."""
    if p.scale_a is not None or p.scale_b is not None or not p.epilogue or onednn_binary_problem(compute):
        return None
    if p.bias is not None and p.bias.dtype != compute:
        return None  # the binary op takes a bias of the input's dtype only (rounding an fp32 one)
    op = p.epilogue[0]
    attr = op.definition.onednn_binary(op)
    params = op.definition.runtime_params()
    if attr is None or len(params) != 1:
        return None
    operand = p.operands[0].get(params[0].name)
    if operand is None or operand.full is None:  # a number: the op's scalar or a number operand
        number = operand.number if operand is not None else op.value(params[0].name)
        if not isinstance(number, (int, float)) or isinstance(number, bool):
            return None
        want = torch.tensor([[float(number)]], dtype=torch.float32)
        other = want.to(compute)
        held = bool(torch.equal(other.float(), want)) or bool(want.isnan().all())
        return (attr, other) if held else None
    full = operand.full
    if full.dtype != compute:
        return None
    rows_stride, cols_stride = full.stride()
    if rows_stride == 0:  # [1, N], or [1, 1] for a 0-d operand
        full = full[:1, :1] if cols_stride == 0 else full[:1]
    # an [M, 1] operand stays the expanded [M, N] view (stride 0 along N): given as [M, 1],
    # oneDNN took ~1,000x the GEMM's time at 512^3 (a per-row broadcast without a fast kernel,
    # measured on Zen 4 with torch 2.13); the expanded view runs at the GEMM's speed
    return attr, full


def _fp32_precision(p: Problem, compute: torch.dtype, onednn: bool) -> str:
    """"bf16" (oneDNN bf16 fpmath, exact here) for an fp32 oneDNN GEMM of bf16-valued inputs
    where that path is checked exact and fast (:func:`bf16_fpmath_problem`), else "ieee"."""
    bf16_valued = p.a.dtype in _BF16_EXACT and p.b.dtype in _BF16_EXACT
    if compute == torch.float32 and onednn and bf16_valued and not bf16_fpmath_problem():
        return "bf16"
    return "ieee"


def _make_plan(p: Problem) -> _Plan:
    compute, bf16_binary = _plan_choice(p)
    onednn = not onednn_problem(compute)
    precision = _fp32_precision(p, compute, onednn)
    # Scales come before the bias; under bf16 fpmath the bias and epilogue stay out of oneDNN,
    # so that nothing but the bf16-valued inputs is ever rounded to bf16.
    inside = onednn and p.scale_a is None and p.scale_b is None and precision == "ieee"
    activation = _onednn_activation(p) if inside else None
    # only where it lets the bf16 GEMM stand for the fp32 one: after an fp32 GEMM the op on the
    # block costs the same or less (a column mul as a post-op took 1.28x at 8192x1024x64, Zen 4)
    binary = bf16_binary if inside and activation is None else None
    fused_ops = 1 if activation or binary else 0
    bias = p.bias if inside else None
    if bias is not None:  # oneDNN reads the bias dense, in fp32 or the compute dtype
        bias = (bias if bias.dtype in (torch.float32, compute) else bias.float()).contiguous()
    gemm_is_output = (compute == p.out_dtype and (inside or (p.bias is None and p.scale_a is None
                                                             and p.scale_b is None))
                      and (fused_ops == len(p.epilogue) or compute != torch.float32 and _on_output(p, fused_ops))
                      and all(r.source == "output" for r in p.reductions))
    on_output = len(p.epilogue) - fused_ops if gemm_is_output else 0
    attr, scalars, algorithm = activation or ("none", [], "")
    w = converted_weight(p.b, compute, dense=p.m <= _DENSE_WEIGHT_ROWS)
    return _Plan(compute=compute, a=p.a.to(compute).contiguous(), w=w,
                 bias=bias, onednn=onednn, attr=attr, scalars=scalars, algorithm=algorithm, inside=inside,
                 binary=binary[0] if binary else "", other=binary[1] if binary else None,
                 fused_ops=fused_ops, gemm_is_output=gemm_is_output, on_output=on_output,
                 steps=reduction_steps(p.reductions, p.n),
                 needs_output=any(r.source == "output" for r in p.reductions), precision=precision)


def _gemm_block(p: Problem, plan: _Plan, rows: slice) -> torch.Tensor:
    """The block's GEMM, finished (scales, bias, every epilogue op) unless it is ``y`` itself."""
    if plan.other is not None:
        other = plan.other if plan.other.shape[0] == 1 else plan.other[rows]
        block: torch.Tensor = torch.ops.mkldnn._linear_pointwise.binary(plan.a[rows], other, plan.w,
                                                                        plan.bias, plan.binary)
    elif plan.onednn:
        block = torch.ops.mkldnn._linear_pointwise(plan.a[rows], plan.w, plan.bias,
                                                   plan.attr, plan.scalars, plan.algorithm)
    else:
        block = torch.mm(plan.a[rows], plan.w.t())
    if plan.gemm_is_output:
        return finish_block(p, block, rows, applied=plan.fused_ops) if plan.on_output else block
    if block.dtype != torch.float32:  # fast_accum: the bf16 GEMM result, finished in fp32
        block = block.float()
    return finish_block(p, block, rows, applied=plan.fused_ops if plan.inside else None)


def _run_block(p: Problem, plan: _Plan, y: torch.Tensor | None, outs: tuple[torch.Tensor, ...],
               rows: slice) -> None:
    block = _gemm_block(p, plan, rows)
    y_block = y[rows] if y is not None else None
    if y_block is not None:
        y_block.copy_(block)  # cast and store in one pass, in place
    _reduce_rows(p, plan, block, y_block, outs, rows)


def _reduce_rows(p: Problem, plan: _Plan, block: torch.Tensor, y_block: torch.Tensor | None,
                 outs: tuple[torch.Tensor, ...], rows: slice) -> None:
    """The reductions of one block: of its fp32 values (``block``) or of its rounded output."""
    if not p.reductions:
        return
    sources = {"fp32": block}
    if plan.needs_output:
        rounded = (block if block.dtype == p.out_dtype else y_block if y_block is not None
                   else block.to(p.out_dtype))
        if rounded.dtype != torch.float32:  # upcast once into a reused buffer: fp32 reductions
            rounded = _fp32_scratch(*rounded.shape).copy_(rounded)  # run ~2x faster than bf16
        sources["output"] = rounded
    _reduce_block(sources, plan.steps, outs, rows)


# GNU OpenMP is not fork-safe: in a forked child, the thread that called fork() still points
# at its parent's OpenMP team, whose threads do not exist there, and its next parallel region
# waits for them forever (plain torch ops hang the same way; DataLoader workers avoid it with
# torch.set_num_threads(1)). Any thread created in the child has a fresh team, so calls made
# on that thread are handed to a driver thread of the child's own.
_fork_survivor: tuple[int, int] | None = None  # (pid, thread ident) of a forked child's survivor
_driver: tuple[int, ThreadPoolExecutor] | None = None
_driver_lock = threading.Lock()


def _after_fork_in_child() -> None:
    global _fork_survivor
    _fork_survivor = (os.getpid(), threading.get_ident())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _on_fork_survivor() -> bool:
    return _fork_survivor == (os.getpid(), threading.get_ident())


def _driver_thread() -> ThreadPoolExecutor:
    global _driver
    with _driver_lock:
        if _driver is None or _driver[0] != os.getpid():
            _driver = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="devcaps_kernels_driver"))
        return _driver[1]


def run_cpu(p: Problem) -> tuple[torch.Tensor | None, tuple[torch.Tensor, ...], str]:
    """``(y, reductions, reason)``: ``reason`` says why the call ran slower than its usual path
    ("" when it did not), from the plan the call ran."""
    if p.m == 0 or p.n == 0 or p.k == 0:
        return (*run_reference(p), _fallback_reason(_plan_dtype(p)))
    if _on_fork_survivor() and torch.get_num_threads() > 1:
        return _driver_thread().submit(_run_cpu_here, p).result()
    return _run_cpu_here(p)


def _run_cpu_here(p: Problem) -> tuple[torch.Tensor | None, tuple[torch.Tensor, ...], str]:
    plan = _make_plan(p)
    reason = _fallback_reason(plan.compute)
    if plan.compute != torch.float32:  # no fp32 GEMM runs: nothing to pin (a bf16 GEMM)
        return (*_run_blocks(p, plan), reason)
    with fp32_matmul_precision(plan.precision):  # worker threads see the pinned setting too
        return (*_run_blocks(p, plan), reason)


def _run_blocks(p: Problem, plan: _Plan) -> Result:
    m, n = p.m, p.n
    outs = tuple(torch.empty(r.out_shape(m, n), dtype=torch.float32, device=p.device)
                 for r in p.reductions)
    step = block_rows(m, n, torch.get_num_threads())
    if m <= step and plan.gemm_is_output and p.store_output:
        # one block whose GEMM output is y itself (a new tensor oneDNN or mm made): y is that
        # tensor, not a copy of it into another (at 512^3 bf16 the copy was ~4% of the call)
        whole = _gemm_block(p, plan, slice(0, m))
        _reduce_rows(p, plan, whole, whole, outs, slice(0, m))
        return whole, outs
    y = torch.empty(m, n, dtype=p.out_dtype, device=p.device) if p.store_output else None
    for r0 in range(0, m, step):
        _run_block(p, plan, y, outs, slice(r0, min(r0 + step, m)))
    return y, outs
