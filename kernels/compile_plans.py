"""The plans the cross-compilation builds: a representative set for CI and the whole matrix.

A :class:`PlanSpec` describes a ``scaled_mm`` call without data (operand family, scales, bias,
epilogue, reductions); :meth:`PlanSpec.problem` makes a stand-in problem for a target on the
meta device (``a`` row-major, ``b`` column-major as ``torch._scaled_mm`` and ``nn.Linear``
weights have it; 4096^3), whose launch arguments Triton specializes as at a real launch.

* :func:`representative` (CI): every operand family (fp8 in the target's own e4m3 format,
  bf16, fp32) with one plan that has scales, bias, two epilogue ops (one reading an ``[M, 1]``
  tensor) and three reductions (row, group and an fp32-source max), on every target.
* :func:`op_plans` and :func:`reduction_plans` (with every tile config of each target's family
  lists, the whole matrix of ``python -m devcaps_kernels.compile --all``): every epilogue op
  alone, every reduction kind and source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from . import epilogue as ep
from .epilogue import EpiOp
from .gpu_targets import GpuTarget
from .problem import Problem, build_problem
from .reductions import KINDS, SOURCES, Reduce

FAMILIES = ("fp8", "bf16", "fp32")
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "e5m2": torch.float8_e5m2}
META = torch.device("meta")


def meta_tensor(*shape: int) -> torch.Tensor:
    return torch.empty(shape, device=META)


#: An op for a problem of M x N: ``(m, n) -> EpiOp`` (its tensor operands on the meta device).
Recipe = Callable[[int, int], EpiOp]
#: The built-in ops' recipes by name.
OPS: dict[str, Recipe] = {
    "relu": lambda m, n: ep.relu(),
    "gelu": lambda m, n: ep.gelu(),
    "gelu_tanh": lambda m, n: ep.gelu(approximate="tanh"),
    "silu": lambda m, n: ep.silu(),
    "sigmoid": lambda m, n: ep.sigmoid(),
    "tanh": lambda m, n: ep.tanh(),
    "scale": lambda m, n: ep.scale(0.5),
    "clamp": lambda m, n: ep.clamp(-1.0, 1.0),
    "clamp_lo": lambda m, n: ep.clamp(lo=0.0),
    "add_number": lambda m, n: ep.add(1.5),
    "add_row": lambda m, n: ep.add(meta_tensor(n)),
    "mul_col": lambda m, n: ep.mul(meta_tensor(m, 1)),
    "add_full": lambda m, n: ep.add(meta_tensor(m, n)),
}


@dataclass(frozen=True)
class PlanSpec:
    """A plan to compile: a ``scaled_mm`` call without data."""

    name: str
    operands: str = "bf16"                  # fp8 (the target's e4m3), e5m2, bf16, fp16, fp32
    scales: str = "none"                    # none, tensorwise, rowwise
    bias: bool = False
    epilogue: tuple[str | Recipe, ...] = ()  # names in OPS, or recipes of ops defined elsewhere
    reductions: tuple[Reduce, ...] = ()
    out_dtype: torch.dtype = torch.bfloat16
    store: bool = True

    def dtype(self, target: GpuTarget) -> torch.dtype:
        if self.operands == "fp8":
            return target.fp8_dtype or torch.float8_e4m3fn  # sm_80: e4m3fn, decoded
        return _DTYPES[self.operands]

    def problem(self, target: GpuTarget, m: int = 4096, n: int = 4096, k: int = 4096) -> Problem:
        dtype = self.dtype(target)
        a = torch.empty(m, k, dtype=dtype, device=META)
        b = torch.empty(n, k, dtype=dtype, device=META).t()
        sa, sb = {"none": (None, None), "tensorwise": (meta_tensor(1, 1), meta_tensor(1, 1)),
                  "rowwise": (meta_tensor(m, 1), meta_tensor(1, n))}[self.scales]
        bias = torch.empty(n, dtype=torch.bfloat16, device=META) if self.bias else None
        ops = [(OPS[o] if isinstance(o, str) else o)(m, n) for o in self.epilogue]
        return build_problem(a, b, sa, sb, bias, self.out_dtype, ops, self.reductions, self.store)


REPRESENTATIVE_REDUCTIONS = (Reduce("sum"), Reduce("sumsq", group=64), Reduce("amax", source="fp32"))


def representative_plan(operands: str) -> PlanSpec:
    """The one epilogue-and-reduction plan each family is checked with in CI."""
    return PlanSpec(f"{operands}:{'rowwise+' if operands == 'fp8' else ''}bias+gelu_tanh+mul_col"
                    f"/sum+sumsq.g64+amax.fp32", operands, "rowwise" if operands == "fp8" else "none",
                    True, ("gelu_tanh", "mul_col"), REPRESENTATIVE_REDUCTIONS)


def representative() -> tuple[PlanSpec, ...]:
    return tuple(representative_plan(f) for f in FAMILIES)


def op_plans(operands: str) -> tuple[PlanSpec, ...]:
    """Every epilogue op alone (after the bias; with scales for fp8)."""
    scales = "rowwise" if operands == "fp8" else "none"
    return tuple(PlanSpec(f"{operands}:bias+{name}", operands, scales, True, (name,)) for name in OPS)


def reduction_plans(operands: str) -> tuple[PlanSpec, ...]:
    """Every reduction kind and source in groups of 64 without storing y, plus whole-row sums
    (the two-pass workspace path) of each source."""
    scales = "rowwise" if operands == "fp8" else "none"
    shapes = [(kind, source, 64) for kind in KINDS for source in SOURCES] + [("sum", s, None) for s in SOURCES]
    return tuple(PlanSpec(f"{operands}:{kind}.{source}.{'row' if g is None else f'g{g}'}", operands, scales,
                          False, (), (Reduce(kind, group=g, source=source),), store=False)
                 for kind, source, g in shapes)
