"""``devcaps report merge|html|schema``: the work behind the command line."""

from __future__ import annotations

import argparse
import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

from pytest_devcaps.report.formats import FORMATS, ReportError
from pytest_devcaps.report.html import render
from pytest_devcaps.report.fleet import merge
from pytest_devcaps.report.sources import load_source, parse_argument

SCHEMA_FILE = "devcaps-report.schema.json"


def schema_text() -> str:
    """The JSON Schema of every kind of report (package data ``schemas/devcaps-report.schema.json``)."""
    return (resources.files("pytest_devcaps.report") / "schemas" / SCHEMA_FILE).read_text("utf-8")


def merged(arguments: Sequence[str]) -> dict[str, Any]:
    """The fleet document of report files given as ``[SUITE=]PATH``."""
    return merge([load_source(*parse_argument(argument)) for argument in arguments])


def fleet_of(arguments: Sequence[str]) -> dict[str, Any]:
    """One fleet file as it is, or the merge of report files."""
    if len(arguments) == 1 and Path(arguments[0]).is_file():
        try:
            document = json.loads(Path(arguments[0]).read_text("utf-8"))
        except (ValueError, OSError):
            document = None  # load_source names the problem
        if isinstance(document, dict) and document.get("kind") == "fleet":
            version = document.get("format")
            if not isinstance(version, int) or not 1 <= version <= FORMATS["fleet"]:
                raise ReportError(f"fleet report format {version!r}: this pytest-devcaps reads "
                                  f"formats 1 to {FORMATS['fleet']}", file=arguments[0],
                                  key="format")
            return document
    return merged(arguments)


def _write(output: str, text: str) -> None:
    if output == "-":
        sys.stdout.write(text)
        return
    from pytest_devcaps._util.files import write_atomic

    write_atomic(Path(output), text)


def _tell(fleet: dict[str, Any]) -> None:
    """The summary, conflicts and disagreements on stderr: nothing merged silently."""
    s = fleet["summary"]
    print(f"devcaps report: {s['reports']} report(s), {s['hosts']} host(s), {s['devices']} "
          f"device(s), {s['failing_tests']} failing test(s), {s['duplicate_tests']} duplicate "
          f"test result(s) merged", file=sys.stderr)
    for conflict in fleet["conflicts"]:
        print(f"devcaps report: conflict: {conflict['capability']} on {conflict['device']}: "
              f"{' vs '.join(conflict['levels'])}", file=sys.stderr)
    for row in fleet["suites"]:
        for entry in row["disagreements"]:
            print(f"devcaps report: disagreement: {row['suite']} on {row['device']}: "
                  f"{entry['nodeid']}: {', '.join(entry['outcomes'])}", file=sys.stderr)


def command_report(args: argparse.Namespace) -> int:
    if args.report_command == "schema":
        sys.stdout.write(schema_text())
        return 0
    if args.report_command == "merge":
        fleet = merged(args.reports)
        _write(args.output, json.dumps(fleet, indent=1, sort_keys=True) + "\n")
    else:
        fleet = fleet_of(args.reports)
        _write(args.output, render(fleet))
    _tell(fleet)
    return 0
