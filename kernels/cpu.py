"""The ``cpu`` backend: row-blocked GEMM whose blocks are finished and reduced while in cache.

Each block of rows goes through one oneDNN call that already applies the bias and the first
activation (``torch.ops.mkldnn._linear_pointwise``) when no scale precedes them; the rest of
the epilogue, the cast and every reduction then run on that block before the next one.
fp8 inputs are upcast to bf16 once (exact). The GEMM runs in bf16 only when its rounded
output *is* the final ``y`` (bf16 out, nothing left to apply, no fp32-source reduction);
otherwise it runs in fp32 on upcast inputs so the accumulator keeps the reference semantics.
"""

from __future__ import annotations

import math

import torch

from .problem import FP8_DTYPES, Problem
from .reductions import Reduce
from .reference import Result, finish_block, run_reference

# oneDNN post-op names (attr, algorithm) for our activations.
# relu is left out: oneDNN's relu turns NaN into 0, torch.relu keeps NaN.
_ONEDNN_ACTIVATIONS = {"silu": ("swish", ""), "sigmoid": ("sigmoid", ""),
                       "tanh": ("tanh", "")}
# Aim for blocks of about this many output elements: an fp32 block then stays in L2.
_BLOCK_ELEMENTS = 1 << 18


def _onednn_activation(p: Problem) -> tuple[str, str] | None:
    """The oneDNN post-op for ``p.epilogue[0]`` when it can run inside the GEMM."""
    if p.scale_a is not None or p.scale_b is not None or not p.epilogue:
        return None
    op = p.epilogue[0]
    if op.kind == "gelu":
        return ("gelu", op.approximate)
    return _ONEDNN_ACTIVATIONS.get(op.kind)


def block_rows(m: int, n: int, k: int) -> int:
    """Rows per block: about ``_BLOCK_ELEMENTS`` outputs, more when K is large so the weight
    (re-read once per block) is amortized."""
    rows = max(16, _BLOCK_ELEMENTS // max(n, 1))
    if k > 1024:
        rows = max(rows, 256)
    return min(m, rows)


def _reduce_block(src: torch.Tensor, r: Reduce, out: torch.Tensor) -> None:
    """Write reduction ``r`` of the block ``src`` ([rows, N], any float dtype) into ``out``."""
    rows, n = src.shape
    g = r.group_size(n)
    v = src.view(rows, n // g, g)
    out = out.view(rows, n // g)
    if r.kind in ("sum", "mean"):
        torch.sum(v, -1, dtype=torch.float32, out=out)
    elif r.kind in ("sumsq", "meansq"):
        # One pass instead of square-then-sum; sqrt/square cost ~1 ulp.
        torch.linalg.vector_norm(v, 2, -1, dtype=torch.float32, out=out)
        out.square_()
    else:
        torch.linalg.vector_norm(v, math.inf, -1, dtype=torch.float32, out=out)
    if r.kind in ("mean", "meansq"):
        out.div_(g)


def run_cpu(p: Problem) -> Result:
    m, n, k = p.m, p.n, p.k
    if m == 0 or n == 0 or k == 0:
        return run_reference(p)
    activation = _onednn_activation(p)
    fused_ops = 1 if activation else 0
    wide = p.a.dtype in FP8_DTYPES + (torch.bfloat16,) and p.b.dtype in FP8_DTYPES + (torch.bfloat16,)
    gemm_is_output = (wide and p.out_dtype == torch.bfloat16 and fused_ops == len(p.epilogue)
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
    step = block_rows(m, n, k)
    for r0 in range(0, m, step):
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
        for r, out in zip(p.reductions, outs):
            _reduce_block(yb if r.source == "output" else block, r, out[rows])
    return y, outs
