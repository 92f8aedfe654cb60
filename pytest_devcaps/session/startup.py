"""A session's start: markers and settings at configure time (usage errors, the header first),
the state whose registry is built on first need, the devices device tests run on, and the
session's own plugins (reporting, suites, expectations).

Where a process stands in a session spread over processes (a torchrun rank, a pinned xdist
worker) is ``parallel/``'s answer, handed in as a :class:`Placement`: this module does not
import ``parallel/``."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import pytest

from pytest_devcaps.errors import ConfigError, DevcapsError, DevcapsWarning
from pytest_devcaps.session import config_warnings
from pytest_devcaps.session.keys import HEADER_SHOWN_KEY, STATE_KEY, session_state
from pytest_devcaps.environment import check_device_types, check_required
from pytest_devcaps.session.options import DevcapsSettings, resolve_settings
from pytest_devcaps.session.state import RegistryUnavailable, Selection, SessionState

if TYPE_CHECKING:
    from pytest_devcaps.registry import CapabilityRegistry

Builder = Callable[[], "CapabilityRegistry"]


@dataclass(frozen=True)
class Placement:
    """This process's place in the session: the device index it owns (a rank's local rank, a
    pinned worker's device; None where it owns none), who it is (for errors), and how it gets
    the session's registry given a builder (an xdist worker receives the controller's)."""

    index: int | None
    owner: str
    obtain: Callable[[Builder], CapabilityRegistry]


def resolve(config: pytest.Config) -> DevcapsSettings:
    """Markers registered and the settings resolved; a bad setting is a usage error now."""
    from pytest_devcaps.marks.names import MARKER_LINES

    for line in MARKER_LINES:
        config.addinivalue_line("markers", line)
    try:
        settings = resolve_settings(config)
        if settings.json_path:
            from pytest_devcaps.distributed.ranks import check_report_path

            check_report_path(settings.json_path)
    except DevcapsError as exc:
        raise pytest.UsageError(f"pytest-devcaps: {exc}") from None
    return settings


def start(config: pytest.Config, settings: DevcapsSettings, placement: Callable[[], Placement]) -> SessionState:
    """The session's state (its registry built on first need, where ``placement`` says) and the
    default registry library code sees while the session runs."""
    worker = getattr(config, "workerinput", None) is not None  # xdist sets it in workers only
    state = SessionState(settings, lambda: select(config, settings, placement()), is_worker=worker)
    config.stash[STATE_KEY] = state
    from pytest_devcaps.library import install_default_registry

    install_default_registry(state.get_registry)
    return state


def build_if_asked(state: SessionState) -> None:
    """An option asks for devcaps: build now (usage errors, the header first)."""
    if state.settings.given() and not state.is_worker:
        try:
            state.selection
        except RegistryUnavailable as exc:
            raise pytest.UsageError(str(exc)) from None


def select(config: pytest.Config, settings: DevcapsSettings, placement: Placement) -> Selection:
    """Build (or receive) the session's registry and choose its devices: on first need."""
    try:
        _load_vendor_plugins(config)
        registry = placement.obtain(lambda: _build(config, settings))
        check_required(settings.require, registry.catalogue)
        selected = select_devices(registry, settings, placement.index)
    except DevcapsError as exc:
        raise pytest.UsageError(f"pytest-devcaps: {exc}") from None
    primary = next((key for key in selected if not key.startswith("cpu")), None)
    if primary is None:
        primary = selected[0] if selected else registry.primary_device.key
    if placement.index is not None and not primary.startswith("cpu"):
        _make_current(primary, placement.owner)
    return Selection(registry, selected, primary)


def _load_vendor_plugins(config: pytest.Config) -> None:
    """The ``devcaps`` entry-point group's vendor plugins, as the CLI and library code load them
    (on first need: a session that never builds a registry pays nothing); a ``pytest11``-only
    vendor plugin is a warning, since nothing outside pytest sees it."""
    from pytest_devcaps import hookspecs

    with config_warnings.reissued(config):
        ours = hookspecs.load_vendor_plugins(config.pluginmanager)
        for name in hookspecs.vendors_seen_only_by_pytest(config.pluginmanager, ours):
            warnings.warn(f"pytest-devcaps: the vendor plugin {name} is a pytest11 plugin only: "
                          f"devcaps probe and library code do not see it; register it under the "
                          f"{hookspecs.VENDOR_GROUP!r} entry-point group as well",
                          DevcapsWarning, stacklevel=2)


def _build(config: pytest.Config, settings: DevcapsSettings) -> CapabilityRegistry:
    from pytest_devcaps.registry import build_registry

    with config_warnings.reissued(config):  # warnings go through pytest (config_warnings)
        return build_registry(settings.registry_options(), hook=config.hook)


def _make_current(device: str, who: str) -> None:
    """Make the device a rank or pinned worker owns the current one (device backends bind
    process groups and default allocations to it)."""
    from pytest_devcaps import runtime

    try:
        runtime.set_device(device)
    except Exception as exc:
        raise pytest.UsageError(f"pytest-devcaps: could not make {device} current in {who}: "
                                f"{type(exc).__name__}: {exc}") from None


def select_devices(registry: CapabilityRegistry, settings: DevcapsSettings,
                   worker: int | None = None) -> list[str]:
    """Device keys the ``device`` fixture is parametrized over: the first device of each type, or
    device ``worker mod count`` where a rank or worker owns one (``LOCAL_RANK`` under torchrun;
    the worker number in an xdist worker pinned with ``set_device``).

    A type named in ``--devcaps-devices`` must be present (naming it says the run expects it;
    leaving the option unset means every type present), and the selection must not be empty:
    either would leave device tests with an empty parameter set, skipped as "got empty
    parameter set" and exit 0.
    """
    present = registry.device_types()
    check_device_types(settings.devices, settings.except_, present)  # the unittest bridge's check too
    wanted = [t for t in (settings.devices.value or present) if t in present]
    chosen = [t for t in wanted if t not in settings.except_.value]
    if not chosen:
        raise ConfigError(f"no device type left to run device tests on (present: "
                          f"{', '.join(present)})", file=settings.except_.source)
    keys: list[str] = []
    for type_ in chosen:
        identity = registry.identity(type_)
        if worker is not None and type_ != "cpu" and identity.count > 0:
            keys.append(f"{type_}:{worker % identity.count}")
        else:
            keys.append(identity.key)
    return keys


def register_plugins(config: pytest.Config) -> None:
    """The session's own plugins: reporting (and the outcome recorder with a JSON report), the
    suite hooks, and the expectations hooks where ``--devcaps-expect`` is given."""
    from pytest_devcaps.session import reporting
    from pytest_devcaps.session.suite_hooks import SuiteHooks

    state = session_state(config)
    reporter = reporting.ReportingPlugin(config)
    config.pluginmanager.register(reporter, "devcaps-reporting")
    if state.settings.json_path:
        config.pluginmanager.register(reporter.outcomes, "devcaps-outcomes")
    config.pluginmanager.register(SuiteHooks(config), "devcaps-suites")
    if state.settings.expect.value:
        from pytest_devcaps.session.expect import PLUGIN_NAME, ExpectHooks

        expect = ExpectHooks(config)
        config.pluginmanager.register(expect, PLUGIN_NAME)
        if not state.is_worker:
            expect.load()  # a bad key is a usage error now, before collection


def finish(config: pytest.Config) -> None:
    """The default registry the session installed is taken away with it."""
    if STATE_KEY in config.stash:
        from pytest_devcaps.library import uninstall_default_registry

        uninstall_default_registry(config.stash[STATE_KEY].get_registry)


def header(config: pytest.Config, *, collected: bool) -> list[str] | None:
    """The devcaps lines, before collection when the registry exists by then (an option asked
    for it); else after collection (``collected``), if a test built it; once."""
    if STATE_KEY not in config.stash or not session_state(config).built:
        return None
    if collected and config.stash.get(HEADER_SHOWN_KEY, False):
        return None
    from pytest_devcaps.session.reporting import header_lines

    config.stash[HEADER_SHOWN_KEY] = True
    return header_lines(session_state(config), verbose=config.get_verbosity() > 0)
