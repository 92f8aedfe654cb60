"""``devcaps check``: the capability table, then every bundled suite on every device, as a matrix.

Each suite runs in a child pytest that prints one line per test as it starts and ends (``-v``),
so a long suite shows where it is. ``--json`` writes a ``check`` report (``report.formats``):
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
              overrides: Sequence[str]) -> SuiteResult:
    """Run one suite in a child pytest (live progress on our stdout) and read its JSON report."""
    with tempfile.TemporaryDirectory(prefix="devcaps-check-") as tmp:
        report = Path(tmp) / "report.json"
        # -v: each test's id when it starts, its outcome when it ends (the live progress);
        # --no-header: the capability table was printed once already
        command = [sys.executable, "-m", "pytest", "--pyargs", f"pytest_devcaps.suites.{name}",
                   "-p", "pytest_devcaps", "-v", "--no-header", "-rfE", f"--devcaps-json={report}",
                   "-p", "no:cacheprovider", *pytest_args]
        if devices:
            command.append(f"--devcaps-devices={devices}")
        command += [f"--devcaps-overrides={path}" for path in overrides]
        started = time.perf_counter()
        # The child runs in a temporary folder (so no conftest.py or ini file of the caller's
        # folder applies): paths given to it must be absolute (command_check resolves its own).
        exit_code = subprocess.call(command, cwd=tmp, env=dict(os.environ))
        result = SuiteResult(name, exit_code, time.perf_counter() - started)
        if report.is_file():
            result.tests = json.loads(report.read_text())["tests"]
            result.counts = count_outcomes(result.tests)
            result.hardware = Counter(t["hardware"] for t in result.tests if t.get("hardware"))
        _warn_left_behind(name, Path(tmp), report)
        return result


def _warn_left_behind(name: str, folder: Path, report: Path) -> None:
    """Files a suite wrote into its temporary folder (``-- --junitxml=out.xml``) are deleted
    with it: say so rather than lose them silently."""
    left = sorted(str(p.relative_to(folder)) for p in folder.iterdir() if p != report)
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
    from pytest_devcaps.marks.hardware import count_text

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
    from pytest_devcaps.report.table import show_registry

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
    for index, name in enumerate(suites, 1):
        print(f"\n[{index}/{len(suites)}] suite {name} ...", flush=True)
        results.append(run_suite(name, args.pytest_args, devices=args.devices,
                                 overrides=overrides))
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
