"""The cross-compilation matrix: every plan x target x tile config, compiled without a GPU.

Runs ``python -m devcaps_kernels.compile --all`` (every tile config of each target's family
lists, including the configs the shared-memory model keeps out of a target's list; every
epilogue op alone and every reduction kind and source) for sm_80, sm_89, sm_90, sm_100, sm_120,
gfx942 and gfx950, and writes the table (one row per plan x target x config: pass / FAIL /
excluded, and why not) and the JSON rows to ``benchmarks/results/``, named after the date, the
CPU model and its ISA. Compile times are wall times on this machine under its load at the time
(printed in the header).

    python benchmarks/bench_cross_compile.py --jobs 2
    python benchmarks/bench_cross_compile.py --targets sm_90,gfx942 --plans fp8
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

from devcaps_kernels.compile import failed, format_rows, jobs_for, run_jobs
from devcaps_kernels.compile_plans import FAMILIES
from devcaps_kernels.gpu_targets import DEFAULT_TARGETS
from kernel_timing import cpu_model_and_isa, machine_tag

RESULTS = Path(__file__).resolve().parent / "results"


def summary(rows: list[dict[str, object]]) -> str:
    outcome = Counter(("pass" if r["passed"] else "excluded" if not r["in_autotune_list"] else "FAIL", r["target"])
                      for r in rows)
    lines = ["per target: pass / FAIL / excluded (outside the target's list)"]
    for t in sorted({str(r["target"]) for r in rows}):
        lines.append(f"  {t:<7} {outcome[('pass', t)]:>4} / {outcome[('FAIL', t)]:>3} / {outcome[('excluded', t)]:>3}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default=",".join(DEFAULT_TARGETS))
    parser.add_argument("--plans", default=",".join(FAMILIES))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS), help="folder for the table and JSON")
    args = parser.parse_args(argv)
    import triton

    model, isa = cpu_model_and_isa()
    start, load = time.perf_counter(), os.getloadavg()[0]
    rows = run_jobs(jobs_for(args.targets.split(","), args.plans.split(","), True), args.jobs)
    took = time.perf_counter() - start
    header = (f"# cross-compilation matrix, {time.strftime('%Y-%m-%d %H:%M')}, triton {triton.__version__}, "
              f"{model} ({' '.join(isa)}), {args.jobs} jobs, load average {load:.1f} at start / "
              f"{os.getloadavg()[0]:.1f} at end, {took:.0f} s\n"
              f"# command: python benchmarks/bench_cross_compile.py --jobs {args.jobs}\n"
              f"# {len(rows)} compiles, {sum(failed(r) for r in rows)} failed checks on configs in a "
              f"target's autotune list\n")
    stem = f"cross_compile_matrix_{time.strftime('%Y-%m-%d')}_{machine_tag()}"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.txt").write_text(header + summary(rows) + "\n\n" + format_rows(rows) + "\n")
    (out / f"{stem}.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(header + summary(rows))
    print(f"wrote {out / stem}.txt and .json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
