"""Device and dtype parametrization, and fixture hygiene.

Our ``device`` / ``dtype`` fixtures step aside for a fixture of the same name that a project
defines (conftest or module): a test that gets the project's ``device`` is not parametrized by
us (its ids and its number of runs stay the project's). ``devcaps_device`` / ``devcaps_dtype``
are the same fixtures under names no project uses, parametrized whatever ``device`` is.
Which fixture a test gets is pytest's answer (the last of ``name2fixturedefs``, the closest
definition), not a guess from names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_devcaps.errors import MarkerError
from pytest_devcaps.marks.names import DEVICE_NAMES, DTYPE_NAMES
from pytest_devcaps.marks.evaluation import dtype_name, dtypes_for

if TYPE_CHECKING:
    from pytest_devcaps.session.state import SessionState

FIXTURES_MODULE = "pytest_devcaps.session.fixtures"


def defined_by(metafunc: pytest.Metafunc, name: str) -> Any:
    """The fixture function a test gets for ``name`` (None when none is defined)."""
    definitions = getattr(metafunc, "_arg2fixturedefs", {}).get(name)
    return getattr(definitions[-1], "func", None) if definitions else None


def is_ours(metafunc: pytest.Metafunc, name: str) -> bool:
    return getattr(defined_by(metafunc, name), "__module__", None) == FIXTURES_MODULE


def user_parametrizes(metafunc: pytest.Metafunc, name: str) -> bool:
    """Whether a ``parametrize`` mark of the test names ``name``."""
    for mark in metafunc.definition.iter_markers("parametrize"):
        argnames = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        names = [a.strip() for a in argnames.split(",")] if isinstance(argnames, str) else list(argnames)
        if name in names:
            return True
    return False


def _ours_requested(metafunc: pytest.Metafunc, names: tuple[str, ...]) -> str | None:
    for name in names:
        if name in metafunc.fixturenames and is_ours(metafunc, name) \
                and not user_parametrizes(metafunc, name):
            return name
    return None


def parametrize(metafunc: pytest.Metafunc, state: SessionState) -> None:
    """Instantiate the test per selected device (when it gets our device fixture) and per dtype
    of its ``dtypes`` mark (per device with ``when=``)."""
    device_arg = _ours_requested(metafunc, DEVICE_NAMES)
    mark = metafunc.definition.get_closest_marker("dtypes")
    dtype_arg = _dtype_argname(metafunc) if mark is not None else None
    if mark is None or dtype_arg is None or not mark.kwargs.get("when"):
        if device_arg is not None:
            metafunc.parametrize(device_arg, state.selected, ids=_device_ids(state.selected),
                                 indirect=True)
        if mark is not None and dtype_arg is not None:
            _parametrize_dtypes(metafunc, dtype_arg, dtypes_for(mark, None))
        return
    if device_arg is None:
        identity = state.registry.identity(state.primary_device)
        _parametrize_dtypes(metafunc, dtype_arg, dtypes_for(mark, identity))
        return
    pairs = [(key, dtype) for key in state.selected
             for dtype in dtypes_for(mark, state.registry.identity(key))]
    ids = [f"{key.split(':')[0]}-{dtype_name(dtype)}" for key, dtype in pairs]
    metafunc.parametrize([device_arg, dtype_arg], pairs, ids=ids, indirect=True)


def _device_ids(keys: list[str]) -> list[str]:
    return [key.split(":")[0] for key in keys]


def _parametrize_dtypes(metafunc: pytest.Metafunc, argname: str, values: list[Any]) -> None:
    if not values:
        raise MarkerError("dtypes", "needs at least one dtype")
    metafunc.parametrize(argname, values, ids=[dtype_name(v) for v in values], indirect=True)


def _dtype_argname(metafunc: pytest.Metafunc) -> str | None:
    """Our dtype fixture's name in this test; a ``dtypes`` mark on a test whose ``dtype`` is
    the project's own fixture fails collection instead of parametrizing nothing."""
    name = _ours_requested(metafunc, DTYPE_NAMES)
    if name is None and "dtype" in metafunc.fixturenames and not is_ours(metafunc, "dtype") \
            and not user_parametrizes(metafunc, "dtype"):
        where = getattr(getattr(defined_by(metafunc, "dtype"), "__code__", None), "co_filename", "?")
        raise MarkerError("dtypes", "parametrizes devcaps' dtype fixture, but this test's "
                          f"`dtype` is the project's own (defined in {where}); request "
                          "`devcaps_dtype` instead")
    return name
