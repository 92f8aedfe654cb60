"""``devcaps report merge|html|schema`` (``diff`` and ``expect``: ``commands/bringup.py``): the
work behind the command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from pytest_devcaps.errors import UnsafeFileError
from pytest_devcaps._util.files import replace_refusal, write_atomic
from pytest_devcaps.report.formats import FORMATS, ReportError
from pytest_devcaps.report.html import render
from pytest_devcaps.report.fleet import merge
from pytest_devcaps.report.sources import load_source, parse_argument, read_json
from pytest_devcaps.report.validate import SchemaMismatch, schema_text, validate_kind


def merged(arguments: Sequence[str]) -> dict[str, Any]:
    """The fleet document of report files given as ``[SUITE=]PATH``."""
    return merge([load_source(*parse_argument(argument)) for argument in arguments])


def fleet_of(arguments: Sequence[str]) -> dict[str, Any]:
    """One fleet file, checked against the schema, or the merge of report files."""
    if len(arguments) == 1 and Path(arguments[0]).is_file():
        document = read_json(arguments[0])
        if isinstance(document, dict) and document.get("kind") == "fleet":
            return checked_fleet(document, arguments[0])
    return merged(arguments)


def checked_fleet(document: dict[str, Any], path: str) -> dict[str, Any]:
    """``document`` if it is a fleet of the current format matching the schema's ``fleet``;
    a :class:`ReportError` naming the key that does not, otherwise: a page is only made from a
    document the merge could have written."""
    version = document.get("format")
    if version != FORMATS["fleet"]:
        if isinstance(version, int) and not isinstance(version, bool) and 1 <= version:
            why = ("is newer than this pytest-devcaps reads" if version > FORMATS["fleet"] else
                   "does not record exit statuses or ranks, so a failed run could look green; "
                   "merge its reports again")
        else:
            why = "is not a fleet format"
        raise ReportError(f"fleet report format {version!r} {why} (this pytest-devcaps reads "
                          f"format {FORMATS['fleet']})", file=path, key="format")
    try:
        validate_kind(document, "fleet")
    except SchemaMismatch as error:
        raise ReportError(f"not a fleet report this pytest-devcaps wrote: {error}", file=path,
                          key=error.where or None) from None
    return document


def check_output(output: str) -> None:
    """``-o``, checked before anything is read (as ``--devcaps-json``): ``-`` (standard output,
    which must be open), or a path an atomic write may replace: not a directory, a device such
    as ``/dev/null`` (as root the rename would replace the node; ``-o - >/dev/null`` discards),
    a FIFO or a socket, nor a path under a file."""
    if output == "-":
        if sys.stdout is None or sys.stdout.closed:
            raise ReportError("cannot write: standard output is closed (give -o FILE)", file="-")
        return
    if not output.strip():
        raise ReportError("needs a file path, or - for standard output", file="-o")
    refusal = replace_refusal(Path(output))
    if refusal is not None:
        raise ReportError(f"cannot write: {refusal}", file=output)


def write_output(output: str, text: str) -> None:
    """``text`` to ``output`` (``-``: standard output; anything else replaced atomically); a
    :class:`ReportError` for any failure (read-only, a path under a file, a full disk, a
    closed pipe)."""
    try:
        if output == "-":
            check_output(output)
            sys.stdout.write(text)
            sys.stdout.flush()
        else:
            write_atomic(Path(output), text)
    except OSError as error:
        if output == "-":
            _detach_stdout()
        raise ReportError(f"cannot write: {error.strerror or error}", file=output) from None
    except UnsafeFileError as error:
        raise ReportError(f"cannot write: {error.reason}", file=output) from None


def _detach_stdout() -> None:
    """After a failed write to standard output (a closed pipe), what is still buffered must
    not fail again when the interpreter flushes at exit (Python's "Exception ignored" lines):
    standard output becomes /dev/null."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _tell(fleet: dict[str, Any]) -> None:
    """The summary, problems, conflicts and disagreements on stderr: nothing merged silently."""
    s = fleet["summary"]
    verdict = "passed" if fleet["passed"] else "FAILED"
    print(f"devcaps report: {verdict}: {s['reports']} report(s), {s['hosts']} host(s), "
          f"{s['devices']} device(s), {s['failing_tests']} failing test(s), "
          f"{s['failed_reports']} failed report(s), {s['missing_ranks']} missing and "
          f"{s['repeated_ranks']} repeated rank(s), {s['duplicate_tests']} duplicate test "
          f"result(s) merged", file=sys.stderr)
    for problem in fleet["problems"]:
        print(f"devcaps report: FAILED: {problem}", file=sys.stderr)
    for conflict in fleet["conflicts"]:
        print(f"devcaps report: conflict: {conflict['capability']} on {conflict['device']}: "
              f"{' vs '.join(conflict['levels'])}", file=sys.stderr)
    for row in fleet["suites"]:
        for entry in row["disagreements"]:
            print(f"devcaps report: disagreement: {row['suite']} on {row['device']}: "
                  f"{entry['nodeid']}: {', '.join(entry['outcomes'])}", file=sys.stderr)


def command_report(args: argparse.Namespace) -> int:
    """0 when the fleet passed, 1 when a test failed, a report failed or a rank is missing or
    repeated (2, from the CLI, for a report or output it cannot read or write)."""
    if args.report_command == "schema":
        write_output("-", schema_text())
        return 0
    check_output(args.output)
    if args.report_command == "merge":
        fleet = merged(args.reports)
        write_output(args.output, json.dumps(fleet, indent=1, sort_keys=True) + "\n")
    else:
        fleet = fleet_of(args.reports)
        write_output(args.output, render(fleet))
    _tell(fleet)
    return 0 if fleet["passed"] else 1
