"""The per-test run hooks of tests that use devcaps: the ``device`` fixture set up from its
parameter, errors for wrong marks or classes and the capability skip at setup, and the
evaluation and hardware class carried on every report."""

from __future__ import annotations

from typing import Any, Generator

import pytest

from pytest_devcaps.session.fixtures import device_value, set_up_by_us
from pytest_devcaps.session.keys import (
    CLASS_PROBLEM_KEY,
    EVALUATION_KEY,
    FREE_MEMORY_KEY,
    HARDWARE_KEY,
    HARDWARE_REPORT_KEY,
    MARK_PROBLEM_KEY,
    REPORT_FIELDS_KEY,
)
from pytest_devcaps.session.require import skip_unless_required


def fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Any:
    """Set up our ``device`` fixture from its parameter without the fixture function (see
    ``fixtures.device_value``); caches the value or the error as pytest's own setup does
    (``_pytest/fixtures.py`` ``pytest_fixture_setup``). None: not ours, pytest sets it up."""
    if not set_up_by_us(fixturedef):
        return None
    key = fixturedef.cache_key(request)  # type: ignore[arg-type]
    try:
        value = device_value(request)
    except Exception as exc:
        fixturedef.cached_result = (None, key, (exc, exc.__traceback__))
        raise
    fixturedef.cached_result = (value, key, None)
    return value


class RunHooks:
    """Per-test hooks of tests that use devcaps (registered by ``collection``)."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        setup(item)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item) -> Generator[None, Any, Any]:
        report = yield
        annotate(report, item)
        return report


def setup(item: pytest.Item) -> None:
    """Errors for wrong marks or classes, free memory now, then the capability skip."""
    for problem in (CLASS_PROBLEM_KEY, MARK_PROBLEM_KEY):
        if problem in item.stash:
            pytest.fail(item.stash[problem], pytrace=False)
    evaluation = item.stash.get(EVALUATION_KEY, None)
    if evaluation is None:
        return
    if not evaluation.skip:
        if FREE_MEMORY_KEY not in item.stash:
            return
        from pytest_devcaps.session.suite_hooks import check_free_memory

        check_free_memory(item)  # requires_memory(free=True), now
        evaluation = item.stash[EVALUATION_KEY]
        if not evaluation.skip:
            return
    skip_unless_required(item.config, evaluation.missing, evaluation.reason)


def annotate(report: pytest.TestReport, item: pytest.Item) -> None:
    """The skip points at the test; the report carries the evaluation and hardware class."""
    evaluation = item.stash.get(EVALUATION_KEY, None)
    if evaluation is not None and evaluation.skip and report.skipped and isinstance(report.longrepr, tuple):
        # Point the skip at the test, not at this plugin (as pytest does for skip marks).
        filename, line = item.reportinfo()[:2]
        report.longrepr = (str(filename), (line or 0) + 1, report.longrepr[2])
    if HARDWARE_KEY in item.stash:
        report.__dict__[HARDWARE_REPORT_KEY] = item.stash[HARDWARE_KEY]
    if evaluation is not None:
        fields = item.stash.get(REPORT_FIELDS_KEY, None)
        if fields is None or fields[0] is not evaluation:  # made once per evaluation, not per phase
            fields = (evaluation, {"device": evaluation.device, "requires": list(evaluation.required),
                                   "missing": [m.to_dict() for m in evaluation.missing]})
            item.stash[REPORT_FIELDS_KEY] = fields
        report.__dict__["devcaps"] = fields[1]
