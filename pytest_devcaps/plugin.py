"""pytest entry point (``pytest11: devcaps``): options, the session's registry and devices at
configure time, ``device`` / ``dtype`` parametrization, capability marks evaluated at collection
and turned into skips (or ``--devcaps-require`` failures) at setup.

The fixtures are in ``fixtures``, reports in ``reporting``, plan mode (``--devcaps-profile``) in
``plan``, the xdist controller/worker handshake in ``xdist_hooks``. Importing it imports no torch.
"""

from __future__ import annotations

from typing import Any, Generator, Sequence

import pytest

from pytest_devcaps import configwarnings, parametrize, xdist_hooks
from pytest_devcaps import markers as _markers
from pytest_devcaps.errors import ConfigError, DevcapsError, did_you_mean
from pytest_devcaps.fixtures import (  # noqa: F401  (fixtures are found by name on this module)
    devcaps,
    devcaps_device,
    devcaps_dtype,
    device,
    device_runtime,
    device_type,
    devices,
    dist_backend,
    dtype,
    item_device,
    tolerances,
)
from pytest_devcaps.options import KNOWN_DEVICE_TYPES, add_options, resolve_settings
from pytest_devcaps.require import check_required, skip_unless_required
from pytest_devcaps.state import EVALUATION_KEY, STATE_KEY, SessionState, session_state

pytest_plugins = ["pytest_devcaps.plan"]  # plan mode, with its pytest_cmdline_main hook


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_devcaps import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    for line in _markers.MARKER_LINES:
        config.addinivalue_line("markers", line)
    try:
        settings = resolve_settings(config)
        from pytest_devcaps.library import install_default_registry
        from pytest_devcaps.registry import build_registry, registry_from_snapshot

        snapshot = xdist_hooks.worker_snapshot(config)
        if snapshot is not None:
            registry = registry_from_snapshot(snapshot, config.hook)
        else:
            with configwarnings.reissued(config):
                registry = build_registry(settings.registry_options(), hook=config.hook)
        check_required(settings.require, registry.catalogue)
        worker = xdist_hooks.worker_number(config) if settings.pin_workers else None
        selected = select_devices(registry, settings, worker)
    except DevcapsError as exc:
        raise pytest.UsageError(f"pytest-devcaps: {exc}") from None
    primary = next((key for key in selected if not key.startswith("cpu")), None)
    if primary is None:
        primary = selected[0] if selected else registry.primary_device.key
    config.stash[STATE_KEY] = SessionState(settings, registry, selected, primary,
                                           is_worker=xdist_hooks.is_worker(config))
    install_default_registry(registry)
    if settings.pin_workers:
        xdist_hooks.pin_worker(config, primary)
    _register_optional_plugins(config)


def _register_optional_plugins(config: pytest.Config) -> None:
    from pytest_devcaps import reporting

    config.pluginmanager.register(reporting.ReportingPlugin(config), "devcaps-reporting")
    from pytest_devcaps.suite_hooks import SuiteHooks

    config.pluginmanager.register(SuiteHooks(config), "devcaps-suites")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(xdist_hooks.XdistHooks(config), "devcaps-xdist")
    try:
        from pytest_devcaps.distributed import fixture as distributed_fixture
    except ImportError:
        return
    if not config.pluginmanager.is_registered(distributed_fixture):
        config.pluginmanager.register(distributed_fixture, "devcaps-distributed")


def pytest_unconfigure(config: pytest.Config) -> None:
    if STATE_KEY in config.stash:
        from pytest_devcaps.library import uninstall_default_registry

        uninstall_default_registry(config.stash[STATE_KEY].registry)


def select_devices(registry: Any, settings: Any, worker: int | None = None) -> list[str]:
    """Device keys the ``device`` fixture is parametrized over: the first device of each type, or
    in xdist worker number ``worker`` (``--devcaps-pin-workers``) device ``worker mod count``.

    A type named in ``--devcaps-devices`` must be present (naming it says the run expects it;
    leaving the option unset means every type present), and the selection must not be empty:
    either would leave device tests with an empty parameter set, skipped as "got empty
    parameter set" and exit 0.
    """
    present = registry.device_types()
    _check_device_types(settings, present)
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


def _check_device_types(settings: Any, present: list[str]) -> None:
    known = list(dict.fromkeys([*KNOWN_DEVICE_TYPES, *present]))
    for setting in (settings.devices, settings.except_):
        for name in setting.value:
            if name not in known:
                raise ConfigError(f"unknown device type {name!r}{did_you_mean(name, known)}; "
                                  f"present here: {', '.join(present)}", file=setting.source)
            if name not in present and setting is settings.devices:
                raise ConfigError(f"device type {name!r} is not present on this machine (present: "
                                  f"{', '.join(present)}); leave the option unset to run on every "
                                  "type present", file=setting.source)


def _devcaps_marks(node: pytest.Item) -> list[pytest.Mark]:
    return [m for m in node.iter_markers() if m.name in _markers.SIGNATURES]


def _validate_marks(node: pytest.Item, registry: Any, fixturenames: Sequence[str] | None) -> None:
    """Check the devcaps marks ``node`` sees; the test's own marks must also have the fixture
    they parametrize (a module's ``pytestmark = dtypes(...)`` serves only its dtype tests)."""
    own = [m for m in node.own_markers if m.name in _markers.SIGNATURES]
    _markers.validate_marks([m for m in _devcaps_marks(node) if m not in own], registry)
    _markers.validate_marks(own, registry, fixturenames)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    state = session_state(metafunc.config)
    problem = None
    try:
        _validate_marks(metafunc.definition, state.registry, metafunc.fixturenames)
    except DevcapsError as exc:
        problem = str(exc)
    if problem is not None:  # failing outside the handler keeps the exception chain out
        pytest.fail(f"{metafunc.definition.nodeid}: {problem}", pytrace=False)
    parametrize.parametrize(metafunc, state)


MARK_PROBLEM_KEY = pytest.StashKey[str]()
"""Why a test's devcaps marks are wrong, for tests collected without ``pytest_generate_tests``
(unittest classes): they cannot fail collection, so they error at setup instead."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = session_state(config)
    for item in items:
        marks = _devcaps_marks(item)
        try:
            _validate_marks(item, state.registry, getattr(item, "fixturenames", None))
        except DevcapsError as exc:
            item.stash[MARK_PROBLEM_KEY] = str(exc)
            continue
        marks = [m for m in marks if m.name != "dtypes"]
        callspec = getattr(item, "callspec", None)
        uses_device = parametrize.callspec_param(callspec, parametrize.DEVICE_NAMES) is not None
        dtype_param = parametrize.callspec_param(callspec, parametrize.DTYPE_NAMES)
        if not marks and not uses_device and dtype_param is None:
            continue
        evaluation = _markers.evaluate(marks, state.registry, item_device(item), dtype_param)
        item.stash[EVALUATION_KEY] = evaluation
        item.user_properties.append(("devcaps_device", evaluation.device))
        if evaluation.required:
            item.user_properties.append(("devcaps_requires", ",".join(evaluation.required)))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if MARK_PROBLEM_KEY in item.stash:
        pytest.fail(item.stash[MARK_PROBLEM_KEY], pytrace=False)
    evaluation = item.stash.get(EVALUATION_KEY, None)
    if evaluation is None or not evaluation.skip:
        return
    skip_unless_required(item.config, evaluation.missing, evaluation.reason)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    evaluation = item.stash.get(EVALUATION_KEY, None)
    if evaluation is not None and evaluation.skip and report.skipped and isinstance(report.longrepr, tuple):
        # Point the skip at the test, not at this plugin (as pytest does for skip marks).
        filename, line = item.reportinfo()[:2]
        report.longrepr = (str(filename), (line or 0) + 1, report.longrepr[2])
    if evaluation is not None:
        report.__dict__["devcaps"] = {
            "device": evaluation.device,
            "requires": list(evaluation.required),
            "missing": [m.to_dict() for m in evaluation.missing],
        }
    return report


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    if STATE_KEY not in config.stash:
        return None
    from pytest_devcaps.reporting import header_lines

    return header_lines(session_state(config), verbose=config.get_verbosity() > 0)
