"""The kernel plan of a problem on a Triton target: the running process's, or any GPU target.

:class:`KernelTarget` is what the plan needs to know about a target: its vendor, whether its
``tl.dot`` takes each fp8 type natively, whether it accumulates native fp8 imprecisely by
default, and its per-block shared memory. :func:`current_target` reads it from Triton's active
driver (the process's GPU); :func:`target_for` from a Triton ``GPUTarget`` with no driver and no
GPU (the cross-compilation), both through the same backend options
(``make_backend(target).parse_options({})``). :func:`plan_for` then makes the one plan the
runtime launches and the cross-compilation checks.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import torch

from .dtypes import FP8_DTYPES
from .gpu_targets import shared_limit
from .problem import Problem
from .triton_configs import INTERPRETER, TileConfig, configs_for, segment_base
from .triton_source import TRITON_FP8, KernelPlan, OpPlan
from .triton_support import (_target_options, active_driver, options_fp8_dot_imprecise, options_fp8_dot_types,
                             triton_drives)


@dataclass(frozen=True)
class KernelTarget:
    """What a plan needs to know about the target it is compiled for."""

    vendor: str                      # "cuda", "hip", "xpu"; "" when unknown / interpreted
    arch: int | str | None
    fp8_dot_types: frozenset[str]    # Triton fp8 type names tl.dot takes as fp8
    fp8_imprecise: bool              # native fp8 dots accumulate imprecisely unless told
    shared_limit: int | None         # bytes per block; None: unknown (no config dropped)
    interpret: bool = False


INTERPRETED = KernelTarget("", None, frozenset(), False, None, interpret=True)


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def target_for(gpu_target: Any) -> KernelTarget:
    """The :class:`KernelTarget` of a Triton ``GPUTarget`` (no driver or GPU needed)."""
    options = _target_options(gpu_target)
    return KernelTarget(str(gpu_target.backend), gpu_target.arch, options_fp8_dot_types(options),
                        options_fp8_dot_imprecise(options), shared_limit(str(gpu_target.backend), gpu_target.arch))


def current_target() -> KernelTarget:
    """The target of this process: the interpreter under TRITON_INTERPRET=1, else the active
    driver's current device; an unknown target (fp8 decoded, all configs) when Triton cannot say."""
    if interpreting():
        return INTERPRETED
    driver = active_driver()
    try:
        return target_for(driver.get_current_target()) if driver is not None else _UNKNOWN
    except Exception:  # noqa: BLE001 - another Triton version, a broken driver...
        return _UNKNOWN


_UNKNOWN = KernelTarget("", None, frozenset(), True, None)


def target_of(device: torch.device) -> KernelTarget:
    """The target a launch on ``device`` compiles for: the interpreter under TRITON_INTERPRET=1,
    the active driver's where Triton drives ``device``, else unknown (no driver is asked)."""
    if interpreting():
        return INTERPRETED
    return current_target() if triton_drives(device) else _UNKNOWN


def native_fp8(a_dtype: torch.dtype, b_dtype: torch.dtype, target: KernelTarget) -> bool:
    """Both operands are the same fp8 type and the target's ``tl.dot`` takes it as fp8."""
    return a_dtype == b_dtype and a_dtype in FP8_DTYPES and TRITON_FP8[a_dtype] in target.fp8_dot_types


def family(a_dtype: torch.dtype, native: bool) -> str:
    """The autotune family: operands as ``tl.dot`` sees them."""
    if native:
        return "fp8"
    return "fp32" if a_dtype == torch.float32 else "16bit"


def tile_configs(p: Problem, target: KernelTarget, native: bool) -> tuple[TileConfig, ...]:
    if target.interpret:
        return INTERPRETER
    return configs_for(target.vendor, family(p.a.dtype, native), p.n, target.shared_limit, target.arch)


def plan_for(p: Problem, target: KernelTarget,
             configs: tuple[TileConfig, ...] | None = None) -> KernelPlan:
    """The kernel plan of ``p`` on ``target`` (``configs``: the autotune candidates, by default
    the target's list for the problem's family)."""
    native = native_fp8(p.a.dtype, p.b.dtype, target)
    configs = tile_configs(p, target, native) if configs is None else configs
    base = segment_base(configs)
    reductions = tuple((r.kind, r.source, math.gcd(r.group_size(p.n), base)) for r in p.reductions)
    ops = tuple(OpPlan(op.definition, tuple(op.statics().items())) for op in p.epilogue)
    return KernelPlan(a_dtype=p.a.dtype, b_dtype=p.b.dtype, native_fp8=native, out_dtype=p.out_dtype,
                      scale_a=p.scale_a is not None, scale_b=p.scale_b is not None, bias=p.bias is not None,
                      ops=ops, reductions=reductions, store=p.store_output, configs=configs,
                      promote_fp8_acc=native and not p.fast_accum and target.fp8_imprecise,
                      interpret=target.interpret)
