"""pytest hooks for suites as they are: TestCase classes, hardware classes and expectations.

Registered by ``plugin`` next to it. At collection: every test is classified
(:mod:`pytest_devcaps.marks.classification`) and ``--devcaps-hardware`` deselects the others, and an
``xfail_on`` whose condition holds on the test's device becomes pytest's own ``xfail`` mark. At
setup (called from the plugin's own setup hook): ``requires_memory(free=True)`` is checked
against the free memory of that moment. During the call, where a collected module uses the
unittest bridge: :data:`pytest_devcaps._util.current_test.PYTEST_TEST` tells it that pytest is
running the test, so marks are not evaluated twice.

A test with no devcaps mark and no declared class is ``generic`` without importing the
classification machinery (most tests of most sessions the plugin is loaded into).
"""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from typing import TYPE_CHECKING, Any, Generator, Hashable

import pytest

from pytest_devcaps.session.fixtures import item_device
from pytest_devcaps.marks.names import (GENERIC_CLASS, HARDWARE_ATTRIBUTE, InheritedMarks, any_devcaps_mark, marks_key,
                                        pytorch_gates_in_use)
from pytest_devcaps.marks.names import RANKS_MARKER
from pytest_devcaps.session.keys import (CLASS_PROBLEM_KEY, CLASS_PROBLEMS_KEY, CLASS_SKIP_KEY, EVALUATION_KEY, GATES_SEEN_KEY,
                                         HARDWARE_KEY, RANKS_KEY, WORLD_KEY, session_state, started_state)

if TYPE_CHECKING:
    from pytest_devcaps.marks.classification import Classification

EXPECTATION_PROPERTY = "devcaps_xfail_on"
_FUNCTION_CLASS = pytest.Function.cls  # the property: a test's class is its parent's


class SuiteHooks:
    """Per session: the hardware class of every collected test, for the counts."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.counts: Counter[str] = Counter()
        self.inferred = 0
        self.deselected = 0
        self.checked_at_setup = False  # a test was given a check at setup (the SetupChecks plugin)
        self._last_parent: object = None
        self._last_class: type | None = None
        self._classes: dict[Hashable, Classification] = {}
        self._error_type: type[Exception] | None = None

    def _registry(self) -> Any:
        return session_state(self.config).registry

    def _selection(self) -> tuple[str, ...]:
        """``--devcaps-hardware``'s classes, a bad one a usage error; () where it is not set."""
        state = started_state(self.config)  # not started: nothing of ours is set, no selection
        setting = state.settings.hardware if state is not None else None
        if setting is None or not setting.value:
            return ()
        from pytest_devcaps.errors import DevcapsError
        from pytest_devcaps.marks import classification

        try:
            return classification.parse_selection(setting.value, setting.source, self._registry)
        except DevcapsError as exc:
            raise pytest.UsageError(f"pytest-devcaps: {exc}") from None

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        selection = self._selection()
        kept: list[pytest.Item] = []
        deselected: list[pytest.Item] = []
        self.gates_active = pytorch_gates_in_use()  # without importing pytorch_gates
        view = InheritedMarks()
        self.checked_at_setup = False
        self._classes = {}  # classify()'s answers of this pass
        config.stash[CLASS_PROBLEMS_KEY] = False
        plain = 0  # tests with no devcaps mark, no gate, no declared class: generic, inferred
        plain_kept = not selection or GENERIC_CLASS in selection
        # most tests of most sessions are plain, and a parent's tests come one after another:
        # whether the parent passes nothing down is asked once per parent and item type
        fast = not self.gates_active
        last_parent: object = view  # no item's parent
        last_type: type | None = None
        plain_parent = False
        for item in items:
            own = item.own_markers
            if fast and not (own and any_devcaps_mark(own)):
                if item.parent is not last_parent or type(item) is not last_type:
                    last_parent, last_type = item.parent, type(item)
                    plain_parent = self._plain_parent(item, view)
                if plain_parent:
                    plain += 1
                    item.stash[HARDWARE_KEY] = GENERIC_CLASS
                    if selection:  # else nothing is deselected and the list stays as it is
                        (kept if plain_kept else deselected).append(item)
                    continue
            found = self._prepare(item, view(item))  # also another item type's plain test
            if found is not None and selection and found not in selection:
                deselected.append(item)
            else:
                kept.append(item)
        if plain:
            self.counts[GENERIC_CLASS] += plain
            self.inferred += plain
        if deselected:
            self.deselected = len(deselected)
            config.hook.pytest_deselected(items=deselected)
            items[:] = kept
        manager = config.pluginmanager
        if self.checked_at_setup and not manager.has_plugin(SETUP_PLUGIN) \
                and any(CLASS_SKIP_KEY in i.stash or WORLD_KEY in i.stash or RANKS_KEY in i.stash for i in items):
            manager.register(SetupChecks(), SETUP_PLUGIN)

    def _plain_parent(self, item: pytest.Item, view: InheritedMarks) -> bool:
        """Whether the tests of ``item``'s parent and type that have no devcaps mark of their own
        are plain: the parent passes no devcaps mark down, and their class (a ``Function``'s is
        its parent's) declares no hardware class."""
        if getattr(type(item), "cls", None) is not _FUNCTION_CLASS or item.parent is None:
            return False  # a class of another item type's own: asked per test
        return not view.share(item.parent) and not hasattr(self._class_of(item), HARDWARE_ATTRIBUTE)

    def _prepare(self, item: pytest.Item, marks: list[pytest.Mark]) -> str | None:
        """Classify and expect one test from its devcaps ``marks`` (closest first): its class, or
        None (and an error at setup)."""
        cls = self._class_of(item)
        gates = self._gates(item, cls)
        for mark in marks:
            if mark.name == RANKS_MARKER:
                item.stash[RANKS_KEY] = True  # its world is checked at setup
                self.checked_at_setup = True
                break
        if not gates and not marks and not hasattr(cls, HARDWARE_ATTRIBUTE):
            value, inferred = GENERIC_CLASS, True  # what classify() says, without importing it
        else:
            try:
                found = self._classify(item, marks, cls, gates)
            except self._devcaps_error() as exc:
                item.stash[CLASS_PROBLEM_KEY] = f"{item.nodeid}: {exc}"
                self.config.stash[CLASS_PROBLEMS_KEY] = True
                return None
            value, inferred = found.value, found.inferred
        self.counts[value] += 1
        self.inferred += inferred
        item.stash[HARDWARE_KEY] = value
        return value

    def _devcaps_error(self) -> type[Exception]:
        """``DevcapsError``, imported by the first test that has marks (not per test: an import
        statement costs about what a small function call does)."""
        if self._error_type is None:
            from pytest_devcaps.errors import DevcapsError

            self._error_type = DevcapsError
        return self._error_type

    def _class_of(self, item: pytest.Item) -> type | None:
        """The test's class. A ``Function``'s (pytest's property, not overridden) is its parent's,
        so the tests of one class ask it once."""
        if getattr(type(item), "cls", None) is not _FUNCTION_CLASS:
            return getattr(item, "cls", None)
        parent = item.parent
        if parent is not self._last_parent:
            self._last_parent, self._last_class = parent, getattr(item, "cls", None)
        return self._last_class

    def _gates(self, item: pytest.Item, cls: type | None) -> tuple[Any, ...]:
        """PyTorch's gates on the test (only where a module imported PyTorch's test helpers)."""
        if not getattr(self, "gates_active", False):
            return ()
        from pytest_devcaps.marks.pytorch_gates import gates_of, is_multiprocess

        gates = gates_of(getattr(item, "obj", None), cls)
        if gates:
            item.user_properties.append((GATES_PROPERTY, [g.to_dict() for g in gates]))
            self.config.stash[GATES_SEEN_KEY] = True
        if cls is not None and is_multiprocess(cls):
            item.stash[WORLD_KEY] = gates
            self.checked_at_setup = True
        return gates

    def _classify(self, item: pytest.Item, marks: list[pytest.Mark], cls: type | None,
                  gates: tuple[Any, ...] = ()) -> Classification:
        found = self._class_from(marks, cls, gates)
        # the hardware mark decides where a test runs; PyTorch's own hw_classification
        # attribute keeps PyTorch's meaning (a label: such classes also run on the CPU)
        if not found.inferred and found.value != GENERIC_CLASS and any(m.name == "hardware" for m in marks) \
                and session_state(self.config).settings.hardware_reading.value == "devcaps":
            self._enforce(item, found.value)
        self._expect(item, marks)
        return found

    def _class_from(self, marks: list[pytest.Mark], cls: type | None, gates: tuple[Any, ...]) -> Classification:
        """``classify``'s answer, once per group of equal marks, class and gates in a pass: it
        reads nothing of the test but these (a suite's tests share a few groups, each test with
        mark objects of its own), and a ``Classification`` is frozen."""
        group = marks_key(marks)
        key = None if group is None else (group, cls, gates)
        if key is not None:
            try:
                return self._classes[key]
            except KeyError:
                pass
            except TypeError:  # a class that cannot be hashed
                key = None
        from pytest_devcaps.marks.classification import classify

        found = classify(marks, cls, self._registry, gates)
        if key is not None:
            self._classes[key] = found
        return found

    def _enforce(self, item: pytest.Item, value: str) -> None:
        """A declared class decides where the test runs: a skip at setup where it does not."""
        from pytest_devcaps.marks.classification import mismatch

        reason = mismatch(value, self._registry().identity(item_device(item)))
        if reason is not None:
            item.stash[CLASS_SKIP_KEY] = reason
            self.checked_at_setup = True

    def _expect(self, item: pytest.Item, marks: list[pytest.Mark]) -> None:
        """An ``xfail_on`` that holds on the test's device becomes an ``xfail`` mark."""
        expected = [m for m in marks if m.name == "xfail_on"]
        if not expected:
            return
        from pytest_devcaps.marks.conditions import known_facts
        from pytest_devcaps.marks.expectations import parse_condition

        registry = self._registry()
        identity = registry.identity(item_device(item))
        for mark in expected:
            condition = parse_condition(mark.name, mark.args, mark.kwargs, known_facts(registry))
            if condition.applies(identity):
                reason = condition.describe(identity)
                item.add_marker(pytest.mark.xfail(reason=reason, strict=condition.strict,
                                                  raises=condition.raises))
                item.user_properties.append((EXPECTATION_PROPERTY, reason))
                return

    def pytest_report_collectionfinish(self, config: pytest.Config) -> list[str]:
        if not self.counts and not self.deselected:
            return []
        from pytest_devcaps.marks.names import count_text

        line = (f"devcaps: hardware classes: {count_text(self.counts)} "
                f"({self.inferred} without a declared class)")
        state = started_state(config)  # not started: no selection
        setting = state.settings.hardware if state is not None else None
        if setting is not None and setting.value:
            line += (f"; selected {', '.join(setting.value)} ({setting.source}), "
                     f"{self.deselected} deselected")
        return [line]

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """The collected modules are imported: the call hook is needed where one of them uses
        the unittest bridge (every other test is spared a hook wrapper)."""
        manager = session.config.pluginmanager
        if "pytest_devcaps.testcase" in sys.modules and not manager.has_plugin(BRIDGE_PLUGIN):
            manager.register(BridgeHooks(), BRIDGE_PLUGIN)


BRIDGE_PLUGIN = "devcaps-unittest-bridge"
SETUP_PLUGIN = "devcaps-suite-setup"
GATES_PROPERTY = "devcaps_gates"




class SetupChecks:
    """Registered where a collected test has a declared class that does not run on its device,
    or is a multi-process test whose world is checked before it runs."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        reason = item.stash.get(CLASS_SKIP_KEY, None)
        if reason is None and RANKS_KEY in item.stash:
            check_ranks(item)  # converted tests: requires_ranks (skips or errors itself)
        if reason is None and WORLD_KEY in item.stash:
            reason = world_shortfall(item, item.stash[WORLD_KEY])
        if reason is not None:
            pytest.skip(reason)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item) -> Generator[None, Any, Any]:
        report = yield
        if report.skipped and report.when == "setup" and isinstance(report.longrepr, tuple) and \
                (CLASS_SKIP_KEY in item.stash or WORLD_KEY in item.stash or RANKS_KEY in item.stash):
            filename, line = item.reportinfo()[:2]  # the skip points at the test, not at us
            report.longrepr = (str(filename), (line or 0) + 1, report.longrepr[2])
        return report


def world_shortfall(item: pytest.Item, gates: tuple[Any, ...]) -> str | None:
    """Why a multi-process test would pass with fewer ranks than its gate needs (zero ranks
    spawned run nothing: ``MultiProcessTestCase`` then reports a pass), or None."""
    from pytest_devcaps.marks.pytorch_gates import devices_needed, strictest, world_size_of

    cls = getattr(item, "cls", None)
    size = world_size_of(cls, getattr(item, "name", "runTest"))
    needed = max(devices_needed(gates), 1)
    if size is None or size >= needed:
        return None
    registry = session_state(item.config).registry
    accelerators = [i for i in registry.devices if i.type != "cpu"]
    gate = strictest(tuple(g for g in gates if g.devices)) or strictest(gates)
    kind = accelerators[0].type if accelerators else \
        (gate.hardware if gate is not None and gate.hardware not in (None, "generic", "accelerator")
         else "cuda")
    count = accelerators[0].count if accelerators else 0
    where = f"{gate.name}; " if gate is not None else ""
    return (f"requires {needed} device{'s' if needed > 1 else ''}; found {count} {kind} "
            f"({where}world_size {size} of {cls.__name__ if cls else '?'}: "
            f"{'no rank would run' if size == 0 else 'fewer ranks than the gate needs'})")


def check_ranks(item: pytest.Item) -> None:
    """``requires_ranks``: the world the test's class would start, checked now
    (:mod:`pytest_devcaps.marks.multiprocess`). The requirement joins the test's evaluation (the
    report's ``requires`` / ``missing``) and a shortfall skips as ``requires_devices`` does; a bad
    mark, or a test whose class starts no world, errors."""
    from pytest_devcaps.distributed.settings import share_devices
    from pytest_devcaps.errors import DevcapsError
    from pytest_devcaps.marks.multiprocess import ranks_missing, wanted, with_ranks
    from pytest_devcaps.session.require import skip_unless_required

    marks = list(item.iter_markers(RANKS_MARKER))
    method = getattr(item, "originalname", item.name)
    try:
        missing = ranks_missing(marks, getattr(item, "cls", None), method,
                                session_state(item.config).registry, share_devices, item.name)
    except DevcapsError as exc:  # a bad mark, a class without a world, a bad variable
        pytest.fail(f"{item.nodeid}: {exc}", pytrace=False)
    evaluation = item.stash.get(EVALUATION_KEY, None)
    if evaluation is not None:
        item.stash[EVALUATION_KEY] = with_ranks(evaluation, wanted(marks), missing)
    if missing is not None:
        skip_unless_required(item.config, [missing], missing.reason)


class BridgeHooks:
    """Registered once the unittest bridge (``testcase``) is imported."""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        from pytest_devcaps._util.current_test import PYTEST_TEST, PytestTest

        token = PYTEST_TEST.set(PytestTest(getattr(item, "cls", None), lambda: item_device(item)))
        try:
            return (yield)
        finally:
            PYTEST_TEST.reset(token)


def check_free_memory(item: pytest.Item) -> None:
    """``requires_memory(free=True)``: the free memory now, added to the test's evaluation."""
    evaluation = item.stash.get(EVALUATION_KEY, None)
    if evaluation is None or evaluation.skip:
        return  # not a devcaps test, or skipped already
    wanted = [m for m in item.iter_markers("requires_memory") if m.kwargs.get("free")]
    if wanted:
        from pytest_devcaps.marks.evaluation import free_memory_missing
        from pytest_devcaps.runtime import free_memory

        identity = session_state(item.config).registry.identity(evaluation.device)
        extra = free_memory_missing(wanted, identity, lambda i: free_memory(i.key))
        if extra:
            item.stash[EVALUATION_KEY] = dataclasses.replace(
                evaluation, missing=(*evaluation.missing, *extra))
