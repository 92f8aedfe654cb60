"""The ``cpu`` backend: row-blocked GEMM whose blocks are finished and reduced while in cache.

Each block of rows goes through one oneDNN call that already applies the bias and the first
activation (``torch.ops.mkldnn._linear_pointwise``) when no scale precedes them; the rest of
the epilogue, the cast and every reduction then run on that block while it is hot.
Blocks are spread over a pool of threads, one per intra-op thread, each running torch
single-threaded: every core finishes its own blocks in its own cache and no OpenMP barrier
is crossed per op (with several small ops per block those barriers cost more than the work,
and far more on a shared machine).

fp8 inputs are upcast to bf16 once (exact). The GEMM runs in bf16 only when its rounded
output *is* the final ``y`` (bf16 out, no scales, nothing left to apply, no fp32-source
reduction); otherwise it runs in fp32 on upcast inputs, so the accumulator is exactly the
reference's ``a.float() @ b.float()`` up to summation order.
"""

from __future__ import annotations

import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

from .problem import FP8_DTYPES, Problem
from .reductions import Reduce
from .reference import Result, finish_block, run_reference

# oneDNN post-op names (attr, algorithm) for our activations.
# relu is left out: oneDNN's relu turns NaN into 0, torch.relu keeps NaN.
_ONEDNN_ACTIVATIONS = {"silu": ("swish", ""), "sigmoid": ("sigmoid", ""),
                       "tanh": ("tanh", "")}
# Aim for blocks of about this many output elements (measured best on a 2-core Zen 4 VM:
# fewer small ops per output beat strict L2 residency: a bf16 block is 1 MiB = L2, fp32 in L3).
_BLOCK_ELEMENTS = 1 << 19


def _onednn_activation(p: Problem) -> tuple[str, str] | None:
    """The oneDNN post-op for ``p.epilogue[0]`` when it can run inside the GEMM."""
    if p.scale_a is not None or p.scale_b is not None or not p.epilogue:
        return None
    op = p.epilogue[0]
    if op.kind == "gelu":
        return ("gelu", op.approximate)
    return _ONEDNN_ACTIVATIONS.get(op.kind)


def block_rows(m: int, n: int, workers: int) -> int:
    """Rows per block: about ``_BLOCK_ELEMENTS`` outputs, at least 256 rows so the weight
    (re-read once per block) is amortized, and at least two blocks per worker when M allows."""
    rows = max(_BLOCK_ELEMENTS // max(n, 1), 256)
    if workers > 1:
        rows = min(rows, max(16, -(-m // (2 * workers))))
    return min(m, rows)


_pool_lock = threading.Lock()
_pool: tuple[int, int, ThreadPoolExecutor] | None = None  # (pid, workers, pool)


def _single_threaded_worker() -> None:
    torch.ones(1 << 16).sum()  # run ATen's per-thread lazy init first, or it would undo the next line
    torch.set_num_threads(1)   # sets this thread's OpenMP count (and, briefly, the global one)


def _worker_pool(workers: int) -> ThreadPoolExecutor:
    """A pool of ``workers`` threads whose torch ops run single-threaded."""
    global _pool
    with _pool_lock:
        # A forked child inherits the pool object but not its threads: make a new one.
        if _pool is None or _pool[:2] != (os.getpid(), workers):
            if _pool is not None and _pool[0] == os.getpid():
                _pool[2].shutdown(wait=False)
            pool = ThreadPoolExecutor(workers, thread_name_prefix="devcaps_kernels",
                                      initializer=_single_threaded_worker)
            barrier = threading.Barrier(workers)
            list(pool.map(lambda _: barrier.wait(), range(workers)))  # start every worker now
            torch.set_num_threads(workers)  # restore the global count the workers changed
            _pool = (os.getpid(), workers, pool)
        return _pool[2]


_FAMILY = {"sum": "sum", "mean": "sum", "sumsq": "sq", "meansq": "sq", "amax": "abs"}


def _raw_partial(src: torch.Tensor, family: str, g: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Sum / sum of squares / max-abs of each group of ``g`` columns of ``src``, fp32."""
    rows, n = src.shape
    v = src.view(rows, n // g, g)
    if family == "sum":
        return torch.sum(v, -1, dtype=torch.float32, out=out)
    if family == "sq":
        # One pass instead of square-then-sum; sqrt/square cost ~1 ulp.
        norm: torch.Tensor = torch.linalg.vector_norm(v, 2, -1, dtype=torch.float32, out=out)
        return norm.square_()
    amax: torch.Tensor = torch.linalg.vector_norm(v, math.inf, -1, dtype=torch.float32, out=out)
    return amax


def _reduce_block(sources: dict[str, torch.Tensor], reductions: tuple[Reduce, ...],
                  outs: tuple[torch.Tensor, ...], rows: slice) -> None:
    """Write every reduction of one block into its output rows.

    A reduction whose group is a multiple of an already computed finer one (same family and
    source) is derived from those partials: ``Reduce("sum")`` next to ``Reduce("sum",
    group=64)`` costs a pass over N/64 values, not over the block. Results are written in
    place (``out=``) where no mean division follows, to save small ops per block.
    """
    n = next(iter(sources.values())).shape[1]
    partials: dict[tuple[str, str, int], torch.Tensor] = {}
    order = sorted(range(len(reductions)), key=lambda i: reductions[i].group_size(n))
    for i in order:
        r = reductions[i]
        family, g = _FAMILY[r.kind], r.group_size(n)
        out = outs[i][rows].view(-1, n // g)
        is_mean = r.kind in ("mean", "meansq")
        raw = partials.get((family, r.source, g))
        if raw is None:
            target = None if is_mean else out
            finer = [fg for (f, s, fg) in partials if f == family and s == r.source and g % fg == 0]
            if finer:
                fg = max(finer)
                part = partials[(family, r.source, fg)]
                part = part.view(part.shape[0], n // g, g // fg)
                raw = (torch.amax(part, -1, out=target) if family == "abs"
                       else torch.sum(part, -1, out=target))
            else:
                raw = _raw_partial(sources[r.source], family, g, out=target)
            partials[(family, r.source, g)] = raw
            if not is_mean:
                continue
        if is_mean:
            torch.div(raw, g, out=out)
        else:
            out.copy_(raw)


def run_cpu(p: Problem) -> Result:
    m, n, k = p.m, p.n, p.k
    if m == 0 or n == 0 or k == 0:
        return run_reference(p)
    activation = _onednn_activation(p)
    fused_ops = 1 if activation else 0
    # fp8 and bf16 inputs are exact in bf16, so a bf16 GEMM reads them unchanged.
    bf16_exact = FP8_DTYPES + (torch.bfloat16,)
    inputs_exact_in_bf16 = p.a.dtype in bf16_exact and p.b.dtype in bf16_exact
    gemm_is_output = (inputs_exact_in_bf16 and p.out_dtype == torch.bfloat16 and fused_ops == len(p.epilogue)
                      and p.scale_a is None and p.scale_b is None
                      and all(r.source == "output" for r in p.reductions))
    compute = torch.bfloat16 if gemm_is_output else torch.float32
    a = p.a.to(compute).contiguous()
    w = p.b.to(compute).t()  # [N, K]; oneDNN takes the transposed view without a copy
    bias = p.bias
    if bias is not None:  # oneDNN reads the bias as dense
        bias = (bias if bias.dtype in (torch.float32, compute) else bias.float()).contiguous()
    use_onednn = p.scale_a is None and p.scale_b is None  # scales come before bias
    attr, algorithm = activation or ("none", "")

    y = torch.empty(m, n, dtype=p.out_dtype, device=p.device) if p.store_output else None
    outs = tuple(torch.empty((m,) if r.group is None else (m, n // r.group), dtype=torch.float32,
                             device=p.device) for r in p.reductions)

    def run_block(r0: int) -> None:
        rows = slice(r0, min(r0 + step, m))
        if use_onednn:
            block = torch.ops.mkldnn._linear_pointwise(a[rows], w, bias, attr, [], algorithm)
            if not gemm_is_output:
                block = finish_block(p, block, rows, applied=fused_ops)
        else:
            block = finish_block(p, torch.mm(a[rows], w.t()), rows)
        yb = block if block.dtype == p.out_dtype else block.to(p.out_dtype)
        if y is not None:
            y[rows] = yb
        if p.reductions:
            # One upcast of the block: fp32 reductions run ~2x faster than on bf16/fp16.
            _reduce_block({"output": yb.float(), "fp32": block}, p.reductions, outs, rows)

    workers = torch.get_num_threads()
    step = block_rows(m, n, workers)
    starts = range(0, m, step)
    if workers > 1 and len(starts) > 1:
        for future in [_worker_pool(workers).submit(run_block, r0) for r0 in starts]:
            future.result()
    else:
        for r0 in starts:
            run_block(r0)
    return y, outs
