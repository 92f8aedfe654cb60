"""``devcaps check``: the capability table, then every bundled suite on every device, as a matrix."""

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
from typing import Any, Sequence

from pytest_devcaps.errors import ConfigError, did_you_mean
from pytest_devcaps.files import replace_refusal, write_atomic

SUITES = ("kernels", "fsdp", "dynamo")


@dataclass
class SuiteResult:
    """Counts per device for one suite run."""

    name: str
    exit_code: int
    seconds: float
    counts: dict[str, Counter[str]] = field(default_factory=dict)
    hardware: Counter[str] = field(default_factory=Counter)


def available_suites(wanted: Sequence[str] = ()) -> list[str]:
    """Bundled suites that are installed (``pytest_devcaps.suites.<name>`` importable)."""
    names = list(wanted) or list(SUITES)
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        raise ConfigError(f"unknown suite {unknown[0]!r}{did_you_mean(unknown[0], SUITES)}",
                          file="--suite")
    return [n for n in names if importlib.util.find_spec(f"pytest_devcaps.suites.{n}") is not None]


def classify_outcome(test: dict[str, Any]) -> str:
    outcome = test.get("outcome") or "error"
    if outcome == "skipped":
        return "skipped-by-capability" if test.get("missing") else "skipped-other"
    return outcome


def count_outcomes(tests: Sequence[dict[str, Any]]) -> dict[str, Counter[str]]:
    """Outcome counts per device from a report's tests; an error in teardown counts as an
    error besides the test's own outcome, as pytest counts it."""
    counts: dict[str, Counter[str]] = {}
    for test in tests:
        device = counts.setdefault(test.get("device") or "no-device", Counter())
        device[classify_outcome(test)] += 1
        if test.get("teardown") == "error":
            device["error"] += 1
    return counts


def run_suite(name: str, pytest_args: Sequence[str], *, devices: str | None,
              overrides: Sequence[str]) -> SuiteResult:
    """Run one suite in a child pytest (live progress on our stdout) and read its JSON report."""
    with tempfile.TemporaryDirectory(prefix="devcaps-check-") as tmp:
        report = Path(tmp) / "report.json"
        command = [sys.executable, "-m", "pytest", "--pyargs", f"pytest_devcaps.suites.{name}",
                   "-p", "pytest_devcaps", "-q", "-rfE", f"--devcaps-json={report}",
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
            tests = json.loads(report.read_text())["tests"]
            result.counts = count_outcomes(tests)
            result.hardware = Counter(t["hardware"] for t in tests if t.get("hardware"))
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
        for dev in devices or ["-"]:
            c = result.counts.get(dev, Counter())
            if not c and devices:
                continue
            lines.append(f"{result.name:<8} {dev:<8} {c['passed']:>7} {c['failed']:>7} "
                         f"{c['error']:>7} {c['skipped-by-capability']:>9} {c['skipped-other']:>11} "
                         f"{c['xfailed']:>6} {c['xpassed']:>6} {result.seconds:>8.1f}")
        if not result.counts:
            why = "collected no tests" if result.exit_code == 5 else "no report"
            lines.append(f"{result.name:<8} {'-':<8} {why} (pytest exit code {result.exit_code})")
    return lines + hardware_lines(results)


def hardware_lines(results: Sequence[SuiteResult]) -> list[str]:
    """Tests per hardware class and suite: ``hardware  kernels: generic 40, accelerator 3``."""
    from pytest_devcaps.hardware_classes import count_text

    return [f"hardware {result.name}: {count_text(result.hardware)}"
            for result in results if result.hardware]


def _write_json(path: Path, results: Sequence[SuiteResult]) -> None:
    data = [{"suite": r.name, "exit_code": r.exit_code, "seconds": round(r.seconds, 2),
             "counts": {d: dict(c) for d, c in r.counts.items()}, "hardware": dict(r.hardware)}
            for r in results]
    try:
        write_atomic(path, json.dumps(data, indent=1))
    except OSError as exc:  # the path changed while the suites ran
        raise ConfigError(f"cannot write {str(path)!r}: {exc}", file="--json") from None


def command_check(args: argparse.Namespace) -> int:
    from pytest_devcaps.registry import RegistryOptions
    from pytest_devcaps.table import show_registry

    overrides = [str(Path(path).absolute()) for path in args.overrides]  # the suites run elsewhere
    if args.json:
        refusal = replace_refusal(Path(args.json))
        if refusal:
            raise ConfigError(refusal, file="--json")
    show_registry(RegistryOptions(overrides=tuple(overrides)))
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
    if args.json:
        _write_json(Path(args.json), results)
    # A suite that ran nothing (exit code 5) proves nothing: it fails the check too.
    failed = [r for r in results if r.exit_code != 0 or
              any(c["failed"] or c["error"] for c in r.counts.values())]
    if failed:
        print(f"devcaps check: FAILED in {', '.join(r.name for r in failed)}")
        return 1
    print("devcaps check: all suites passed")
    return 0
