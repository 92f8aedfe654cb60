"""The pytest plugin ``devcaps check`` loads into each suite's run (``-p``): one line per finished
test, ``done total``, appended to the file ``--devcaps-check-progress`` names, which the command
reads to print one progress line per suite instead of the suite's own per-test output."""

from __future__ import annotations

from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--devcaps-check-progress", dest="devcaps_check_progress", metavar="FILE",
                     help="(devcaps check) append 'tests-done total' to FILE as tests finish")


class Progress:
    def __init__(self, path: str) -> None:
        self.path = path
        self.total = 0
        self.done = 0

    def _write(self) -> None:
        with open(self.path, "a", encoding="utf-8") as stream:
            stream.write(f"{self.done} {self.total}\n")

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.total = len(session.items)
        self._write()

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """Under xdist the controller collects nothing: a worker's collection is the total."""
        self.total = max(self.total, len(ids))
        self._write()

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        self.done += 1
        self._write()


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("devcaps_check_progress")
    if path and getattr(config, "workerinput", None) is None:
        config.pluginmanager.register(Progress(path), "devcaps-check-progress")
