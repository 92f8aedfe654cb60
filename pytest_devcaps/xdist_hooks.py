"""pytest-xdist integration: probe once in the controller, hand workers a plain-dict snapshot."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_devcaps.state import session_state


class XdistHooks:
    """Registered only when xdist is present (``config.pluginmanager.hasplugin("xdist")``)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_configure_node(self, node: Any) -> None:
        from pytest_devcaps.plugin import WORKERINPUT_KEY

        node.workerinput[WORKERINPUT_KEY] = session_state(self.config).registry.to_snapshot()
