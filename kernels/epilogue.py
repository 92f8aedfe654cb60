"""Pointwise epilogue ops, applied in order to the fp32 accumulator before the cast.

Build them with the constructors below (``ep.gelu(approximate="tanh")``, ``ep.mul(t)``...).
An operand ``t`` is a Python number or a tensor shaped ``[]``, ``[N]``, ``[1, N]``, ``[M, 1]``
or ``[M, N]``; it is converted to fp32 for the math.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

import torch

from .dtypes import refuse_fp8_operand

Operand = Union[float, int, torch.Tensor]

ACTIVATIONS = ("relu", "gelu", "silu", "sigmoid", "tanh")
BINARY = ("add", "mul")
KINDS = ACTIVATIONS + BINARY + ("scale", "clamp")
GELU_APPROXIMATIONS = ("none", "tanh")


@dataclass(frozen=True, eq=False)
class EpiOp:
    """One epilogue step: ``kind`` plus its parameters (use the constructors, not this class)."""

    kind: str
    operand: Operand | None = None
    approximate: str = "none"
    lo: float | None = None
    hi: float | None = None

    def __repr__(self) -> str:
        if self.kind == "gelu":
            return f"gelu(approximate={self.approximate!r})"
        if self.kind == "clamp":
            return f"clamp(lo={self.lo}, hi={self.hi})"
        if self.kind in BINARY or self.kind == "scale":
            shown = (f"Tensor{list(self.operand.shape)}" if isinstance(self.operand, torch.Tensor)
                     else self.operand)
            return f"{self.kind}({shown})"
        return f"{self.kind}()"


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a Python number, got {type(value).__name__}")
    return float(value)


def _operand(kind: str, t: object) -> Operand:
    if isinstance(t, torch.Tensor):
        if not t.is_floating_point():
            raise TypeError(f"{kind}(t): t must be a floating-point tensor, got dtype {t.dtype}")
        refuse_fp8_operand(f"{kind}(t): t", t)
        return t
    return _number(f"{kind}(t)", t)


def relu() -> EpiOp:
    return EpiOp("relu")


def gelu(approximate: str = "none") -> EpiOp:
    if approximate not in GELU_APPROXIMATIONS:
        raise ValueError(f"gelu(approximate=...) expects one of {GELU_APPROXIMATIONS}, "
                         f"got {approximate!r}")
    return EpiOp("gelu", approximate=approximate)


def silu() -> EpiOp:
    return EpiOp("silu")


def sigmoid() -> EpiOp:
    return EpiOp("sigmoid")


def tanh() -> EpiOp:
    return EpiOp("tanh")


def add(t: Operand) -> EpiOp:
    """``x + t``."""
    return EpiOp("add", operand=_operand("add", t))


def mul(t: Operand) -> EpiOp:
    """``x * t``."""
    return EpiOp("mul", operand=_operand("mul", t))


def scale(alpha: float) -> EpiOp:
    """``x * alpha`` for a Python number ``alpha``."""
    return EpiOp("scale", operand=_number("scale(alpha)", alpha))


def clamp(lo: float | None = None, hi: float | None = None) -> EpiOp:
    """``torch.clamp(x, lo, hi)``; at least one bound is required."""
    if lo is None and hi is None:
        raise ValueError("clamp() expects at least one of lo, hi; got neither")
    lo_f = None if lo is None else _number("clamp(lo)", lo)
    hi_f = None if hi is None else _number("clamp(hi)", hi)
    if lo_f is not None and math.isnan(lo_f) or hi_f is not None and math.isnan(hi_f):
        raise ValueError(f"clamp() bounds must not be NaN, got lo={lo}, hi={hi}")
    return EpiOp("clamp", lo=lo_f, hi=hi_f)


def apply_torch(x: torch.Tensor, op: EpiOp, operand: torch.Tensor | float | None) -> torch.Tensor:
    """Apply ``op`` to the fp32 block ``x`` in place where possible; returns the result.

    ``operand`` is the op's operand already broadcast to ``x``'s rows (fp32 view) or a number.
    """
    kind = op.kind
    if kind == "relu":
        return torch.relu_(x)
    if kind == "gelu":
        return torch.nn.functional.gelu(x, approximate=op.approximate)
    if kind == "silu":
        return torch.nn.functional.silu(x, inplace=True)
    if kind == "sigmoid":
        return torch.sigmoid_(x)
    if kind == "tanh":
        return torch.tanh_(x)
    if kind == "add":
        assert operand is not None
        return x.add_(operand)
    if kind in ("mul", "scale"):
        assert operand is not None
        return x.mul_(operand)
    if kind == "clamp":
        return x.clamp_(op.lo, op.hi)
    raise AssertionError(f"unknown epilogue kind {kind!r}")
