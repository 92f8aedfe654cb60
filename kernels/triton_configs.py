"""Autotuning configs of the fused Triton kernel: per vendor and dtype family, M bucketed.

The tile lists follow Triton's matmul tutorial (``python/tutorials/03-matrix-multiplication.py``:
``get_cuda_autotune_config`` with its 16-bit and "good config for fp8 inputs" halves, and
``get_hip_autotune_config`` with ``waves_per_eu`` and ``num_stages=2``). Changes:

* every ``BLOCK_N`` is a power of two no smaller than :data:`MIN_BLOCK_N` (or N's own power
  of two when N is smaller), so the reduction segments ``gcd(group, min BLOCK_N)`` divide every
  config's tile: the workspace shape and the reduction order do not depend on which config
  the autotuner picks (no atomics, the same partial sums in the same order);
* fp8 on AMD gets ``BLOCK_K >= 64`` (the fp8 MFMA instructions take K in steps of 32 or 64);
* the key buckets M to a power of two (:func:`m_bucket`), so a new batch size reuses the tuned
  config of its bucket instead of benchmarking every config again (Inductor buckets the same
  way); configs whose ``BLOCK_M`` is far above the bucket are pruned before benchmarking;
* no register spills with the fused epilogue (scales, bias, ops, reductions on the whole tile),
  as the cross-compilation measured for every target (benchmarks/results/cross_compile_matrix_*):
  tiles of 128x128 outputs or more run 8 warps (the tutorial's 4 spilled 400-2100 bytes per
  thread on sm_80..sm_120); the tutorial's 128x256 / 256x128 (CUDA) and 256x256 (HIP) tiles are
  out (they spilled 240-1700 bytes, or 290-400 VGPRs, even with 8 warps or bias + gelu alone: the
  epilogue's temporaries do not fit beside a 128-register accumulator; an epilogue in subtiles,
  tutorial 09's ``EPILOGUE_SUBTILE``, would bring them back); HIP's 128x256 runs 8 warps (4
  spilled 440-490 VGPRs) and the 64x64 HIP configs ask ``waves_per_eu=4`` (the tutorial's 8
  caps a wave at 64 VGPRs: 35-50 spilled).

Per target, :func:`configs_for` keeps only the configs whose :func:`shared_bytes_estimate` fits
the target's per-block shared memory (:mod:`devcaps_kernels.gpu_targets`), so the autotuner
never meets ``OutOfResources`` for them; the cross-compilation checks the estimate against
every compiled kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

#: Smallest ``BLOCK_N`` of any config (unless N itself is smaller).
MIN_BLOCK_N = 64
#: The autotune key: M is bucketed, N and K (fixed per weight in practice) are exact.
AUTOTUNE_KEY = ("M_BUCKET", "N", "K")


@dataclass(frozen=True)
class TileConfig:
    """One autotune candidate: tile sizes, launch options and backend-only options."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int
    options: tuple[tuple[str, int], ...] = ()  # e.g. (("waves_per_eu", 2),) on HIP


def _tiles(rows: Sequence[tuple[int, int, int, int, int, int]],
           options: tuple[tuple[str, int], ...] = ()) -> tuple[TileConfig, ...]:
    return tuple(TileConfig(bm, bn, bk, gm, w, st, options) for bm, bn, bk, gm, w, st in rows)


# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages)
_CUDA_16BIT = _tiles([(128, 128, 64, 8, 8, 3), (64, 256, 32, 8, 8, 4), (128, 128, 32, 8, 8, 4),
                      (128, 64, 32, 8, 4, 4), (64, 128, 32, 8, 4, 4), (64, 64, 32, 8, 4, 4),
                      (32, 64, 32, 8, 2, 5)])
_CUDA_FP8 = _tiles([(128, 128, 128, 8, 8, 4), (256, 64, 128, 8, 8, 4), (64, 256, 128, 8, 8, 4),
                    (128, 128, 128, 8, 8, 3), (128, 64, 64, 8, 4, 4), (64, 128, 64, 8, 4, 4),
                    (64, 64, 64, 8, 4, 4)])
# fp32 operands run tl.dot with input_precision="ieee" (no tensor cores): small tiles; the two of
# 8,192 outputs run 8 warps (with 4, 64 fp32 accumulators a thread: 64x128 spilled 8 bytes at 255
# registers on sm_80 with bias + gelu_tanh + mul_col and three reductions, 128x64 took 254-255 on
# sm_80..sm_120; with 8: 128-192 registers, no spills on any target, cross_compile_fp32_warps_*).
_FP32 = _tiles([(64, 64, 32, 8, 4, 3), (128, 64, 32, 8, 8, 3), (64, 128, 32, 8, 8, 3),
                (32, 64, 32, 8, 2, 4)])
_HIP_16BIT = (
    _tiles([(128, 256, 16, 1, 8, 2), (128, 128, 32, 1, 8, 2)], (("waves_per_eu", 2),))
    + _tiles([(64, 128, 32, 8, 4, 2)], (("waves_per_eu", 3),))
    + _tiles([(64, 64, 32, 1, 4, 2)], (("waves_per_eu", 4),)))
_HIP_FP8 = (
    _tiles([(128, 256, 64, 1, 8, 2), (128, 128, 128, 1, 8, 2)], (("waves_per_eu", 2),))
    + _tiles([(64, 128, 128, 8, 4, 2)], (("waves_per_eu", 3),))
    + _tiles([(64, 64, 64, 1, 4, 2)], (("waves_per_eu", 4),)))
#: The interpreter benchmarks nothing and runs every program in Python: one small tile.
INTERPRETER = (TileConfig(32, 64, 32, 8, 4, 1),)

FAMILIES = ("fp8", "16bit", "fp32")
_TABLE = {("cuda", "fp8"): _CUDA_FP8, ("cuda", "16bit"): _CUDA_16BIT, ("cuda", "fp32"): _FP32,
          ("hip", "fp8"): _HIP_FP8, ("hip", "16bit"): _HIP_16BIT, ("hip", "fp32"): _FP32}


def configs_for(vendor: str, family: str, n: int, shared_limit: int | None = None,
                arch: int | str | None = None) -> tuple[TileConfig, ...]:
    """The candidates for ``vendor`` (``"hip"``, else CUDA's list) and dtype ``family``
    (``"fp8"``: operands go to ``tl.dot`` as fp8; ``"16bit"``: bf16/fp16, or fp8 decoded to bf16;
    ``"fp32"``), with ``BLOCK_N`` capped at N's power of two (at least 16), duplicates dropped,
    and, for a target whose per-block shared memory is ``shared_limit`` bytes, only the configs
    whose :func:`shared_bytes_estimate` fits it (per-arch lists: the (256, 64, 128) fp8 tile with
    4 stages takes 160 KB on sm_90, within its 227 KB; on sm_89, which keeps 3 of the stages in
    shared memory, 120 KB: over its 99 KB)."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    table = _TABLE[("hip" if vendor == "hip" else "cuda", family)]
    cap = max(16, 1 << max(n - 1, 0).bit_length())
    seen: dict[TileConfig, None] = {}
    for c in table:
        seen.setdefault(TileConfig(c.block_m, min(c.block_n, cap), c.block_k, c.group_m, c.num_warps,
                                   c.num_stages, c.options), None)
    if shared_limit is None:
        return tuple(seen)
    sizes = family_element_bytes(family)
    fitting = tuple(c for c in seen if shared_bytes_estimate(c, *sizes, vendor, arch) <= shared_limit)
    if not fitting:
        raise ValueError(f"no {vendor} {family} config fits {shared_limit} bytes of shared memory")
    return fitting


def family_element_bytes(family: str) -> tuple[int, int]:
    """Bytes per element of the A and B tiles a family keeps in shared memory."""
    return {"fp8": (1, 1), "16bit": (2, 2), "fp32": (4, 4)}[family]


#: Targets whose pipeline keeps ``num_stages - 1`` A/B stages in shared memory (the mma.sync
#: path of NVIDIA sm_80-sm_89 and sm_120, and gfx942's stream pipeliner); the others (the
#: wgmma / tcgen05 path of sm_90 / sm_100, gfx950, and any target not named) keep
#: ``num_stages``. Measured by the cross-compilation on every target.
_ONE_STAGE_LESS = {"cuda": (80, 86, 87, 89, 120, 121), "hip": ("gfx942",)}
#: Barriers and the like beyond the tiles (measured: 16 bytes on sm_100, 224 on gfx950).
SHARED_SLACK = 1024


def shared_bytes_estimate(c: TileConfig, a_bytes: int, b_bytes: int, vendor: str,
                          arch: int | str | None = None) -> int:
    """An upper bound of the shared memory the kernel uses with config ``c`` (bytes): the
    software pipeline's A and B tiles (``num_stages`` of them, or ``num_stages - 1`` where the
    target keeps one in registers, :data:`_ONE_STAGE_LESS`) plus :data:`SHARED_SLACK`, or the
    epilogue's layout conversion of the tile if that is larger (``BLOCK_M x BLOCK_N`` x 4 bytes:
    the fp32 accumulator's tile, which reductions read before the cast; the conversion reuses the
    pipeline's buffers. The 2-byte figure once used on NVIDIA was measured low by 9 configs of the
    cross-compilation matrix of 2026-12-02: 65,536 bytes for 64x256 and 128x128 tiles on sm_80,
    sm_89 and sm_120). Checked against the
    compiled kernels' ``metadata.shared`` on every target by the cross-compilation
    (:mod:`devcaps_kernels.cross_compile`: a kernel above its estimate fails the check)."""
    name = str(arch).split(":")[0] if vendor == "hip" else arch
    one_less = name in _ONE_STAGE_LESS.get(vendor, ())
    stages = max(1, c.num_stages - 1) if one_less else c.num_stages
    tiles = c.block_m * c.block_k * a_bytes + c.block_k * c.block_n * b_bytes
    epilogue = c.block_m * c.block_n * 4
    return max(stages * tiles + SHARED_SLACK, epilogue)


def config_name(c: TileConfig) -> str:
    """``128x256x64/w8/s3`` (and ``/waves_per_eu=2``...): a config in one word."""
    extra = "".join(f"/{k}={v}" for k, v in c.options)
    return f"{c.block_m}x{c.block_n}x{c.block_k}/w{c.num_warps}/s{c.num_stages}{extra}"


def segment_base(configs: Sequence[TileConfig]) -> int:
    """The smallest ``BLOCK_N``: reduction segments are ``gcd(group, segment_base)``, which
    divides every config's ``BLOCK_N`` (all powers of two)."""
    return min(c.block_n for c in configs)


def m_bucket(m: int) -> int:
    """M's autotune bucket: the next power of two, at least 16."""
    return max(16, 1 << max(m - 1, 0).bit_length())


def prune_for_m(configs: list[Any], named_args: dict[str, Any], **kwargs: Any) -> list[Any]:
    """``early_config_prune`` for ``triton.autotune``: drop configs whose ``BLOCK_M`` exceeds
    twice M's bucket (their rows would be mostly masked); keep the smallest if none is left."""
    limit = 2 * int(named_args["M_BUCKET"])
    kept = [c for c in configs if c.kwargs["BLOCK_M"] <= limit]
    if kept:
        return kept
    smallest = min(c.kwargs["BLOCK_M"] for c in configs)
    return [c for c in configs if c.kwargs["BLOCK_M"] == smallest]


def triton_configs(configs: Sequence[TileConfig]) -> list[Any]:
    """``triton.Config`` objects for ``configs`` (imports triton)."""
    import triton

    return [triton.Config({"BLOCK_M": c.block_m, "BLOCK_N": c.block_n, "BLOCK_K": c.block_k,
                           "GROUP_M": c.group_m, **dict(c.options)},
                          num_warps=c.num_warps, num_stages=c.num_stages) for c in configs]
