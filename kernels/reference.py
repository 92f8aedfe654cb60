"""The ``reference`` backend: plain torch on any device; the ground truth and unfused baseline."""

from __future__ import annotations

import torch

from .epilogue import apply_torch
from .precision import fp32_matmul_precision
from .problem import Problem
from .reductions import reduce_rows

Result = tuple["torch.Tensor | None", tuple[torch.Tensor, ...]]


def finish_block(p: Problem, acc: torch.Tensor, rows: slice, *,
                 applied: int | None = None) -> torch.Tensor:
    """Scales, bias and the epilogue on the fp32 accumulator block ``acc`` (rows ``rows``).

    ``applied=i`` says a fused GEMM already applied scales, bias and the first ``i`` ops.
    Works in place where torch allows; returns the finished fp32 block.
    """
    first_op = applied or 0
    if applied is None:
        if p.scale_a is not None:
            acc.mul_(p.scale_a[rows] if p.scale_a.shape[0] != 1 else p.scale_a)
        if p.scale_b is not None:
            acc.mul_(p.scale_b)
        if p.bias is not None:
            acc.add_(p.bias)
    for op, operands in zip(p.epilogue[first_op:], p.operands[first_op:]):
        values = {name: o.number if o.full is None else o.full[rows] for name, o in operands.items()}
        acc = apply_torch(acc, op, values)
    return acc


def run_reference(p: Problem) -> Result:
    """``acc = a.float() @ b.float()`` in IEEE fp32 (whatever float32_matmul_precision says),
    finished in fp32, cast, then reduced."""
    with fp32_matmul_precision("ieee"):
        acc = p.a.float() @ p.b.float()
    acc = finish_block(p, acc, slice(None))
    y = acc.to(p.out_dtype)
    reductions = tuple(reduce_rows(y if r.source == "output" else acc, r) for r in p.reductions)
    return (y if p.store_output else None), reductions
