"""The bundled suites' own cost, before and after a change, measured back to back in one run.

``--before`` is a source tree of the older pytest-devcaps (``git archive <commit> | tar -x -C
DIR``); the current tree is "after". Each measurement alternates before and after (so both see
the same machine load) and prints the median of each and the ratio after/before:

- ``distributed.run`` of a no-op body: the first call (a world starts) and the next calls of
  the same world size (after: the world is reused);
- the FSDP suite (``pytest --pyargs pytest_devcaps.suites.fsdp``);
- the Dynamo suite, warm (after: the shared Inductor cache, warmed by one untimed run; before:
  each run compiles into a new cache of its own, as its conftest did);
- ``devcaps check``, warm (probe cache and Inductor cache), with ``--check``.

The load average before and after is printed: the machine may be shared.

    python benchmarks/bench_suite_cost.py --before /tmp/devcaps-before [--repeat 2] [--check]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

AFTER = Path(__file__).resolve().parents[1]
NOOP_BODY = "def noop(ctx):\n    return ctx.rank\n"
NOOP_DRIVER = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import noop_body
from pytest_devcaps.distributed import spawn_world
times = {}
for size in (2, 4):
    for call in range(3):
        started = time.perf_counter()
        spawn_world(noop_body.noop, (), world_size=size, device="cpu", backend="gloo")
        times.setdefault(size, []).append(time.perf_counter() - started)
print(json.dumps(times))
"""


def environment(tree: Path, cache: Path) -> dict[str, str]:
    """``tree``'s pytest_devcaps first on the path (ranks and check's children inherit it)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]),
            "PYTEST_DEVCAPS_CACHE_DIR": str(cache), "PYTEST_ADDOPTS": "-p no:randomly"}


def timed(command: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n"
                         f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return elapsed


def noop_calls(env: dict[str, str], work: Path) -> dict[str, list[float]]:
    import json

    (work / "noop_body.py").write_text(NOOP_BODY)
    done = subprocess.run([sys.executable, "-c", NOOP_DRIVER, str(work)], env=env, cwd=work,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def suite(name: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "--pyargs", f"pytest_devcaps.suites.{name}", "-q",
            "-p", "no:cacheprovider"]


def alternate(label: str, repeat: int, run: Callable[[str], float]) -> None:
    results: dict[str, list[float]] = {"before": [], "after": []}
    for _ in range(repeat):
        for side in ("before", "after"):
            results[side].append(run(side))
    before, after = statistics.median(results["before"]), statistics.median(results["after"])
    print(f"{label:<34} before {before:7.1f} s   after {after:7.1f} s   after/before "
          f"{after / before:5.2f}   (runs: {fmt(results['before'])} | {fmt(results['after'])})",
          flush=True)


def fmt(values: list[float]) -> str:
    return " ".join(f"{v:.1f}" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, type=Path, help="source tree of the old version")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--check", action="store_true", help="also time devcaps check (minutes)")
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{os.cpu_count()} cores", flush=True)
    with tempfile.TemporaryDirectory(prefix="devcaps-bench-") as tmp:
        work = Path(tmp)
        trees = {"before": args.before.resolve(), "after": AFTER}
        envs = {side: environment(tree, work / f"cache-{side}") for side, tree in trees.items()}
        for side in trees:  # warm the probe caches (and the after side's Inductor cache)
            timed(suite("dynamo"), envs[side], work)
        noop = {side: noop_calls(envs[side], work) for side in trees}
        for size in ("2", "4"):
            for side in trees:
                first, *again = noop[side][size]
                print(f"distributed.run no-op, world {size}, {side:<6}: first call {first:5.2f} s, "
                      f"next calls {fmt(again)} s", flush=True)
        alternate("FSDP suite", args.repeat, lambda side: timed(suite("fsdp"), envs[side], work))
        alternate("Dynamo suite (warm)", args.repeat,
                  lambda side: timed(suite("dynamo"), envs[side], work))
        if args.check:
            alternate("devcaps check (warm)", 1, lambda side: timed(
                [sys.executable, "-m", "pytest_devcaps.commands.main", "check"], envs[side], work))
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)


if __name__ == "__main__":
    main()
