"""Row and grouped reductions of the GEMM output (all in fp32)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

KINDS = ("sum", "mean", "sumsq", "meansq", "amax")
SOURCES = ("output", "fp32")


@dataclass(frozen=True)
class Reduce:
    """Reduce each row of the result, whole (``group=None``) or in groups of ``group`` columns.

    ``kind``: ``sum``, ``mean``, ``sumsq`` (sum of squares), ``meansq`` or ``amax`` (max of
    absolute values). ``source="output"`` reduces the rounded ``out_dtype`` values (what
    ``y.float()`` holds); ``"fp32"`` the fp32 value before the cast. The result is fp32, ``[M]``
    for ``group=None`` and ``[M, N // group]`` otherwise (``N % group == 0`` is required).
    NaN propagates through every kind.
    """

    kind: str
    group: int | None = None
    source: str = "output"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Reduce.kind must be one of {KINDS}, got {self.kind!r}")
        if self.source not in SOURCES:
            raise ValueError(f"Reduce.source must be one of {SOURCES}, got {self.source!r}")
        if self.group is not None and (isinstance(self.group, bool)
                                       or not isinstance(self.group, int) or self.group < 1):
            raise ValueError(f"Reduce.group must be None or a positive int, got {self.group!r}")

    def group_size(self, n: int) -> int:
        return n if self.group is None else self.group

    def combine_is_max(self) -> bool:
        return self.kind == "amax"


def prepare(src: torch.Tensor, kind: str) -> torch.Tensor:
    """The per-element value a reduction kind sums or maxes, in fp32 (or wider)."""
    x = src.to(torch.promote_types(src.dtype, torch.float32))
    if kind in ("sumsq", "meansq"):
        return x * x
    if kind == "amax":
        return x.abs()
    return x


def combine(values: torch.Tensor, reduce: Reduce, group: int) -> torch.Tensor:
    """Reduce the last axis of ``values`` (already prepared, fp32) and finish means."""
    if reduce.combine_is_max():
        return values.amax(-1)
    total = values.sum(-1)
    if reduce.kind in ("mean", "meansq"):
        total = total / group
    return total


def reduce_rows(src: torch.Tensor, reduce: Reduce) -> torch.Tensor:
    """``reduce`` over the ``[M, N]`` tensor ``src`` (plain torch; the reference definition)."""
    m, n = src.shape
    g = reduce.group_size(n)
    out = combine(prepare(src, reduce.kind).view(m, n // g, g), reduce, g)
    return out.view(m) if reduce.group is None else out
