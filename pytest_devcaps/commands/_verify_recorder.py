"""The pytest plugin ``devcaps lint --fix --verify`` loads into each pytest run it starts
(``-p pytest_devcaps.commands._verify_recorder --devcaps-verify-record FILE``): one JSON line per
event, flushed as it happens, so a run that crashes or is killed still says which test was
running. Events: ``item`` (node id, the qualified name of the function in the file, its device),
``start`` (a test begins), ``report`` (its outcome and a one-line message), ``collect_error`` (a
module or class that failed to collect, with the lines of the file in its traceback).

Only the standard library and pytest: it is imported in the child, not by the ``devcaps`` command.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from typing import IO, Any

import pytest

_FRAME = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+): in (?P<func>\S+)", re.M)
_DEVICE_VALUE = re.compile(r"(cpu|cuda|xpu|mps|hpu|mtia|meta|emu|privateuseone)(:\d+)?")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--devcaps-verify-record", metavar="FILE", default=None,
                     help="(devcaps lint --verify) write every test's outcome to FILE, one JSON line each")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--devcaps-verify-record")
    if path:
        config.pluginmanager.register(_Recorder(open(path, "a", encoding="utf-8")), "devcaps-verify-recorder")


def _function_of(item: pytest.Item) -> tuple[str | None, str | None]:
    """The qualified name and file of the ``def`` behind ``item``, through ``functools.wraps``
    (``instantiate_device_type_tests`` and skip decorators keep the original's ``__qualname__``)."""
    function = getattr(item, "obj", None)
    function = getattr(function, "__func__", function)
    try:
        function = inspect.unwrap(function)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        pass
    code = getattr(function, "__code__", None)
    return getattr(function, "__qualname__", None), getattr(code, "co_filename", None)


def _device_of(item: pytest.Item) -> str | None:
    """The device type a test runs on, where it says: a device parameter, else its class's
    ``device_type`` (PyTorch's instantiated classes; ``privateuse1`` read as the backend's name)."""
    callspec = getattr(item, "callspec", None)
    for value in getattr(callspec, "params", {}).values():
        text = str(value)
        if _DEVICE_VALUE.fullmatch(text):
            return text.split(":")[0]
    device_type = getattr(getattr(item, "cls", None), "device_type", None)
    if device_type == "privateuse1":
        try:
            import torch

            device_type = torch._C._get_privateuse1_backend_name()
        except Exception:  # noqa: BLE001 - a name is all this asks for
            pass
    return device_type if isinstance(device_type, str) else None


def _message(report: Any) -> str:
    """One line: a skip's reason, else the last ``E`` line of a failure, else its last line."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")[:300]
    text = str(getattr(report, "longreprtext", "") or longrepr or "")
    errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    lines = errors or [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[-1] if lines else "")[:300]


class _Recorder:
    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.final: dict[str, str] = {}

    def _write(self, **event: object) -> None:
        self.stream.write(json.dumps(event) + "\n")
        self.stream.flush()

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        qualname, filename = _function_of(item)
        self._write(event="item", nodeid=item.nodeid, name=item.name, qualname=qualname,
                    file=os.path.realpath(filename) if filename else None, device=_device_of(item))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            text = str(report.longrepr)
            frames = [(os.path.realpath(m["file"]), int(m["line"])) for m in _FRAME.finditer(text)]
            self._write(event="collect_error", nodeid=report.nodeid, message=_message(report), frames=frames)

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self._write(event="start", nodeid=nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or report.failed or report.skipped:
            outcome: str = report.outcome
            if hasattr(report, "wasxfail"):
                outcome = "xfailed" if report.skipped else "xpassed"
            elif report.failed and report.when != "call":
                outcome = "error"
            if self.final.get(report.nodeid) in ("failed", "error"):
                return  # a teardown after a failure adds nothing
            self.final[report.nodeid] = outcome
            self._write(event="report", nodeid=report.nodeid, outcome=outcome, message=_message(report))

    def pytest_unconfigure(self) -> None:
        self.stream.close()
