"""Profile loading scales linearly: a profile of N devices costs N times one device.

Writes profiles of ``--small`` and ``--large`` devices (default 10,000 and 100,000; the large
one is about 10 MB), loads each with ``load_profile`` in a fresh interpreter, and prints the
CPU time (``time.process_time``: a busy shared machine disturbs it far less than wall time),
the cost per device and the ratio of the two per-device costs (1.0: linear; 10: quadratic).

    python benchmarks/bench_profile_scale.py [--small 10000] [--large 100000]
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

DEVICE = ('    - {{type: cuda, vendor: nvidia, arch: sm_90, index: {i}, memory_gib: 80, '
          'facts: {{sm: 90, cuda_version: "12.8"}}}}\n')  # ~100 bytes: 100,000 in 10 MB
LOAD = """
import sys, time
from pytest_devcaps.config import load_catalogue, load_profile
catalogue = load_catalogue()
cpu, wall = time.process_time(), time.perf_counter()
profile = load_profile(sys.argv[1], catalogue)
print(len(profile.identities), time.process_time() - cpu, time.perf_counter() - wall)
"""


def write_profile(path: Path, devices: int) -> int:
    rows = "".join(DEVICE.format(i=i) for i in range(devices))
    path.write_text("devcaps: 1\nprofile:\n  name: fleet\n  devices:\n" + rows)
    return path.stat().st_size


def measure(path: Path) -> tuple[int, float, float]:
    out = subprocess.run([sys.executable, "-c", LOAD, str(path)], check=True,
                         capture_output=True, text=True).stdout.split()
    return int(out[0]), float(out[1]), float(out[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--large", type=int, default=100_000)
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    per_device = []
    with tempfile.TemporaryDirectory() as tmp:
        for devices in (args.small, args.large):
            path = Path(tmp, f"fleet-{devices}.yaml")
            size = write_profile(path, devices)
            count, cpu, wall = measure(path)
            assert count == devices
            per_device.append(cpu / devices)
            print(f"{devices:>7} devices {size / 2**20:6.1f} MiB: {cpu:6.2f} s CPU ({wall:6.2f} s wall), "
                  f"{cpu / devices * 1e6:6.1f} us CPU per device")
    print(f"per-device cost, large / small: {per_device[1] / per_device[0]:.2f} (1.0 is linear)")


if __name__ == "__main__":
    main()
