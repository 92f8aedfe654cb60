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
    for ``group=None`` and ``[M, ceil(N / group)]`` otherwise. ``N % group == 0`` is required
    unless ``ragged=True``: then the last group holds the ``N % group`` columns left over and
    is reduced over those (a mean divides by their count). A group that does not divide N is
    more often a mistake than a wish, hence the opt-in. NaN propagates through every kind.
    """

    kind: str
    group: int | None = None
    source: str = "output"
    ragged: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Reduce.kind must be one of {KINDS}, got {self.kind!r}")
        if self.source not in SOURCES:
            raise ValueError(f"Reduce.source must be one of {SOURCES}, got {self.source!r}")
        if self.group is not None and (isinstance(self.group, bool)
                                       or not isinstance(self.group, int) or self.group < 1):
            raise ValueError(f"Reduce.group must be None or a positive int, got {self.group!r}")
        if not isinstance(self.ragged, bool):
            raise ValueError(f"Reduce.ragged must be a bool, got {self.ragged!r}")

    def group_size(self, n: int) -> int:
        return n if self.group is None else self.group

    def groups(self, n: int) -> int:
        """How many groups a row of ``n`` columns has (the last one may be short if ragged)."""
        return -(-n // self.group_size(n)) if n else 0

    def counts(self, n: int, device: torch.device) -> torch.Tensor | int:
        """The element count of each group: an int when all are equal, else an fp32 ``[groups]``."""
        g = self.group_size(n)
        if n % g == 0:
            return g
        counts = torch.full((self.groups(n),), float(g), device=device)
        counts[-1] = n % g
        return counts

    def out_shape(self, m: int, n: int) -> tuple[int, ...]:
        return (m,) if self.group is None else (m, self.groups(n))

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


def grouped(values: torch.Tensor, per: int) -> torch.Tensor:
    """``values [rows, n]`` viewed ``[rows, ceil(n / per), per]``; a short last group is padded
    with zeros, the identity of every combine here (sums, and maxima of absolute values)."""
    rows, n = values.shape
    pad = -n % per
    if pad:
        values = torch.nn.functional.pad(values, (0, pad))
    return values.view(rows, (n + pad) // per, per)


def finish_mean(total: torch.Tensor, reduce: Reduce, n: int) -> torch.Tensor:
    """Divide the sums of a ``mean``/``meansq`` reduction by its group counts (no-op otherwise)."""
    if reduce.kind not in ("mean", "meansq"):
        return total
    return total / reduce.counts(n, total.device)


def reduce_rows(src: torch.Tensor, reduce: Reduce) -> torch.Tensor:
    """``reduce`` over the ``[M, N]`` tensor ``src`` (plain torch; the reference definition)."""
    m, n = src.shape
    values = grouped(prepare(src, reduce.kind), reduce.group_size(n))
    out = finish_mean(values.amax(-1) if reduce.combine_is_max() else values.sum(-1), reduce, n)
    return out.view(m) if reduce.group is None else out
