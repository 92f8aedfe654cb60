"""Every ``pytest.StashKey`` of the plugin, typed, in one place: what a session, a test function's
definition and a test keep between hooks (pytest's ``Stash``; nothing here imports torch); and
:func:`session_state`, the one reader of the session's own key.

Each key's type is an annotation, not ``StashKey[T]()``: a subscript is built when the module
runs, and this module is imported by every pytest session."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable

    from _pytest.mark.structures import ParameterSet

    from pytest_devcaps.config.expectfile import Expectation
    from pytest_devcaps.distributed.rankstore import RankStore
    from pytest_devcaps.marks.evaluation import Evaluation
    from pytest_devcaps.session.state import SessionState

DefinitionKey = tuple[str, str]
"""A test function's definition: its parent's node id and its original name."""

# --- the session (config.stash) -----------------------------------------------------------
STATE_KEY: pytest.StashKey[SessionState] = pytest.StashKey()
"""The session's state (settings, the registry on first need)."""
START_KEY: pytest.StashKey[Callable[[], SessionState]] = pytest.StashKey()
"""A session that set nothing of ours at configure time: what makes its state on first need
(``session/startup.py`` ``defer``; :func:`session_state` calls it)."""
REGISTRY_SOURCE_KEY: pytest.StashKey[Callable[[], Any]] = pytest.StashKey()
"""What the session installed as library code's default registry (uninstalled at the end)."""
VALID_MARKS_KEY: pytest.StashKey[set[object]] = pytest.StashKey()
"""Mark groups that passed validation in this session, by value: the session's registry (and
its catalogue) is one, so the same marks need not be checked again for every test."""
VALIDATED_KEY: pytest.StashKey[dict[DefinitionKey, tuple[pytest.Mark, ...]]] = pytest.StashKey()
"""The marks each test function's definition had when ``pytest_generate_tests`` checked them:
its items, which carry the same marks, need not be checked again (a cost per test)."""
DEFINITION_PROBLEM_KEY: pytest.StashKey[dict[DefinitionKey, str]] = pytest.StashKey()
"""Why a test function's devcaps marks are wrong, found by ``pytest_generate_tests``: every
item of that function errors at setup with it (never the whole module at collection)."""
DEVICE_PARAMETERS_KEY: pytest.StashKey[tuple[list[str], list[ParameterSet]]] = pytest.StashKey()
"""The parameter sets the device fixture is parametrized with, made once from the selected
devices (the list they were made from, then the sets: ``parametrize.device_parameters``)."""
HEADER_SHOWN_KEY: pytest.StashKey[bool] = pytest.StashKey()
"""The devcaps header lines were printed (before or after collection, once)."""
STORE_KEY: pytest.StashKey[RankStore] = pytest.StashKey()
"""Under torchrun: the launcher's TCP store this rank talks through."""

GATES_SEEN_KEY: pytest.StashKey[bool] = pytest.StashKey()
"""A collected test has PyTorch gates: the skip footer is printed even without the registry."""
CLASS_PROBLEMS_KEY: pytest.StashKey[bool] = pytest.StashKey()
"""A collected test of this pass has a ``CLASS_PROBLEM_KEY`` (``suite_hooks`` sets both), so the
run hooks that raise it are needed: the collection pass asks this, not every test's stash."""
MACHINERY_KEY: pytest.StashKey[tuple[Any, ...]] = pytest.StashKey()
"""``collection.machinery``: the error types and functions a devcaps test needs, imported once
per session."""

# --- one test (item.stash) ------------------------------------------------------------------
EVALUATION_KEY: pytest.StashKey[Evaluation] = pytest.StashKey()
"""The test's devcaps marks evaluated against its device at collection."""
MARK_PROBLEM_KEY: pytest.StashKey[str] = pytest.StashKey()
"""Why a test's devcaps marks are wrong: it errors at setup with it (tests collected without
``pytest_generate_tests``, unittest classes, cannot fail collection)."""
CLASS_PROBLEM_KEY: pytest.StashKey[str] = pytest.StashKey()
"""Why a test could not be classified or expected (a misspelled ``hw_classification``); the
test errors at setup with it."""
HARDWARE_KEY: pytest.StashKey[str] = pytest.StashKey()
"""A test's hardware class (``suite_hooks`` at collection), carried on its reports as
``HARDWARE_REPORT_KEY`` (an attribute that travels with xdist reports) for the JSON report."""
FREE_MEMORY_KEY: pytest.StashKey[bool] = pytest.StashKey()
"""The test has ``requires_memory(free=True)``: free memory is measured at its setup."""
REPORT_FIELDS_KEY: pytest.StashKey[tuple[Evaluation, dict[str, Any]]] = pytest.StashKey()
"""The evaluation a test's reports describe and the fields made from it (setup, call and
teardown reports share them)."""
CLASS_SKIP_KEY: pytest.StashKey[str] = pytest.StashKey()
"""Why a test's declared hardware class does not run on its device (skipped at setup)."""
WORLD_KEY: pytest.StashKey[tuple[Any, ...]] = pytest.StashKey()
"""The gates of a multi-process test (``MultiProcessTestCase``): its world is checked at setup."""
RANKS_KEY: pytest.StashKey[bool] = pytest.StashKey()
"""The test has ``requires_ranks``: the world of its class is checked at setup."""
RULE_KEY: pytest.StashKey[tuple[Expectation, str]] = pytest.StashKey()
"""The expectations rule that decides a test, and the device key it was decided for."""

HARDWARE_REPORT_KEY = "devcaps_hardware"
"""The report attribute carrying a test's hardware class (not a StashKey: reports travel)."""


def session_state(config: pytest.Config) -> SessionState:
    """The session's state; in a session that set nothing of ours, made now (first need)."""
    try:
        return config.stash[STATE_KEY]
    except KeyError:
        start = config.stash.get(START_KEY, None)
        if start is not None:
            del config.stash[START_KEY]
            return start()
        raise pytest.UsageError("pytest-devcaps is not configured in this session "
                                "(was it disabled with -p no:devcaps?)") from None


def started_state(config: pytest.Config) -> SessionState | None:
    """The session's state if it has been made (never makes it: for the hooks every session runs,
    which a session that does not use devcaps must not start)."""
    return config.stash.get(STATE_KEY, None)
