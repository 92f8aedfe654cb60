"""Fused scaled-GEMM benchmark: our ``auto`` backend against the unfused composition.

Times, in one run and side by side, per shape (M, N, K):
  fused     devcaps_kernels.scaled_mm(..., backend="auto") with bias + gelu(tanh) + Reduce("sum")
            + Reduce("sumsq") + Reduce("sum", group=64)
  eager     the same composition in eager torch, one op per pass over M*N
  compiled  torch.compile (inductor) of that composition
  bare mm   the matmul alone (the floor)

CPU (or any device where ``auto`` does not pick Triton): bf16 inputs; the composition is
``addmm(bias, a, b)`` (bf16 GEMM, fp32 accumulation) -> gelu in fp32 -> bf16 -> 3 reductions.
Devices where ``auto`` picks Triton (``choose_backend``): fp8 e4m3fn inputs with rowwise
scales; the composition is ``torch._scaled_mm`` (+bias, bf16 out) -> gelu -> 3 reductions,
and bare mm is ``torch._scaled_mm`` alone.

    python benchmarks/bench_fused_gemm.py --shapes 4096x4096x256 --repeat 3
"""

from __future__ import annotations

import argparse
import platform
import math
import os
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from devcaps_kernels import Reduce, choose_backend, last_backend, scaled_mm
from devcaps_kernels import epilogue as ep

DEFAULT_SHAPES = "4096x4096x4096,4096x4096x256,8192x1024x64,16384x512x128"
GROUP = 64
REDUCTIONS = (Reduce("sum"), Reduce("sumsq"), Reduce("sum", group=GROUP))
EPILOGUE = (ep.gelu(approximate="tanh"),)


@dataclass(frozen=True)
class Row:
    shape: tuple[int, int, int]
    backend: str
    fused: float
    eager: float
    compiled: float
    bare: float
    max_diff: float


def _sync(device: torch.device) -> None:
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def time_interleaved(fns: dict[str, Callable[[], object]], device: torch.device, repeat: int,
                     warmup: int = 2) -> dict[str, float]:
    """Best wall time (ms) of each function over ``repeat`` rounds; every round runs every
    function once, so load from other processes hits all variants alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    _sync(device)
    best = {name: math.inf for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            _sync(device)
            best[name] = min(best[name], (time.perf_counter() - start) * 1e3)
    return best


def _reduce_eager(y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    yf = y.float()
    return yf.sum(-1), yf.square().sum(-1), yf.view(y.shape[0], -1, GROUP).sum(-1)


def cpu_composition(a, b, bias):
    y = F.gelu(torch.addmm(bias, a, b).float(), approximate="tanh").to(torch.bfloat16)
    return (y, *_reduce_eager(y))


def scaled_composition(a, b, scale_a, scale_b, bias):
    acc = torch._scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=torch.bfloat16)
    y = F.gelu(acc.float(), approximate="tanh").to(torch.bfloat16)
    return (y, *_reduce_eager(y))


def bench_shape(shape: tuple[int, int, int], device: torch.device, fp8: bool, repeat: int) -> Row:
    m, n, k = shape
    if fp8:
        a = (torch.randn(m, k, device=device) * 4).to(torch.float8_e4m3fn)
        b = (torch.randn(n, k, device=device) * 4).to(torch.float8_e4m3fn).t()  # column-major
        scale_a = torch.rand(m, 1, device=device) / 64
        scale_b = torch.rand(1, n, device=device) / 64
        bias = torch.randn(n, device=device, dtype=torch.bfloat16)
        inputs = (a, b, scale_a, scale_b, bias)
        composition: Callable = scaled_composition
        bare = lambda: torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)  # noqa: E731
    else:
        a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=device, dtype=torch.bfloat16)
        scale_a = scale_b = None
        bias = torch.randn(n, device=device, dtype=torch.bfloat16)
        inputs = (a, b, bias)
        composition = cpu_composition
        bare = lambda: torch.mm(a, b)  # noqa: E731

    def fused():
        return scaled_mm(a, b, scale_a, scale_b, bias=bias, epilogue=EPILOGUE,
                         reductions=REDUCTIONS, out_dtype=torch.bfloat16)

    compiled_fn = torch.compile(composition, dynamic=False)
    y, reds = fused()
    backend = last_backend() or "?"
    eager_out = composition(*inputs)
    max_diff = float((y.float() - eager_out[0].float()).abs().max())
    t = time_interleaved({"fused": fused, "eager": lambda: composition(*inputs),
                          "compiled": lambda: compiled_fn(*inputs), "bare": bare}, device, repeat)
    return Row(shape, backend, t["fused"], t["eager"], t["compiled"], t["bare"], max_diff)


def format_table(rows: list[Row], header: str) -> str:
    lines = [header,
             f"{'M x N x K':>18} {'backend':>8} {'fused ms':>9} {'eager ms':>9} {'compiled':>9} "
             f"{'bare mm':>9} {'f/eager':>8} {'f/comp':>7} {'f/bare':>7} {'max|dy|':>8}"]
    for r in rows:
        lines.append(
            f"{'x'.join(map(str, r.shape)):>18} {r.backend:>8} {r.fused:9.2f} {r.eager:9.2f} "
            f"{r.compiled:9.2f} {r.bare:9.2f} {r.fused / r.eager:8.3f} {r.fused / r.compiled:7.3f} "
            f"{r.fused / r.bare:7.3f} {r.max_diff:8.4f}")
    return "\n".join(lines)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _default_device() -> str:
    accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    return str(accelerator) if accelerator is not None else "cpu"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=DEFAULT_SHAPES,
                        help=f"comma-separated MxNxK list (default {DEFAULT_SHAPES})")
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds (best of)")
    parser.add_argument("--device", default=None, help="torch device (default: the accelerator, else cpu)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads on CPU")
    args = parser.parse_args(argv)
    device = torch.device(args.device or _default_device())
    if args.threads:
        torch.set_num_threads(args.threads)
    fp8 = choose_backend(device) == "triton"  # the Triton path is benchmarked with fp8 inputs
    shapes = [tuple(int(v) for v in s.lower().split("x")) for s in args.shapes.split(",") if s]
    where = _cpu_name() if device.type == "cpu" else f"{device} ({torch.accelerator.current_accelerator()})"
    header = (f"fused scaled GEMM, {time.strftime('%Y-%m-%d')}, torch {torch.__version__}, {where}, "
              f"{torch.get_num_threads()} threads, inputs {'fp8 e4m3fn rowwise' if fp8 else 'bf16'}, "
              f"bias + gelu(tanh) + sum + sumsq + sum(group={GROUP}), best of {args.repeat} interleaved rounds")
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    rows = []
    for shape in shapes:
        rows.append(bench_shape(shape, device, fp8, args.repeat))  # type: ignore[arg-type]
        print(format_table(rows[-1:], "") .splitlines()[-1], flush=True)
    if hasattr(os, "getloadavg"):  # this is often a shared machine: say how busy it was
        header += f"\nload average before/after: {load_before:.1f} / {os.getloadavg()[0]:.1f}"
    print()
    print(format_table(rows, header))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
