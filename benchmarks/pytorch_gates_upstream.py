"""Issue 19's check on real, unmodified PyTorch test files (never committed: pass their folder).

For each file: pytest's counts without the plugin (-p no:devcaps) and with it (--devcaps-json),
every test the plugin classes ``cuda`` against every test carrying ``onlyCUDA`` / ``skipIf(not
TEST_CUDA)`` (read from the file's own decorators), ``--devcaps-hardware=cuda`` selecting exactly
those, and the footer's groups adding up to pytest's skip count.

    python benchmarks/pytorch_gates_upstream.py /work/upstream/h19/test_dlpack.py ...
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

COUNTS = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|error|errors|deselected)")


def run(path: Path, *args: str) -> tuple[dict[str, int], str]:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
               str(path), *args]
    done = subprocess.run(command, capture_output=True, text=True, cwd=path.parent, timeout=1800)
    last = [line for line in done.stdout.splitlines() if line.strip()][-1]
    return {k.rstrip("s") if k == "errors" else k: int(n) for n, k in COUNTS.findall(last)}, done.stdout


def footer_total(text: str) -> tuple[int, int]:
    lines = text.split("devcaps: skipped tests by reason", 1)[1].splitlines()[1:]
    groups = 0
    for line in lines:
        match = re.match(r"^\s*(\d+)  ", line)
        if not match:
            total = int(re.match(r"(\d+) test\(s\) skipped", line).group(1))  # type: ignore[union-attr]
            return groups, total
        groups += int(match.group(1))
    raise AssertionError("no footer total")


def main(paths: list[str]) -> int:
    ok = True
    for name in paths:
        path = Path(name).resolve()
        plain, _ = run(path, "-p", "no:devcaps")
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "r.json"
            ours, text = run(path, f"--devcaps-json={report}")
            data = json.loads(report.read_text())
            selected, _ = run(path, "--devcaps-hardware=cuda")
        cuda = sorted(t["nodeid"] for t in data["tests"] if t.get("hardware") == "cuda")
        gated = sorted(t["nodeid"] for t in data["tests"]
                       if any(g["gate"] in ("onlyCUDA", "TEST_CUDA") for g in t.get("gates", ())))
        groups, total = footer_total(text)
        checks = {
            "counts identical": plain == ours,
            "onlyCUDA/TEST_CUDA tests classed cuda": cuda == gated,
            "--devcaps-hardware=cuda selects them": sum(v for k, v in selected.items()
                                                        if k != "deselected") == len(cuda),
            "footer groups add up": groups == total == ours.get("skipped", 0),
        }
        ok &= all(checks.values())
        print(f"{path.name}: without plugin {plain}; with plugin {ours}; classes {data['hardware']}; "
              f"cuda-gated {len(gated)}, classed cuda {len(cuda)}; --devcaps-hardware=cuda {selected}; "
              f"footer groups {groups} = total {total}")
        for check, passed in checks.items():
            print(f"  {'ok ' if passed else 'BAD'} {check}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
