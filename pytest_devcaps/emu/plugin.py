"""The hook a vendor's package implements to add its backend adapter.

Registered under the ``pytest11`` entry-point group (pytest sessions) and the ``devcaps`` group
(the ``devcaps`` CLI). ``optionalhook``: it loads harmlessly where pytest-devcaps' hooks are not
registered (``-p no:devcaps``). Importing it imports neither torch nor the plugin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_devcaps.registry.registrars import BackendRegistrar


@pytest.hookimpl(optionalhook=True)
def pytest_devcaps_register_backends(registrar: BackendRegistrar) -> None:
    from pytest_devcaps.emu.adapter import EmuAdapter

    registrar.add(EmuAdapter())
