"""fp8 on CPU, exact mode: what oneDNN runs for torch._scaled_mm, and the fastest exact GEMM.

Three parts, all in one process, every ratio printed is of two times from the same rounds:

1. Which oneDNN implementation torch._scaled_mm reaches with tensorwise and with rowwise
   scales (``ONEDNN_VERBOSE`` lines, captured as the mm.scaled probe captures them). On an
   AMX-INT8 Xeon tensorwise goes to oneDNN (Blas.cpp _scaled_mm_out_cpu) and runs ``ref:any``;
   rowwise and every CPU without AMX-INT8 take the fp32 upcast (no oneDNN fp8 line).
2. Exactness of each candidate exact path against float64 (``max |y - a@b| / (|a|@|b|)``) and
   whether it kept a sum bf16 cannot hold (1 + 2^-9).
3. Times (best of rounds, ms) at 1024^3 and 7x4096x4096 (M x N x K): bf16 oneDNN linear (the
   target's denominator), fp32 IEEE linear, fp32 linear under oneDNN's bf16 fpmath (exact for
   fp8/bf16 values where the CPU has native bf16), ``scaled_mm`` exact (fp8 e4m3fn, tensorwise
   scales, bf16 out; the cpu backend's choice), and ``torch._scaled_mm`` tensorwise
   (--with-scaled-mm: on AMX-INT8 this is the ~28 s reference kernel at 1024^3).

    python benchmarks/bench_fp8_exact_cpu.py --repeat 5
"""

from __future__ import annotations

import argparse
import math
import os
import time
from typing import Callable

import torch

from devcaps_kernels import last_backend, scaled_mm
from devcaps_kernels.cpu_backend import bf16_fpmath_problem, onednn_problem
from devcaps_kernels.precision import fp32_matmul_precision
from pytest_devcaps.probes.matmul import fp8_reference_kernels, onednn_executions

SHAPES = ((1024, 1024, 1024), (7, 4096, 4096))
_ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_int8",
              "amx_fp16", "amx_tile")


def cpu_model_and_isa() -> tuple[str, list[str]]:
    model, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return model, [f for f in _ISA_FLAGS if f in flags]


def best_ms(fn: Callable[[], object], repeat: int, budget_s: float = 60.0) -> float:
    fn()  # warm-up (primitive creation, weight conversion)
    best, spent = math.inf, 0.0
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        took = time.perf_counter() - start
        best, spent = min(best, took), spent + took
        if spent > budget_s:
            break
    return best * 1e3


def onednn_routes() -> list[str]:
    """The oneDNN executions of torch._scaled_mm (64^3, e4m3fn) with each scaling."""
    a = torch.randn(64, 64).to(torch.float8_e4m3fn)
    b = torch.randn(64, 64).to(torch.float8_e4m3fn).t().contiguous().t()
    scales = {"tensorwise": (torch.tensor(1.0), torch.tensor(1.0)),
              "rowwise": (torch.ones(64, 1), torch.ones(1, 64))}
    lines = []
    for name, (sa, sb) in scales.items():
        try:
            _, log = onednn_executions(lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16))
        except Exception as exc:  # noqa: BLE001 - recorded as what happened
            lines.append(f"  {name:10s} raised {type(exc).__name__}: {str(exc).splitlines()[0][:100]}")
            continue
        fp8 = [entry for entry in log if "f8_" in entry]
        ref = fp8_reference_kernels(log)
        what = (f"oneDNN fp8: {fp8[0].split(',')[6] if fp8 else ''}" if fp8
                else "no oneDNN fp8 primitive (fp32-upcast path)")
        lines.append(f"  {name:10s} {what}{' -> reference kernel' if ref else ''}")
        lines.extend(f"      {entry}" for entry in fp8[:2])
    return lines


def exactness(m: int, n: int, k: int) -> dict[str, float]:
    """Accumulation error vs float64 of every exact candidate on fp8 e4m3fn values."""
    a8 = torch.randn(m, k).to(torch.float8_e4m3fn)
    b8 = torch.randn(k, n).to(torch.float8_e4m3fn)
    a, w = a8.float(), b8.float().t().contiguous()
    exact = a.double() @ w.double().t()
    scale = a.double().abs() @ w.double().abs().t()
    linear = torch.ops.mkldnn._linear_pointwise

    def err(y: torch.Tensor) -> float:
        return float(((y.double() - exact).abs() / scale.clamp_min(1e-300)).max())

    with fp32_matmul_precision("ieee"):
        out = {"fp32 ieee linear": err(linear(a, w, None, "none", [], ""))}
    with fp32_matmul_precision("bf16"):
        out["fp32 linear, bf16 fpmath"] = err(linear(a, w, None, "none", [], ""))
    y, _ = scaled_mm(a8, b8, out_dtype=torch.float32)
    out[f"scaled_mm exact ({last_backend()})"] = err(y) if y is not None else math.nan
    if not onednn_problem(torch.bfloat16):
        out["bf16 linear (bf16 out)"] = err(linear(a.bfloat16(), w.bfloat16(), None, "none", [], "").float())
    return out


def times(m: int, n: int, k: int, repeat: int, with_scaled_mm: bool) -> dict[str, float]:
    a8 = torch.randn(m, k).to(torch.float8_e4m3fn)
    b8 = torch.randn(k, n).to(torch.float8_e4m3fn)
    a, w = a8.float(), b8.float().t().contiguous()
    ab, wb = a.bfloat16(), w.bfloat16()
    linear = torch.ops.mkldnn._linear_pointwise
    sa, sb = torch.tensor(0.5), torch.tensor(2.0)
    fns: dict[str, Callable[[], object]] = {}
    if not onednn_problem(torch.bfloat16):
        fns["bf16 linear"] = lambda: linear(ab, wb, None, "none", [], "")
    else:
        fns["bf16 torch.mm"] = lambda: torch.mm(ab, wb.t())

    def pinned(precision: str) -> Callable[[], object]:
        def run() -> object:
            with fp32_matmul_precision(precision):
                return linear(a, w, None, "none", [], "")
        return run

    fns["fp32 ieee linear"] = pinned("ieee")
    fns["fp32 linear bf16 fpmath"] = pinned("bf16")
    fns["scaled_mm fp8 exact"] = lambda: scaled_mm(a8, b8, sa, sb)
    if with_scaled_mm:
        fns["torch._scaled_mm tensorwise"] = lambda: torch._scaled_mm(
            a8, b8.t().contiguous().t(), sa, sb, out_dtype=torch.bfloat16)
    return {name: best_ms(fn, repeat) for name, fn in fns.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--with-scaled-mm", action="store_true",
                        help="also time torch._scaled_mm (very slow on AMX-INT8: reference kernel)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, isa = cpu_model_and_isa()
    load = "%.1f" % os.getloadavg()[0] if hasattr(os, "getloadavg") else "n/a"
    print(f"# {model}; isa {' '.join(isa) or 'none of ' + ','.join(_ISA_FLAGS)}; torch {torch.__version__}; "
          f"ATen capability {torch.backends.cpu.get_cpu_capability()}; threads {torch.get_num_threads()}; "
          f"load {load}")
    print(f"# bf16 fpmath path: {bf16_fpmath_problem() or 'usable (checked exact)'}")
    print("oneDNN route of torch._scaled_mm (ONEDNN_VERBOSE):")
    print("\n".join(onednn_routes()))
    print("accumulation error vs float64, fp8 e4m3fn values, 256x256x1024:")
    for name, value in exactness(256, 256, 1024).items():
        print(f"  {name:32s} {value:.2e}")
    for m, n, k in SHAPES:
        got = times(m, n, k, args.repeat, args.with_scaled_mm)
        base_name = next(iter(got))
        base = got[base_name]
        print(f"{m}x{n}x{k} (ms, best of {args.repeat}; ratio to {base_name}):")
        for name, ms in got.items():
            print(f"  {name:32s} {ms:10.2f}  {ms / base:7.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
