"""`devcaps lint` (check and `--fix`) on one generated CUDA-only test file of growing size: linear?

The file is blocks of our own (tests/lint/test_hostile.py's ``generated``: a helper with a gate, a
skipped TestCase with moves, device literals and runtime calls, a pytest test with an in-test
skip), about 26 lines a block. Each measurement runs in a fresh child process, so a checkout
given with ``--source`` (an older commit, ``git archive <commit> | tar -x -C DIR``) is measured
the same way, side by side with this one:

    python benchmarks/bench_lint_scale.py --lines 2000 20000                # CPU seconds
    python benchmarks/bench_lint_scale.py --callgrind --lines 500 2000      # instructions (valgrind)
    python benchmarks/bench_lint_scale.py --source /tmp/base --callgrind ... # and those of /tmp/base

CPU seconds (``time.process_time`` of the child's analysis or fix, imports excluded) move with
the load of a shared machine; instruction counts (``valgrind --tool=callgrind``, the whole
child) do not. The ratio between two sizes is 10 for 10 times the lines when the work is linear.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
MODES = ("check", "fix")

CHILD = """
import sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from test_hostile import generated
mode, lines = sys.argv[1], int(sys.argv[2])
text = generated(max(1, (lines - 6) // 26))
from pytest_devcaps.lint import analyze
from pytest_devcaps.lint.fix import fix_text
import libcst, libcst.codemod.visitors  # imported before the clock starts
started = time.process_time()
if mode == "check":
    result = len(analyze(text, "t.py").findings)
else:
    fixed = fix_text(text, "t.py")
    result = (fixed.fixed, len(fixed.left.findings))
print(len(text.splitlines()), result, time.process_time() - started)
"""


def child(source: Path, mode: str, lines: int, callgrind: bool) -> tuple[int, str, float, int | None]:
    """(lines, findings, CPU seconds, instructions or None) of one run."""
    code = CHILD.format(tests=str(HERE / "tests" / "lint"))
    env = {**os.environ, "PYTHONPATH": str(source)}
    argv = [sys.executable, "-c", code, mode, str(lines)]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        if callgrind:
            argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{source} {mode} {lines}: {done.stderr[-2000:]}")
        count, rest = done.stdout.strip().split(maxsplit=1)
        found, seconds = rest.rsplit(maxsplit=1)
        instructions = None
        if callgrind:
            totals = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.MULTILINE)
            instructions = int(totals.group(1)) if totals else None
    return int(count), found, float(seconds), instructions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, nargs="+", default=[2000, 20000])
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--source", type=Path, action="append", default=[],
                        help="another checkout to measure beside this one (repeatable)")
    parser.add_argument("--callgrind", action="store_true", help="count instructions with valgrind")
    args = parser.parse_args()
    sources = [HERE, *args.source]
    unit = "instructions" if args.callgrind else "CPU s"
    print(f"# python benchmarks/bench_lint_scale.py {' '.join(sys.argv[1:])}")
    for mode in args.modes:
        for source in sources:
            results = []
            for lines in args.lines:  # one size after the other, each in a fresh child
                count, found, seconds, instructions = child(source, mode, lines, args.callgrind)
                value = instructions if args.callgrind else seconds
                results.append((count, value))
                shown = f"{instructions:>15,d} instructions" if instructions else f"{seconds:9.2f} CPU s"
                print(f"{mode:5s} {source.name or source}: {count:6d} lines: {shown}  findings {found}", flush=True)
            (small, first), (large, last) = results[0], results[-1]
            if first and last:
                print(f"{mode:5s} {source.name or source}: ratio {large}/{small} lines: {last / first:.2f} "
                      f"({large / small:.2f} = linear, {unit})", flush=True)


if __name__ == "__main__":
    main()
