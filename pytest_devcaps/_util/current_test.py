"""Which test the pytest plugin is running now, for the unittest bridge (``testcase``).

Set around every test call by ``suite_hooks``; read by ``testcase``'s decorators, which defer to
pytest while it is set. Kept apart so that the hook costs no import of the bridge.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class PytestTest:
    """The test the pytest plugin is running now: its class (None for a function) and how to
    get its device key (asked only when a TestCase wants it)."""

    cls: type | None
    device_of: Callable[[], str]


PYTEST_TEST: contextvars.ContextVar[PytestTest | None] = contextvars.ContextVar(
    "devcaps_pytest_test", default=None)
