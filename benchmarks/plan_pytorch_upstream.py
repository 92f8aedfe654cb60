"""Issue 31's check of plans on real, unmodified PyTorch device-generic test files (never
committed: pass their paths; the repository, path and commit of each are in the results file).

For each profile, one ``pytest FILES --devcaps-profile P --devcaps-json=...`` (nothing runs) and,
from its JSON report and terminal text:

- the tests generated for the profile's device type (``TestFooCUDA``), and this host's own
  instances left out;
- every test carrying ``@onlyCPU`` (read from the file's decorators) planned skipped on cuda
  with PyTorch's reason, and every planned skip once in the footer (its groups add up to the
  skip count);
- the skips by gate (``largeTensorTest`` over the profile's memory, ``skipCUDAIfRocm`` on ROCm,
  ``slowTest``...), and the tests whose gates a profile cannot decide (notes).

    python benchmarks/plan_pytorch_upstream.py [--profile nvidia-h100 ...] FILE...
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any


def only_cpu_tests(path: Path) -> set[str]:
    """Generic test names decorated ``@onlyCPU`` in the file, as its source writes them."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and any(
                ast.unparse(d) == "onlyCPU" for d in node.decorator_list):
            names.add(node.name)
    return names


def plan(paths: list[Path], profile: str, root: Path) -> tuple[dict[str, Any], str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "plan.json"
        command = [sys.executable, "-m", "pytest", "-q", "-v", "-p", "no:randomly", "-p",
                   "no:cacheprovider", f"--devcaps-profile={profile}",
                   f"--devcaps-json={report}", *map(str, paths)]
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, cwd=root, timeout=3600)
        seconds = time.perf_counter() - started
        if not report.is_file():
            raise SystemExit(f"no plan for {profile}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return json.loads(report.read_text()), done.stdout, seconds


def footer_groups(text: str) -> int:
    """The counts of the plan footer's groups, added up."""
    section = text.split("devcaps plan for profile", 1)[1]
    return sum(int(m.group(1)) for m in re.finditer(r"^\s{0,4}(\d+)  \S", section, re.M))


def gate_of(test: dict[str, Any]) -> str:
    gate = (test.get("gate") or {}).get("gate") or ""
    return re.sub(r"\(.*", "", gate) or ("devcaps marks" if test.get("missing") else "other")


def summarize(paths: list[Path], profile: str, root: Path) -> tuple[list[str], bool]:
    data, text, seconds = plan(paths, profile, root)
    tests = data["tests"]
    generated = [t for t in tests if t.get("generated")]
    skipped = [t for t in tests if t["outcome"] == "would-skip"]
    lines = [f"## {profile} ({seconds:.0f} s wall, nothing run)", "",
             f"- tests planned: {len(tests)} ({len(tests) - len(skipped)} would run, "
             f"{len(skipped)} would be skipped); generated as the profile's host would: "
             f"{data['plan']['generated']}; this host's own instances left out: "
             f"{data['plan']['left_out']}"]
    ok = footer_groups(text) == len(skipped)
    lines.append(f"- footer groups add up to {footer_groups(text)} = {len(skipped)} skipped: "
                 f"{'yes' if ok else 'NO'}")
    for path in paths:
        wanted = only_cpu_tests(path)
        mine = [t for t in generated if t["nodeid"].startswith(str(path.relative_to(root)))]
        cpu_only = [t for t in mine if any(f"::{n}_" in t["nodeid"] for n in wanted)]
        planned_skip = all(t["outcome"] == "would-skip" and t.get("reason", "").startswith(
            "Only runs on cpu") for t in cpu_only)
        ok &= planned_skip
        lines.append(f"- {path.relative_to(root)}: {len(mine)} generated; {len(cpu_only)} "
                     f"instances of @onlyCPU tests, all planned skipped 'Only runs on cpu': "
                     f"{'yes' if planned_skip else 'NO'}")
    by_gate = Counter(gate_of(t) for t in skipped)
    lines.append("- skips by gate: " + ", ".join(f"{g} {n}" for g, n in by_gate.most_common()))
    for t in skipped:
        if gate_of(t) in ("largeTensorTest", "skipCUDAIfRocm", "deviceCountAtLeast",
                          "unittest.skipIf"):
            lines.append(f"  - {t['nodeid']}: {t.get('reason')} ({t['gate']['gate']})"
                         + "".join(f"; {n}" for n in t.get("notes", [])))
    noted = [t for t in tests if t.get("notes")]
    lines.append(f"- tests with a note (a gate read with this host's value or not known for the "
                 f"profile): {len(noted)}")
    lines += [f"  - {t['nodeid']}: {'; '.join(t['notes'])}" for t in noted[:12]]
    return lines + [""], ok


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="+")
    parser.add_argument("--profile", action="append", default=[])
    parser.add_argument("--root", help="the folder node ids are relative to (default: the "
                        "files' common parent)")
    args = parser.parse_args()
    paths = [Path(p).resolve() for p in args.files]
    root = Path(args.root).resolve() if args.root else Path(*Path(paths[0]).parts[:-2])
    ok = True
    for profile in args.profile or ["nvidia-h100", "amd-mi300x", "nvidia-t4"]:
        lines, good = summarize(paths, profile, root)
        ok &= good
        print("\n".join(lines), flush=True)
    print("all checks hold" if ok else "A CHECK FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
