"""`devcaps lint` and `devcaps lint --fix` measured on real upstream CUDA-only test files (issue 18).

For every file in the manifest (benchmarks/lint_upstream_files.txt: repository, commit, path) that
is present under UPSTREAM_DIR/<owner>/<name>/<path>, in a temporary copy:

- ``devcaps lint --format json``: the findings, per rule code (found) and how many are fixable;
- ``devcaps lint --fix`` for ``--target devcaps`` and ``--target torch`` (while the installed lint
  has no ``--target``, the devcaps target runs plain ``--fix`` and the torch target is recorded as
  unsupported): what is left per rule code (a fresh ``devcaps lint --format json`` of the
  result), fixed = found - left, whether the output parses (``ast.parse``) and whether a second
  ``--fix`` changes nothing;
- for pytorch/pytorch files (they need only torch): ``python -m pytest FILE -q -p no:randomly``
  on the original and on each converted copy, in a subprocess with a timeout, recording
  collection errors and every test's outcome (passed, skipped with its reason, failed).

It prints a table and writes benchmarks/results/lint_upstream_<date>_<cpu-model>-<isa>.md with the
repository, path, commit and counts of every file. Third-party code is never committed: the
files live outside the repository (``--fetch-list`` prints what to fetch).

    python benchmarks/bench_lint_upstream.py /work/upstream [--label baseline] [--no-run]
    python benchmarks/bench_lint_upstream.py --fetch-list [/work/upstream]
"""

from __future__ import annotations

import argparse
import ast
import collections
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MANIFEST = HERE / "lint_upstream_files.txt"
TARGETS = ("devcaps", "torch")
RUNNABLE_REPOS = ("pytorch/pytorch",)  # need only torch, so they run here
# The console script installed beside this interpreter (its module may move; the command does not).
DEVCAPS = [str(Path(sys.executable).with_name("devcaps")) if Path(sys.executable).with_name("devcaps").is_file()
           else shutil.which("devcaps") or "devcaps"]


@dataclass(frozen=True)
class Entry:
    repo: str
    commit: str
    path: str

    def local(self, upstream: Path) -> Path:
        owner, name = self.repo.split("/")
        return upstream / owner / name / self.path


@dataclass
class FixOutcome:
    supported: bool = True
    note: str = ""
    left: dict[str, int] = field(default_factory=dict)
    parses: bool | None = None
    idempotent: bool | None = None
    run: dict[str, object] | None = None


@dataclass
class FileResult:
    entry: Entry
    found: dict[str, int]
    fixable: int
    lines: int
    original_run: dict[str, object] | None
    fixes: dict[str, FixOutcome]


def read_manifest(path: Path = MANIFEST) -> list[Entry]:
    entries = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 3 or not re.fullmatch(r"[0-9a-f]{40}", parts[1]) or parts[0].count("/") != 1:
            raise SystemExit(f"{path}:{number}: expected 'owner/name <40-hex commit> path', got {raw!r}")
        entries.append(Entry(*parts))
    return entries


def fetch_list(entries: list[Entry], upstream: Path | None) -> int:
    """Print, per repository, the files to fetch (missing ones only when UPSTREAM_DIR is given)."""
    missing = [e for e in entries if upstream is None or not e.local(upstream).is_file()]
    by_repo: dict[str, list[Entry]] = collections.defaultdict(list)
    for entry in missing:
        by_repo[entry.repo].append(entry)
    for repo, items in sorted(by_repo.items()):
        print(f"github:{repo}")
        for entry in items:
            where = entry.local(upstream) if upstream else f"UPSTREAM_DIR/{repo}/{entry.path}"
            print(f"    {entry.commit} {entry.path} -> {where}")
    print(f"# {len(missing)} of {len(entries)} file(s) to fetch"
          + (f" into {upstream}" if upstream else ""), file=sys.stderr)
    return 0


def _devcaps(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DEVCAPS, "lint", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def lint_json(path: Path) -> tuple[dict[str, int], int]:
    """(findings per rule code, fixable count) from ``devcaps lint --format json``."""
    done = _devcaps("--format", "json", path.name, cwd=path.parent)
    if done.returncode not in (0, 1, 2) or not done.stdout.strip():
        raise RuntimeError(f"devcaps lint {path}: exit {done.returncode}: {done.stderr[-2000:]}")
    document = json.loads(done.stdout)
    codes: collections.Counter[str] = collections.Counter()
    fixable = 0
    for item in document["files"]:
        for finding in item["findings"]:
            codes[finding["code"]] += 1
            fixable += bool(finding.get("fixable"))
    return dict(sorted(codes.items())), fixable


def run_fix(path: Path, target: str) -> tuple[bool, str]:
    """``devcaps lint --fix [--target T]`` on ``path``; (supported, note)."""
    done = _devcaps("--fix", "--target", target, path.name, cwd=path.parent)
    if done.returncode == 2 and "unrecognized arguments: --target" in done.stderr:
        if target != "devcaps":
            return False, "--target not supported by this lint"
        done = _devcaps("--fix", path.name, cwd=path.parent)
        note = "plain --fix (no --target yet)"
    else:
        note = ""
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    return True, "; ".join([note, *errors[:2]]).strip("; ")


def pytest_run(path: Path, timeout: float) -> dict[str, object]:
    """Outcomes of ``python -m pytest path -q -p no:randomly`` (a junit XML report is read)."""
    report = path.parent / f".{path.stem}.junit.xml"
    command = [sys.executable, "-m", "pytest", path.name, "-q", "-p", "no:randomly", "-p",
               "no:cacheprovider", f"--junitxml={report.name}", "-o", "junit_family=xunit2"]
    started = time.monotonic()
    try:
        done = subprocess.run(command, cwd=path.parent, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"exit": "timeout", "seconds": round(time.monotonic() - started, 1)}
    result: dict[str, object] = {"exit": done.returncode, "seconds": round(time.monotonic() - started, 1)}
    result.update(_junit(report) if report.is_file() else {"error": done.stdout[-1500:]})
    tail = [line for line in done.stdout.splitlines() if line.startswith(("ERROR", "E ")) and line[2:].strip()]
    if done.returncode not in (0, 5) and tail:
        result["error_lines"] = tail[:6]
    return result


def _junit(report: Path) -> dict[str, object]:
    counts: collections.Counter[str] = collections.Counter()
    skips: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}.{case.get('name', '')}".strip(".")
        outcome = "passed"
        for child in case:
            if child.tag == "skipped":
                outcome = "skipped"
                skips[" ".join((child.get("message") or "").split())[:120]] += 1
            elif child.tag in ("failure", "error"):
                outcome = "failed" if child.tag == "failure" else "error"
                failures.append(f"{name}: {' '.join((child.get('message') or '').split())[:160]}")
        counts[outcome] += 1
    return {"counts": dict(counts), "skips": dict(skips), "failures": failures[:8]}


def measure(entry: Entry, upstream: Path, run_tests: bool, timeout: float,
            keep: Path | None = None) -> FileResult:
    source = entry.local(upstream)
    with tempfile.TemporaryDirectory(prefix="devcaps-upstream-") as scratch:
        original = Path(scratch) / "original" / source.name
        original.parent.mkdir()
        shutil.copyfile(source, original)
        found, fixable = lint_json(original)
        runnable = run_tests and entry.repo in RUNNABLE_REPOS
        original_run = pytest_run(original, timeout) if runnable else None
        fixes = {t: _measure_fix(source, Path(scratch) / t, t, runnable, timeout) for t in TARGETS}
        for target in TARGETS if keep else ():
            converted = Path(scratch) / target / source.name
            kept = keep / target / entry.repo / entry.path  # type: ignore[operator]
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(converted, kept)
    lines = len(source.read_text(encoding="utf-8", errors="replace").splitlines())
    return FileResult(entry, found, fixable, lines, original_run, fixes)


def _measure_fix(source: Path, folder: Path, target: str, runnable: bool, timeout: float) -> FixOutcome:
    folder.mkdir()
    copy = folder / source.name
    shutil.copyfile(source, copy)
    supported, note = run_fix(copy, target)
    if not supported:
        return FixOutcome(False, note)
    outcome = FixOutcome(True, note)
    first = copy.read_bytes()
    try:
        ast.parse(first, filename=str(copy))
        outcome.parses = True
    except SyntaxError as exc:
        outcome.parses = False
        outcome.note = f"{outcome.note}; does not parse: {exc.msg} line {exc.lineno}".strip("; ")
    outcome.left, _ = lint_json(copy)
    run_fix(copy, target)
    outcome.idempotent = copy.read_bytes() == first
    if runnable and outcome.parses:
        copy.write_bytes(first)
        outcome.run = pytest_run(copy, timeout)
    return outcome


def cpu_label() -> str:
    """``AMD-EPYC-AVX2``: the CPU model (lscpu) and its widest vector ISA (/proc/cpuinfo)."""
    model = "unknown-cpu"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30).stdout
        found = re.search(r"^Model name:\s*(.+)$", out, re.M)
        model = re.sub(r"[^A-Za-z0-9]+", "-", found.group(1)).strip("-") if found else model
    except (OSError, subprocess.SubprocessError):
        pass
    flags = ""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        pass
    isa = next((name for flag, name in (("amx_tile", "AMX"), ("avx512f", "AVX512"), ("avx2", "AVX2"))
                if re.search(rf"\b{flag}\b", flags)), "baseline")
    return f"{model}-{isa}"


def _total(codes: dict[str, int]) -> int:
    return sum(codes.values())


def _codes(codes: dict[str, int]) -> str:
    return " ".join(f"{code}:{n}" for code, n in sorted(codes.items())) or "-"


def _fixed(found: dict[str, int], left: dict[str, int]) -> dict[str, int]:
    return {c: found[c] - left.get(c, 0) for c in found if found[c] - left.get(c, 0)}


def _run_cell(run: dict[str, object] | None) -> str:
    if run is None:
        return "-"
    if run.get("exit") == "timeout":
        return f"timeout ({run['seconds']} s)"
    counts = run.get("counts")
    if not isinstance(counts, dict):
        return f"exit {run.get('exit')}: no report"
    shown = " ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    return f"exit {run['exit']}: {shown or 'no tests'}"


def _fix_cell(fix: FixOutcome) -> str:
    if not fix.supported:
        return "unsupported"
    flags = ("" if fix.parses else " UNPARSABLE") + ("" if fix.idempotent else " NOT-IDEMPOTENT")
    return f"{_total(fix.left)} left{flags}"


def summary_rows(results: list[FileResult]) -> list[list[str]]:
    rows = [["file", "lines", "found", "fixable", *(f"--target {t}" for t in TARGETS),
             "pytest original", *(f"pytest {t}" for t in TARGETS)]]
    for r in results:
        rows.append([f"{r.entry.repo}:{r.entry.path}", str(r.lines), str(_total(r.found)),
                     str(r.fixable), *(_fix_cell(r.fixes[t]) for t in TARGETS),
                     _run_cell(r.original_run), *(_run_cell(r.fixes[t].run) for t in TARGETS)])
    found = sum(_total(r.found) for r in results)
    totals = ["TOTAL", str(sum(r.lines for r in results)), str(found), str(sum(r.fixable for r in results))]
    for t in TARGETS:
        fixes = [r.fixes[t] for r in results]
        if not all(f.supported for f in fixes):
            totals.append("unsupported")
            continue
        left = sum(_total(f.left) for f in fixes)
        totals.append(f"{left} left ({100 * left / max(found, 1):.0f}%)")
    rows.append(totals + ["", *("" for _ in TARGETS)])
    return rows


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def _markdown_table(rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows[1:]]
    return out


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "?"


def environment(label: str) -> list[str]:
    import platform

    try:
        import torch

        torch_version = str(torch.__version__)
    except ImportError:
        torch_version = "not installed"
    dirty = " (uncommitted changes)" if _git("status", "--porcelain", "--untracked-files=no") else ""
    return [f"- label: {label}",
            f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}",
            f"- pytest-devcaps: {_git('rev-parse', 'HEAD')} on branch {_git('rev-parse', '--abbrev-ref', 'HEAD')}"
            f"{dirty}: {_git('log', '-1', '--format=%s')[:120]}",
            f"- CPU: {cpu_label()}; Python {platform.python_version()}; torch {torch_version}"]


def detail_lines(results: list[FileResult]) -> list[str]:
    out = ["## Per file: rule codes found, fixed and left", ""]
    for r in results:
        out += [f"### {r.entry.repo}: `{r.entry.path}`", "",
                f"- commit `{r.entry.commit}`, {r.lines} lines",
                f"- found: {_total(r.found)} ({_codes(r.found)}); fixable per the lint: {r.fixable}"]
        for t in TARGETS:
            fix = r.fixes[t]
            if not fix.supported:
                out.append(f"- --target {t}: {fix.note}")
                continue
            new = {c: n for c, n in fix.left.items() if c not in r.found}
            out.append(f"- --target {t}: fixed {_total(_fixed(r.found, fix.left))} "
                       f"({_codes(_fixed(r.found, fix.left))}); left {_total(fix.left)} "
                       f"({_codes(fix.left)}){'; new codes after fix: ' + _codes(new) if new else ''}; "
                       f"parses: {fix.parses}; second --fix changes nothing: {fix.idempotent}"
                       f"{'; ' + fix.note if fix.note else ''}")
        out += _run_lines(r)
        out.append("")
    return out


def _run_lines(r: FileResult) -> list[str]:
    runs = [("original", r.original_run), *((f"--target {t}", r.fixes[t].run) for t in TARGETS)]
    out = []
    for name, run in runs:
        if run is None:
            continue
        out.append(f"- pytest, {name}: {_run_cell(run)} in {run.get('seconds')} s")
        skips = run.get("skips")
        for reason, n in sorted(skips.items()) if isinstance(skips, dict) else ():
            out.append(f"    - skipped {n}: {reason or '(no reason)'}")
        for line in [*(run.get("failures") or []), *(run.get("error_lines") or [])][:8]:  # type: ignore[misc]
            out.append(f"    - {line}")
        if run.get("error"):
            out.append(f"    - no report; output tail: `{str(run['error'])[-300:]}`")
    return out


def write_markdown(results: list[FileResult], rows: list[list[str]], label: str, out: Path | None) -> Path:
    date = datetime.date.today().isoformat()
    path = out or HERE / "results" / f"lint_upstream_{date}_{cpu_label()}.md"
    text = ["# `devcaps lint` / `--fix` on real upstream CUDA-only test files", "",
            "Measured by `benchmarks/bench_lint_upstream.py` (manifest `benchmarks/lint_upstream_files.txt`).",
            "found = findings of `devcaps lint --format json` on the original; left = findings of the "
            "same command on the converted copy; fixed = found - left per rule code. pytest runs use "
            "`python -m pytest FILE -q -p no:randomly` on this CPU-only machine.", "",
            *environment(label), "", *_markdown_table(rows), "", *detail_lines(results)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("upstream", nargs="?", type=Path, help="folder of <owner>/<name>/<path> files")
    parser.add_argument("--fetch-list", action="store_true", help="print what must be fetched, then exit")
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    parser.add_argument("--label", default="", help="what is measured (e.g. 'baseline', 'lint18 <commit>')")
    parser.add_argument("--no-run", action="store_true", help="do not run the pytorch files under pytest")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per pytest run (default 600)")
    parser.add_argument("--only", action="append", default=[], help="only paths containing this (repeatable)")
    parser.add_argument("--keep", type=Path, help="copy each converted file to KEEP/<target>/<repo>/<path> "
                        "(outside the repository: third-party code)")
    parser.add_argument("--out", type=Path, help="the Markdown file to write (default: benchmarks/results/...)")
    args = parser.parse_args(argv)
    entries = read_manifest(args.manifest)
    if args.fetch_list:
        return fetch_list(entries, args.upstream)
    if args.upstream is None:
        parser.error("UPSTREAM_DIR is required (or --fetch-list)")
    present = [e for e in entries if e.local(args.upstream).is_file()
               and (not args.only or any(o in e.path for o in args.only))]
    skipped = [e for e in entries if not e.local(args.upstream).is_file()]
    for entry in skipped:
        print(f"missing, not measured: {entry.repo} {entry.path} (see --fetch-list)", file=sys.stderr)
    results = []
    for entry in present:
        print(f"measuring {entry.repo}:{entry.path} ...", file=sys.stderr, flush=True)
        results.append(measure(entry, args.upstream, not args.no_run, args.timeout, args.keep))
    rows = summary_rows(results)
    print_table(rows)
    print(f"wrote {write_markdown(results, rows, args.label or 'unlabelled', args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
