"""pytest entry point (``pytest11: devcaps``): options, the session's registry and devices on
first need (``state``), ``device`` / ``dtype`` parametrization, capability marks evaluated at
collection and turned into skips (or ``--devcaps-require`` failures) at setup.

The fixtures are in ``fixtures``, reports in ``reporting``, plan mode (``--devcaps-profile``) in
``plan``, the xdist controller/worker handshake in ``xdist_hooks``. Importing it imports no torch.
"""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING, Any, Generator, Sequence

import pytest

from pytest_devcaps.session import config_warnings as configwarnings
from pytest_devcaps.errors import ConfigError, DevcapsError, DevcapsWarning
from pytest_devcaps.session.fixtures import (  # noqa: F401  (fixtures are found by name on this module)
    devcaps,
    devcaps_device,
    devcaps_dtype,
    device,
    device_runtime,
    device_type,
    devices,
    device_value,
    dist_backend,
    distributed,
    dtype,
    is_device_fixture,
    item_device,
    tolerances,
)
from pytest_devcaps.marks.names import (
    DEVICE_NAMES,
    DTYPE_NAMES,
    MARKER_LINES,
    MARKER_NAMES,
    callspec_param,
    pytorch_gates_in_use,
)
from pytest_devcaps.session.options import (
    DevcapsSettings,
    add_options,
    check_device_types,
    resolve_settings,
)
from pytest_devcaps.session.require import check_required, skip_unless_required
from pytest_devcaps.session.state import (
    CLASS_PROBLEM_KEY,
    EVALUATION_KEY,
    HARDWARE_KEY,
    HARDWARE_REPORT_KEY,
    STATE_KEY,
    RegistryUnavailable,
    Selection,
    SessionState,
    session_state,
)

if TYPE_CHECKING:
    from pytest_devcaps.registry import CapabilityRegistry

def _launched() -> bool:
    """RANK and WORLD_SIZE are set: a launcher (torchrun) started this session as one rank."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


pytest_plugins = [
    "pytest_devcaps.session.plan",  # plan mode, with its pytest_cmdline_main hook
    # ranks of a launched world (torchrun) run as one; only imported under a launcher
    *(["pytest_devcaps.parallel.torchrun"] if _launched() else []),
]


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_devcaps import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    for line in MARKER_LINES:
        config.addinivalue_line("markers", line)
    try:
        settings = resolve_settings(config)
        if settings.json_path:
            from pytest_devcaps.distributed.ranks import check_report_path

            check_report_path(settings.json_path)
    except DevcapsError as exc:
        raise pytest.UsageError(f"pytest-devcaps: {exc}") from None
    worker = getattr(config, "workerinput", None) is not None  # xdist sets it in workers only
    if worker:
        from pytest_devcaps.parallel import xdist_handshake as xdist_hooks

        xdist_hooks.apply_worker_environment(config)  # before anything initialises a device here
    state = SessionState(settings, lambda: _select(config, settings),
                         is_worker=worker)
    config.stash[STATE_KEY] = state
    from pytest_devcaps.library import install_default_registry

    install_default_registry(state.get_registry)
    if _launched():
        from pytest_devcaps.parallel import torchrun  # registered through pytest_plugins

        torchrun.receive_seed(config)
    if settings.given() and not state.is_worker:
        try:  # an option asks for devcaps: build now (usage errors, the header first)
            state.selection
        except RegistryUnavailable as exc:
            raise pytest.UsageError(str(exc)) from None
    _register_optional_plugins(config)


def _select(config: pytest.Config, settings: DevcapsSettings) -> Selection:
    """Build (or receive) the session's registry and choose its devices: on first need."""
    launch = None
    if _launched():
        from pytest_devcaps.parallel import torchrun

        launch = torchrun.active(config)
    from pytest_devcaps.parallel import xdist_handshake as xdist_hooks

    index = launch.local_rank if launch is not None else xdist_hooks.pinned_index(config)
    try:
        _load_vendor_plugins(config)
        registry = xdist_hooks.session_registry(config, lambda: _build(config, settings))
        check_required(settings.require, registry.catalogue)
        selected = select_devices(registry, settings, index)
    except DevcapsError as exc:
        raise pytest.UsageError(f"pytest-devcaps: {exc}") from None
    primary = next((key for key in selected if not key.startswith("cpu")), None)
    if primary is None:
        primary = selected[0] if selected else registry.primary_device.key
    if index is not None and not primary.startswith("cpu"):
        _make_current(primary, f"rank {launch.rank}" if launch else "this xdist worker")
    return Selection(registry, selected, primary)


def _load_vendor_plugins(config: pytest.Config) -> None:
    """The ``devcaps`` entry-point group's vendor plugins, as the CLI and library code load them
    (on first need: a session that never builds a registry pays nothing); a ``pytest11``-only
    vendor plugin is a warning, since nothing outside pytest sees it."""
    from pytest_devcaps import hookspecs

    with configwarnings.reissued(config):
        ours = hookspecs.load_vendor_plugins(config.pluginmanager)
        for name in hookspecs.vendors_seen_only_by_pytest(config.pluginmanager, ours):
            warnings.warn(f"pytest-devcaps: the vendor plugin {name} is a pytest11 plugin only: "
                          f"devcaps probe and library code do not see it; register it under the "
                          f"{hookspecs.VENDOR_GROUP!r} entry-point group as well",
                          DevcapsWarning, stacklevel=2)


def _build(config: pytest.Config, settings: DevcapsSettings) -> CapabilityRegistry:
    from pytest_devcaps.registry import build_registry

    with configwarnings.reissued(config):  # warnings go through pytest (configwarnings)
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


def _register_optional_plugins(config: pytest.Config) -> None:
    from pytest_devcaps.session import reporting

    reporter = reporting.ReportingPlugin(config)
    config.pluginmanager.register(reporter, "devcaps-reporting")
    if session_state(config).settings.json_path:
        config.pluginmanager.register(reporter.outcomes, "devcaps-outcomes")
    from pytest_devcaps.session.suite_hooks import SuiteHooks

    config.pluginmanager.register(SuiteHooks(config), "devcaps-suites")
    if session_state(config).settings.expect.value:
        from pytest_devcaps.session.expect import PLUGIN_NAME, ExpectHooks

        expect = ExpectHooks(config)
        config.pluginmanager.register(expect, PLUGIN_NAME)
        if not session_state(config).is_worker:
            expect.load()  # a bad key is a usage error now, before collection
    if _xdist_session(config):
        from pytest_devcaps.parallel import xdist_handshake as xdist_hooks

        hooks = xdist_hooks.XdistHooks(config)
        state = session_state(config)
        if state.settings.pin_workers and not state.is_worker and getattr(config.option, "tx", None):
            try:
                hooks.plans = xdist_hooks.plan_partition(config, state.registry)
            except DevcapsError as exc:
                raise pytest.UsageError(f"pytest-devcaps: {exc}") from None
        config.pluginmanager.register(hooks, "devcaps-xdist")


def _xdist_session(config: pytest.Config) -> bool:
    """An xdist controller (``-n``/``--tx`` given: xdist's cmdline_main has filled ``tx`` by
    configure time) or worker; a session that merely has xdist installed needs no handshake."""
    if not config.pluginmanager.hasplugin("xdist"):
        return False
    return getattr(config, "workerinput", None) is not None or bool(getattr(config.option, "tx", None))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The session's worlds end with it (their ranks would otherwise wait until exit). No
    world was started unless the pool was imported: a session without one imports nothing."""
    import sys

    pool = sys.modules.get("pytest_devcaps.distributed.pool")
    if pool is not None:
        pool.close_worlds()


def pytest_unconfigure(config: pytest.Config) -> None:
    if STATE_KEY in config.stash:
        from pytest_devcaps.library import uninstall_default_registry

        uninstall_default_registry(config.stash[STATE_KEY].get_registry)


def select_devices(registry: Any, settings: Any, worker: int | None = None) -> list[str]:
    """Device keys the ``device`` fixture is parametrized over: the first device of each type, or
    device ``worker mod count`` where a rank or worker owns one (``LOCAL_RANK`` under torchrun;
    the worker number in an xdist worker pinned with ``set_device``).

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
    check_device_types(settings.devices, settings.except_, present)  # the unittest bridge's check too


def _devcaps_marks(node: pytest.Item) -> list[pytest.Mark]:
    return [m for m in node.iter_markers() if m.name in MARKER_NAMES]


def _validate_marks(node: pytest.Item, registry: Any, fixturenames: Sequence[str] | None,
                    marks: list[pytest.Mark] | None = None) -> None:
    """Check the devcaps marks ``node`` sees (``marks``, when the caller has them already); the
    test's own marks must also have the fixture they parametrize (a module's
    ``pytestmark = dtypes(...)`` serves only its dtype tests)."""
    from pytest_devcaps.marks.evaluation import validate_marks

    own = [m for m in node.own_markers if m.name in MARKER_NAMES]
    seen = _devcaps_marks(node) if marks is None else marks
    inherited = [m for m in seen if m not in own]
    fixtures = frozenset(fixturenames or ()) & _PARAMETRIZED_FIXTURES if fixturenames is not None else None
    passed = node.config.stash.setdefault(VALID_MARKS_KEY, set())
    for group, names in ((inherited, None), (own, fixtures)):
        key = _validation_key(group, names)
        if key is not None and key in passed:
            continue  # the same marks passed before (one module's tests share their marks)
        validate_marks(group, registry, fixturenames if names is not None else None)
        if key is not None:
            passed.add(key)


VALID_MARKS_KEY = pytest.StashKey[set[object]]()
"""Mark groups that passed validation in this session, by value: the session's registry (and
its catalogue) is one, so the same marks need not be checked again for every test."""

_PARAMETRIZED_FIXTURES = frozenset({"dtype", "devcaps_dtype", "device", "devcaps_device"})


def _validation_key(marks: list[pytest.Mark], fixtures: frozenset[str] | None) -> object | None:
    """A hashable identity of ``marks`` (name, args, keywords) and the fixtures they may
    parametrize; None when an argument is unhashable (then the marks are checked every time)."""
    key = (tuple((m.name, m.args, tuple(sorted(m.kwargs.items()))) for m in marks), fixtures)
    try:
        hash(key)
    except TypeError:
        return None
    return key


VALIDATED_KEY = pytest.StashKey[dict[tuple[str, str], tuple[pytest.Mark, ...]]]()
"""The marks each test function's definition had when ``pytest_generate_tests`` checked them:
its items, which carry the same marks, need not be checked again (a cost per test)."""


def _definition_key(node: pytest.Item) -> tuple[str, str]:
    parent = node.parent
    return (parent.nodeid if parent is not None else "", getattr(node, "originalname", node.name))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marks = _devcaps_marks(metafunc.definition)
    if not marks and not any(name in metafunc.fixturenames for name in DEVICE_NAMES):
        return  # this test does not use devcaps: nothing is built for it
    state = session_state(metafunc.config)
    try:
        registry = state.registry
    except RegistryUnavailable:
        return  # pytest_collection_modifyitems reports it, once
    from pytest_devcaps.session.parametrize import parametrize

    key = _definition_key(metafunc.definition)
    try:
        _validate_marks(metafunc.definition, registry, metafunc.fixturenames, marks)
        parametrize(metafunc, state)
    except DevcapsError as exc:
        # As pytest's skipif with a bad condition: this test errors (at setup, where
        # _setup reads the problem), its module's other tests run.
        problems = metafunc.config.stash.setdefault(DEFINITION_PROBLEM_KEY, {})
        problems[key] = f"{metafunc.definition.nodeid}: {exc}"
        return
    metafunc.config.stash.setdefault(VALIDATED_KEY, {})[key] = tuple(marks)


DEFINITION_PROBLEM_KEY = pytest.StashKey[dict[tuple[str, str], str]]()
"""Why a test function's devcaps marks are wrong, found by ``pytest_generate_tests``: every
item of that function errors at setup with it (never the whole module at collection)."""

MARK_PROBLEM_KEY = pytest.StashKey[str]()
"""Why a test's devcaps marks are wrong, for tests collected without ``pytest_generate_tests``
(unittest classes): they cannot fail collection, so they error at setup instead."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = session_state(config)
    if state.failure is not None:
        raise pytest.UsageError(state.failure)
    if pytorch_gates_in_use():  # PyTorch's capability skips, where torch has them
        from pytest_devcaps.pytorch_compat import fill_privateuse1_capabilities

        fill_privateuse1_capabilities()
    for item in items:
        marks = _devcaps_marks(item)
        callspec = getattr(item, "callspec", None)
        uses_device = callspec_param(callspec, DEVICE_NAMES) is not None
        dtype_param = callspec_param(callspec, DTYPE_NAMES)
        if not marks and not uses_device and dtype_param is None:
            continue  # this test does not use devcaps (and builds nothing)
        definition_problem = config.stash.get(DEFINITION_PROBLEM_KEY, {}).get(_definition_key(item))
        if definition_problem is not None:
            item.stash[MARK_PROBLEM_KEY] = definition_problem
            continue
        checked = config.stash.get(VALIDATED_KEY, {}).get(_definition_key(item))
        try:
            if checked != tuple(marks):  # not checked at collection, or marks added since
                _validate_marks(item, state.registry, getattr(item, "fixturenames", None), marks)
        except DevcapsError as exc:
            item.stash[MARK_PROBLEM_KEY] = str(exc)
            continue
        marks = [m for m in marks if m.name != "dtypes"]
        if not marks and not uses_device and dtype_param is None:
            continue
        from pytest_devcaps.marks.evaluation import evaluate

        evaluation = evaluate(marks, state.registry, item_device(item), dtype_param)
        item.stash[EVALUATION_KEY] = evaluation
        if any(m.name == "requires_memory" and m.kwargs.get("free") for m in marks):
            item.stash[FREE_MEMORY_KEY] = True  # measured at setup, right before the test
        item.user_properties.append(("devcaps_device", evaluation.device))
        if evaluation.required:
            item.user_properties.append(("devcaps_requires", ",".join(evaluation.required)))
    _register_run_hooks(config, items)


RUN_HOOKS = "devcaps-run"


def _register_run_hooks(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The setup and report hooks, where a collected test uses devcaps or a JSON report wants
    every test's hardware class: a session of plain tests pays no hook call per test for them."""
    manager = config.pluginmanager
    if manager.has_plugin(RUN_HOOKS):
        return
    if session_state(config).settings.json_path or \
            any(_uses_devcaps(item) for item in items):
        manager.register(RunHooks(), RUN_HOOKS)


def _uses_devcaps(item: pytest.Item) -> bool:
    """Evaluated marks or a device parameter, or marks or a class that failed to check."""
    stash = item.stash
    return EVALUATION_KEY in stash or MARK_PROBLEM_KEY in stash or CLASS_PROBLEM_KEY in stash


@pytest.hookimpl(tryfirst=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Any:
    """Set up our ``device`` fixture from its parameter without the fixture function (see
    ``fixtures.device_value``); caches the value or the error as pytest's own setup does
    (``_pytest/fixtures.py`` ``pytest_fixture_setup``)."""
    if fixturedef.argname not in DEVICE_NAMES or not is_device_fixture(fixturedef.func):
        return None
    key = fixturedef.cache_key(request)  # type: ignore[arg-type]
    try:
        value = device_value(request)
    except Exception as exc:
        fixturedef.cached_result = (None, key, (exc, exc.__traceback__))
        raise
    fixturedef.cached_result = (value, key, None)
    return value


class RunHooks:
    """Per-test hooks of tests that use devcaps (registered by ``_register_run_hooks``)."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        _setup(item)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item) -> Generator[None, Any, Any]:
        report = yield
        _annotate(report, item)
        return report


def _setup(item: pytest.Item) -> None:
    """Errors for wrong marks or classes, free memory now, then the capability skip."""
    for problem in (CLASS_PROBLEM_KEY, MARK_PROBLEM_KEY):
        if problem in item.stash:
            pytest.fail(item.stash[problem], pytrace=False)
    evaluation = item.stash.get(EVALUATION_KEY, None)
    if evaluation is None:
        return
    if not evaluation.skip:
        if FREE_MEMORY_KEY not in item.stash:
            return
        from pytest_devcaps.session.suite_hooks import check_free_memory

        check_free_memory(item)  # requires_memory(free=True), now
        evaluation = item.stash[EVALUATION_KEY]
        if not evaluation.skip:
            return
    skip_unless_required(item.config, evaluation.missing, evaluation.reason)


def _annotate(report: pytest.TestReport, item: pytest.Item) -> None:
    """The skip points at the test; the report carries the evaluation and hardware class."""
    evaluation = item.stash.get(EVALUATION_KEY, None)
    if evaluation is not None and evaluation.skip and report.skipped and isinstance(report.longrepr, tuple):
        # Point the skip at the test, not at this plugin (as pytest does for skip marks).
        filename, line = item.reportinfo()[:2]
        report.longrepr = (str(filename), (line or 0) + 1, report.longrepr[2])
    if HARDWARE_KEY in item.stash:
        report.__dict__[HARDWARE_REPORT_KEY] = item.stash[HARDWARE_KEY]
    if evaluation is not None:
        fields = item.stash.get(REPORT_FIELDS_KEY, None)
        if fields is None or fields[0] is not evaluation:  # made once per evaluation, not per phase
            fields = (evaluation, {"device": evaluation.device, "requires": list(evaluation.required),
                                   "missing": [m.to_dict() for m in evaluation.missing]})
            item.stash[REPORT_FIELDS_KEY] = fields
        report.__dict__["devcaps"] = fields[1]


FREE_MEMORY_KEY = pytest.StashKey[bool]()
"""The test has ``requires_memory(free=True)``: free memory is measured at its setup."""

REPORT_FIELDS_KEY = pytest.StashKey[tuple[Any, dict[str, Any]]]()
"""The evaluation a test's reports describe and the fields made from it (setup, call and
teardown reports share them)."""


HEADER_SHOWN_KEY = pytest.StashKey[bool]()


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    """The devcaps lines, before collection when the registry exists by then (an option asked
    for it); else after collection (:func:`pytest_report_collectionfinish`), if a test built it."""
    if STATE_KEY not in config.stash or not session_state(config).built:
        return None
    return _header(config)


def pytest_report_collectionfinish(config: pytest.Config) -> list[str] | None:
    if STATE_KEY not in config.stash or config.stash.get(HEADER_SHOWN_KEY, False):
        return None
    if not session_state(config).built:
        return None
    return _header(config)


def _header(config: pytest.Config) -> list[str]:
    from pytest_devcaps.session.reporting import header_lines

    config.stash[HEADER_SHOWN_KEY] = True
    return header_lines(session_state(config), verbose=config.get_verbosity() > 0)
