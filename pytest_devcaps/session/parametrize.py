"""Device and dtype parametrization, and fixture hygiene.

Our ``device`` / ``dtype`` fixtures step aside for a fixture of the same name that a project
defines (conftest or module): a test that gets the project's ``device`` is not parametrized by
us (its ids and its number of runs stay the project's). ``devcaps_device`` / ``devcaps_dtype``
are the same fixtures under names no project uses, parametrized whatever ``device`` is.
Which fixture a test gets is pytest's answer (the last of ``name2fixturedefs``, the closest
definition), not a guess from names.

Why indirect: the device (and the dtype) reach the test through our fixture, with its value as
``request.param``, and not as a direct parameter. Measured with callgrind on pytest 9.2 (issue
32; ``benchmarks/results/plugin_overhead_issue32_device_*``), a direct parameter costs more per
test, not less: pytest makes a ``DirectParamFixtureDef`` for every direct ``parametrize`` call
(its ``FixtureDef.__init__`` runs ``inspect.signature``), and at setup that fixture asks for
``request``, which builds a ``RequestFixtureDef`` (another signature) twice per test; a
``SubRequest`` is made for it all the same. Our fixture takes no argument and its value is set by
the plugin's ``pytest_fixture_setup`` (``runtest.fixture_setup``), so the indirect path pays
neither. It also keeps what tests see today: ``callspec.params["device"]`` is the device key
(``cpu``, ``emu:0``), which ``item_device``, xdist and the reports read, and the fixture's value
is the one ``torch.device`` per key (``fixtures.device_value``).

What is the same for every call of one session is made once: the device parameter sets (their
ids included) of the session's selection (``device_parameters``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Collection, Sequence

import pytest

from pytest_devcaps.errors import MarkerError
from pytest_devcaps.marks.evaluation import dtype_name, dtypes_for
from pytest_devcaps.marks.names import DEVICE_NAMES, DTYPE_NAMES
from pytest_devcaps.session.keys import DEVICE_PARAMETERS_KEY

if TYPE_CHECKING:
    from _pytest.mark.structures import ParameterSet

    from pytest_devcaps.session.state import SessionState

FIXTURES_MODULE = "pytest_devcaps.session.fixtures"
_NO_NAMES: frozenset[str] = frozenset()


def defined_by(metafunc: pytest.Metafunc, name: str) -> Any:
    """The fixture function a test gets for ``name`` (None when none is defined)."""
    definitions = getattr(metafunc, "_arg2fixturedefs", {}).get(name)
    return getattr(definitions[-1], "func", None) if definitions else None


def is_ours(metafunc: pytest.Metafunc, name: str) -> bool:
    return getattr(defined_by(metafunc, name), "__module__", None) == FIXTURES_MODULE


def argnames_of(mark: pytest.Mark) -> list[str]:
    """The argument names a ``parametrize`` mark parametrizes."""
    argnames = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
    return [a.strip() for a in argnames.split(",")] if isinstance(argnames, str) else list(argnames)


def user_names(parametrize_marks: Sequence[pytest.Mark]) -> frozenset[str]:
    """The names a test parametrizes itself (its ``parametrize`` marks, module and class ones
    included): ours step aside for them."""
    if not parametrize_marks:
        return _NO_NAMES
    return frozenset(name for mark in parametrize_marks for name in argnames_of(mark))


def _ours_requested(metafunc: pytest.Metafunc, names: tuple[str, ...], user_names: Collection[str]) -> str | None:
    """The first of ``names`` the test asks for, gets from us, and does not parametrize itself
    (``user_names``: what its ``parametrize`` marks name; a user's own parametrization wins)."""
    fixturenames = metafunc.fixturenames
    for name in names:
        if name in fixturenames and name not in user_names and is_ours(metafunc, name):
            return name
    return None


def parametrize(metafunc: pytest.Metafunc, state: SessionState, marks: Sequence[pytest.Mark],
                user_names: Collection[str]) -> None:
    """Instantiate the test per selected device (when it gets our device fixture) and per dtype
    of its ``dtypes`` mark (per device with ``when=``). ``marks`` are the test's devcaps marks,
    closest first (its ``dtypes`` mark is the first), ``user_names`` the names its own
    ``parametrize`` marks take (``collection.definition_marks`` reads both in one walk)."""
    device_arg = _ours_requested(metafunc, DEVICE_NAMES, user_names)
    mark = _closest_dtypes(marks)
    dtype_arg = _dtype_argname(metafunc, user_names) if mark is not None else None
    if mark is None or dtype_arg is None or not mark.kwargs.get("when"):
        if device_arg is not None:
            metafunc.parametrize(device_arg, device_parameters(metafunc.config, state), indirect=True)
        if mark is not None and dtype_arg is not None:
            _parametrize_dtypes(metafunc, dtype_arg, dtypes_for(mark, None))
        return
    if device_arg is None:
        identity = state.registry.identity(state.primary_device)
        _parametrize_dtypes(metafunc, dtype_arg, dtypes_for(mark, identity))
        return
    pairs = [(key, dtype) for key in state.selected
             for dtype in dtypes_for(mark, state.registry.identity(key))]
    ids = [f"{device_id(key)}-{dtype_name(dtype)}" for key, dtype in pairs]
    metafunc.parametrize([device_arg, dtype_arg], pairs, ids=ids, indirect=True)


def _closest_dtypes(marks: Sequence[pytest.Mark]) -> pytest.Mark | None:
    for mark in marks:
        if mark.name == "dtypes":
            return mark
    return None


def device_id(key: str) -> str:
    """A device key's part of a test id: its device type (``emu:0`` -> ``emu``)."""
    return key.split(":")[0]


def device_parameters(config: pytest.Config, state: SessionState) -> list[ParameterSet]:
    """The parameter sets of the selected devices, each with its id, made once per session:
    ``parametrize`` takes them as they are (no id list to check, no value to wrap) for every
    device test. pytest never changes a parameter set (an immutable tuple), so one list serves
    all."""
    selected = state.selected
    cached = config.stash.get(DEVICE_PARAMETERS_KEY, None)
    if cached is None or cached[0] is not selected:
        cached = (selected, [pytest.param(key, id=device_id(key)) for key in selected])
        config.stash[DEVICE_PARAMETERS_KEY] = cached
    return cached[1]


def _parametrize_dtypes(metafunc: pytest.Metafunc, argname: str, values: list[Any]) -> None:
    if not values:
        raise MarkerError("dtypes", "needs at least one dtype")
    metafunc.parametrize(argname, values, ids=[dtype_name(v) for v in values], indirect=True)


def _dtype_argname(metafunc: pytest.Metafunc, user_names: Collection[str]) -> str | None:
    """Our dtype fixture's name in this test; a ``dtypes`` mark on a test whose ``dtype`` is
    the project's own fixture fails collection instead of parametrizing nothing."""
    name = _ours_requested(metafunc, DTYPE_NAMES, user_names)
    if name is None and "dtype" in metafunc.fixturenames and not is_ours(metafunc, "dtype") \
            and "dtype" not in user_names:
        where = getattr(getattr(defined_by(metafunc, "dtype"), "__code__", None), "co_filename", "?")
        raise MarkerError("dtypes", "parametrizes devcaps' dtype fixture, but this test's "
                          f"`dtype` is the project's own (defined in {where}); request "
                          "`devcaps_dtype` instead")
    return name
