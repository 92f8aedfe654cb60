"""The command-line options and ini keys of pytest-devcaps, declared (``pytest_addoption``), and
whether a session sets any of them: declaring them imports nothing else (the plugin is loaded
into every pytest session; :mod:`pytest_devcaps.session.resolved` resolves them, on first need
where none is set).
"""

from __future__ import annotations

from typing import Any

import pytest

DEFAULT_RANK_TIMEOUT = 300.0
"""Seconds the ranks of a launched world wait for each other (collection, results)."""
DEVICES_HELP = ("comma-separated device types to run device tests on, each present here "
                "(default: every type present)")
EXCEPT_HELP = "comma-separated device types to leave out"
OVERRIDES_HELP = "capability override YAML file (repeatable; later files win)"
PROFILE_HELP = "plan against a device profile (shipped name or YAML file) instead of running"
REQUIRE_HELP = ("comma-separated capabilities this runner must have: a test skipped for one "
                "is an error instead")
TIMEOUT_HELP = "seconds one empirical probe may take before it counts as unknown"
HARDWARE_HELP = ("comma-separated hardware classes to run (generic, accelerator, a device type or "
                 "vendor); other tests are deselected")
EXPECT_HELP = ("expectations YAML file: known failures, skips, flaky and must-pass tests per "
               "device (repeatable; later files win)")
EXPECT_STRICT_HELP = ("a stale expectations entry (one that selects no collected test) fails "
                      "the run")
READING_HELP = ("how a declared hardware class is read: devcaps (default: an accelerator-class test "
                "skips on the CPU, a device type's or vendor's runs only there) or pytorch (the "
                "class only labels and selects tests, as PyTorch's ACCELERATOR classes that also "
                "run on the CPU)")


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("devcaps", "device capabilities (pytest-devcaps)")
    group.addoption("--devcaps-devices", dest="devcaps_devices", metavar="TYPES", help=DEVICES_HELP)
    group.addoption("--devcaps-except", dest="devcaps_except", metavar="TYPES", help=EXCEPT_HELP)
    group.addoption("--devcaps-overrides", dest="devcaps_overrides", metavar="FILE",
                    action="append", default=[], help=OVERRIDES_HELP)
    group.addoption("--devcaps-profile", dest="devcaps_profile", metavar="NAME|FILE", help=PROFILE_HELP)
    group.addoption("--devcaps-require", dest="devcaps_require", metavar="CAPS", help=REQUIRE_HELP)
    group.addoption("--devcaps-set", dest="devcaps_set", metavar="CAP=LEVEL[@DEVICE]",
                    action="append", default=[],
                    help="force one capability's level (repeatable), e.g. dtype.bf16=unsupported@cpu")
    group.addoption("--devcaps-json", dest="devcaps_json", metavar="PATH",
                    help="write a JSON report (devices, capability records, per-test outcomes)")
    group.addoption("--devcaps-reprobe", dest="devcaps_reprobe", action="store_true",
                    help="ignore the probe cache and probe again")
    group.addoption("--devcaps-probe-timeout", dest="devcaps_probe_timeout", metavar="SECONDS",
                    help=TIMEOUT_HELP)
    group.addoption("--devcaps-pin-workers", dest="devcaps_pin_workers", action="store_true",
                    help="under xdist, give each worker its own slice of the accelerators (through "
                         "the backend's visible-devices variable)")
    group.addoption("--devcaps-all-ranks", dest="devcaps_all_ranks", action="store_true",
                    help="under torchrun, every rank prints its terminal output (default: rank 0)")
    group.addoption("--devcaps-rank-timeout", dest="devcaps_rank_timeout", metavar="SECONDS",
                    help="under torchrun, how long a rank waits for the others at collection and "
                         "at the end of the session (default 300)")
    parser.addini("devcaps_devices", DEVICES_HELP, type="string", default="")
    parser.addini("devcaps_except", EXCEPT_HELP, type="string", default="")
    parser.addini("devcaps_overrides", OVERRIDES_HELP + " (relative to the ini file)", type="paths",
                  default=[])
    parser.addini("devcaps_require", REQUIRE_HELP, type="string", default="")
    parser.addini("devcaps_probe_timeout", TIMEOUT_HELP, type="string", default="")
    _add_hardware_option(group, parser)
    _add_expect_options(group, parser)


def _add_expect_options(group: Any, parser: pytest.Parser) -> None:
    group.addoption("--devcaps-expect", dest="devcaps_expect", metavar="FILE", action="append",
                    default=[], help=EXPECT_HELP)
    group.addoption("--devcaps-expect-strict", dest="devcaps_expect_strict", action="store_true",
                    help=EXPECT_STRICT_HELP)
    parser.addini("devcaps_expect", EXPECT_HELP + " (relative to the ini file)", type="paths",
                  default=[])
    parser.addini("devcaps_expect_strict", EXPECT_STRICT_HELP, type="bool", default=False)


def _add_hardware_option(group: Any, parser: pytest.Parser) -> None:
    group.addoption("--devcaps-hardware", dest="devcaps_hardware", metavar="CLASSES",
                    help=HARDWARE_HELP)
    parser.addini("devcaps_hardware", HARDWARE_HELP, type="string", default="")
    group.addoption("--devcaps-hardware-reading", dest="devcaps_hardware_reading",
                    metavar="devcaps|pytorch", help=READING_HELP)
    parser.addini("devcaps_hardware_reading", READING_HELP, type="string", default="")


#: The prefix of every option destination and ini key declared above.
NAME_PREFIX = "devcaps_"
#: The ini keys declared above (what a session may set in its ini file).
INI_KEYS = ("devcaps_devices", "devcaps_except", "devcaps_overrides", "devcaps_require",
            "devcaps_probe_timeout", "devcaps_hardware", "devcaps_hardware_reading", "devcaps_expect",
            "devcaps_expect_strict")


def any_given(config: pytest.Config) -> bool:
    """Whether the command line or the ini file sets any devcaps option: an option that is not
    its default (None, False or no values; an empty text is given: ``--devcaps-json=`` is
    refused), an ini key that is not empty. Attribute reads and cached ini lookups."""
    if any(value is not None and value is not False and value != []
           for name, value in vars(config.option).items() if name.startswith(NAME_PREFIX)):
        return True
    return any(config.getini(key) for key in INI_KEYS)
