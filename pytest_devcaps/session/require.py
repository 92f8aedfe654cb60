"""``--devcaps-require``: capabilities this runner must have; a skip for one is an error.

The names are checked against the catalogue when the session starts: a misspelt name would
match nothing and switch the gate off unnoticed. A test is held to them when an unmet
requirement names a required capability: directly, through its ``dtype`` parameter, or as one
of the alternatives of an ``any_of`` none of which the device has.

Such a test is an **error at setup**, not a failure: it did not run, so nothing says the code it
tests is wrong; like a fixture that cannot be set up, the runner cannot give it what it needs.
Both make pytest exit non-zero.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, NoReturn

import pytest

from pytest_devcaps.session.keys import session_state

if TYPE_CHECKING:
    from pytest_devcaps.marks.evaluation import Missing


def required_capabilities(config: pytest.Config) -> set[str]:
    """The capabilities ``--devcaps-require`` names, aliases resolved to the real names."""
    state = session_state(config)
    catalogue = state.registry.catalogue
    return {catalogue.check_name(name).name for name in state.settings.require.value}


def skip_unless_required(config: pytest.Config, missing: Iterable[Missing | str],
                         reason: str) -> NoReturn:
    """Skip with ``reason``, or error at setup when one of the capabilities ``missing`` names
    (:class:`Missing` records, or capability names) is required on this runner."""
    setting = session_state(config).settings.require
    named = {name for item in missing
             for name in ((item,) if isinstance(item, str) else item.capabilities)}
    names = sorted(named & required_capabilities(config)) if setting.value else []
    if names:
        pytest.fail(f"{', '.join(names)} required on this runner ({setting.source}) but: {reason}",
                    pytrace=False)
    pytest.skip(reason)
