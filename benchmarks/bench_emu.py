"""What the emulated device costs: its cold build, a warm load, and the kernels suite on emu.

All in one run, in fresh interpreters, printing medians and ratios:

- cold build: ``devcaps emu build`` into an empty ``PYTEST_DEVCAPS_EMU_CACHE_DIR`` (once);
- warm ``import torch`` with ``PYTEST_DEVCAPS_EMU_DEVICES=1`` against plain ``import torch``,
  alternated ``--repeat`` times (the warm load's cost is the difference);
- with ``--suite``: ``pytest --pyargs pytest_devcaps.suites.kernels`` on cpu and on emu.

The load average is printed: the machine may be shared.

    python benchmarks/bench_emu.py [--repeat 5] [--suite]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def _timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--suite", action="store_true")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    base = {k: v for k, v in os.environ.items() if k != "PYTEST_DEVCAPS_EMU_DEVICES"}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(base, PYTEST_DEVCAPS_EMU_CACHE_DIR=cache)
        cold = _timed([sys.executable, "-m", "pytest_devcaps.commands.main", "emu", "build"], env)
        warm_build = _timed([sys.executable, "-m", "pytest_devcaps.commands.main", "emu", "build"], env)
        print(f"cold build (devcaps emu build, empty cache): {cold:.1f} s")
        print(f"devcaps emu build again (cached): {warm_build:.1f} s")
        emu = dict(env, PYTEST_DEVCAPS_EMU_DEVICES="1")
        plain_times, emu_times = [], []
        for _ in range(args.repeat):
            plain_times.append(_timed([sys.executable, "-c", "import torch"], env))
            emu_times.append(_timed([sys.executable, "-c", "import torch"], emu))
        plain, loaded = statistics.median(plain_times), statistics.median(emu_times)
        print(f"import torch, median of {args.repeat}: plain {plain:.2f} s, with emu (warm) "
              f"{loaded:.2f} s: ratio {loaded / plain:.3f}, warm load {loaded - plain:+.2f} s")
        if args.suite:
            suite = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "--pyargs",
                     "pytest_devcaps.suites.kernels"]
            on_cpu = _timed([*suite, "--devcaps-devices=cpu"], emu)
            on_emu = _timed([*suite, "--devcaps-devices=emu"], emu)
            print(f"kernels suite: cpu {on_cpu:.1f} s, emu {on_emu:.1f} s: ratio "
                  f"{on_emu / on_cpu:.1f}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
