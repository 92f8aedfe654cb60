"""Collection: a test's devcaps marks checked (once per group of equal marks) and parametrized
(``pytest_generate_tests``), then evaluated against its device into a stashed ``Evaluation``
(``pytest_collection_modifyitems``); the per-test run hooks registered only where a test uses
devcaps. A wrong mark errors its own tests at setup, never the whole module."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Hashable, Iterable, Sequence

import pytest

from pytest_devcaps.marks.names import (DEVICE_NAMES, DTYPE_NAMES, MARKER_NAMES, InheritedMarks, any_devcaps_mark,
                                        callspec_param, marks_key, pytorch_gates_in_use)
from pytest_devcaps.session.fixtures import item_device
from pytest_devcaps.session.keys import (
    CLASS_PROBLEMS_KEY,
    MACHINERY_KEY,
    DEFINITION_PROBLEM_KEY,
    EVALUATION_KEY,
    FREE_MEMORY_KEY,
    MARK_PROBLEM_KEY,
    VALID_MARKS_KEY,
    VALIDATED_KEY,
    DefinitionKey,
    session_state,
    started_state,
)

if TYPE_CHECKING:
    from pytest_devcaps.marks.evaluation import Evaluation
    from pytest_devcaps.registry import CapabilityRegistry

RUN_HOOKS = "devcaps-run"
_PARAMETRIZED_FIXTURES = frozenset({"dtype", "devcaps_dtype", "device", "devcaps_device"})


def devcaps_marks(node: pytest.Item) -> list[pytest.Mark]:
    return [m for m in node.iter_markers() if m.name in MARKER_NAMES]


def definition_marks(node: pytest.Item) -> tuple[list[pytest.Mark], list[pytest.Mark]]:
    """A test definition's devcaps marks (closest first, as ``devcaps_marks``) and its
    ``parametrize`` marks, in one walk of its node chain (``iter_markers`` walks the chain again
    on each call: once per device test is what collection pays)."""
    marks: list[pytest.Mark] = []
    parametrize_marks: list[pytest.Mark] = []
    for mark in node.iter_markers():
        name = mark.name
        if name in MARKER_NAMES:
            marks.append(mark)
        elif name == "parametrize":
            parametrize_marks.append(mark)
    return marks, parametrize_marks


def generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``device`` / ``dtype`` (checking the definition's marks first); a wrong mark is
    kept for its items' setup (as pytest's skipif with a bad condition). A test that asks for
    none of our parametrized fixtures is left alone here: its marks are checked with its items
    (``collect_items``), and most tests of most sessions have no devcaps mark at all."""
    fixturenames = metafunc.fixturenames
    if _PARAMETRIZED_FIXTURES.isdisjoint(fixturenames):  # one C call: asked for every test
        return
    marks, parametrize_marks = definition_marks(metafunc.definition)
    if not marks and not _requests_any(fixturenames, DEVICE_NAMES):
        return  # a dtype fixture without a dtypes mark: nothing to build
    devcaps_error, registry_unavailable, parametrize, _ = machinery(metafunc.config)
    state = session_state(metafunc.config)
    try:
        registry = state.registry
    except registry_unavailable:
        return  # collect_items reports it, once

    key = definition_key(metafunc.definition)
    try:
        validate_marks(metafunc.definition, registry, fixturenames, marks)
        parametrize.parametrize(metafunc, state, marks, parametrize.user_names(parametrize_marks))
    except devcaps_error as exc:
        problems = metafunc.config.stash.setdefault(DEFINITION_PROBLEM_KEY, {})
        problems[key] = f"{_definition_id(key)}: {exc}"
        return
    metafunc.config.stash.setdefault(VALIDATED_KEY, {})[key] = tuple(marks)


def machinery(config: pytest.Config) -> tuple[Any, ...]:
    """(DevcapsError, RegistryUnavailable, session.parametrize, evaluate): what checking,
    parametrizing and evaluating a devcaps test needs, imported by the first such test (a
    session of plain tests imports none of it) and kept for the session: an import statement
    costs its caller about what a small function call does, and these would be paid for every
    test. Per session, not per process: a process that runs sessions one after another (pytester
    in-process runs, an IDE) may import our modules again in between, and a class kept from the
    first import is not the one a later session raises or compares (a kept ``evaluate`` read the
    registry's new ``Level.NATIVE`` as not native and skipped a test whose capability was set)."""
    found = config.stash.get(MACHINERY_KEY, None)
    if found is None:
        from pytest_devcaps.errors import DevcapsError
        from pytest_devcaps.marks.evaluation import evaluate
        from pytest_devcaps.session import parametrize
        from pytest_devcaps.session.state import RegistryUnavailable

        found = config.stash[MACHINERY_KEY] = (DevcapsError, RegistryUnavailable, parametrize, evaluate)
    return found


def _requests_any(fixturenames: Sequence[str], names: Iterable[str]) -> bool:
    for name in names:  # a loop, not any(): asked for every test of every session
        if name in fixturenames:
            return True
    return False


def collect_items(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Evaluate every collected test that uses devcaps; register the run hooks if one does."""
    state = started_state(config)  # a session that has not started is not started here
    if state is not None and state.failure is not None:
        raise pytest.UsageError(state.failure)
    if pytorch_gates_in_use():  # PyTorch's capability skips, where torch has them
        from pytest_devcaps.pytorch_compat import fill_privateuse1_capabilities

        fill_privateuse1_capabilities()
    view = InheritedMarks()
    evaluate_item = ItemEvaluations(config)
    used = False
    last_parent: object = None
    inherited: tuple[pytest.Mark, ...] = ()
    for item in items:  # most tests: no devcaps mark of their own or inherited, no parameters
        own, parent = item.own_markers, item.parent
        if parent is not last_parent:  # a parent's tests come one after another
            last_parent, inherited = parent, view.share(parent)
        if inherited or (own and any_devcaps_mark(own)) or getattr(item, "callspec", None) is not None:
            used |= evaluate_item(item, view(item))
    _register_run_hooks(config, used or config.stash.get(CLASS_PROBLEMS_KEY, False))


class ItemEvaluations:
    """One ``collect_items`` pass: each collected test's devcaps marks checked and evaluated
    against its device. ``evaluate``'s answers are kept by value (the marks' ``marks_key``, the
    device, the dtype parameter): a suite's tests share a few groups of marks, each test with
    mark objects of its own, and the registry does not change during the pass, so a group is
    evaluated once per device and dtype (an ``Evaluation`` is frozen: tests may share one, and a
    check at setup replaces a test's own, never changes it)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._answers: dict[Hashable, Evaluation] = {}

    def __call__(self, item: pytest.Item, marks: list[pytest.Mark]) -> bool:
        """Evaluate one test's devcaps ``marks`` (or stash why they are wrong): whether it uses devcaps."""
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else None
        if not marks and not params:
            return False  # this test does not use devcaps (and builds nothing)
        uses_device = callspec_param(callspec, DEVICE_NAMES) is not None
        dtype_param = callspec_param(callspec, DTYPE_NAMES)
        if not marks and not uses_device and dtype_param is None:
            return False
        config = self.config
        key = definition_key(item)
        definition_problem = config.stash.get(DEFINITION_PROBLEM_KEY, {}).get(key)
        if definition_problem is not None:
            item.stash[MARK_PROBLEM_KEY] = definition_problem
            return True
        devcaps_error, registry_unavailable, _, _ = machinery(config)
        state = session_state(config)
        try:
            if config.stash.get(VALIDATED_KEY, {}).get(key) != tuple(marks):  # unchecked, or marks added since
                validate_marks(item, state.registry, getattr(item, "fixturenames", None), marks)
        except registry_unavailable as exc:  # first needed here, by a test without our fixtures
            raise pytest.UsageError(str(exc)) from None
        except devcaps_error as exc:
            item.stash[MARK_PROBLEM_KEY] = f"{_definition_id(key)}: {exc}"  # worded as generate_tests does
            return True
        marks = [m for m in marks if m.name != "dtypes"]
        if not marks and not uses_device and dtype_param is None:
            return False
        evaluation = self.evaluation(marks, state.registry, item_device(item), dtype_param)
        item.stash[EVALUATION_KEY] = evaluation
        for mark in marks:
            if mark.name == "requires_memory" and mark.kwargs.get("free"):
                item.stash[FREE_MEMORY_KEY] = True  # measured at setup, right before the test
                break
        item.user_properties.append(("devcaps_device", evaluation.device))
        if evaluation.required:
            item.user_properties.append(("devcaps_requires", ",".join(evaluation.required)))
        return True

    def evaluation(self, marks: list[pytest.Mark], registry: CapabilityRegistry, device: str,
                   dtype: Any) -> Evaluation:
        """``evaluate(marks, registry, device, dtype)``, once per value of its arguments."""
        group = marks_key(marks)
        key = None if group is None else (group, device, type(dtype), dtype)
        if key is not None:
            try:
                return self._answers[key]
            except KeyError:
                pass
            except TypeError:  # a dtype parameter of the test's own that cannot be hashed
                key = None
        evaluation: Evaluation = machinery(self.config)[3](marks, registry, device, dtype)
        if key is not None:
            self._answers[key] = evaluation
        return evaluation


def validate_marks(node: pytest.Item, registry: CapabilityRegistry, fixturenames: Sequence[str] | None,
                   marks: list[pytest.Mark] | None = None) -> None:
    """Check the devcaps marks ``node`` sees (``marks``, when the caller has them already); the
    test's own marks must also have the fixture they parametrize (a module's
    ``pytestmark = dtypes(...)`` serves only its dtype tests)."""
    own = [m for m in node.own_markers if m.name in MARKER_NAMES]
    seen = devcaps_marks(node) if marks is None else marks
    inherited = [m for m in seen if m not in own]
    fixtures = _PARAMETRIZED_FIXTURES.intersection(fixturenames) if fixturenames is not None else None
    passed = node.config.stash.setdefault(VALID_MARKS_KEY, set())
    for group, names in ((inherited, None), (own, fixtures)):
        if not group:
            continue  # no marks: nothing to check
        key = _validation_key(group, names)
        if key is not None and key in passed:
            continue  # the same marks passed before (one module's tests share their marks)
        from pytest_devcaps.marks.evaluation import validate_marks as check  # only where not cached

        check(group, registry, fixturenames if names is not None else None)
        if key is not None:
            passed.add(key)


def _validation_key(marks: list[pytest.Mark], fixtures: frozenset[str] | None) -> object | None:
    """A hashable identity of ``marks`` (``marks_key``: by value) and the fixtures they may
    parametrize; None when an argument is unhashable (then the marks are checked every time)."""
    group = marks_key(marks)
    return None if group is None else (group, fixtures)


def _definition_id(key: DefinitionKey) -> str:
    """The node id of a test's definition (its items' without the parameters)."""
    parent, name = key
    return f"{parent}::{name}" if parent else name


def definition_key(node: pytest.Item) -> DefinitionKey:
    parent = node.parent
    return (parent.nodeid if parent is not None else "", getattr(node, "originalname", node.name))


def _register_run_hooks(config: pytest.Config, used: bool) -> None:
    """The setup and report hooks, where a collected test uses devcaps (``used``: evaluated marks
    or a device parameter, or marks or a class that failed to check) or a JSON report wants every
    test's hardware class: a session of plain tests pays no hook call per test for them."""
    manager = config.pluginmanager
    if manager.has_plugin(RUN_HOOKS):
        return
    state = started_state(config)  # not started: no --devcaps-json
    if used or (state is not None and state.settings.json_path):
        from pytest_devcaps.session.runtest import RunHooks

        manager.register(RunHooks(), RUN_HOOKS)
