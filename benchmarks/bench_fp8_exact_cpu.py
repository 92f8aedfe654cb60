"""Exact fp8 on CPU against the bf16 path: time side by side, and the one-rounding bound.

For each shape (1024^3 and 4096^3 by default) and each output dtype (bf16, fp32), in the same
interleaved rounds (median ms, load average printed):

  bf16        scaled_mm(a16, b16)                       bf16 operands, the "bf16 path"
  fp8 tensor  scaled_mm(a8, b8, sa, sb)                 fp8 e4m3fn, tensorwise scales
  fp8 row     scaled_mm(a8, b8, sa[M,1], sb[1,N])       fp8 e4m3fn, rowwise scales

(``b`` column-major, as ``torch._scaled_mm`` takes it; ``cpu`` backend). The target of issue 30:
fp8 (exact: ``fast_accum=False``) at most 1.5x the bf16 path with the same output dtype.
Exactness: every fp8 output against float64 (``a.double() @ b.double()``, the scales applied
in float64): ``|y - exact| <= ulp(exact) / 2 + K * 2^-24 * (|a| @ |b|) * |sa * sb|``, one rounding
to the output dtype plus fp32 summation-order error; the worst ratio to that bound (<= 1) and
the share of outputs that are the correctly rounded exact value are printed. At 4096^3 the
check covers the first 512 rows (the float64 GEMM of the whole shape would dominate the run).
Also printed: the route oneDNN takes for ``torch._scaled_mm`` on this CPU (``ONEDNN_VERBOSE``).

    python benchmarks/bench_fp8_exact_cpu.py --rounds 5
"""

from __future__ import annotations

import argparse
from typing import Callable

import torch

from devcaps_kernels import last_backend, scaled_mm
from devcaps_kernels.cpu_backend import bf16_fpmath_problem, bf16_gemm_problem
from kernel_timing import header, interleaved, load_average, machine_tag, median
from pytest_devcaps.probes.matmul import fp8_reference_kernels, onednn_executions

TARGET = 1.5


def onednn_routes() -> list[str]:
    """The oneDNN executions of torch._scaled_mm (64^3, e4m3fn) with each scaling."""
    a = torch.randn(64, 64).to(torch.float8_e4m3fn)
    b = torch.randn(64, 64).to(torch.float8_e4m3fn).t().contiguous().t()
    scales = {"tensorwise": (torch.tensor(1.0), torch.tensor(1.0)), "rowwise": (torch.ones(64, 1), torch.ones(1, 64))}
    lines = []
    for name, (sa, sb) in scales.items():
        try:
            _, log = onednn_executions(lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16))
        except Exception as exc:  # noqa: BLE001 - recorded as what happened
            lines.append(f"  {name:10s} raised {type(exc).__name__}: {str(exc).splitlines()[0][:100]}")
            continue
        fp8 = [entry for entry in log if "f8_" in entry]
        what = f"oneDNN fp8: {fp8[0].split(',')[6]}" if fp8 else "no oneDNN fp8 primitive (fp32-upcast path)"
        lines.append(f"  {name:10s} {what}{' -> reference kernel' if fp8_reference_kernels(log) else ''}")
    return lines


def ulp(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of ``dtype`` values at ``|x|`` (float64; subnormal spacing below the normals)."""
    info = torch.finfo(dtype)
    return torch.pow(2.0, torch.floor(torch.log2(x.abs().clamp_min(info.tiny)))) * info.eps


def one_rounding(y: torch.Tensor, a8: torch.Tensor, b8: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor,
                 rows: int) -> tuple[float, float]:
    """(worst |y - exact| / bound, share of outputs equal to the correctly rounded exact value)."""
    a, b = a8[:rows].double(), b8.double()
    scale = sa[:rows].double() * sb.double() if sa.numel() > 1 else sa.double() * sb.double()
    exact = (a @ b) * scale
    accumulation = a.shape[1] * 2.0 ** -24 * (a.abs() @ b.abs()) * scale.abs()
    got = y[:rows].double()
    bound = ulp(exact.abs() + accumulation, y.dtype) / 2 + accumulation
    worst = float(((got - exact).abs() / bound).max())
    correct = float((exact.to(y.dtype).double() == got).double().mean())
    return worst, correct


def case(m: int, n: int, k: int, rounds: int) -> list[str]:
    gen = torch.Generator().manual_seed(m * 7 + k)
    a8 = (torch.randn(m, k, generator=gen) * 4).to(torch.float8_e4m3fn)
    b8 = (torch.randn(n, k, generator=gen) * 4).to(torch.float8_e4m3fn).t()  # column-major [K, N]
    a16, b16 = a8.to(torch.bfloat16), b8.to(torch.bfloat16)
    tensorwise = (torch.tensor(0.37), torch.tensor(1.9))
    rowwise = (torch.rand(m, 1, generator=gen) + 0.5, torch.rand(1, n, generator=gen) + 0.5)
    lines = []
    for out in (torch.bfloat16, torch.float32):
        fns: dict[str, Callable[[], object]] = {
            "bf16": lambda: scaled_mm(a16, b16, out_dtype=out, backend="cpu"),
            "fp8 tensor": lambda: scaled_mm(a8, b8, *tensorwise, out_dtype=out, backend="cpu"),
            "fp8 row": lambda: scaled_mm(a8, b8, *rowwise, out_dtype=out, backend="cpu"),
        }
        times = interleaved(fns, rounds)
        base = median(times["bf16"])
        for name in ("fp8 tensor", "fp8 row"):
            scales = tensorwise if name == "fp8 tensor" else rowwise
            y, _ = scaled_mm(a8, b8, *scales, out_dtype=out, backend="cpu")
            worst, correct = one_rounding(y, a8, b8, *scales, rows=min(m, 512))
            ratio = median(times[name]) / base
            lines.append(f"{m}x{n}x{k:<6} {str(out).removeprefix('torch.'):>8} {name:>10} {median(times[name]):10.1f} "
                         f"{base:10.1f} {ratio:6.2f}x  {'met' if ratio <= TARGET else 'NOT met'}  worst/bound "
                         f"{worst:.3f} ({'ok' if worst <= 1 else 'OVER'}), correctly rounded {correct:.4f}  "
                         f"[{last_backend()!r}]  rounds(ms) fp8 {[round(t) for t in times[name]]} "
                         f"bf16 {[round(t) for t in times['bf16']]}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shapes", default="1024x1024x1024,4096x4096x4096")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(header(f"exact fp8 vs the bf16 path on CPU ({machine_tag()})"))
    print(f"# bf16 GEMM here: {bf16_gemm_problem() or 'native bf16 and oneDNN bf16: the bf16 path runs a bf16 GEMM'}")
    print(f"# bf16 fpmath (exact fp32 GEMM on bf16 units): {bf16_fpmath_problem() or 'usable (checked exact)'}")
    print("oneDNN route of torch._scaled_mm (ONEDNN_VERBOSE):")
    print("\n".join(onednn_routes()))
    print(f"{'M x N x K':<16} {'out':>8} {'variant':>10} {'fp8 ms':>10} {'bf16 ms':>10} {'ratio':>7}  target <= {TARGET}x "
          f"(medians of {args.rounds} interleaved rounds)")
    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        for line in case(m, n, k, args.rounds):
            print(line, flush=True)
        print(f"# load average after {shape}: {load_average():.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
