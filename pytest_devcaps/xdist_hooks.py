"""pytest-xdist, both sides of the handshake: the controller probes once and hands every worker a
plain-dict snapshot of the registry under ``WORKERINPUT_KEY``; a worker rebuilds its registry from
that snapshot instead of probing, and, with ``--devcaps-pin-workers``, takes accelerator
``worker number mod count``. ``plugin`` imports this module, never the reverse."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_devcaps.state import session_state

WORKERINPUT_KEY = "devcaps_registry"


class XdistHooks:
    """The controller side; registered only when xdist is present
    (``config.pluginmanager.hasplugin("xdist")``)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[WORKERINPUT_KEY] = session_state(self.config).registry.to_snapshot()


def is_worker(config: pytest.Config) -> bool:
    """True in an xdist worker (xdist sets ``config.workerinput`` there and only there)."""
    return getattr(config, "workerinput", None) is not None


def worker_snapshot(config: pytest.Config) -> dict[str, Any] | None:
    """The registry snapshot the controller sent this worker; None in the controller."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or WORKERINPUT_KEY not in workerinput:
        return None
    snapshot: dict[str, Any] = workerinput[WORKERINPUT_KEY]
    return snapshot


def worker_number(config: pytest.Config) -> int | None:
    """``3`` in worker ``gw3``; None in the controller or for a worker id of another form."""
    workerinput = getattr(config, "workerinput", None)
    if not workerinput:
        return None
    digits = str(workerinput.get("workerid", "")).lstrip("gw")
    return int(digits) if digits.isdigit() else None


def pin_worker(config: pytest.Config, device: str) -> None:
    """Make ``device`` current in this worker (nothing in the controller or for the CPU)."""
    if not is_worker(config) or device.startswith("cpu"):
        return
    from pytest_devcaps import runtime

    try:
        runtime.set_device(device)  # worker i owns accelerator i mod count
    except Exception as exc:
        workerid = config.workerinput.get("workerid")  # type: ignore[attr-defined]
        raise pytest.UsageError(f"pytest-devcaps: --devcaps-pin-workers could not make {device} "
                                f"current in worker {workerid}: {exc}") from None
