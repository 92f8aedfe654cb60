"""pytest-xdist, both sides of the handshake. ``plugin`` imports this module, never the reverse.

The registry is built once per session, and only when the session needs it:

- When the controller has built it (a devcaps option asked for it at configure time), it hands
  every worker a plain-dict snapshot under ``WORKERINPUT_KEY``; with ``--devcaps-pin-workers``
  the snapshot is the worker's slice of the accelerators (``partition``), whose visible-devices
  variables the controller puts in the worker's start-up environment
  (``pytest_xdist_setupnodes``: execnet sets ``XSpec.env`` before the worker imports anything).
- Otherwise workers start before anyone knows whether a test will ask (xdist workers collect,
  the controller does not), so the controller hands them a shared folder (``SHARED_KEY``): the
  first process that needs the registry builds it under a file lock and publishes a JSON
  snapshot there; the others wait on the lock and read it. Probes still run once per session,
  and a suite that never asks builds nothing anywhere.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import pytest

from pytest_devcaps.session.keys import session_state

if TYPE_CHECKING:
    from pytest_devcaps.parallel.partition import TypePlan
    from pytest_devcaps.registry import CapabilityRegistry

WORKERINPUT_KEY = "devcaps_registry"
SHARED_KEY = "devcaps_shared"
SLICES_KEY = "devcaps_slices"
SNAPSHOT_FILE = "registry.json"


class XdistHooks:
    """The controller side; registered only when xdist is present
    (``config.pluginmanager.hasplugin("xdist")``)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.shared: Path | None = None
        self.plans: list[TypePlan] | None = None
        self._workers = 0
        self._header_shown = False

    def shared_dir(self) -> Path:
        import shutil
        import tempfile

        if self.shared is None:
            self.shared = Path(tempfile.mkdtemp(prefix="devcaps-xdist-"))
            self.config.add_cleanup(lambda: shutil.rmtree(str(self.shared), ignore_errors=True))
        return self.shared

    @pytest.hookimpl(trylast=True)
    def pytest_xdist_setupnodes(self, config: pytest.Config, specs: list[Any]) -> None:
        if self.plans is None:
            return
        from pytest_devcaps.parallel import partition

        self._workers = len(specs)
        for worker, spec in enumerate(specs):
            for piece in partition.worker_slices(self.plans, len(specs), worker):
                if piece.variable is not None and piece.value is not None:
                    spec.env[piece.variable] = piece.value
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            for line in partition.describe(self.plans, len(specs)):
                reporter.write_line(line)

    def pytest_configure_node(self, node: Any) -> None:
        state = session_state(self.config)
        if not state.built:
            node.workerinput[SHARED_KEY] = str(self.shared_dir())
            return
        registry = state.registry
        if self.plans is not None:
            from pytest_devcaps.parallel import partition

            number = worker_number_of(node.workerinput) or 0
            slices = partition.worker_slices(self.plans, max(self._workers, number + 1), number)
            node.workerinput[SLICES_KEY] = [s.to_dict() for s in slices]
            registry = partition.restricted(registry, slices)
        node.workerinput[WORKERINPUT_KEY] = registry.to_snapshot()

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """The devcaps header, once, when a worker built the registry during its collection."""
        if self._header_shown or self.shared is None or not (self.shared / SNAPSHOT_FILE).exists():
            return
        self._header_shown = True
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        from pytest_devcaps.session.reporting import header_lines

        reporter.write_line("")
        for line in header_lines(session_state(self.config),
                                 verbose=self.config.get_verbosity() > 0):
            reporter.write_line(line)


def plan_partition(config: pytest.Config, registry: CapabilityRegistry) -> list[TypePlan]:
    """The controller's split of every accelerator type (``--devcaps-pin-workers``); raises
    :class:`~pytest_devcaps.errors.ConfigError` once, here, for what cannot be split."""
    from pytest_devcaps import runtime
    from pytest_devcaps.parallel import partition
    from pytest_devcaps.errors import ConfigError
    from pytest_devcaps.registry.build import backend_adapters

    variables = {adapter.type: adapter.visible_devices_variable
                 for adapter in backend_adapters(config.hook)}
    plans = partition.plan_types(registry, variables, os.environ)
    for plan in plans:
        module = runtime.device_module(plan.type)
        if plan.variable is None and not hasattr(module, "set_device"):
            raise ConfigError(f"--devcaps-pin-workers: {plan.type} has no visible-devices variable "
                              f"and torch.{plan.type} has no set_device: its devices cannot be "
                              f"split between workers", file="--devcaps-pin-workers")
    return plans


def is_worker(config: pytest.Config) -> bool:
    """True in an xdist worker (xdist sets ``config.workerinput`` there and only there)."""
    return getattr(config, "workerinput", None) is not None


def session_registry(config: pytest.Config,
                     build: Callable[[], CapabilityRegistry]) -> CapabilityRegistry:
    """This process's registry: the controller's snapshot in a worker that got one, else the
    session's shared one (built here if nobody published it yet), else ``build()``."""
    workerinput = getattr(config, "workerinput", None)
    shared: Path | None = None
    if workerinput is not None:
        if WORKERINPUT_KEY in workerinput:
            return _from_snapshot(config, workerinput[WORKERINPUT_KEY])
        if SHARED_KEY in workerinput:
            shared = Path(workerinput[SHARED_KEY])
    else:
        hooks = config.pluginmanager.get_plugin("devcaps-xdist")
        shared = getattr(hooks, "shared", None)
    if shared is None:
        return build()
    import json

    with _locked(shared / "lock"):
        published = shared / SNAPSHOT_FILE
        if published.exists():
            return _from_snapshot(config, json.loads(published.read_text()))
        registry = build()
        from pytest_devcaps._util.files import write_atomic

        write_atomic(published, json.dumps(registry.to_snapshot()))
        return registry


def _from_snapshot(config: pytest.Config, snapshot: dict[str, Any]) -> CapabilityRegistry:
    from pytest_devcaps.errors import ConfigError
    from pytest_devcaps.registry import registry_from_snapshot

    try:
        return registry_from_snapshot(snapshot, config.hook)
    except ValueError as exc:
        raise ConfigError(f"the xdist controller's registry: {exc}") from None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` between processes (released by the OS if one dies); where
    ``fcntl`` is missing, none: each process then builds from the probe cache itself."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def worker_number_of(workerinput: dict[str, Any]) -> int | None:
    digits = str(workerinput.get("workerid", "")).lstrip("gw")
    return int(digits) if digits.isdigit() else None


def pinned_index(config: pytest.Config) -> int | None:
    """The index this worker's device of a partitioned type takes: 0 when the controller gave it
    a slice through a visible-devices variable (its first device), the worker number when the
    type is pinned with ``set_device``; None outside workers of a pinned session."""
    workerinput = getattr(config, "workerinput", None)
    if not workerinput or SLICES_KEY not in workerinput:
        return None
    from pytest_devcaps.parallel.partition import WorkerSlice

    slices = [WorkerSlice.from_dict(s) for s in workerinput[SLICES_KEY]]
    pinned = [s for s in slices if s.variable is None]
    return pinned[0].indices[0] if pinned else None


def apply_worker_environment(config: pytest.Config) -> None:
    """In a worker: the slice's variables, where the start-up environment does not have them
    already (an xdist that did not apply ``XSpec.env``); torch has not initialised a device here
    yet, and the worker's registry snapshot describes exactly this slice."""
    workerinput = getattr(config, "workerinput", None)
    if not workerinput or SLICES_KEY not in workerinput:
        return
    for data in workerinput[SLICES_KEY]:
        if data.get("variable") and data.get("value") is not None:
            os.environ[data["variable"]] = data["value"]


def register_hooks(config: pytest.Config) -> None:
    """The handshake's hooks, in an xdist controller (``-n``/``--tx`` given: xdist's cmdline_main
    has filled ``tx`` by configure time) or worker; a session that merely has xdist installed
    needs none. With ``--devcaps-pin-workers`` the controller splits the devices now."""
    if not config.pluginmanager.hasplugin("xdist") or \
            not (is_worker(config) or getattr(config.option, "tx", None)):
        return
    from pytest_devcaps.errors import DevcapsError

    hooks = XdistHooks(config)
    state = session_state(config)
    if state.settings.pin_workers and not state.is_worker and getattr(config.option, "tx", None):
        try:
            hooks.plans = plan_partition(config, state.registry)
        except DevcapsError as exc:
            raise pytest.UsageError(f"pytest-devcaps: {exc}") from None
    config.pluginmanager.register(hooks, "devcaps-xdist")
