"""``devcaps report diff`` and ``devcaps report expect``: the bring-up loop's commands.

* ``diff BASE NEW``: per device, newly failing, passing now (candidates to take out of the
  expectations file), newly skipped, changed reasons, gone; ``--format`` text, markdown, json
  or github; exit 1 on a regression (``--fail-on``: failing by default, also skipped, gone).
* ``expect --from NEW.json``: an expectations file from a run's failures (xfail rules per
  device), the way a team starts one.
* ``expect --to-exclusions FILE... --device-type T``: the skip rules for a device as PyTorch's
  ``test_exclusions``; ``expect --from-exclusions FILE --device-type T``: the reverse.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from typing import Any, Mapping, Sequence

from pytest_devcaps.errors import ConfigError


def add_parsers(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from pytest_devcaps.report.diff import FAIL_ON
    from pytest_devcaps.report.diff_text import FORMATTERS

    diff = actions.add_parser("diff", help="compare two runs (reports or fleet documents): newly "
                              "failing, passing now, newly skipped, changed reasons; exit 1 on a "
                              "regression")
    diff.add_argument("base", metavar="BASE.json")
    diff.add_argument("new", metavar="NEW.json")
    diff.add_argument("--format", choices=sorted(FORMATTERS), default="text")
    diff.add_argument("--fail-on", action="append", default=[], metavar="WHAT",
                      help=f"what is a regression (repeatable; {', '.join(FAIL_ON)}; default: failing)")
    diff.add_argument("-o", "--output", default="-", metavar="FILE", help="default '-': stdout")
    expect = actions.add_parser("expect", help="write an expectations file from a run's failures, "
                                "or convert to and from PyTorch's test_exclusions")
    source = expect.add_mutually_exclusive_group(required=True)
    source.add_argument("--from", dest="from_report", metavar="NEW.json",
                        help="a pytest or check report: its failures become xfail rules")
    source.add_argument("--to-exclusions", nargs="+", metavar="EXPECT.yaml",
                        help="print the skip rules for --device-type as test_exclusions (JSON)")
    source.add_argument("--from-exclusions", metavar="EXCLUSIONS.json",
                        help="a test_exclusions mapping (JSON or YAML) as skip rules")
    expect.add_argument("--device-type", metavar="TYPE", help="the device type (with --*-exclusions)")
    expect.add_argument("--profile", metavar="NAME|FILE",
                        help="with --to-exclusions: the device's facts from this profile")
    expect.add_argument("--strict", action="store_true", help="with --from: strict xfail rules "
                        "(a test that passes again fails the run)")
    expect.add_argument("-o", "--output", default="-", metavar="FILE", help="default '-': stdout")


def command_diff(args: argparse.Namespace) -> int:
    from pytest_devcaps.commands.report import checked_fleet, write_output
    from pytest_devcaps.report.diff import compare, load_side, regressions
    from pytest_devcaps.report.diff_text import FORMATTERS

    fail_on = [part.strip() for value in (args.fail_on or ["failing"]) for part in value.split(",")
               if part.strip()]
    diff = compare(load_side(args.base, checked_fleet), load_side(args.new, checked_fleet))
    found = regressions(diff, fail_on)
    write_output(args.output, FORMATTERS[args.format](diff, found))
    return 1 if found else 0


def command_expect(args: argparse.Namespace) -> int:
    from pytest_devcaps.commands.report import write_output

    if args.from_report:
        text = _from_report(args.from_report, strict=args.strict)
    elif args.to_exclusions:
        text = _to_exclusions(args.to_exclusions, _device(args))
    else:
        text = _from_exclusions(args.from_exclusions, _device_type(args))
    write_output(args.output, text)
    return 0


def _device_type(args: argparse.Namespace) -> str:
    if not args.device_type:
        raise ConfigError("needs --device-type (the test base's device type: cuda, xpu...)",
                          file="--from-exclusions" if args.from_exclusions else "--to-exclusions")
    return str(args.device_type)


def _device(args: argparse.Namespace) -> Any:
    """The device the rules are selected for: a profile's first device of the type, or a
    device of that type with no other facts."""
    from pytest_devcaps.model import DeviceIdentity

    if args.profile:
        from pytest_devcaps.config import load_catalogue, load_profile

        profile = load_profile(args.profile, load_catalogue())
        wanted = args.device_type or profile.identities[0].type
        found = [i for i in profile.identities if i.type == wanted]
        if not found:
            raise ConfigError(f"profile {profile.name} has no {wanted} device", file="--profile")
        return found[0]
    kind = _device_type(args)
    return DeviceIdentity(type=kind, index=0 if kind != "cpu" else None, vendor="", name="", arch="")


def _to_exclusions(paths: Sequence[str], identity: Any) -> str:
    from pytest_devcaps.config.expect_export import to_test_exclusions
    from pytest_devcaps.config.expectfile import load_expectations

    found, left_out = to_test_exclusions(load_expectations(paths), identity)
    for line in left_out:
        print(f"devcaps report expect: left out: {line}", file=sys.stderr)
    return json.dumps(found, indent=1, sort_keys=True) + "\n"


def _from_exclusions(path: str, device_type: str) -> str:
    from pytest_devcaps.config.expect_export import expectations_yaml, from_test_exclusions
    from pytest_devcaps.config.yamlsource import read_yaml_file

    document, source, _ = read_yaml_file(path)  # JSON is YAML
    entry, problems = from_test_exclusions(_plain(document), device_type, source)
    if problems:
        raise ConfigError("; ".join(problems), file=path)
    return expectations_yaml([entry])


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _from_report(path: str, *, strict: bool) -> str:
    """xfail rules for each device's failing tests, matched by the device's type, vendor and arch."""
    from pytest_devcaps.config.expect_export import EntryDraft, expectations_yaml, failure_rules
    from pytest_devcaps.report.sources import NO_DEVICE, load_source, read_json

    source = load_source(path)  # checked: a file the merge could read
    document = read_json(path)
    identities = {d["key"]: d for d in source.devices}
    primary = _primary(document, identities)
    failing: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for test in _raw_tests(document):
        outcome = test.get("outcome")
        if outcome in ("failed", "error") or test.get("teardown") == "error":
            device = str(test.get("device") or NO_DEVICE)
            failing[primary if device == NO_DEVICE else device].append(test)
    origin = f"{path}" + (f" ({source.created})" if source.created else "")
    entries = [EntryDraft(_match(identities.get(device), device),
                          {"xfail": failure_rules(tests, strict=strict, origin=origin)},
                          f"{len(tests)} failing on {device}")
               for device, tests in sorted(failing.items())]
    header = (f"made from the failures in {origin} by devcaps report expect; give each rule its "
              "issue and check its reason")
    return expectations_yaml(entries, header)


def _primary(document: Mapping[str, Any], identities: Mapping[str, Any]) -> str:
    """The device tests without a device ran on: the first accelerator selected, else the first."""
    selected = [str(d) for d in document.get("selected_devices", [])] or list(identities)
    accelerators = [d for d in selected if not d.startswith("cpu")]
    return (accelerators or selected or ["cpu"])[0]


def _raw_tests(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    if document.get("kind") == "check":
        return [t for suite in document.get("suites", []) for t in suite.get("tests", [])]
    return list(document.get("tests", []))


def _match(identity: Mapping[str, Any] | None, device: str) -> dict[str, Any]:
    if identity is None:
        return {"device_type": device.partition(":")[0]}
    found = {"device_type": identity.get("type")}
    for key in ("vendor", "arch"):
        if identity.get(key):
            found[key] = identity[key]
    return found
