"""Does a fused CPU call change how fast torch's own small ops run afterwards? Before / after.

Each measurement is one fresh process: it times small torch ops (a 512^3 fp32 mm, a 1M-element
sum, a 64K-element add; median of --rounds calls each), then runs the middle step, then times
the same ops again, and reports both medians and its thread count before and after:

  fused    three scaled_mm calls of four blocks each (2048x1024x512 fp32 in, bf16 out)
  control  the same number of torch.mm calls of that size (what the process did otherwise)

Processes alternate fused / control, --repeat times each; printed are the medians over them of
after / before per op. A fused call runs its blocks on the calling thread with torch's own
threads, so the fused process's ratios match the control's (before issue 30's item 7 they ran
on a pool of single-threaded workers, which were made not to start OpenMP teams of their own). ``--kernels PATH`` runs another copy of devcaps_kernels
(for a before/after of a change: ``git archive`` an older commit's ``kernels/`` as
``PATH/devcaps_kernels``).

    python benchmarks/bench_cpu_threading.py --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from kernel_timing import header, load_average, machine_tag

_CHILD = r"""
import json, os, statistics, sys, time
import torch
torch.set_num_threads(int(sys.argv[2]))
from devcaps_kernels import scaled_mm
rounds = int(sys.argv[3])
x, w = torch.randn(512, 512), torch.randn(512, 512)
big, small = torch.randn(1 << 20), torch.randn(1 << 16)
ops = {"mm512": lambda: torch.mm(x, w), "sum1M": lambda: big.sum(), "add64K": lambda: small + small}
def measure():
    out = {}
    for name, fn in ops.items():
        fn(); ts = []
        for _ in range(rounds):
            s = time.perf_counter(); fn(); ts.append((time.perf_counter() - s) * 1e3)
        out[name] = statistics.median(ts)
    return out
threads = lambda: len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else -1
before, t0 = measure(), threads()
a, b = torch.randn(2048, 512), torch.randn(512, 1024)
for _ in range(3):
    scaled_mm(a, b) if sys.argv[1] == "fused" else torch.mm(a, b)
after, t1 = measure(), threads()
print(json.dumps({"before": before, "after": after, "threads": [t0, t1]}))
"""


def child(kind: str, threads: int, rounds: int, kernels: str | None) -> dict[str, object]:
    env = dict(os.environ)
    if kernels:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [kernels, env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", _CHILD, kind, str(threads), str(rounds)], capture_output=True,
                          text=True, env=env, timeout=900, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--kernels", default=None, help="a folder holding another devcaps_kernels")
    args = parser.parse_args(argv)
    print(header(f"torch's small ops before / after a fused call, one process each ({machine_tag()})"))
    print(f"# kernels: {args.kernels or 'this checkout'}; {args.threads} torch threads; {args.rounds} calls per "
          f"median; {args.repeat} processes of each kind, alternating")
    runs: dict[str, list[dict[str, object]]] = {"fused": [], "control": []}
    for _ in range(args.repeat):
        for kind in runs:
            runs[kind].append(child(kind, args.threads, args.rounds, args.kernels))
    for kind, results in runs.items():
        cells = []
        for op in ("mm512", "sum1M", "add64K"):
            before = statistics.median(r["before"][op] for r in results)  # type: ignore[index]
            after = statistics.median(r["after"][op] for r in results)  # type: ignore[index]
            ratio = statistics.median(r["after"][op] / r["before"][op] for r in results)  # type: ignore[index]
            cells.append(f"{op} {before:.3f} -> {after:.3f} ms (after/before {ratio:.2f})")
        threads = sorted({tuple(r["threads"]) for r in results})  # type: ignore[arg-type]
        print(f"{kind:>8}: " + "; ".join(cells) + f"; threads before -> after {threads}")
    print(f"# load average at the end: {load_average():.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
