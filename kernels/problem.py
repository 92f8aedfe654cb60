"""Input validation: turns the arguments of ``scaled_mm`` into one checked ``Problem``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

from .dtypes import FP8_DTYPES, INPUT_DTYPES, OUT_DTYPES, refuse_fp8_operand
from .epilogue import EpiOp, Operand
from .reductions import Reduce

__all__ = ["Operand2D", "Operands", "Problem", "build_problem"]


@dataclass(frozen=True, eq=False)
class Operand2D:
    """An epilogue operand: a number, or a fp32-convertible tensor viewed as ``[M, N]``.

    ``full`` is an expanded (stride-0 where broadcast) view of the user's tensor, so
    backends can index rows or read strides without copying.
    """

    number: float | None = None
    full: torch.Tensor | None = None


Operands = Mapping[str, Operand2D]


@dataclass(frozen=True, eq=False)
class Problem:
    """Checked inputs. Scales are ``None`` or fp32 tensors viewed ``[M, 1]`` / ``[1, N]``."""

    a: torch.Tensor
    b: torch.Tensor
    scale_a: torch.Tensor | None
    scale_b: torch.Tensor | None
    bias: torch.Tensor | None
    out_dtype: torch.dtype
    epilogue: tuple[EpiOp, ...]
    operands: tuple[Operands, ...]  # per op: operand name -> Operand2D
    reductions: tuple[Reduce, ...]
    store_output: bool
    fast_accum: bool = False

    @property
    def m(self) -> int:
        return self.a.shape[0]

    @property
    def n(self) -> int:
        return self.b.shape[1]

    @property
    def k(self) -> int:
        return self.a.shape[1]

    @property
    def device(self) -> torch.device:
        return self.a.device


def _shape(t: torch.Tensor) -> str:
    return f"[{', '.join(str(s) for s in t.shape)}]"


def _check_device(name: str, t: torch.Tensor, device: torch.device) -> None:
    if t.device != device:
        raise ValueError(f"{name} must be on {device} like a, got a tensor on {t.device}")


def _check_scale(name: str, s: object, rowwise_shape: tuple[int, int],
                 device: torch.device) -> torch.Tensor | None:
    if s is None:
        return None
    if isinstance(s, (int, float)) and not isinstance(s, bool):
        return torch.full((1, 1), float(s), dtype=torch.float32, device=device)
    if not isinstance(s, torch.Tensor):
        raise TypeError(f"{name} must be None, a number or a float32 tensor, got {type(s).__name__}")
    if s.dtype != torch.float32:
        raise TypeError(f"{name} must be float32 (a decode multiplier), got {s.dtype}")
    _check_device(name, s, device)
    if s.numel() == 1 and s.dim() <= 2:
        return s.reshape(1, 1)
    if tuple(s.shape) == rowwise_shape:
        return s
    want = "[M, 1]" if rowwise_shape[1] == 1 else "[1, N]"
    raise ValueError(f"{name} must be a scalar (numel 1) or {want} = [{rowwise_shape[0]}, "
                     f"{rowwise_shape[1]}], got shape {_shape(s)}")


def _check_operand(where: str, t: Operand, m: int, n: int, device: torch.device) -> Operand2D:
    if not isinstance(t, torch.Tensor):
        return Operand2D(number=float(t))
    refuse_fp8_operand(where + " operand", t)
    _check_device(where + " operand", t, device)
    shape = tuple(t.shape)
    if shape == ():
        full = t.reshape(1, 1).expand(m, n)
    elif shape == (n,):
        full = t.reshape(1, n).expand(m, n)
    elif shape in ((1, n), (m, 1), (m, n)):
        full = t.expand(m, n)
    else:
        raise ValueError(f"{where}: operand must be a scalar, [N]=[{n}], [1, N]=[1, {n}], "
                         f"[M, 1]=[{m}, 1] or [M, N]=[{m}, {n}], got shape {_shape(t)}")
    return Operand2D(full=full)


def _check_operands(index: int, op: EpiOp, m: int, n: int, device: torch.device) -> Operands:
    """Each operand of ``op`` as an :class:`Operand2D`, by parameter name."""
    where = f"epilogue[{index}] ({op.kind})"
    found: dict[str, Operand2D] = {}
    for name, value in op.operands():
        if not isinstance(value, (torch.Tensor, int, float)) or isinstance(value, bool):
            raise TypeError(f"{where}: operand {name} must be a number or a tensor, "
                            f"got {type(value).__name__}")
        found[name] = _check_operand(where, value, m, n, device)
    return found


def build_problem(a: torch.Tensor, b: torch.Tensor, scale_a: object, scale_b: object,
                  bias: torch.Tensor | None, out_dtype: torch.dtype, epilogue: Sequence[EpiOp],
                  reductions: Sequence[Reduce], store_output: bool, fast_accum: bool = False) -> Problem:
    """Validate everything; raises ``TypeError`` (wrong kind/dtype) or ``ValueError`` (shape,
    device, group) naming what was expected and what was given."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in INPUT_DTYPES:
            raise TypeError(f"{name} has unsupported dtype {t.dtype}; expected one of "
                            f"{', '.join(str(d) for d in INPUT_DTYPES)}")
        if t.dim() != 2:
            raise ValueError(f"{name} must be 2-D, got shape {_shape(t)}")
    if a.dtype != b.dtype and not (a.dtype in FP8_DTYPES and b.dtype in FP8_DTYPES):
        raise TypeError(f"a and b must share a dtype (or both be fp8), got {a.dtype} and {b.dtype}")
    device = a.device
    _check_device("b", b, device)
    m, k = a.shape
    if b.shape[0] != k:
        raise ValueError(f"shape mismatch: a is [M, K] = {_shape(a)} so b must be [K, N] with "
                         f"K = {k}, got b {_shape(b)}")
    n = b.shape[1]
    if out_dtype not in OUT_DTYPES:
        raise TypeError(f"out_dtype must be one of {', '.join(str(d) for d in OUT_DTYPES)}, "
                        f"got {out_dtype}")
    sa = _check_scale("scale_a", scale_a, (m, 1), device)
    sb = _check_scale("scale_b", scale_b, (1, n), device)
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or not bias.is_floating_point():
            raise TypeError(f"bias must be a floating-point tensor, got "
                            f"{getattr(bias, 'dtype', type(bias).__name__)}")
        refuse_fp8_operand("bias", bias)
        _check_device("bias", bias, device)
        if tuple(bias.shape) != (n,):
            raise ValueError(f"bias must be [N] = [{n}], got shape {_shape(bias)}")
    ops = tuple(epilogue)
    for i, op in enumerate(ops):
        if not isinstance(op, EpiOp):
            raise TypeError(f"epilogue[{i}] must be an op from devcaps_kernels.epilogue, "
                            f"got {type(op).__name__}")
    operands = tuple(_check_operands(i, op, m, n, device) for i, op in enumerate(ops))
    reds = tuple(reductions)
    for i, r in enumerate(reds):
        if not isinstance(r, Reduce):
            raise TypeError(f"reductions[{i}] must be a Reduce, got {type(r).__name__}")
        if n == 0:
            raise ValueError("reductions need N >= 1, got N = 0")
        if r.group is not None and n % r.group != 0 and not r.ragged:
            raise ValueError(f"reductions[{i}]: N % group must be 0, got N = {n}, "
                             f"group = {r.group} (Reduce(..., ragged=True) reduces the "
                             f"{n % r.group} columns left over as a shorter last group)")
    return Problem(a=a, b=b, scale_a=sa, scale_b=sb, bias=bias, out_dtype=out_dtype,
                   epilogue=ops, operands=operands, reductions=reds,
                   store_output=bool(store_output), fast_accum=bool(fast_accum))
