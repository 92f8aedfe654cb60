"""Collection: a test's devcaps marks checked (once per group of equal marks) and parametrized
(``pytest_generate_tests``), then evaluated against its device into a stashed ``Evaluation``
(``pytest_collection_modifyitems``); the per-test run hooks registered only where a test uses
devcaps. A wrong mark errors its own tests at setup, never the whole module."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Sequence

import pytest

from pytest_devcaps.marks.names import (DEVICE_NAMES, DTYPE_NAMES, MARKER_NAMES, InheritedMarks, callspec_param,
                                        pytorch_gates_in_use)
from pytest_devcaps.session.fixtures import item_device
from pytest_devcaps.session.keys import (
    CLASS_PROBLEM_KEY,
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
    from pytest_devcaps.registry import CapabilityRegistry

RUN_HOOKS = "devcaps-run"
_PARAMETRIZED_FIXTURES = frozenset({"dtype", "devcaps_dtype", "device", "devcaps_device"})


def devcaps_marks(node: pytest.Item) -> list[pytest.Mark]:
    return [m for m in node.iter_markers() if m.name in MARKER_NAMES]


def generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``device`` / ``dtype`` (checking the definition's marks first); a wrong mark is
    kept for its items' setup (as pytest's skipif with a bad condition). A test that asks for
    none of our parametrized fixtures is left alone here: its marks are checked with its items
    (``collect_items``), and most tests of most sessions have no devcaps mark at all."""
    fixturenames = metafunc.fixturenames
    if not _requests_any(fixturenames, _PARAMETRIZED_FIXTURES):
        return
    marks = devcaps_marks(metafunc.definition)
    if not marks and not _requests_any(fixturenames, DEVICE_NAMES):
        return  # a dtype fixture without a dtypes mark: nothing to build
    from pytest_devcaps.errors import DevcapsError
    from pytest_devcaps.session.parametrize import parametrize
    from pytest_devcaps.session.state import RegistryUnavailable

    state = session_state(metafunc.config)
    try:
        registry = state.registry
    except RegistryUnavailable:
        return  # collect_items reports it, once

    key = definition_key(metafunc.definition)
    try:
        validate_marks(metafunc.definition, registry, fixturenames, marks)
        parametrize(metafunc, state)
    except DevcapsError as exc:
        problems = metafunc.config.stash.setdefault(DEFINITION_PROBLEM_KEY, {})
        problems[key] = f"{_definition_id(key)}: {exc}"
        return
    metafunc.config.stash.setdefault(VALIDATED_KEY, {})[key] = tuple(marks)


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
    used = False
    for item in items:
        used |= _evaluate_item(config, item, view(item))
    _register_run_hooks(config, used or any(CLASS_PROBLEM_KEY in item.stash for item in items))


def _evaluate_item(config: pytest.Config, item: pytest.Item, marks: list[pytest.Mark]) -> bool:
    """Evaluate one test's devcaps ``marks`` (or stash why they are wrong): whether it uses devcaps."""
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else None
    if not marks and not params:
        return False  # this test does not use devcaps (and builds nothing)
    uses_device = callspec_param(callspec, DEVICE_NAMES) is not None
    dtype_param = callspec_param(callspec, DTYPE_NAMES)
    if not marks and not uses_device and dtype_param is None:
        return False
    key = definition_key(item)
    definition_problem = config.stash.get(DEFINITION_PROBLEM_KEY, {}).get(key)
    if definition_problem is not None:
        item.stash[MARK_PROBLEM_KEY] = definition_problem
        return True
    from pytest_devcaps.errors import DevcapsError
    from pytest_devcaps.session.state import RegistryUnavailable

    state = session_state(config)
    try:
        if config.stash.get(VALIDATED_KEY, {}).get(key) != tuple(marks):  # unchecked, or marks added since
            validate_marks(item, state.registry, getattr(item, "fixturenames", None), marks)
    except RegistryUnavailable as exc:  # first needed here, by a test without our fixtures
        raise pytest.UsageError(str(exc)) from None
    except DevcapsError as exc:
        item.stash[MARK_PROBLEM_KEY] = f"{_definition_id(key)}: {exc}"  # worded as generate_tests does
        return True
    marks = [m for m in marks if m.name != "dtypes"]
    if not marks and not uses_device and dtype_param is None:
        return False
    from pytest_devcaps.marks.evaluation import evaluate

    evaluation = evaluate(marks, state.registry, item_device(item), dtype_param)
    item.stash[EVALUATION_KEY] = evaluation
    if any(m.name == "requires_memory" and m.kwargs.get("free") for m in marks):
        item.stash[FREE_MEMORY_KEY] = True  # measured at setup, right before the test
    item.user_properties.append(("devcaps_device", evaluation.device))
    if evaluation.required:
        item.user_properties.append(("devcaps_requires", ",".join(evaluation.required)))
    return True


def validate_marks(node: pytest.Item, registry: CapabilityRegistry, fixturenames: Sequence[str] | None,
                   marks: list[pytest.Mark] | None = None) -> None:
    """Check the devcaps marks ``node`` sees (``marks``, when the caller has them already); the
    test's own marks must also have the fixture they parametrize (a module's
    ``pytestmark = dtypes(...)`` serves only its dtype tests)."""
    from pytest_devcaps.marks.evaluation import validate_marks as check

    own = [m for m in node.own_markers if m.name in MARKER_NAMES]
    seen = devcaps_marks(node) if marks is None else marks
    inherited = [m for m in seen if m not in own]
    fixtures = frozenset(fixturenames) & _PARAMETRIZED_FIXTURES if fixturenames is not None else None
    passed = node.config.stash.setdefault(VALID_MARKS_KEY, set())
    for group, names in ((inherited, None), (own, fixtures)):
        key = _validation_key(group, names)
        if key is not None and key in passed:
            continue  # the same marks passed before (one module's tests share their marks)
        check(group, registry, fixturenames if names is not None else None)
        if key is not None:
            passed.add(key)


def _validation_key(marks: list[pytest.Mark], fixtures: frozenset[str] | None) -> object | None:
    """A hashable identity of ``marks`` (name, args, keywords) and the fixtures they may
    parametrize; None when an argument is unhashable (then the marks are checked every time)."""
    key = (tuple((m.name, m.args, tuple(sorted(m.kwargs.items()))) for m in marks), fixtures)
    try:
        hash(key)
    except TypeError:
        return None
    return key


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
