"""Fused scaled-GEMM benchmark: ``devcaps_kernels.scaled_mm`` against the unfused ways.

Every workload is ``y = gelu_tanh(a @ b + bias)`` (bf16 out) with ``Reduce("sum")``,
``Reduce("sumsq")`` and ``Reduce("sum", group=G)`` (G = 64 unless the shape says ``:gG``).
All variants of a shape are timed in the same rounds, one after another, so load from other
processes hits them alike; a time is the best of those rounds (ms; at least --repeat rounds,
more for fast shapes, see --min-seconds), and every ratio printed is of two times measured in
the same run (lower is better for fused / other).

CPU table (bf16 inputs, ``b`` row-major [K, N] as in the issue's table):
  fused      scaled_mm(backend="auto"), back-to-back calls
  one-off    the first fused call on that shape (new tensors, after the other shapes were built;
             the process itself is warmed up by one small call first)
  bare       torch.mm(a, b) alone
  inductor   torch.compile (inductor) of the bf16 graph: addmm(bias, a, b) -> gelu in fp32 ->
             bf16 -> y.float() sum / square().sum / view(M, -1, G).sum
  eager32    eager torch with the documented semantics: acc = a.float() @ b.float() + bias,
             gelu in fp32, one rounding to bf16, the reductions of y.float()
  epilogue   the epilogue alone on a precomputed fp32 accumulator (+bias, gelu, round, the three
             reductions), compiled by inductor: the floor is bare + epilogue
  gemm+gelu  oneDNN's GEMM with bias and gelu(tanh) as post-ops (torch.ops.mkldnn._linear_pointwise),
             no reductions, no copy into y: what the fused CPU path's GEMM alone costs
fp8 table (--fp8-shapes): the same workload with fp8 e4m3fn ``a``/``b`` (rowwise scales) against
bf16 inputs of the same shape, both with ``b`` column-major ([N, K] storage, the layout
``torch._scaled_mm`` takes), plus ``fast_accum=True``, and the GEMMs that bound it (oneDNN bf16
and fp32 linear, oneDNN's fp8 ``qlinear_pointwise``).
GPU sweep (--gpu-sweep, for .ci/gpu-check): fp8 e4m3fn rowwise, M = N = 8192 by default, K from
256 to 8192: fused against ``torch._scaled_mm`` + eager epilogue and ``_scaled_mm`` alone, with
numerics against a float64 reference, and next to each time the roofline floor of that shape on
that GPU (bytes moved / memory bandwidth or FLOPs / dense fp8 tensor throughput, from the
vendor's datasheet: benchmarks/gpu_datasheets.py) with measured / floor for fused and bare.
--op-sweep (every epilogue op and reduction against Inductor and eager, CPU) and
--threading-check (torch's small ops before / after a fused call) run the scripts named there.

    python benchmarks/bench_fused_gemm.py --runs 2 --repeat 5
    python benchmarks/bench_fused_gemm.py --shapes 512x512x512,3000x3000x333:g60 --no-inductor
    python benchmarks/bench_fused_gemm.py --gpu-sweep
    python benchmarks/bench_fused_gemm.py --split-study 512x512x512,1024x512x512,1024x1024x512
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from devcaps_kernels import Reduce, last_backend, scaled_mm
from devcaps_kernels import epilogue as ep
from gpu_datasheets import fused_gemm_traffic, peaks_for

ISSUE_SHAPES = ("4096x4096x4096,4096x4096x256,8192x1024x64,16384x512x128,65536x256x64,"
                "8192x8192x64,512x512x512")
DEFAULT_SHAPES = ISSUE_SHAPES + ",1x4096x4096,7x4096x4096,3000x3000x333:g60"
DEFAULT_FP8_SHAPES = "1x4096x4096,7x4096x4096,512x4096x4096,4096x4096x256"
EPILOGUE = (ep.gelu(approximate="tanh"),)


def reductions(group: int) -> tuple[Reduce, ...]:
    return (Reduce("sum"), Reduce("sumsq"), Reduce("sum", group=group))


@dataclass(frozen=True)
class Shape:
    m: int
    n: int
    k: int
    group: int = 64

    @classmethod
    def parse(cls, text: str) -> Shape:
        dims, _, group = text.lower().partition(":g")
        m, n, k = (int(v) for v in dims.split("x"))
        return cls(m, n, k, int(group) if group else 64)

    def __str__(self) -> str:
        return f"{self.m}x{self.n}x{self.k}" + (f":g{self.group}" if self.group != 64 else "")


def _sync(device: torch.device) -> None:
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def time_once(fn: Callable[[], object], device: torch.device) -> float:
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    return (time.perf_counter() - start) * 1e3


def time_interleaved(fns: dict[str, Callable[[], object]], device: torch.device, repeat: int,
                     warmup: int = 2, min_seconds: float = 0.0) -> dict[str, float]:
    """Best wall time (ms) of each function over ``repeat`` rounds (more for fast functions:
    enough rounds for the slowest one to run ``min_seconds``, at most 200); every round runs
    every function once, back to back."""
    slowest = 0.0
    for fn in fns.values():
        for _ in range(warmup):
            slowest = max(slowest, time_once(fn, device) / 1e3)
    if min_seconds and slowest:
        repeat = max(repeat, min(200, math.ceil(min_seconds / slowest)))
    best = {name: math.inf for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            best[name] = min(best[name], time_once(fn, device))
    return best


def _reduce_eager(y: torch.Tensor, group: int) -> tuple[torch.Tensor, ...]:
    yf = y.float()
    return yf.sum(-1), yf.square().sum(-1), yf.view(y.shape[0], -1, group).sum(-1)


def bf16_graph(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, group: int) -> tuple[torch.Tensor, ...]:
    """The issue's "bf16 graph": bf16 addmm, gelu in fp32, bf16 y, reductions of y."""
    y = F.gelu(torch.addmm(bias, a, b).float(), approximate="tanh").to(torch.bfloat16)
    return (y, *_reduce_eager(y, group))


def eager_fp32(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, group: int) -> tuple[torch.Tensor, ...]:
    """The documented semantics, op by op: fp32 accumulator, fp32 epilogue, one rounding."""
    acc = torch.addmm(bias.float(), a.float(), b.float())
    y = F.gelu(acc, approximate="tanh").to(torch.bfloat16)
    return (y, *_reduce_eager(y, group))


def epilogue_alone(acc: torch.Tensor, bias: torch.Tensor, group: int) -> tuple[torch.Tensor, ...]:
    y = F.gelu(acc + bias.float(), approximate="tanh").to(torch.bfloat16)
    return (y, *_reduce_eager(y, group))


@dataclass
class CpuCase:
    """One shape's inputs and timed functions (built once, measured in every run)."""

    shape: Shape
    fns: dict[str, Callable[[], object]]
    one_off: float
    max_diff: float
    backend: str


def _allow_one_compile_per_shape(shapes: int) -> None:
    """torch.compile keeps up to ``recompile_limit`` (8) graphs per function and then silently
    runs it eagerly: with more shapes than that the inductor column would time eager torch."""
    import torch._dynamo

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), shapes + 2))


def build_cpu_case(shape: Shape, device: torch.device, inductor: bool) -> CpuCase:
    m, n, k, g = shape.m, shape.n, shape.k, shape.group
    a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=device, dtype=torch.bfloat16)
    bias = torch.randn(n, device=device, dtype=torch.bfloat16)
    reds = reductions(g)

    def fused() -> object:
        return scaled_mm(a, b, bias=bias, epilogue=EPILOGUE, reductions=reds)

    one_off = time_once(fused, device)
    backend = str(last_backend())
    y, _ = fused()
    acc = (a.float() @ b.float()).contiguous()
    max_diff = float((y.float() - eager_fp32(a, b, bias, g)[0].float()).abs().max())
    fns: dict[str, Callable[[], object]] = {"fused": fused, "bare": lambda: torch.mm(a, b),
                                            "eager32": lambda: eager_fp32(a, b, bias, g)}
    if device.type == "cpu":
        fns["gemm+gelu"] = lambda: torch.ops.mkldnn._linear_pointwise(a, b.t(), bias, "gelu", [], "tanh")
    if inductor:
        graph = torch.compile(bf16_graph, dynamic=False)
        epi = torch.compile(epilogue_alone, dynamic=False)
        fns["inductor"] = lambda: graph(a, b, bias, g)
        fns["epilogue"] = lambda: epi(acc, bias, g)
    else:
        fns["epilogue"] = lambda: epilogue_alone(acc, bias, g)
    return CpuCase(shape, fns, one_off, max_diff, backend)


def cpu_header(args: argparse.Namespace, threads: int) -> str:
    return (f"fused scaled GEMM, {time.strftime('%Y-%m-%d %H:%M')}, torch {torch.__version__}, "
            f"{cpu_name()}, {threads} threads, bf16 in/out, bias + gelu(tanh) + sum + sumsq + "
            f"sum(group), best of >= {args.repeat} interleaved rounds (>= {args.min_seconds} s for the "
            f"slowest variant); epilogue floor "
            f"{'compiled by inductor' if args.inductor else 'in eager torch'}")


def format_cpu_run(cases: list[CpuCase], times: list[dict[str, float]]) -> str:
    cols = ("fused", "one-off", "bare", "inductor", "eager32", "epilogue", "gemm+gelu")
    lines = [f"{'M x N x K':>19} {'backend':>7} " + " ".join(f"{c:>9}" for c in cols)
             + f" {'f/ind':>6} {'f/bare':>6} {'f/floor':>7} {'f/g+g':>6} {'f/e32':>6} {'1off/f':>6} {'max|dy|':>8}"]
    for case, t in zip(cases, times):
        floor = t["bare"] + t["epilogue"]
        ind, gg = t.get("inductor", math.nan), t.get("gemm+gelu", math.nan)
        cells = [t["fused"], case.one_off, t["bare"], ind, t["eager32"], t["epilogue"], gg]
        lines.append(f"{str(case.shape):>19} {case.backend:>7} " + " ".join(f"{v:9.2f}" for v in cells)
                     + f" {t['fused'] / ind:6.2f} {t['fused'] / t['bare']:6.2f} {t['fused'] / floor:7.2f}"
                     f" {t['fused'] / gg:6.2f} {t['fused'] / t['eager32']:6.2f} {case.one_off / t['fused']:6.2f}"
                     f" {case.max_diff:8.4f}")
    return "\n".join(lines)


def stability(cases: list[CpuCase], runs: list[list[dict[str, float]]]) -> str:
    """Per shape, the spread of each ratio over the runs."""
    lines = [f"ratio spread over {len(runs)} runs (min / median / max):",
             f"{'M x N x K':>19} {'fused/inductor':>22} {'fused/bare':>22} {'fused/floor':>22}"
             f" {'gemm+gelu/bare':>22}"]
    for i, case in enumerate(cases):
        cells = []
        for num, other in (("fused", "inductor"), ("fused", "bare"), ("fused", "floor"), ("gemm+gelu", "bare")):
            ratios = [run[i].get(num, math.nan) / (run[i]["bare"] + run[i]["epilogue"] if other == "floor"
                                                   else run[i].get(other, math.nan)) for run in runs]
            cells.append(f"{min(ratios):6.2f} /{statistics.median(ratios):6.2f} /{max(ratios):6.2f}")
        lines.append(f"{str(case.shape):>19} " + " ".join(f"{c:>22}" for c in cells))
    return "\n".join(lines)


def fp8_rows(shapes: list[Shape], device: torch.device, repeat: int, min_seconds: float) -> str:
    lines = [f"fp8 e4m3fn (rowwise scales) against bf16, b column-major, best of >= {repeat} rounds (ms):",
             f"{'M x N x K':>19} {'bf16':>8} {'fp8':>8} {'fp8 fast':>8} {'fp8/bf16':>8} {'fast/bf16':>9}"
             f" {'dnn bf16':>8} {'dnn fp32':>8} {'f32/bf16':>8} {'qlin fp8':>9}"]
    for shape in shapes:
        t = _time_fp8_shape(shape, device, repeat, min_seconds)
        lines.append(f"{str(shape):>19} {t['bf16']:8.2f} {t['fp8']:8.2f} {t['fp8 fast']:8.2f} "
                     f"{t['fp8'] / t['bf16']:8.2f} {t['fp8 fast'] / t['bf16']:9.2f} {t['dnn bf16']:8.2f} "
                     f"{t['dnn fp32']:8.2f} {t['dnn fp32'] / t['dnn bf16']:8.2f} {t.get('qlinear', math.nan):9.2f}")
    return "\n".join(lines)


def _time_fp8_shape(shape: Shape, device: torch.device, repeat: int, min_seconds: float) -> dict[str, float]:
    m, n, k, g = shape.m, shape.n, shape.k, shape.group
    a32, w32 = torch.randn(m, k, device=device) * 4, torch.randn(n, k, device=device) * 4
    a8, w8 = a32.to(torch.float8_e4m3fn), w32.to(torch.float8_e4m3fn)
    a16, w16 = a8.to(torch.bfloat16), w8.to(torch.bfloat16)
    sa, sb = torch.rand(m, 1, device=device) / 16, torch.rand(1, n, device=device) / 16
    bias = torch.randn(n, device=device, dtype=torch.bfloat16)
    kw = dict(bias=bias, epilogue=EPILOGUE, reductions=reductions(g))
    w16f, w32f, b32 = w16.float(), w8.float(), bias.float()
    fns: dict[str, Callable[[], object]] = {
        "bf16": lambda: scaled_mm(a16, w16.t(), **kw),
        "fp8": lambda: scaled_mm(a8, w8.t(), sa, sb, **kw),
        "fp8 fast": lambda: scaled_mm(a8, w8.t(), sa, sb, fast_accum=True, **kw),
        "dnn bf16": lambda: torch.ops.mkldnn._linear_pointwise(a16, w16, bias, "none", [], ""),
        "dnn fp32": lambda: torch.ops.mkldnn._linear_pointwise(a16.float(), w32f, b32, "none", [], ""),
    }
    del w16f
    try:  # oneDNN's fp8 GEMM with fp32 output: exact semantics, but is it fast here?
        packed = torch.ops.onednn.qlinear_prepack(w8, [m, k])
        zeros = torch.zeros(n, dtype=torch.int64, device=device)
        fns["qlinear"] = lambda: torch.ops.onednn.qlinear_pointwise(
            a8, 1.0, 0, packed, sb.view(n).contiguous(), zeros, b32, 1.0, 0, torch.float32, "none", [], "")
        fns["qlinear"]()
    except Exception:  # noqa: BLE001 - not in this build: leave the column empty
        fns.pop("qlinear", None)
    return time_interleaved(fns, device, repeat, min_seconds=min_seconds)


# -- block split study (CPU) -------------------------------------------------------------------

def _with_rows(rows: Callable[[int], int], call: Callable[[], object]) -> Callable[[], object]:
    """``call`` with devcaps_kernels.cpu_backend.block_rows forced to ``rows(m)`` (benchmark-only)."""
    import devcaps_kernels.cpu_backend as cpu_backend

    def run() -> object:
        default = cpu_backend.block_rows
        cpu_backend.block_rows = lambda m, n, threads: rows(m)
        try:
            return call()
        finally:
            cpu_backend.block_rows = default
    return run


def split_study(shapes: list[Shape], device: torch.device, runs: int, min_seconds: float) -> str:
    """The CPU path's split rule on small problems: one block against two (both on the calling
    thread, with torch's threads), with inductor and bare as yardsticks."""
    lines = [f"block split study: fused as one block vs two blocks, best of >= 5 rounds (>= {min_seconds} s)",
             f"{'M x N x K':>19} {'run':>3} {'default':>8} {'1 block':>8} {'2 blocks':>8} {'inductor':>8} {'bare':>7}"
             f" {'1/2':>5} {'1/ind':>6} {'2/ind':>6}"]
    print("\n".join(lines), flush=True)
    for shape in shapes:
        case = build_cpu_case(shape, device, inductor=True)
        fused = case.fns["fused"]
        fns = {"default": fused, "one": _with_rows(lambda m: m, fused),
               "two": _with_rows(lambda m: -(-m // 2), fused), "inductor": case.fns["inductor"],
               "bare": case.fns["bare"]}
        for run in range(runs):
            t = time_interleaved(fns, device, 5, min_seconds=min_seconds)
            lines.append(f"{str(shape):>19} {run + 1:>3} {t['default']:8.3f} {t['one']:8.3f} {t['two']:8.3f} "
                         f"{t['inductor']:8.3f} {t['bare']:7.3f} {t['one'] / t['two']:5.2f} "
                         f"{t['one'] / t['inductor']:6.2f} {t['two'] / t['inductor']:6.2f}")
            print(lines[-1], flush=True)
    return "\n".join(lines)


# -- GPU sweep ---------------------------------------------------------------------------------

def _scaled_eager(a, b, sa, sb, bias, group):
    acc = torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16)
    y = F.gelu(acc.float(), approximate="tanh").to(torch.bfloat16)
    return (y, *_reduce_eager(y, group))


def _float64_numerics(a, b, sa, sb, bias, y: torch.Tensor) -> tuple[float, float, float]:
    """Against float64 on the CPU, on the first 256 rows (float64 GEMMs of the full shape would
    dominate the run): max |y - ref| / max |ref|, and max |acc - a @ b| / (|a| @ |b|) of the
    fp32 accumulator (``out_dtype=float32``, no epilogue) without and with ``fast_accum``."""
    rows = slice(0, min(256, a.shape[0]))
    a64, b64 = a[rows].cpu().double(), b.cpu().double()
    exact, scale = a64 @ b64, (a64.abs() @ b64.abs()).clamp_min(1e-300)
    ref = F.gelu(exact * sa[rows].cpu().double() * sb.cpu().double() + bias.cpu().double(), approximate="tanh")
    y_err = float((y[rows].cpu().double() - ref).abs().max() / ref.abs().max())
    errors = []
    for fast in (False, True):
        acc, _ = scaled_mm(a[rows], b, out_dtype=torch.float32, fast_accum=fast)
        errors.append(float(((acc.cpu().double() - exact).abs() / scale).max()))
    return y_err, errors[0], errors[1]


def _floor_cells(peaks, m: int, n: int, k: int, t: dict[str, float]) -> tuple[str, str]:
    """(floor ms and its roof, measured / floor of fused and bare) for one K; "-" without peaks."""
    if peaks is None:
        return "-", "-"
    floor, roof = peaks.floor_s(2.0 * m * n * k, fused_gemm_traffic(m, n, k, n // 64), fp8=True)
    bare, _ = peaks.floor_s(2.0 * m * n * k, m * k + k * n + 2 * m * n + 4 * (m + n), fp8=True)
    return (f"{floor * 1e3:.4g} {roof}",
            f"{t['fused'] / (floor * 1e3):.2f} / {t['bare'] / (bare * 1e3):.2f}")


def gpu_sweep(device: torch.device, m: int, n: int, ks: list[int], repeat: int, peaks=None) -> str:
    where = (f"floor: bytes / {peaks.bandwidth / 1e12:.2f} TB/s or FLOPs / {peaks.fp8 / 1e12:.0f} dense fp8 "
             f"TFLOP/s ({peaks.name}, {peaks.source}), whichever is larger" if peaks is not None and peaks.fp8
             else "floor: no datasheet entry for this GPU (pass --peak TB/s,bf16,fp8)")
    lines = [f"GPU sweep: fp8 e4m3fn rowwise, M={m} N={n}, bias + gelu(tanh) + sum + sumsq + sum(group=64), "
             f"best of {repeat} rounds (ms); speedup = (_scaled_mm + eager epilogue) / fused; errors against "
             f"float64 (acc err: fp32 accumulator, <= {5e-5:.0e} expected; fast err: fast_accum=True); {where}",
             f"{'K':>6} {'backend':>8} {'fused':>8} {'fast':>8} {'sm+eager':>9} {'bare sm':>8} {'speedup':>8} "
             f"{'bare/fused':>10} {'floor':>16} {'x floor f/bare':>15} {'y err':>9} {'acc err':>9} {'fast err':>9} {'goal':>24}"]
    print("\n".join(lines), flush=True)
    for k in ks:
        a = (torch.randn(m, k, device=device) * 4).to(torch.float8_e4m3fn)
        b = (torch.randn(n, k, device=device) * 4).to(torch.float8_e4m3fn).t()  # column-major
        sa, sb = torch.rand(m, 1, device=device) / 64, torch.rand(1, n, device=device) / 64
        bias = torch.randn(n, device=device, dtype=torch.bfloat16)
        kw = dict(bias=bias, epilogue=EPILOGUE, reductions=reductions(64))
        fns: dict[str, Callable[[], object]] = {
            "fused": lambda: scaled_mm(a, b, sa, sb, **kw),
            "fast": lambda: scaled_mm(a, b, sa, sb, fast_accum=True, **kw),
            "eager": lambda: _scaled_eager(a, b, sa, sb, bias, 64),
            "bare": lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)}
        t = time_interleaved(fns, device, repeat)
        y, _ = scaled_mm(a, b, sa, sb, **kw)
        backend = str(last_backend())
        y_err, acc_err, fast_err = _float64_numerics(a, b, sa, sb, bias, y)
        speedup, bare_ratio = t["eager"] / t["fused"], t["bare"] / t["fused"]
        floor, over = _floor_cells(peaks, m, n, k, t)
        goal = (f"speedup>=1.2: {'met' if speedup >= 1.2 else 'MISSED'}" if k <= 1024 else
                f"bare/fused>=0.9: {'met' if bare_ratio >= 0.9 else 'MISSED'}" if k == 4096 else "")
        lines.append(f"{k:6d} {backend:>8} {t['fused']:8.3f} {t['fast']:8.3f} {t['eager']:9.3f} {t['bare']:8.3f} "
                     f"{speedup:8.2f} {bare_ratio:10.2f} {floor:>16} {over:>15} {y_err:9.2e} {acc_err:9.2e} "
                     f"{fast_err:9.2e} {goal:>24}")
        print(lines[-1], flush=True)
    return "\n".join(lines)


# -- main --------------------------------------------------------------------------------------

def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def load_average() -> str:
    return "%.1f" % os.getloadavg()[0] if hasattr(os, "getloadavg") else "n/a"


def _default_device() -> str:
    accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    return str(accelerator) if accelerator is not None else "cpu"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="comma-separated MxNxK[:gG] list")
    parser.add_argument("--fp8-shapes", default=DEFAULT_FP8_SHAPES, help="fp8 table shapes ('' to skip)")
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds per run (best of)")
    parser.add_argument("--min-seconds", type=float, default=0.5,
                        help="more rounds for fast shapes: until the slowest variant ran this long")
    parser.add_argument("--runs", type=int, default=2, help="repeat the whole CPU table, for stability")
    parser.add_argument("--no-inductor", dest="inductor", action="store_false",
                        help="skip torch.compile (the inductor column; the epilogue floor runs eager)")
    parser.add_argument("--device", default=None, help="torch device (default: the accelerator, else cpu)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads on CPU")
    parser.add_argument("--gpu-sweep", action="store_true", help="the fp8 K sweep of .ci/gpu-check")
    parser.add_argument("--split-study", default="", help="CPU: one block vs two blocks on these shapes")
    parser.add_argument("--sweep-mn", default="8192x8192", help="M x N of the GPU sweep")
    parser.add_argument("--ks", default="256,512,1024,2048,4096,8192", help="K values of the GPU sweep")
    parser.add_argument("--peak", default=None, help="GPU sweep: TB/s,bf16 TFLOP/s,fp8 TFLOP/s for a GPU "
                        "without a datasheet entry (benchmarks/gpu_datasheets.py)")
    parser.add_argument("--op-sweep", action="store_true", help="CPU: every epilogue op and reduction, "
                        "fused vs Inductor vs eager (benchmarks/bench_epilogue_ops_cpu.py)")
    parser.add_argument("--threading-check", action="store_true", help="CPU: torch's small ops before / "
                        "after a fused call (benchmarks/bench_cpu_threading.py)")
    return parser.parse_args(argv)


def run_cpu_tables(args: argparse.Namespace, device: torch.device) -> None:
    shapes = [Shape.parse(s) for s in args.shapes.split(",") if s]
    print(cpu_header(args, torch.get_num_threads()), flush=True)
    # once per process, not per shape: the oneDNN checks, imports
    _allow_one_compile_per_shape(len(shapes))
    warm = build_cpu_case(Shape(96, 128, 64), device, inductor=False)
    print(f"  process warm-up (one 96x128x64 call, not counted below): {warm.one_off:.2f} ms", flush=True)
    load = [load_average()]
    cases = []
    for shape in shapes:
        cases.append(build_cpu_case(shape, device, args.inductor))
        print(f"  built {shape} (backend {cases[-1].backend}, one-off {cases[-1].one_off:.2f} ms)", flush=True)
    runs = []
    for run in range(args.runs):
        runs.append([time_interleaved(case.fns, device, args.repeat, min_seconds=args.min_seconds)
                     for case in cases])
        load.append(load_average())
        print(f"\nrun {run + 1} of {args.runs} (load average after: {load[-1]})")
        print(format_cpu_run(cases, runs[-1]), flush=True)
    if args.runs > 1:
        print("\n" + stability(cases, runs))
    print(f"\nload average (1 min) at start and after each run: {' / '.join(load)}")
    fp8_shapes = [Shape.parse(s) for s in args.fp8_shapes.split(",") if s]
    if fp8_shapes:
        print("\n" + fp8_rows(fp8_shapes, device, args.repeat, args.min_seconds))
        print(f"load average after the fp8 table: {load_average()}")


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    device = torch.device(args.device or _default_device())
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.gpu_sweep:
        m, n = (int(v) for v in args.sweep_mn.lower().split("x"))
        where = cpu_name() if device.type == "cpu" else torch.accelerator.current_accelerator()
        print(f"{time.strftime('%Y-%m-%d %H:%M')}, torch {torch.__version__}, device {device} ({where})")
        name = getattr(torch.get_device_module(device), "get_device_name", None) if device.type != "cpu" else None
        if name is not None:
            print(f"device model: {name(device)}")
        model = name(device) if name is not None else str(device)
        gpu_sweep(device, m, n, [int(k) for k in args.ks.split(",")], args.repeat, peaks_for(model, args.peak))
        return 0
    if args.op_sweep or args.threading_check:
        import bench_cpu_threading
        import bench_epilogue_ops_cpu

        return (bench_epilogue_ops_cpu.main([]) if args.op_sweep else 0) or (
            bench_cpu_threading.main([]) if args.threading_check else 0)
    if args.split_study:
        _allow_one_compile_per_shape(8)
        print(f"{time.strftime('%Y-%m-%d %H:%M')}, torch {torch.__version__}, {cpu_name()}, "
              f"{torch.get_num_threads()} threads, load average {load_average()}", flush=True)
        split_study([Shape.parse(s) for s in args.split_study.split(",")], device, args.runs, args.min_seconds)
        print(f"load average after: {load_average()}")
        return 0
    run_cpu_tables(args, device)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
