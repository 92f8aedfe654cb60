"""The plugin's per-session state, kept behind a ``pytest.StashKey``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_devcaps.markers import Evaluation
    from pytest_devcaps.options import DevcapsSettings
    from pytest_devcaps.registry import CapabilityRegistry


@dataclass
class SessionState:
    settings: DevcapsSettings
    registry: CapabilityRegistry
    selected: list[str]
    primary_device: str
    is_worker: bool = False


STATE_KEY = pytest.StashKey[SessionState]()
EVALUATION_KEY = pytest.StashKey["Evaluation"]()


def session_state(config: pytest.Config) -> SessionState:
    try:
        return config.stash[STATE_KEY]
    except KeyError:
        raise pytest.UsageError("pytest-devcaps is not configured in this session "
                                "(was it disabled with -p no:devcaps?)") from None
