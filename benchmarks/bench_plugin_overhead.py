"""Plugin overhead: generated suites run with plain pytest and with pytest-devcaps, one ratio each.

- ``torch-free``: N tests that never touch torch or devcaps: pytest with the plugin installed
  (autoloaded) against pytest with it disabled (``-p no:devcaps``). Target: <= 1.05x.
- ``device``: N tests, every one taking the ``device`` fixture and a ``requires_capability``
  marker. The plain run gets a conftest with a stand-in ``device`` fixture and the markers
  registered as no-ops, so both runs execute the same bodies and import torch. Serial and
  ``-n 2``. Target: <= 1.10x (issue 32: <= 1.06x).
- ``hand-parametrized`` (issue 32): the same N tests with the device parametrized by hand
  (``@pytest.mark.parametrize("device", [torch.device("cpu")], ids=["cpu"])``, the markers
  no-ops) under plain pytest, against the plugin's device fixture. Target: <= 1.01x.
- ``--callgrind``: instructions instead of seconds (``valgrind --tool=callgrind``, one serial run
  each after a native warm-up run, ``PYTHONHASHSEED=0``): the device comparisons above, and the
  torch-free suite with every entry point of ours loaded by autoload (the other installed
  pytest plugins blocked with ``-p no:NAME``, so they are not even imported) against
  ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`` (issue 32: <= 1.03x).

Plugins autoload as in any environment where they are installed; other plugins that change the
work per test (pytest-randomly, pytest-timeout) are disabled in both runs, so nothing but the
plugin differs. The plugin runs use a warm probe cache, and bytecode is cached as Python does
by default (``PYTHONDONTWRITEBYTECODE`` is dropped: without it pytest re-rewrites the asserts of
every module of the plugin package on each run, a cost of that setting, not of the plugin). Runs are interleaved (drift hits both
alike); each ratio is best plugin time over best plain time, in wall-clock seconds and in CPU
seconds of the pytest processes (user + sys of every child: steadier on a shared machine).

``--tree NAME=PATH`` (repeatable) runs the plugin from a copy of the package at ``PATH`` (a
folder holding ``pytest_devcaps/``, put first on ``PYTHONPATH``; the suites run from temporary
folders, so the copy is imported, not the installed package) and prints one line per tree,
measured in the same session against the same plain runs: before / after a change, interleaved
(wall time) or one after the other (instructions). ``--free 0`` leaves the torch-free suite out.

    python benchmarks/bench_plugin_overhead.py [--free 300] [--tests 2000 10000] [--workers 0 2]
                                               [--repeat 3] [--tree before=/tmp/a --tree after=/tmp/b]
    python benchmarks/bench_plugin_overhead.py --callgrind --free 300 --tests 500
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLAIN_CONFTEST = '''
import pytest
import torch

def pytest_configure(config):
    for name in ("requires_capability", "requires_devices", "requires_memory", "dtypes"):
        config.addinivalue_line("markers", f"{name}: no-op in the plain run")

@pytest.fixture
def device():
    return torch.device("cpu")
'''

DEVICE_HEADER = "import pytest\nimport torch\n\n"
DEVICE_TEST = '''
@pytest.mark.requires_capability("dist.gloo")
def test_device_{i}(device):
    assert device.type == "cpu"
'''
PARAMETRIZED_TEST = '''
@pytest.mark.requires_capability("dist.gloo")
@pytest.mark.parametrize("device", [torch.device("cpu")], ids=["cpu"])
def test_device_{i}(device):
    assert device.type == "cpu"
'''
FREE_HEADER = "import os\n\n"
FREE_TEST = '''
def test_free_{i}():
    assert os.sep
'''


def generate(root: Path, count: int, header: str, template: str, per_module: int = 100) -> None:
    root.mkdir(parents=True)
    for start in range(0, count, per_module):
        body = [header] + [template.format(i=i) for i in range(start, min(start + per_module, count))]
        (root / f"test_gen_{start // per_module:03d}.py").write_text("".join(body))


def timed_run(root: Path, args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the pytest process and everything it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=root, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"pytest failed ({proc.returncode}) in {root}:\n{proc.stdout[-2000:]}\n"
                         f"{proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


Tree = tuple[str, dict[str, str]]  # a label and the environment the plugin runs under


def compare(name: str, plain: tuple[Path, list[str]], plugin: tuple[Path, list[str]],
            trees: list[Tree], env: dict[str, str], repeat: int) -> None:
    """Best of ``repeat`` interleaved runs: the plain suite, then the plugin's under each tree."""
    for _, tree_env in trees:
        timed_run(plugin[0], plugin[1], tree_env)  # warm: probe cache, bytecode
    timed_run(plain[0], plain[1], env)
    plain_runs: list[tuple[float, float]] = []
    plugin_runs: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in trees}
    for _ in range(repeat):
        plain_runs.append(timed_run(*plain, env))
        for label, tree_env in trees:
            plugin_runs[label].append(timed_run(*plugin, tree_env))
    p_wall, p_cpu = _best(plain_runs)
    for label, runs in plugin_runs.items():
        d_wall, d_cpu = _best(runs)
        print(f"{name:<34} plain {p_wall:7.2f} s ({p_cpu:6.2f} cpu)  {label} {d_wall:7.2f} s "
              f"({d_cpu:6.2f} cpu)  ratio {d_wall / p_wall:6.3f}x wall, {d_cpu / p_cpu:6.3f}x cpu",
              flush=True)


def instructions(root: Path, args: list[str], env: dict[str, str]) -> int:
    """Instructions of one serial pytest run (valgrind --tool=callgrind), after a native warm-up."""
    timed_run(root, args, env)
    with tempfile.TemporaryDirectory(prefix="devcaps-callgrind-") as tmp:
        out = Path(tmp, "callgrind.out")
        argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-m", "pytest",
                "-q", "-p", "no:cacheprovider", *args]
        proc = subprocess.run(argv, cwd=root, env={**env, "PYTHONHASHSEED": "0"}, capture_output=True, text=True,
                              check=False)
        if proc.returncode != 0:
            raise SystemExit(f"pytest under valgrind failed ({proc.returncode}) in {root}:\n{proc.stderr[-2000:]}")
        totals = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.MULTILINE)
        if totals is None:
            raise SystemExit(f"no instruction total in {out}")
        return int(totals.group(1))


def compare_instructions(name: str, plain: tuple[Path, list[str], dict[str, str]],
                         plugin: tuple[Path, list[str]], trees: list[Tree], target: float) -> None:
    p = instructions(*plain)
    for label, tree_env in trees:
        d = instructions(plugin[0], plugin[1], tree_env)
        print(f"{name:<44} plain {p:>15,}  {label} {d:>15,}  ratio {d / p:6.3f}x instructions "
              f"(target <= {target:.2f}x: {'met' if d / p <= target else 'NOT met'})", flush=True)


def trees_of(specs: list[str], env: dict[str, str]) -> list[Tree]:
    """``NAME=PATH`` -> (NAME, the environment with PATH first on PYTHONPATH); none: the installed
    package, labelled devcaps."""
    if not specs:
        return [("devcaps", env)]
    trees = []
    for spec in specs:
        label, sep, path = spec.partition("=")
        folder = Path(path).resolve()
        if not sep or not (folder / "pytest_devcaps" / "__init__.py").is_file():
            raise SystemExit(f"--tree {spec!r}: expected NAME=PATH, PATH holding pytest_devcaps/")
        trees.append((label, with_path_entry(env, folder)))
    return trees


def with_path_entry(env: dict[str, str], folder: Path) -> dict[str, str]:
    """``env`` with ``folder`` first on PYTHONPATH. The plain runs get an empty folder there when
    trees are given: an entry costs every import a lookup (~0.1% of a torch suite), which the
    plain runs must pay too for the ratio to be the plugin's."""
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH", "")]))}


def other_plugins() -> list[str]:
    """``-p no:NAME`` for every installed pytest11 entry point but ours (devcaps, devcaps-emu)."""
    from importlib.metadata import entry_points

    return [arg for ep in entry_points(group="pytest11") if not ep.name.startswith("devcaps") for arg in ("-p", f"no:{ep.name}")]


def _best(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return min(r[0] for r in runs), min(r[1] for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--free", type=int, default=300, help="tests in the torch-free suite")
    parser.add_argument("--tests", type=int, nargs="*", default=[2000, 10000],
                        help="sizes of the device suite")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2],
                        help="xdist workers (0: serial)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--callgrind", action="store_true", help="count instructions (valgrind), serial runs")
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                        help="run the plugin from the package copy in PATH (repeatable: one line each)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="devcaps-bench-") as tmp:
        env = dict(os.environ, PYTEST_DEVCAPS_CACHE_DIR=str(Path(tmp, "cache")))
        for name in ("PYTEST_ADDOPTS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
            env.pop(name, None)
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # steady state: bytecode (and pytest's
        # assertion-rewritten bytecode of the test modules and the plugin package) is cached
        trees = trees_of(args.tree, env)
        if args.tree:  # the plain runs pay for a PYTHONPATH entry as the trees' runs do
            Path(tmp, "no-tree").mkdir()
            env = with_path_entry(env, Path(tmp, "no-tree"))
        base = ["-p", "no:randomly", "-p", "no:timeout"]
        serial, plain = [*base, "-p", "no:xdist"], ["-p", "no:devcaps"]
        free = Path(tmp, "free")
        if args.free and args.callgrind:
            generate(free, args.free, FREE_HEADER, FREE_TEST)
            compare_instructions(f"torch-free {args.free}, autoload off vs ours",
                                 (free, [], {**env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}),
                                 (free, other_plugins()), trees, 1.03)
        elif args.free:
            generate(free, args.free, FREE_HEADER, FREE_TEST)
            compare(f"torch-free {args.free}, serial", (free, [*serial, *plain]), (free, serial), trees, env,
                    args.repeat)
        for count in args.tests:
            plain_root, plugin_root = Path(tmp, f"plain{count}"), Path(tmp, f"plugin{count}")
            hand_root = Path(tmp, f"hand{count}")
            generate(plain_root, count, DEVICE_HEADER, DEVICE_TEST)
            generate(plugin_root, count, DEVICE_HEADER, DEVICE_TEST)
            generate(hand_root, count, DEVICE_HEADER, PARAMETRIZED_TEST)
            (plain_root / "conftest.py").write_text(PLAIN_CONFTEST)
            (hand_root / "conftest.py").write_text(PLAIN_CONFTEST.split("@pytest.fixture")[0])
            if args.callgrind:
                compare_instructions(f"device+marker {count} vs stand-in fixture",
                                     (plain_root, [*serial, *plain], env), (plugin_root, serial), trees, 1.06)
                compare_instructions(f"device+marker {count} vs hand-parametrized",
                                     (hand_root, [*serial, *plain], env), (plugin_root, serial), trees, 1.01)
                continue
            for workers in args.workers:
                mode = [*base, "-n", str(workers)] if workers else serial
                label = f"device+marker {count}, " + (f"-n {workers}" if workers else "serial")
                compare(label, (plain_root, [*mode, *plain]), (plugin_root, mode), trees, env, args.repeat)
            compare(f"hand-parametrized {count}, serial", (hand_root, [*serial, *plain]), (plugin_root, serial),
                    trees, env, args.repeat)


if __name__ == "__main__":
    main()
