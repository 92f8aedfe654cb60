"""`devcaps lint --fix`'s safe read and write (pytest_devcaps.lint.writer) on large files: linear?

Times ``read_source`` + ``write_source`` (bounded non-blocking read, CRLF restored, atomic
durable replace with the changed-meanwhile check) on CRLF files of 2,000 and 20,000 lines, the
two sizes alternated so both see the same machine load, and prints the medians and the ratio
(about 10 when linear; fsync cost is per file, so small files make the ratio lower).

    python benchmarks/bench_lint_writer.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from pytest_devcaps.lint.writer import read_source, write_source

SIZES = (2_000, 20_000)


def make(path: Path, lines: int) -> None:
    body = "\r\n".join(f"x{i} = old_name({i})  # line {i}" for i in range(lines))
    path.write_bytes(body.encode("utf-8") + b"\r\n")


def once(path: Path, lines: int) -> float:
    make(path, lines)
    started = time.perf_counter()
    snapshot = read_source(path, root=path.parent)
    text = snapshot.text().replace("\r\n", "\n").replace("old_name(", "new_name(")
    write_source(snapshot, text, root=path.parent)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    times: dict[int, list[float]] = {size: [] for size in SIZES}
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(args.repeat):
            for size in SIZES:
                times[size].append(once(Path(scratch) / f"t{size}.py", size))
    small, large = (statistics.median(times[size]) for size in SIZES)
    for size in SIZES:
        print(f"{size:>6} lines: median {statistics.median(times[size]) * 1000:8.2f} ms "
              f"(min {min(times[size]) * 1000:.2f}, {args.repeat} runs)")
    print(f"ratio {SIZES[1]}/{SIZES[0]} lines: {large / small:.2f} (10 = linear)")


if __name__ == "__main__":
    main()
