"""Plugin overhead: a generated suite of N tests run with plain pytest and with pytest-devcaps.

Half the tests use the ``device`` fixture and devcaps markers. The plain run gets a conftest with
an equivalent ``device`` fixture and the markers registered as no-ops, so both runs execute the
same test bodies (and both import torch). The plugin run uses a warm probe cache. Prints the
best-of-N wall time of each and the ratio (target: plugin <= 1.10x plain).

    python benchmarks/bench_plugin_overhead.py [--tests 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
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

MODULE_HEADER = "import pytest\nimport torch\n\n"

DEVICE_TEST = '''
@pytest.mark.requires_capability("dist.gloo")
def test_device_{i}(device):
    assert device.type in ("cpu", "cuda", "xpu", "mps", "hpu") or device.index is not None
'''

PLAIN_TEST = '''
def test_plain_{i}():
    assert {i} + 1 > {i}
'''


def generate(root: Path, count: int, per_module: int = 100) -> None:
    for start in range(0, count, per_module):
        body = [MODULE_HEADER]
        for i in range(start, min(start + per_module, count)):
            body.append((DEVICE_TEST if i % 2 == 0 else PLAIN_TEST).format(i=i))
        (root / f"test_gen_{start // per_module:03d}.py").write_text("".join(body))


def timed_run(root: Path, args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=root, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"pytest failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="devcaps-bench-") as tmp:
        plain_root, plugin_root = Path(tmp, "plain"), Path(tmp, "plugin")
        for root in (plain_root, plugin_root):
            root.mkdir()
            generate(root, args.tests)
        (plain_root / "conftest.py").write_text(PLAIN_CONFTEST)
        env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
                   PYTEST_DEVCAPS_CACHE_DIR=str(Path(tmp, "cache")))
        plugin_args = ["-p", "pytest_devcaps", "--devcaps-devices=cpu"]
        timed_run(plugin_root, plugin_args, env)  # warm the probe cache
        plain, plugin = [], []
        for _ in range(args.repeat):  # interleaved, so drift hits both alike
            plain.append(timed_run(plain_root, [], env))
            plugin.append(timed_run(plugin_root, plugin_args, env))
    best_plain, best_plugin = min(plain), min(plugin)
    print(f"{args.tests} tests ({args.tests // 2} with device fixture + marker), best of {args.repeat}:")
    print(f"  plain pytest        {best_plain:7.2f} s")
    print(f"  pytest-devcaps      {best_plugin:7.2f} s   (warm probe cache)")
    print(f"  ratio plugin/plain  {best_plugin / best_plain:7.3f}x   (target <= 1.10x)")


if __name__ == "__main__":
    main()
