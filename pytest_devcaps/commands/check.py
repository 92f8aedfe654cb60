"""``devcaps check``: the capability table, then every bundled suite on every device, as a matrix.

Each suite runs in a child pytest whose output goes to a log: one progress line per suite
(tests done / total, elapsed; rewritten in place on a terminal, every minute in a CI log) and,
for a suite that failed, its short summary; ``-v`` shows every test's line instead. ``--json`` writes a ``check`` report (``report.formats``):
the capability records and every suite's per-test outcomes, ready for ``devcaps report``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from pytest_devcaps.errors import ConfigError, did_you_mean
from pytest_devcaps._util.files import replace_refusal, write_atomic
from pytest_devcaps.report.formats import classify_outcome, stamp

if TYPE_CHECKING:
    from pytest_devcaps.registry import CapabilityRegistry

SUITES = ("kernels", "fsdp", "dynamo")


@dataclass
class SuiteResult:
    """Counts per device for one suite run, and its tests as the child's JSON report has them."""

    name: str
    exit_code: int
    seconds: float
    counts: dict[str, Counter[str]] = field(default_factory=dict)
    hardware: Counter[str] = field(default_factory=Counter)
    tests: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"suite": self.name, "exit_code": self.exit_code, "seconds": round(self.seconds, 2),
                "counts": {d: dict(c) for d, c in self.counts.items()},
                "hardware": dict(self.hardware), "tests": self.tests}


def available_suites(wanted: Sequence[str] = ()) -> list[str]:
    """Bundled suites that are installed (``pytest_devcaps.suites.<name>`` importable)."""
    names = list(wanted) or list(SUITES)
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        raise ConfigError(f"unknown suite {unknown[0]!r}{did_you_mean(unknown[0], SUITES)}",
                          file="--suite")
    return [n for n in names if importlib.util.find_spec(f"pytest_devcaps.suites.{n}") is not None]


NO_DEVICE = "no-device"
"""The matrix row of tests that take no device."""


def count_outcomes(tests: Sequence[dict[str, Any]]) -> dict[str, Counter[str]]:
    """Outcome counts per device from a report's tests; an error in teardown counts as an
    error besides the test's own outcome, as pytest counts it."""
    counts: dict[str, Counter[str]] = {}
    for test in tests:
        device = counts.setdefault(test.get("device") or NO_DEVICE, Counter())
        device[classify_outcome(test)] += 1
        if test.get("teardown") == "error":
            device["error"] += 1
    return counts


def run_suite(name: str, pytest_args: Sequence[str], *, devices: str | None,
              overrides: Sequence[str], verbose: bool = False, label: str = "") -> SuiteResult:
    """Run one suite in a child pytest and read its JSON report. Quiet (the default): the
    child's output goes to a log, and one progress line (tests done / total, elapsed) stands for
    it; a failing suite shows the log's short summary. ``verbose``: the child's ``-v`` output,
    live."""
    with tempfile.TemporaryDirectory(prefix="devcaps-check-") as tmp:
        folder = Path(tmp)
        report, progress = folder / "report.json", folder / "progress.txt"
        # --no-header: the capability table was printed once already
        command = [sys.executable, "-m", "pytest", "--pyargs", f"pytest_devcaps.suites.{name}",
                   "-p", "pytest_devcaps", "-p", "pytest_devcaps.commands.check_progress",
                   "-v" if verbose else "-q", "--no-header", "-rfE", f"--devcaps-json={report}",
                   f"--devcaps-check-progress={progress}", "-p", "no:cacheprovider", *pytest_args]
        if devices:
            command.append(f"--devcaps-devices={devices}")
        command += [f"--devcaps-overrides={path}" for path in overrides]
        started = time.perf_counter()
        # The child runs in a temporary folder (so no conftest.py or ini file of the caller's
        # folder applies): paths given to it must be absolute (command_check resolves its own).
        if verbose:
            exit_code = subprocess.call(command, cwd=tmp, env=dict(os.environ))
            log = ""
        else:
            exit_code, log = _run_quietly(command, folder, progress, label or name, started)
        result = SuiteResult(name, exit_code, time.perf_counter() - started)
        if report.is_file():
            result.tests = json.loads(report.read_text())["tests"]
            result.counts = count_outcomes(result.tests)
            result.hardware = Counter(t["hardware"] for t in result.tests if t.get("hardware"))
        if not verbose:
            _finish_line(label or name, result, progress, log)
        _warn_left_behind(name, folder, {report, progress, folder / LOG_NAME})
        return result


LOG_NAME = "output.log"
TICK_SECONDS = 60.0
"""Without a terminal, a progress line at most this often (a CI log stays short)."""


def read_progress(path: Path) -> tuple[int, int]:
    """(tests done, total) from the child's progress file; (0, 0) before it collected."""
    try:
        lines = path.read_text(encoding="utf-8").split()
    except OSError:
        return 0, 0
    return (int(lines[-2]), int(lines[-1])) if len(lines) >= 2 else (0, 0)


def _progress_text(label: str, done: int, total: int, seconds: float) -> str:
    return f"{label}: {done}/{total or '?'} tests, {seconds:.0f} s"


def _run_quietly(command: list[str], folder: Path, progress: Path, label: str,
                 started: float) -> tuple[int, str]:
    tty = sys.stdout.isatty()
    log_path = folder / LOG_NAME
    with open(log_path, "w", encoding="utf-8") as log:
        child = subprocess.Popen(command, cwd=folder, env=dict(os.environ), stdout=log,
                                 stderr=subprocess.STDOUT)
        last_tick = started
        try:
            while child.poll() is None:
                time.sleep(0.5)
                now = time.perf_counter()
                if tty:
                    print("\r" + _progress_text(label, *read_progress(progress), now - started),
                          end="", flush=True)
                elif now - last_tick >= TICK_SECONDS:
                    print("  " + _progress_text(label, *read_progress(progress), now - started),
                          flush=True)
                    last_tick = now
        except KeyboardInterrupt:
            child.terminate()
            child.wait()
            raise
        finally:
            if tty:
                print("\r", end="")
    return child.returncode, log_path.read_text(encoding="utf-8", errors="replace")


def _finish_line(label: str, result: SuiteResult, progress: Path, log: str) -> None:
    """The suite's one line, and what a person needs when it failed: the short summary."""
    done, total = read_progress(progress)
    counts: Counter[str] = Counter()
    for per_device in result.counts.values():
        counts.update(per_device)
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()) if n)
    print(f"{_progress_text(label, done, total, result.seconds)}: "
          f"{summary or f'pytest exit code {result.exit_code}'}", flush=True)
    if result.exit_code not in (0, 5):
        print("\n".join(failure_lines(log)), flush=True)


def failure_lines(log: str, limit: int = 40) -> list[str]:
    """The child's short test summary (``-rfE``), else its last lines: why the suite failed."""
    lines = log.rstrip().splitlines()
    start = next((i for i, line in enumerate(lines) if "short test summary info" in line), None)
    shown = lines[start:] if start is not None else lines[-20:]
    if len(shown) > limit:
        shown = shown[:limit] + [f"... {len(shown) - limit} more line(s); rerun with -v"]
    return ["    " + line for line in shown]


def _warn_left_behind(name: str, folder: Path, ours: set[Path]) -> None:
    """Files a suite wrote into its temporary folder (``-- --junitxml=out.xml``) are deleted
    with it: say so rather than lose them silently."""
    left = sorted(str(p.relative_to(folder)) for p in folder.iterdir() if p not in ours)
    if left:
        print(f"devcaps check: suite {name} wrote {', '.join(left)} into its temporary working "
              "folder, which is deleted now; give paths in pytest arguments as absolute paths",
              file=sys.stderr)


def format_matrix(results: Sequence[SuiteResult]) -> list[str]:
    devices = sorted({d for r in results for d in r.counts})
    header = f"{'suite':<8} {'device':<8} {'passed':>7} {'failed':>7} {'errors':>7} " \
             f"{'skip:cap':>9} {'skip:other':>11} {'xfail':>6} {'xpass':>6} {'seconds':>8}"
    lines = [header, "-" * len(header)]
    for result in results:
        first = True
        for dev in devices or ["-"]:
            c = result.counts.get(dev, Counter())
            if not c and devices:
                continue
            # one suite runs once for all its devices: its seconds go on its first row only
            seconds = f"{result.seconds:>8.1f}" if first else f"{'':>8}"
            first = False
            lines.append(f"{result.name:<8} {dev:<8} {c['passed']:>7} {c['failed']:>7} "
                         f"{c['error']:>7} {c['skipped-by-capability']:>9} {c['skipped-other']:>11} "
                         f"{c['xfailed']:>6} {c['xpassed']:>6} {seconds}".rstrip())
        if not result.counts:
            why = "collected no tests" if result.exit_code == 5 else "no report"
            lines.append(f"{result.name:<8} {'-':<8} {why} (pytest exit code {result.exit_code})")
    return lines + legend_lines(devices) + hardware_lines(results)


def legend_lines(devices: Sequence[str]) -> list[str]:
    """What every row and column of the matrix means."""
    lines = ["rows: one per suite and device its tests ran on (the device fixture's device, or a "
             "test class's device_type)"]
    if NO_DEVICE in devices:
        lines.append(f"  {NO_DEVICE}: tests that take no device (no device fixture, no devcaps "
                     "marks: plain functions, harness checks); they run once, not per device")
    lines.append("columns: skip:cap = skipped for a missing capability, skip:other = any other "
                 "skip; seconds = the whole suite's wall time (every device), on its first row")
    return lines


def hardware_lines(results: Sequence[SuiteResult]) -> list[str]:
    """Tests per hardware class and suite: ``hardware  kernels: generic 40, accelerator 3``."""
    from pytest_devcaps.marks.names import count_text

    return [f"hardware {result.name}: {count_text(result.hardware)}"
            for result in results if result.hardware]


def _write_json(path: Path, registry: CapabilityRegistry, results: Sequence[SuiteResult], *,
                passed: bool) -> None:
    try:
        write_atomic(path, check_json(registry, results, passed=passed))
    except OSError as exc:  # the path changed while the suites ran
        raise ConfigError(f"cannot write {str(path)!r}: {exc}", file="--json") from None


def command_check(args: argparse.Namespace) -> int:
    from pytest_devcaps.registry import RegistryOptions
    from pytest_devcaps.commands.probe import show_registry

    overrides = [str(Path(path).absolute()) for path in args.overrides]  # the suites run elsewhere
    if args.json:
        refusal = replace_refusal(Path(args.json))
        if refusal:
            raise ConfigError(refusal, file="--json")
    registry = show_registry(RegistryOptions(overrides=tuple(overrides)))
    suites = available_suites(args.suite)
    if not suites:
        print("devcaps check: no bundled suite is installed", file=sys.stderr)
        return 1
    results = []
    verbose = bool(getattr(args, "verbose", False))
    for index, name in enumerate(suites, 1):
        label = f"[{index}/{len(suites)}] suite {name}"
        print(f"\n{label} ..." if verbose else f"{label} ...", flush=True)
        results.append(run_suite(name, args.pytest_args, devices=args.devices,
                                 overrides=overrides, verbose=verbose, label=label))
    print("\ndevcaps check: suite x device")
    for line in format_matrix(results):
        print(line)
    # A suite that ran nothing (exit code 5) proves nothing: it fails the check too.
    failed = [r for r in results if r.exit_code != 0 or
              any(c["failed"] or c["error"] for c in r.counts.values())]
    if args.json:
        _write_json(Path(args.json), registry, results, passed=not failed)
    if failed:
        print(f"devcaps check: FAILED in {', '.join(r.name for r in failed)}")
        return 1
    print("devcaps check: all suites passed")
    return 0


def check_json(registry: CapabilityRegistry, results: Sequence[SuiteResult], *,
               passed: bool) -> str:
    """The ``check`` report: the registry's devices and records, each suite with its tests."""
    payload = {
        **stamp("check"),
        "passed": passed,
        "devices": [identity.to_dict() for identity in registry.devices],
        "capabilities": [record.to_dict() for record in registry],
        "meta": registry.meta,
        "suites": [result.to_dict() for result in results],
    }
    return json.dumps(payload, indent=1, sort_keys=True, default=str)
