"""Expectations files in a pytest session (``--devcaps-expect``): the rule that decides each test
on its device, applied at collection as pytest's own marks, and checked when the test ends.

* ``xfail`` becomes ``pytest.mark.xfail(reason=, strict=)`` (a strict one that passes fails, as
  pytest's ``[XPASS(strict)]``), ``skip`` a ``skip`` mark, ``flaky`` pytest-rerunfailures'
  ``flaky(reruns=, reruns_delay=)`` (where it is not loaded, a warning says the tests run once);
  each goes first among the test's marks, so the file overrides what the code says.
* ``pass``: a skip or an xfail of the test is turned into an error (setup) or failure (call)
  naming the rule, as ``--devcaps-require`` turns a capability skip into one.
* Reasons name the file and line and carry the issue: the skip footer, the JSON report's
  ``reason`` and the expectations footer (xfailed, passing now, stale) show them.
* A rule that selects no collected test on a device its entry applies to is *stale* (its file
  named but not collected: not judged); listed in the footer and the JSON report, and under
  ``--devcaps-expect-strict`` a failure of the run (exit status 1).

Under xdist each worker applies the file to its own collection; the workers' stale lists reach
the controller through ``workeroutput``.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Generator

import pytest

from pytest_devcaps.errors import DevcapsError, UnknownDeviceError
from pytest_devcaps.session.expect_report import EXPECTATION_PROPERTY
from pytest_devcaps.session.fixtures import item_device
from pytest_devcaps.session.keys import RULE_KEY, session_state

if TYPE_CHECKING:
    from pytest_devcaps.config.expectfile import Expectation, Expectations
    from pytest_devcaps.config.testnames import TestName

PLUGIN_NAME = "devcaps-expect"
STALE_OUTPUT = "devcaps_expect_stale"


def test_name(item: pytest.Item) -> TestName:
    """How an expectations file names ``item`` (PyTorch's generic names of a generated test)."""
    from pytest_devcaps.config.testnames import TestName, pytorch_generic_names

    cls = getattr(item, "cls", None)
    generic: tuple[str | None, str | None] = (None, None)
    if cls is not None:
        function = getattr(getattr(item, "obj", None), "__name__", None)
        generic = pytorch_generic_names(cls.__name__, getattr(cls, "device_type", None),
                                        item.name, function)
    return TestName(item.nodeid, *generic)


def shown_path(path: Any) -> str:
    """A file under the working directory by its relative path (what reports name), else as given."""
    import os

    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def mark_for(rule: Expectation, device: str, rerun_plugin: bool) -> pytest.MarkDecorator | None:
    """The pytest mark a rule stands for (None: ``pass``, or ``flaky`` without the plugin)."""
    if rule.outcome == "xfail":
        return pytest.mark.xfail(reason=rule.text(device), strict=rule.strict)
    if rule.outcome == "skip":
        return pytest.mark.skip(reason=rule.text(device))
    if rule.outcome == "flaky" and rerun_plugin:
        return pytest.mark.flaky(reruns=rule.reruns, reruns_delay=rule.delay)
    return None


class ExpectHooks:
    """Registered with ``--devcaps-expect`` (or its variable or ini key)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._expectations: Expectations | None = None
        self.stale: list[dict[str, Any]] | None = None
        self.decided: Counter[str] = Counter()
        self.flaky_unrun = 0

    @property
    def expectations(self) -> Expectations:
        """The files, loaded once against the session registry's fact vocabulary."""
        if self._expectations is None:
            from pytest_devcaps.config.expectfile import load_expectations

            state = session_state(self.config)
            self._expectations = load_expectations(
                [shown_path(p) for p in state.settings.expect.value], state.registry.facts)
        return self._expectations

    def load(self) -> None:
        """Read the files now (a bad key is a usage error before collection)."""
        try:
            self.expectations
        except DevcapsError as exc:
            raise pytest.UsageError(f"pytest-devcaps: {exc}") from None

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """Before any deselection (``-k``, ``-m``): a rule for a deselected test is not stale."""
        self.load()
        rerun_plugin = config.pluginmanager.hasplugin("rerunfailures")
        hits: set[Expectation] = set()
        devices: dict[str, Any] = {}
        for item in items:
            hits.update(self._apply(item, rerun_plugin, devices))
        collected = {item.nodeid.partition("::")[0] for item in items}
        self.stale = stale_rules(self.expectations, hits, list(devices.values()), collected)
        if self.flaky_unrun:
            from pytest_devcaps.session import config_warnings

            config_warnings.issue(config, f"pytest-devcaps: {self.flaky_unrun} test(s) of a flaky "
                                  "expectation run once: pytest-rerunfailures is not loaded "
                                  "(pip install pytest-rerunfailures)")

    def _apply(self, item: pytest.Item, rerun_plugin: bool, devices: dict[str, Any]
               ) -> list[Expectation]:
        """Mark ``item`` as the deciding rule says; every rule that selects it (not stale)."""
        registry = session_state(self.config).registry
        try:
            identity = registry.identity(item_device(item))
        except UnknownDeviceError:  # a class for a device type absent here (a plan's host CPU)
            return []
        devices.setdefault(identity.key, identity)
        selecting = self.expectations.selecting(test_name(item), identity)
        if not selecting:
            return selecting
        rule = selecting[-1]
        self.decided[rule.outcome] += 1
        mark = mark_for(rule, identity.key, rerun_plugin)
        if mark is not None:
            item.add_marker(mark, append=False)
        elif rule.outcome == "flaky":
            self.flaky_unrun += 1
        item.stash[RULE_KEY] = (rule, identity.key)
        item.user_properties.append((EXPECTATION_PROPERTY,
                                     {**rule.to_dict(), "device": identity.key}))
        return selecting

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item) -> Generator[None, Any, Any]:
        report = yield
        found = item.stash.get(RULE_KEY, None)
        if found is not None and found[0].outcome == "pass":
            enforce_pass(report, *found)
        return report

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from pytest_devcaps.session.expect_report import summary_lines  # at the end only

        lines = summary_lines(self.expectations, terminalreporter.stats, self.all_stale(),
                              strict=self._strict())
        if lines:
            terminalreporter.section(f"devcaps: expectations ({', '.join(self.expectations.files)})",
                                     sep="-")
            for line in lines:
                terminalreporter.line(line)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Stale rules under strict mode fail the run (before the JSON report records its
        exit status); a worker hands its list to the controller."""
        workeroutput = getattr(self.config, "workeroutput", None)
        if workeroutput is not None:
            workeroutput[STALE_OUTPUT] = self.stale or []
            return
        if self._strict() and self.all_stale() and session.exitstatus in (0, 5):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """xdist: every worker collects the same tests; the first one's stale list is kept."""
        found = getattr(node, "workeroutput", {}).get(STALE_OUTPUT)
        if found is not None and self.stale is None:
            self.stale = list(found)

    def all_stale(self) -> list[dict[str, Any]]:
        return list(self.stale or [])

    def _strict(self) -> bool:
        return bool(session_state(self.config).settings.expect_strict.value)

    def report_fields(self) -> dict[str, Any]:
        """What the JSON report says of the files: their names, strict mode, the stale rules."""
        settings = session_state(self.config).settings
        return {"expectations": {"files": list(self.expectations.files),
                                 "strict": self._strict(), "source": settings.expect.source,
                                 "decided": dict(self.decided), "stale": self.all_stale()}}


def enforce_pass(report: pytest.TestReport, rule: Expectation, device: str) -> None:
    """A ``pass`` rule: a skip or an xfail of the test becomes its failure (an error at setup)."""
    from pytest_devcaps.session.reporting import reason_of

    xfailed = hasattr(report, "wasxfail")
    if report.passed:
        if xfailed:  # it passed: an XPASS of a must-pass test is a pass
            del report.wasxfail
        return
    if not report.skipped:
        return
    what = "xfailed" if xfailed else "was skipped"
    reason = reason_of(report) or "(no reason given)"
    if xfailed:
        del report.wasxfail
    report.outcome = "failed"
    report.longrepr = f"{rule.text(device)}, but it {what}: {reason}"


def stale_rules(expectations: Expectations, hits: set[Expectation], devices: list[Any],
                collected_paths: set[str]) -> list[dict[str, Any]]:
    """The rules that select no collected test, where they were judged: on a device of the
    session their entry applies to, and (for a pattern naming a file) with that file collected."""
    from pytest_devcaps.config.testnames import file_collected, names_a_file

    stale = []
    for entry_index, entry in enumerate(expectations.entries):
        judged = [d.key for d in devices if entry_index in expectations.applying(d)]
        if not judged:
            continue
        for rule in entry.rules:
            if rule in hits:
                continue
            path = names_a_file(rule.pattern)
            if path is not None and not file_collected(path, collected_paths):
                continue
            stale.append({**rule.to_dict(), "devices": judged})
    return stale
