"""Every epilogue op and reduction, alone and combined: fused against Inductor and eager, CPU.

For each shape and input dtype, every variant below is one graph, run three ways in the same
interleaved rounds (median ms of --rounds rounds; the load average is printed per shape):

  fused     devcaps_kernels.scaled_mm(a, b, bias=..., epilogue=..., reductions=...), cpu backend
  inductor  torch.compile (Inductor, static shapes) of the eager graph
  eager     the graph op by op: acc = addmm(bias, a, b) in the input dtype, the ops on
            acc.float(), y = x.to(bf16), reductions of y.float()

``f/ind`` and ``f/eag`` are fused / inductor and fused / eager from the same rounds; the issue's
target is <= 1 for every row (bias + relu and reductions-only included). ``--baseline-kernels
DIR/kernels`` (another commit's ``kernels/``, from ``git archive <commit> kernels | tar -x -C
DIR``) adds that copy's scaled_mm as a fourth column, ``f/base`` = fused / baseline: a before /
after of a change in the same rounds. Each round runs baseline, inductor, fused, eager in that
order, so both fused copies follow another op's OpenMP team, as a call inside a model does.
bf16 inputs run only where aten's bf16 GEMM finishes in reasonable time on this CPU
(``--bf16-shapes``): on a CPU without bf16 units (AVX2) it is ~60x slower than the fp32 GEMM
(6.8 s vs 0.11 s at 1024^3 measured here), which is what eager and Inductor both run for a bf16
graph, while the fused path runs the exact fp32 GEMM on the bf16 values.

    python benchmarks/bench_epilogue_ops_cpu.py --rounds 7
"""

from __future__ import annotations

import argparse
import difflib
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

import torch
import torch.nn.functional as F
from devcaps_kernels import Reduce, last_backend, scaled_mm
from devcaps_kernels import epilogue as ep
from kernel_timing import (
    header,
    interleaved,
    load_average,
    load_kernels_copy,
    machine_tag,
    median,
)

Tensor = torch.Tensor


@dataclass(frozen=True)
class Variant:
    """One graph: its eager ops (on the fp32 accumulator) and its fused description."""

    name: str
    bias: bool
    ops: tuple[str, ...]           # names below
    reductions: tuple[Reduce, ...]


_EAGER_OPS: dict[str, Callable[[Tensor, dict[str, Tensor]], Tensor]] = {
    "relu": lambda x, t: torch.relu(x), "gelu": lambda x, t: F.gelu(x),
    "gelu_tanh": lambda x, t: F.gelu(x, approximate="tanh"), "silu": lambda x, t: F.silu(x),
    "sigmoid": lambda x, t: torch.sigmoid(x), "tanh": lambda x, t: torch.tanh(x),
    "clamp": lambda x, t: torch.clamp(x, -1.0, 1.0), "scale": lambda x, t: x * 0.5,
    "mul_col": lambda x, t: x * t["col"], "add_row": lambda x, t: x + t["row"], "add_full": lambda x, t: x + t["full"],
    "mul_col_in": lambda x, t: x * t["col_in"], "add_row_in": lambda x, t: x + t["row_in"],
    "add_full_in": lambda x, t: x + t["full_in"],
}
# each takes the epilogue module to build from (ours, or a --baseline-kernels copy's)
_FUSED_OPS: dict[str, Callable[..., ep.EpiOp]] = {
    "relu": lambda t, m=ep: m.relu(), "gelu": lambda t, m=ep: m.gelu(),
    "gelu_tanh": lambda t, m=ep: m.gelu(approximate="tanh"), "silu": lambda t, m=ep: m.silu(),
    "sigmoid": lambda t, m=ep: m.sigmoid(), "tanh": lambda t, m=ep: m.tanh(),
    "clamp": lambda t, m=ep: m.clamp(-1.0, 1.0), "scale": lambda t, m=ep: m.scale(0.5),
    "mul_col": lambda t, m=ep: m.mul(t["col"]), "add_row": lambda t, m=ep: m.add(t["row"]),
    "add_full": lambda t, m=ep: m.add(t["full"]),
    "mul_col_in": lambda t, m=ep: m.mul(t["col_in"]), "add_row_in": lambda t, m=ep: m.add(t["row_in"]),
    "add_full_in": lambda t, m=ep: m.add(t["full_in"]),
}
#: ops whose operand has the input dtype (a bf16 model's own tensors); with fp32 inputs they are
#: the plain rows again, so they run for bf16 inputs only
_INPUT_DTYPE_OPERANDS = ("mul_col_in", "add_row_in", "add_full_in")
G64 = 64
VARIANTS = (
    [Variant("reductions only: sum+mean+sumsq", False, (), (Reduce("sum"), Reduce("mean"), Reduce("sumsq")))]
    + [Variant(f"bias+{op}", True, (op,), ()) for op in ("relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "clamp")]
    + [Variant(op, False, (op,), ()) for op in ("scale", "mul_col", "add_row", "add_full")]
    + [Variant(f"{op.removesuffix('_in')}, operand in the input dtype", False, (op,), ()) for op in _INPUT_DTYPE_OPERANDS]
    + [Variant(f"{kind} alone", False, (), (Reduce(kind),)) for kind in ("sum", "mean", "sumsq", "meansq", "amax")]
    + [Variant("sum g64 alone", False, (), (Reduce("sum", group=G64),)),
       Variant("combined: bias+gelu_tanh+mul_col, sum+sumsq+sum.g64+amax", True, ("gelu_tanh", "mul_col"),
               (Reduce("sum"), Reduce("sumsq"), Reduce("sum", group=G64), Reduce("amax")))])


def _reduce(y: Tensor, r: Reduce) -> Tensor:
    v = y.float() if r.group is None else y.float().view(y.shape[0], -1, r.group)
    if r.kind in ("sumsq", "meansq"):
        v = v.square()
    elif r.kind == "amax":
        return v.abs().amax(-1)
    return v.mean(-1) if r.kind in ("mean", "meansq") else v.sum(-1)


def eager_graph(v: Variant) -> Callable[..., tuple[Tensor, ...]]:
    def graph(a: Tensor, b: Tensor, bias: Tensor, t: dict[str, Tensor]) -> tuple[Tensor, ...]:
        acc = torch.addmm(bias, a, b) if v.bias else torch.mm(a, b)
        x = acc.float()
        for op in v.ops:
            x = _EAGER_OPS[op](x, t)
        y = x.to(torch.bfloat16)
        return (y, *(_reduce(y, r) for r in v.reductions))
    return graph


def run_shape(m: int, n: int, k: int, dtype: torch.dtype, rounds: int, baseline: ModuleType | None = None,
              only: tuple[str, ...] = ()) -> list[str]:
    import torch._dynamo

    gen = torch.Generator().manual_seed(m + n + k)
    a, b = torch.randn(m, k, generator=gen).to(dtype), torch.randn(k, n, generator=gen).to(dtype)
    bias = torch.randn(n, generator=gen).to(dtype)
    t = {"col": torch.rand(m, 1, generator=gen), "row": torch.randn(n, generator=gen),
         "full": torch.randn(m, n, generator=gen)}
    t.update({f"{name}_in": t[name].to(dtype) for name in ("col", "row", "full")})
    lines = []
    for v in VARIANTS:
        if (dtype == torch.float32 and set(v.ops) & set(_INPUT_DTYPE_OPERANDS)
                or only and not any(part in v.name for part in only)):
            continue
        graph = eager_graph(v)
        compiled = torch.compile(graph, dynamic=False)
        ops = [_FUSED_OPS[op](t) for op in v.ops]
        fns: dict[str, Callable[[], object]] = {}
        if baseline is not None:
            base_ops = [_FUSED_OPS[op](t, baseline.epilogue) for op in v.ops]
            base_reductions = tuple(baseline.Reduce(r.kind, group=r.group) for r in v.reductions)
            fns["baseline"] = lambda: baseline.scaled_mm(a, b, bias=bias if v.bias else None, epilogue=base_ops,
                                                         reductions=base_reductions)
        fns["inductor"] = lambda: compiled(a, b, bias, t)
        fns["fused"] = lambda: scaled_mm(a, b, bias=bias if v.bias else None, epilogue=ops, reductions=v.reductions)
        fns["eager"] = lambda: graph(a, b, bias, t)
        times = {name: median(ts) for name, ts in interleaved(fns, rounds).items()}
        fns["fused"]()
        backend = last_backend()
        ratio_i, ratio_e = times["fused"] / times["inductor"], times["fused"] / times["eager"]
        verdict = "met" if max(ratio_i, ratio_e) <= 1.0 else "NOT met"
        base = (f" {times['baseline']:9.3f} {times['fused'] / times['baseline']:6.2f}" if baseline is not None else "")
        lines.append(f"{m}x{n}x{k:<5} {str(dtype).removeprefix('torch.'):>8} {v.name[:58]:<58} {times['fused']:9.3f} "
                     f"{times['inductor']:9.3f} {times['eager']:9.3f} {ratio_i:6.2f} {ratio_e:6.2f} {verdict:>7}{base} {backend!r}")
        print(lines[-1], flush=True)
        torch._dynamo.reset()
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--shapes", default="512x512x512,1024x1024x512,8192x1024x64,4096x4096x256,16384x512x128,1x4096x4096,7x4096x4096")
    parser.add_argument("--bf16-shapes", default="512x512x512,1x4096x4096,7x4096x4096")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--baseline-kernels", metavar="DIR", default=None,
                        help="another commit's kernels/ folder, timed in the same rounds (f/base)")
    parser.add_argument("--variants", default="", help="only the variants whose name contains one of these "
                        "comma-separated parts (\"scale,add_\"); all by default")
    args = parser.parse_args(argv)
    only = tuple(filter(None, args.variants.split(",")))
    names = [v.name for v in VARIANTS]
    for part in only:  # a typo would run no row of its own and say nothing
        if not any(part in name for name in names):
            close = difflib.get_close_matches(part, names, n=1, cutoff=0.4)
            parser.error(f"--variants: {part!r} is in no variant's name"
                         + (f" (did you mean {close[0]!r}?)" if close else "") + f"; variants: {', '.join(names)}")
    baseline = load_kernels_copy(args.baseline_kernels) if args.baseline_kernels else None
    if args.threads:
        torch.set_num_threads(args.threads)
    base_columns = f" {'baseline':>9} {'f/base':>6}" if baseline else ""
    print(header(f"every epilogue op and reduction, fused vs Inductor vs eager ({machine_tag()})"))
    print(f"{'M x N x K':<16} {'in':>8} {'variant':<58} {'fused':>9} {'inductor':>9} {'eager':>9} {'f/ind':>6} "
          f"{'f/eag':>6} {'<= 1':>7}{base_columns} backend   "
          f"(median ms of {args.rounds} interleaved rounds)", flush=True)
    for dtype, shapes in ((torch.float32, args.shapes), (torch.bfloat16, args.bf16_shapes)):
        for shape in filter(None, shapes.split(",")):
            m, n, k = (int(x) for x in shape.split("x"))
            run_shape(m, n, k, dtype, args.rounds, baseline, only)
            print(f"# load average after {shape} {str(dtype).removeprefix('torch.')}: {load_average():.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
