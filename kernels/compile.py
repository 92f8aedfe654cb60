"""``python -m devcaps_kernels.compile``: cross-compile the fused kernel for GPU targets, no GPU.

    python -m devcaps_kernels.compile --targets sm_80,sm_89,sm_90,sm_100,sm_120,gfx942,gfx950
    python -m devcaps_kernels.compile --all --json > matrix.json
    python -m devcaps_kernels.compile --targets sm_89 --plans fp8 --config 256x128x128/w8/s3

Default: the representative set (every operand family x one epilogue-and-reduction plan x
every target), each with the smallest config of the target's autotune list (``--config
first``: the autotuner's first candidate, the largest tile; ``--config 128x128x64/w4/s3``: that
config, checked also where the target's list leaves it out). ``--all``: the whole
matrix (every config of the vendor's list per family, also those the shared-memory model keeps
out of a target's list; every epilogue op alone and every reduction with the first family,
fp8 by default: the epilogue's code does not depend on the operands). Each row is checked
as :mod:`devcaps_kernels.cross_compile` says; ``--json`` prints a list of
``{"target", "plan", "compiled", "fp8_native", "instruction", "shared_bytes", "shared_limit",
"spills", "seconds", "error", ...}``. Exit status 1 when a check fails on a config a target's
autotune list holds (a config kept out of the list is expected not to fit: it is reported,
not failed), 2 for a usage error. Needs the ``triton`` package (the test extras install it).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, Sequence

from .compile_plans import FAMILIES, PlanSpec, op_plans, reduction_plans, representative_plan
from .gpu_targets import DEFAULT_TARGETS, GpuTarget, target
from .triton_configs import TileConfig, configs_for, family_element_bytes, shared_bytes_estimate


@dataclass(frozen=True)
class Job:
    spec: PlanSpec
    target: str
    config: TileConfig | None     # None: the first of the target's list
    in_list: bool = True          # the config is in the target's autotune list
    outside: str = ""             # why it is not: "excluded" (does not fit), "not a candidate"


CONFIG_CHOICES = ("smallest", "first")


def _family_of(spec: PlanSpec, t: GpuTarget) -> str:
    if spec.operands in ("fp8", "e5m2"):
        return "fp8" if t.fp8_mma else "16bit"
    return "fp32" if spec.operands == "fp32" else "16bit"


def _config_jobs(spec: PlanSpec, t: GpuTarget) -> list[Job]:
    """``spec`` with every config of the vendor's family list; those the target's shared
    memory keeps out of its list are marked ``in_list=False``."""
    fam = _family_of(spec, t)
    kept = set(configs_for(t.vendor, fam, 4096, t.shared_limit, t.arch))
    return [Job(spec, t.name, c, c in kept, "" if c in kept else "excluded")
            for c in configs_for(t.vendor, fam, 4096)]


def _smallest(spec: PlanSpec, t: GpuTarget) -> TileConfig:
    fam = _family_of(spec, t)
    return min(configs_for(t.vendor, fam, 4096, t.shared_limit, t.arch),
               key=lambda c: shared_bytes_estimate(c, *family_element_bytes(fam), t.vendor, t.arch))


def jobs_for(targets: Sequence[str], families: Sequence[str], everything: bool,
             config: TileConfig | str = "smallest") -> list[Job]:
    """The compiles to run: the representative set with ``config`` (a config, or "smallest" /
    "first" of each target's list), or with ``everything`` the whole matrix."""
    jobs: list[Job] = []
    for name in targets:
        t = target(name)
        for fam in families:
            spec = representative_plan(fam)
            if isinstance(config, TileConfig) and not everything:
                fam_of = _family_of(spec, t)
                kept = set(configs_for(t.vendor, fam_of, 4096, t.shared_limit, t.arch))
                outside = ("" if config in kept else "excluded" if config in configs_for(t.vendor, fam_of, 4096)
                           else "not a candidate")
                jobs.append(Job(spec, name, config, config in kept, outside))
            elif not everything:
                jobs.append(Job(spec, name, _smallest(spec, t) if config == "smallest" else None))
            else:
                jobs += _config_jobs(spec, t)
        if everything:  # the epilogue and reduction code is the same for every operand family
            jobs += [Job(s, name, _smallest(s, t)) for s in op_plans(families[0]) + reduction_plans(families[0])]
    return jobs


def run_job(job: Job, cache_dir: str | None = None) -> dict[str, Any]:
    """One compile and its checks, as a JSON-ready row (runs in a worker process)."""
    from .cross_compile import compile_plan

    with warnings.catch_warnings():  # Triton 3.9's notice of its 3.10 FP-fusion default
        warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION")
        result = compile_plan(job.spec, target(job.target), job.config, cache_dir)
    row = result.as_json()
    row["in_autotune_list"] = job.in_list
    if job.outside == "excluded":
        fits = result.shared_bytes is not None and result.shared_bytes <= result.shared_limit
        row["notes"].append(f"not in {job.target}'s autotune list (estimate {result.shared_estimate} B > "
                            f"{result.shared_limit} B); measured {result.shared_bytes} B: "
                            f"{'it would have fit (the model is conservative here)' if fits else 'does not fit'}")
    elif job.outside:
        row["notes"].append(f"not one of {job.target}'s autotune candidates (given with --config)")
    return row


def _cost(job: Job) -> int:
    c = job.config
    return 0 if c is None else c.block_m * c.block_n * c.num_warps


def run_jobs(jobs: list[Job], workers: int) -> list[dict[str, Any]]:
    """Every job, on ``workers`` processes (forked where the OS can), in the jobs' order."""
    order = sorted(range(len(jobs)), key=lambda i: -_cost(jobs[i]))  # the slow ones first
    if workers <= 1 or len(jobs) == 1:
        rows = {i: run_job(jobs[i]) for i in order}
    else:
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method)) as pool:
            futures = {i: pool.submit(run_job, jobs[i]) for i in order}
            rows = {i: f.result() for i, f in futures.items()}
    return [rows[i] for i in range(len(jobs))]


def failed(row: dict[str, Any]) -> bool:
    """A failure that counts: a check failed on a config the target's list holds."""
    return bool(row["in_autotune_list"]) and not row["passed"]


def format_rows(rows: list[dict[str, Any]]) -> str:
    header = (f"{'target':<7} {'plan':<52} {'config':<28} {'result':<9} {'instruction':<58} "
              f"{'shared/limit (KiB)':>19} {'est':>5} {'spills':>6} {'regs':>5} {'s':>5}  why not")
    lines = [header]
    for r in rows:
        outcome = "pass" if r["passed"] else ("excluded" if not r["in_autotune_list"] else "FAIL")
        shared = "-" if r["shared_bytes"] is None else f"{r['shared_bytes'] / 1024:.0f}"
        est = "-" if r["shared_estimate"] is None else f"{r['shared_estimate'] / 1024:.0f}"
        why = r["error"] + ("; " if r["error"] and r["notes"] else "") + "; ".join(r["notes"])
        lines.append(f"{r['target']:<7} {r['plan'][:52]:<52} {r['config'][:28]:<28} {outcome:<9} "
                     f"{r['instruction'][:58]:<58} {shared:>9}/{r['shared_limit'] / 1024:<9.0f} {est:>5} "
                     f"{'-' if r['spills'] is None else r['spills']:>6} {'-' if r['registers'] is None else r['registers']:>5} "
                     f"{r['seconds']:5.1f}  {why}")
    return "\n".join(lines)


def parse_config(text: str) -> TileConfig:
    """``BMxBNxBK/wW/sS`` (``128x128x64/w4/s3``), optionally ``/waves_per_eu=2``."""
    try:
        dims, warps, stages, *options = text.split("/")
        bm, bn, bk = (int(v) for v in dims.split("x"))
        extra = tuple((k, int(v)) for k, v in (o.split("=") for o in options))
        return TileConfig(bm, bn, bk, 8, int(warps.removeprefix("w")), int(stages.removeprefix("s")), extra)
    except ValueError:
        raise ValueError(f"--config expects BMxBNxBK/wW/sS (e.g. 128x128x64/w4/s3), got {text!r}") from None


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m devcaps_kernels.compile",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default=",".join(DEFAULT_TARGETS),
                        help=f"comma-separated targets ('all' = {','.join(DEFAULT_TARGETS)})")
    parser.add_argument("--plans", default=",".join(FAMILIES), help=f"operand families ({','.join(FAMILIES)})")
    parser.add_argument("--all", action="store_true", help="the whole matrix, not the representative set")
    parser.add_argument("--config", default="smallest",
                        help="smallest / first of each target's list, or BMxBNxBK/wW/sS")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--jobs", type=int, default=None, help="worker processes (default: min(2, CPUs))")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    try:
        names = list(DEFAULT_TARGETS) if args.targets == "all" else [t for t in args.targets.split(",") if t]
        for name in names:
            target(name)
        families = [f for f in args.plans.split(",") if f]
        unknown = sorted(set(families) - set(FAMILIES))
        if unknown:
            raise ValueError(f"unknown plan family {unknown}; known: {', '.join(FAMILIES)}")
        config = args.config if args.config in CONFIG_CHOICES else parse_config(args.config)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    jobs = jobs_for(names, families, args.all, config)
    rows = run_jobs(jobs, max(1, args.jobs or min(2, os.cpu_count() or 1)))
    bad = [r for r in rows if failed(r)]
    print(json.dumps(rows, indent=1) if args.json else format_rows(rows))
    print(f"{len(rows)} compiles, {len(bad)} failed, {sum(not r['in_autotune_list'] for r in rows)} "
          f"configs outside their target's list; {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
