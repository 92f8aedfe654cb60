"""A session's start: markers and fixtures at configure time, then either the settings (usage
errors, the header first), the state whose registry is built on first need and the session's
own plugins (reporting, suites, expectations), or, in a session that sets nothing of ours (no
option, ini key or ``PYTEST_DEVCAPS_*`` variable), only the suite hooks and a promise: the
settings and the state are made when something first asks for them (``keys.session_state``),
so such a session imports none of that machinery unless a test uses devcaps.

Where a process stands in a session spread over processes (a torchrun rank, a pinned xdist
worker) is ``parallel/``'s answer, handed in as a :class:`~pytest_devcaps.session.state.Placement`:
this module does not import ``parallel/``. Importing it imports only pytest and ``keys``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable

import pytest

from pytest_devcaps._util.lazy import lazy_names
from pytest_devcaps.session.keys import HEADER_SHOWN_KEY, REGISTRY_SOURCE_KEY, START_KEY, STATE_KEY, session_state

if TYPE_CHECKING:
    from pytest_devcaps.registry import CapabilityRegistry
    from pytest_devcaps.session.resolved import DevcapsSettings
    from pytest_devcaps.session.state import Placement as Placement  # served by __getattr__
    from pytest_devcaps.session.state import Selection, SessionState

#: ``Placement`` lives with the state (a frozen record: defined where the state is made).
__getattr__, __dir__ = lazy_names(__name__, {"Placement": "pytest_devcaps.session.state"})


def register(config: pytest.Config) -> None:
    """What every session has from configure time on: the markers (``--strict-markers``, ``pytest
    --markers``), the fixtures, the default registry library code sees (the session's, on first
    use) and the suite hooks (every test's hardware class)."""
    from pytest_devcaps.library import install_default_registry
    from pytest_devcaps.marks.names import MARKER_LINES
    from pytest_devcaps.session import fixtures
    from pytest_devcaps.session.suite_hooks import SuiteHooks

    for line in MARKER_LINES:
        config.addinivalue_line("markers", line)
    config.pluginmanager.register(fixtures, "devcaps-fixtures")  # device, dtype, devcaps...
    source = lambda: session_state(config).registry  # noqa: E731 (the same callable uninstalled)
    config.stash[REGISTRY_SOURCE_KEY] = source
    install_default_registry(source)
    config.pluginmanager.register(SuiteHooks(config), "devcaps-suites")


def idle(config: pytest.Config) -> bool:
    """Nothing of ours is set: no devcaps option or ini key, no ``PYTEST_DEVCAPS_*`` variable (nor
    an old name) that configure reads (``_util.environ.configure_reads``: the cache folder, for
    one, is read where the cache is). Such a session's settings are the defaults, so they need
    not be read now."""
    from pytest_devcaps._util.environ import configure_reads
    from pytest_devcaps.session.options import any_given

    return not configure_reads(os.environ) and not any_given(config)


def defer(config: pytest.Config, placement: Callable[[], Placement]) -> None:
    """Start on first need: the settings (defaults: nothing is set, so nothing can be refused),
    the state and the reporting plugin, when ``keys.session_state`` is first asked."""

    def start_now() -> SessionState:
        state = start(config, resolve_settings(config), placement)
        register_reporting(config)
        return state

    config.stash[START_KEY] = start_now


def resolve_settings(config: pytest.Config) -> DevcapsSettings:
    """The settings, a bad one a usage error."""
    from pytest_devcaps.errors import DevcapsError
    from pytest_devcaps.session.resolved import resolve_settings as resolve_all

    try:
        settings = resolve_all(config)
        if settings.json_path:
            from pytest_devcaps.distributed.ranks import check_report_path

            check_report_path(settings.json_path)
    except DevcapsError as exc:
        raise pytest.UsageError(f"pytest-devcaps: {exc}") from None
    return settings


def start(config: pytest.Config, settings: DevcapsSettings, placement: Callable[[], Placement]) -> SessionState:
    """The session's state: its registry is built on first need, where ``placement`` says."""
    from pytest_devcaps.session.state import SessionState

    worker = getattr(config, "workerinput", None) is not None  # xdist sets it in workers only
    state = SessionState(settings, lambda: select(config, settings, placement()), is_worker=worker)
    config.stash[STATE_KEY] = state
    return state


def build_if_asked(state: SessionState) -> None:
    """An option asks for devcaps: build now (usage errors, the header first)."""
    if state.settings.given() and not state.is_worker:
        from pytest_devcaps.session.state import RegistryUnavailable

        try:
            state.selection
        except RegistryUnavailable as exc:
            raise pytest.UsageError(str(exc)) from None


def select(config: pytest.Config, settings: DevcapsSettings, placement: Placement) -> Selection:
    """Build (or receive) the session's registry and choose its devices: on first need."""
    from pytest_devcaps.environment import check_required
    from pytest_devcaps.errors import DevcapsError
    from pytest_devcaps.session.state import Selection

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
    import warnings

    from pytest_devcaps import hookspecs
    from pytest_devcaps.errors import DevcapsWarning
    from pytest_devcaps.session import config_warnings

    with config_warnings.reissued(config):
        ours = hookspecs.load_vendor_plugins(config.pluginmanager)
        for name in hookspecs.vendors_seen_only_by_pytest(config.pluginmanager, ours):
            warnings.warn(f"pytest-devcaps: the vendor plugin {name} is a pytest11 plugin only: "
                          f"devcaps probe and library code do not see it; register it under the "
                          f"{hookspecs.VENDOR_GROUP!r} entry-point group as well",
                          DevcapsWarning, stacklevel=2)


def _build(config: pytest.Config, settings: DevcapsSettings) -> CapabilityRegistry:
    from pytest_devcaps.registry import build_registry
    from pytest_devcaps.session import config_warnings

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
    from pytest_devcaps.environment import check_device_types
    from pytest_devcaps.errors import ConfigError

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


def register_reporting(config: pytest.Config) -> None:
    """The session's own plugins beside the suite hooks (``register``): reporting (and the
    outcome recorder with a JSON report), and the expectations hooks where ``--devcaps-expect``
    is given."""
    from pytest_devcaps.session import reporting

    state = session_state(config)
    reporter = reporting.ReportingPlugin(config)
    config.pluginmanager.register(reporter, "devcaps-reporting")
    if state.settings.json_path:
        config.pluginmanager.register(reporter.outcomes, "devcaps-outcomes")
    if state.settings.expect.value:
        from pytest_devcaps.session.expect import PLUGIN_NAME, ExpectHooks

        expect = ExpectHooks(config)
        config.pluginmanager.register(expect, PLUGIN_NAME)
        if not state.is_worker:
            expect.load()  # a bad key is a usage error now, before collection


def finish(config: pytest.Config) -> None:
    """The default registry the session installed is taken away with it."""
    source = config.stash.get(REGISTRY_SOURCE_KEY, None)
    if source is not None:
        from pytest_devcaps.library import uninstall_default_registry

        uninstall_default_registry(source)


def header(config: pytest.Config, *, collected: bool) -> list[str] | None:
    """The devcaps lines, before collection when the registry exists by then (an option asked
    for it); else after collection (``collected``), if a test built it; once."""
    if STATE_KEY not in config.stash or not config.stash[STATE_KEY].built:  # never starts it
        return None
    if collected and config.stash.get(HEADER_SHOWN_KEY, False):
        return None
    from pytest_devcaps.session.reporting import header_lines

    config.stash[HEADER_SHOWN_KEY] = True
    return header_lines(session_state(config), verbose=config.get_verbosity() > 0)
