"""The ``devcaps`` command: ``probe``, ``profiles``, ``lint``, ``check`` and ``report``.

Argument parsing and dispatch only: the work is in ``table`` (probe), ``config`` (profiles),
``lint``, ``check`` and ``report``, imported by the command that needs it. None imports pytest (``check``
runs its suites in a child pytest): a warm ``devcaps probe`` must not pay for it.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from pytest_devcaps.errors import ConfigError, DevcapsError
from pytest_devcaps._util.durations import DEFAULT_PROBE_TIMEOUT, check_probe_timeout
from pytest_devcaps._util.environ import check_names
from pytest_devcaps.version import __version__

EXIT_USAGE = 2


def _add_registry_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--overrides", nargs="+", default=[], metavar="FILE",
                        help="capability override YAML files (later files win)")
    parser.add_argument("--set", dest="settings", action="append", default=[],
                        metavar="CAP=LEVEL[@DEVICE]", help="force one capability's level")
    parser.add_argument("--profile", metavar="NAME|FILE",
                        help="evaluate the vendor rules against a device profile instead of probing")
    parser.add_argument("--reprobe", action="store_true", help="ignore the probe cache")
    parser.add_argument("--probe-timeout", type=_seconds, default=DEFAULT_PROBE_TIMEOUT,
                        metavar="SECONDS", help="seconds one probe may take (above 0, at most a day)")


def _seconds(text: str) -> float:
    """argparse type for timeouts: argparse turns the error into its usage message, exit 2."""
    try:
        return check_probe_timeout(text, source="--probe-timeout")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="devcaps", description=(
        "Which accelerator capabilities does this machine have, how do we know, and does "
        "the device-generic suite pass on them?"))
    parser.add_argument("--version", action="version", version=f"pytest-devcaps {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    probe = commands.add_parser("probe", help="print the capability table (or JSON)")
    probe.add_argument("--json", action="store_true", help="print every record as JSON")
    probe.add_argument("-v", "--verbose", action="store_true",
                       help="with several devices, also print each device's reasons")
    probe.add_argument("--device", action="append", default=[], metavar="D",
                       help="only these devices or device types (repeatable)")
    probe.add_argument("--explain", metavar="CAP",
                       help="how CAP's answer was reached: the rule that fired (with the fact "
                            "values), the probe, the layers that replaced it, the source")
    _add_registry_arguments(probe)
    commands.add_parser("profiles", help="list the shipped device profiles")
    lint = commands.add_parser("lint", help="report hardcoded device checks (CUDA availability, "
                               "architecture and GPU-count gates, moves, device literals, torch.cuda "
                               "calls, NCCL, autocast, CUDA-only decorators); --fix rewrites them")
    lint.add_argument("paths", nargs="*", default=["."], help="files or folders (default: .)")
    lint.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                      help="skip matching paths (repeatable), e.g. '*/backends/*'")
    lint.add_argument("--format", choices=("text", "json", "github"), default="text",
                      help="text (default), json, or github (annotations in GitHub Actions)")
    rewrite = lint.add_mutually_exclusive_group()
    rewrite.add_argument("--fix", action="store_true",
                         help="rewrite what can be rewritten in place (needs pytest-devcaps[lint])")
    rewrite.add_argument("--diff", action="store_true", help="print what --fix would change, as a patch")
    lint.add_argument("--check", action="store_true",
                      help="with --fix: write nothing, exit 1 if anything would change (for CI, pre-commit)")
    lint.add_argument("--verify", action="store_true",
                      help="with --fix: run each converted file's tests under the plugin before and after, on "
                           "the CPU and on emu (when built or PYTEST_DEVCAPS_EMU_DEVICES is set); undo the "
                           "rewrite of every test whose outcome got worse; report what it gained")
    lint.add_argument("--verify-timeout", type=float, default=None, metavar="SECONDS",
                      help="with --verify: the most all test runs of one file may take (default 900)")
    lint.add_argument("--target", choices=("devcaps", "torch"), default="devcaps",
                      help="what --fix writes: devcaps (this plugin's marks and decorators, default) or "
                           "torch (only what torch itself provides, for contributions upstream)")
    check = commands.add_parser("check", help="probe, then run the bundled suites on every device")
    check.add_argument("--devices", metavar="TYPES", help="comma-separated device types")
    check.add_argument("--overrides", nargs="+", default=[], metavar="FILE")
    check.add_argument("--json", metavar="PATH", help="write the combined JSON report here")
    check.add_argument("-v", "--verbose", action="store_true",
                       help="every test's line as it runs (default: one progress line per suite)")
    check.add_argument("--suite", action="append", default=[],
                       help="only these suites (kernels, fsdp, dynamo); repeatable")
    check.add_argument("pytest_args", nargs="*", help="extra pytest arguments, after --")
    _add_report_parser(commands)
    from pytest_devcaps.emu.command import add_parser as add_emu_parser

    add_emu_parser(commands)
    return parser


def _add_report_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from pytest_devcaps.report.formats import FORMATS

    report = commands.add_parser("report", help="merge reports of many hosts, devices and ranks; "
                                 "render them as one HTML page")
    actions = report.add_subparsers(dest="report_command", required=True)
    merge = actions.add_parser("merge", help="merge pytest --devcaps-json, devcaps check --json "
                               "and devcaps probe --json reports into one fleet report")
    merge.add_argument("reports", nargs="+", metavar="[SUITE=]REPORT",
                       help="report files; SUITE= names the suite of a pytest report")
    merge.add_argument("-o", "--output", required=True, metavar="FLEET.json", help="'-': stdout")
    html = actions.add_parser("html", help="one self-contained HTML page from a fleet report "
                              "(or from reports, merged first)")
    html.add_argument("reports", nargs="+", metavar="FLEET_OR_REPORT")
    html.add_argument("-o", "--output", required=True, metavar="FLEET.html", help="'-': stdout")
    actions.add_parser("schema", help="print the JSON Schema of the reports ("
                       f"{', '.join(sorted(FORMATS))})")
    from pytest_devcaps.commands.bringup import add_parsers

    add_parsers(actions)  # diff, expect


def command_probe(args: argparse.Namespace) -> int:
    from pytest_devcaps.registry import CapabilitySetting, RegistryOptions
    from pytest_devcaps.commands.probe import show_registry

    options = RegistryOptions(
        overrides=tuple(args.overrides),
        settings=tuple(CapabilitySetting.parse(s, source="--set") for s in args.settings),
        profile=args.profile,
        reprobe=args.reprobe,
        probe_timeout=args.probe_timeout,
    )
    if args.explain:
        from pytest_devcaps.commands.explain import show_explanation

        show_explanation(options, args.explain, args.device)
        return 0
    show_registry(options, args.device, as_json=args.json, verbose=args.verbose)
    return 0


def command_profiles(args: argparse.Namespace) -> int:
    from pytest_devcaps.config import list_profiles, load_catalogue, load_profile

    catalogue = load_catalogue()
    for name in list_profiles():
        profile = load_profile(name, catalogue)
        print(f"{name:<20} {profile.description}")
    return 0


def command_lint(args: argparse.Namespace) -> int:
    from pytest_devcaps.commands.lint import run

    mode = "fix" if args.fix else "diff" if args.diff else "check"
    if args.check and mode != "fix":
        from pytest_devcaps.lint.source import LintInputError

        raise LintInputError("--check goes with --fix (`devcaps lint --fix --check`): it says whether "
                             "--fix would change anything")
    _check_option_like_paths(args.paths)
    if args.verify_timeout is not None and (not args.verify or args.verify_timeout <= 0):
        from pytest_devcaps.lint.source import LintInputError

        raise LintInputError("--verify-timeout takes a positive number of seconds and goes with --verify")
    verify_timeout = None
    if args.verify:
        from pytest_devcaps.commands.verify import DEFAULT_TIMEOUT_S

        verify_timeout = args.verify_timeout or DEFAULT_TIMEOUT_S
    return run(args.paths, args.exclude, args.format, "fix-check" if args.check else mode, target=args.target,
               verify_timeout=verify_timeout)


def _check_option_like_paths(paths: Sequence[str]) -> None:
    """A path named like an option reaches here only after ``--`` (``devcaps lint --
    -weird.py``, as the pre-commit hooks call it), where it is linted when it exists; one
    that does not is most likely an option given too late (a hook's ``args:``), and is
    refused saying so, not looked for in silence."""
    from pytest_devcaps.lint.source import LintInputError

    for path in paths:
        if path.startswith("-") and path != "-" and not os.path.lexists(path):
            raise LintInputError(
                f"{path}: no such file or directory; after `--` every argument is a path: "
                "options go before it (with the pre-commit hooks, override `entry:`, e.g. "
                "`entry: devcaps lint --format github --`: a hook's `args:` come after the `--`)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_names()  # a misspelt PYTEST_DEVCAPS_* variable is a usage error, as under pytest
        if args.command in ("probe", "check"):
            from pytest_devcaps.runtime import import_torch

            import_torch()  # a backend that refused to load (emu): one line, not a crash later
        if args.command == "probe":
            return command_probe(args)
        if args.command == "profiles":
            return command_profiles(args)
        if args.command == "lint":
            return command_lint(args)
        if args.command == "emu":
            from pytest_devcaps.emu.command import command_emu

            return command_emu(args)
        if args.command == "report" and args.report_command in ("diff", "expect"):
            from pytest_devcaps.commands import bringup

            return bringup.command_diff(args) if args.report_command == "diff" else \
                bringup.command_expect(args)
        if args.command == "report":
            from pytest_devcaps.commands.report import command_report

            return command_report(args)
        from pytest_devcaps.commands.check import command_check

        return command_check(args)
    except DevcapsError as exc:
        print(f"devcaps: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
