"""Probe cost: cold probing of every capability, and a warm (cached) lookup beyond ``import torch``.

Each measurement runs in a fresh interpreter, so imports are not shared. Targets on the CI
machine: cold under 3 s, warm under 50 ms beyond ``import torch``. The warm build is also given
in CPU time (``time.process_time``), which a busy shared machine disturbs far less than wall time.

    python benchmarks/bench_probe.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

IMPORT_TORCH = "import time; t = time.perf_counter(); import torch; print(time.perf_counter() - t)"
BUILD = """
import time
t = time.perf_counter()
import torch
t_torch = time.perf_counter()
cpu = time.process_time()
from pytest_devcaps.registry import RegistryOptions, build_registry
registry = build_registry(RegistryOptions())
records = list(registry)
t_end = time.perf_counter()
assert records
print(t_torch - t, t_end - t_torch, registry.meta["cache"], len(records), time.process_time() - cpu)
"""


def run(code: str, env: dict[str, str]) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    return out.stdout.split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="devcaps-probe-bench-") as cache:
        env = dict(os.environ, PYTEST_DEVCAPS_CACHE_DIR=cache)
        torch_only = min(float(run(IMPORT_TORCH, env)[0]) for _ in range(args.repeat))
        cold = run(BUILD, env)
        assert cold[2] == "miss", cold
        warm_runs = [run(BUILD, env) for _ in range(args.repeat)]
        assert all(w[2] == "hit" for w in warm_runs), warm_runs
    warm = min(float(w[1]) for w in warm_runs)
    warm_cpu = min(float(w[4]) for w in warm_runs)
    print(f"records: {cold[3]} (every capability x device)")
    print(f"import torch alone         {torch_only * 1000:8.1f} ms")
    print(f"cold: probe + build        {float(cold[1]) * 1000:8.1f} ms beyond import torch   (target < 3000 ms)")
    print(f"warm: cached build         {warm * 1000:8.1f} ms beyond import torch   (target < 50 ms)")
    print(f"warm: cached build, CPU    {warm_cpu * 1000:8.1f} ms")
    print(f"cold/warm ratio            {float(cold[1]) / warm:8.1f}x")


if __name__ == "__main__":
    main()
