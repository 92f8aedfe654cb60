"""The kernel suite's summary: which backend each device ran, and what it was checked against.

Every test records the backend of its ``scaled_mm`` calls (``_checks.record_backend``, a
``devcaps_kernels_backend`` user property: ``"<device>=<backend>"``, also in JUnit XML and, under
xdist, sent to the controller with the report); the terminal summary lists them per device, so
a run on a device without Triton says that it tested the ``reference`` backend, against float64.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

PROPERTY = "devcaps_kernels_backend"
_WHAT = {
    "triton": "the compiled Triton kernel",
    "cpu": "the fused CPU path (oneDNN GEMM, blocked epilogue and reductions)",
    "reference": "the reference backend (plain torch): no fused backend runs on this device",
}
_seen: dict[str, set[str]] = {}  # this session's "<device>=<backend>" -> the tests that ran it


def pytest_sessionstart(session: pytest.Session) -> None:
    _seen.clear()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        for name, value in report.user_properties:
            if name == PROPERTY:
                _seen.setdefault(str(value), set()).add(report.nodeid)


def summary_lines(seen: dict[str, set[str]]) -> list[str]:
    """One line per device and backend: how many tests, what ran, what it was checked against."""
    counts = Counter({key: len(tests) for key, tests in seen.items()})
    lines = []
    for key, count in sorted(counts.items()):
        device, _, backend = key.partition("=")
        lines.append(f"  {device}: backend {backend!r}, {_WHAT.get(backend, backend)}: {count} tests; "
                     f"outputs checked against float64 math on the CPU")
    return lines


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _seen:
        terminalreporter.write_line("devcaps_kernels: backends tested")
        for line in summary_lines(_seen):
            terminalreporter.write_line(line)
