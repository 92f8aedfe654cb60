"""Issue 28: real, unmodified PyTorch device-generic test files on emu (never committed: pass
their paths; read with the read_file tool and saved as they are stored).

Each file runs three ways, in fresh pytest processes, with per-test outcomes from --junitxml:

* ``cpu``: emu not loaded, without the plugin (``-p no:devcaps``): the by-hand CPU run;
* ``emu``: ``PYTEST_DEVCAPS_EMU_DEVICES=2``, without the plugin: PyTorch's own instantiation
  (``PrivateUse1TestBase`` is among the test bases once the backend is available) and its own
  gates, the by-hand run on emu;
* ``emu+devcaps``: the same with ``-p pytest_devcaps``.

Checks: the plugin changes no test's outcome (``emu`` == ``emu+devcaps``, test by test); loading
emu changes no CPU-instantiated test's outcome except those PyTorch gates on the PrivateUse1
backend being present (listed); every skip has a reason. Printed: outcomes per instantiated
class, every skip reason and every failure's first line, counted.

    python benchmarks/emu_upstream.py FILE.py [FILE.py ...]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

RUNS = {
    "cpu": ({}, ("-p", "no:devcaps")),
    "emu": ({"PYTEST_DEVCAPS_EMU_DEVICES": "2"}, ("-p", "no:devcaps")),
    "emu+devcaps": ({"PYTEST_DEVCAPS_EMU_DEVICES": "2"}, ("-p", "pytest_devcaps")),
}


def outcomes(path: Path, extra_env: dict[str, str], args: tuple[str, ...]
             ) -> tuple[dict[str, tuple[str, str]], float]:
    """test id -> (outcome, message), and the run's wall time."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_DEVCAPS_EMU_DEVICES"}
    env.update(extra_env)
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p",
                        "no:cacheprovider", str(path), f"--junitxml={xml}", *args],
                       cwd=path.parent, env=env, capture_output=True, text=True, timeout=3600,
                       check=False)
        took = time.perf_counter() - started
        found: dict[str, tuple[str, str]] = {}
        for case in ET.parse(xml).getroot().iter("testcase"):
            test = f"{case.get('classname')}::{case.get('name')}"
            outcome, message = "passed", ""
            for child in case:
                if child.tag in ("failure", "error", "skipped"):
                    outcome = {"failure": "failed"}.get(child.tag, child.tag)
                    message = (child.get("message") or "").strip().splitlines()[0][:160] \
                        if child.get("message") else ""
            found[test] = (outcome, message)
    return found, took


def instantiated_class(test: str) -> str:
    cls = test.split("::")[0].rsplit(".", 1)[-1]
    for suffix in ("PRIVATEUSE1", "CPU", "CUDA", "MPS", "XPU", "META"):
        if cls.endswith(suffix):
            return suffix
    return "not instantiated"


def report(path: Path) -> bool:
    runs = {name: outcomes(path, env, args) for name, (env, args) in RUNS.items()}
    print(f"\n## {path.name}")
    for name, (found, took) in runs.items():
        per_class: dict[str, Counter[str]] = {}
        for test, (outcome, _) in found.items():
            per_class.setdefault(instantiated_class(test), Counter())[outcome] += 1
        summary = "; ".join(f"{cls}: {dict(sorted(c.items()))}" for cls, c in sorted(per_class.items()))
        print(f"- {name} ({took:.0f} s, {len(found)} tests): {summary}")
    emu, ours, cpu = runs["emu"][0], runs["emu+devcaps"][0], runs["cpu"][0]
    changed = sorted(t for t in emu if ours.get(t, ("missing",))[0] != emu[t][0])
    cpu_changed = sorted(t for t in cpu if emu.get(t, ("missing",))[0] != cpu[t][0])
    unexplained = [t for t, (o, m) in ours.items() if o == "skipped" and not m]
    print(f"- the plugin changed {len(changed)} outcome(s) on the emu run"
          + (f": {changed[:5]}" if changed else ""))
    print(f"- loading emu changed {len(cpu_changed)} CPU-run outcome(s)"
          + "".join(f"\n    {t}: {cpu[t][0]} -> {emu.get(t, ('missing',))[0]}" for t in cpu_changed))
    print(f"- skips without a reason: {len(unexplained)}")
    for label, kind in (("skip reasons (emu+devcaps)", "skipped"),
                        ("failures (emu+devcaps, first line)", "failed")):
        reasons = Counter(f"[{instantiated_class(t)}] {m}" for t, (o, m) in ours.items() if o == kind)
        print(f"- {label}:" + ("".join(f"\n    {n:4d}  {r}" for r, n in reasons.most_common())
                                or " none"))
    return not changed and not unexplained


def main(paths: list[str]) -> int:
    print(f"load average: {os.getloadavg()}")
    ok = all([report(Path(p).resolve()) for p in paths])
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
