"""pytest entry point (``pytest11: devcaps``): the hook table. Each hook delegates to
``session/`` (settings and state in ``session.startup``, collection in ``session.collection``,
the per-test hooks in ``session.runtest``, fixtures in ``session.fixtures``, plan mode in
``session.plan``) or ``parallel/`` (the xdist handshake in ``parallel.xdist_handshake``, a
process's place in ``parallel.placement``, torchrun in ``parallel.torchrun``).

The plugin is loaded into every pytest session: importing it imports pytest, ``hookspecs`` and
``session.collection`` alone (no torch), and a session that sets nothing of ours starts the
rest on first need (``session.startup.defer``). Our hook specs are added on first need too
(``hookspecs.add_when_implemented``, ``hookspecs.load_vendor_plugins``).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Generator

import pytest

from pytest_devcaps import hookspecs
from pytest_devcaps._util.environ import ENV_EMU_DEVICES
from pytest_devcaps.session import collection, fixtures, startup


def _launched() -> bool:
    """A rank of a launched world (``distributed.ranks.launched``); without ``WORLD_SIZE``, which
    it reads, the answer is no without importing it."""
    if "WORLD_SIZE" not in os.environ:
        return False
    from pytest_devcaps.distributed.ranks import launched

    return launched()


# ranks of a launched world (torchrun) run as one; only imported under a launcher
pytest_plugins = ["pytest_devcaps.parallel.torchrun"] if _launched() else []


def pytest_addoption(parser: pytest.Parser) -> None:
    from pytest_devcaps.session.options import add_options

    add_options(parser)


def pytest_plugin_registered(manager: pytest.PytestPluginManager) -> None:
    # our hook specs: where a plugin implements one, or when the registry is built (not at start)
    hookspecs.add_when_implemented(manager)


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config: pytest.Config) -> Generator[None, Any, Any]:
    # A wrapper runs before every plain implementation, so before xdist's own (tryfirst)
    # pytest_cmdline_main, which turns -n / -d / --dist into workers: a plan runs in one process.
    if not startup.idle(config):
        from pytest_devcaps.session.plan import plan_in_one_process

        plan_in_one_process(config)
    return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if ENV_EMU_DEVICES in os.environ:
        _check_emu_devices()
    startup.register(config)  # markers, fixtures, the suite hooks
    worker = getattr(config, "workerinput", None) is not None  # xdist sets it in workers only
    xdist = worker or bool(getattr(config.option, "tx", None))  # an xdist worker or controller (-n / --tx)
    if not xdist and not _launched() and startup.idle(config):
        startup.defer(config, lambda: _placement(config))  # nothing of ours is set: on first need
    else:
        _start(config, worker, xdist)


def _check_emu_devices() -> None:
    """A bad emu device count is a usage error now (one line, exit 4): torch's autoload loads emu
    into any process that sets the variable, so the first ``import torch`` would fail on it.
    (emu's vendor hooks are loaded with the registry, through the ``devcaps`` entry-point group.)"""
    from pytest_devcaps.emu.config import EmuConfigError, check_requested

    try:
        check_requested(os.environ)
    except EmuConfigError as exc:
        raise pytest.UsageError(str(exc)) from None


def _start(config: pytest.Config, worker: bool, xdist: bool) -> None:
    settings = startup.resolve_settings(config)  # a bad setting is a usage error now
    if worker:
        from pytest_devcaps.parallel import xdist_handshake

        xdist_handshake.apply_worker_environment(config)  # before anything initialises a device
    state = startup.start(config, settings, lambda: _placement(config))
    if _launched():
        from pytest_devcaps.parallel import torchrun  # registered through pytest_plugins

        torchrun.receive_seed(config)
    startup.build_if_asked(state)
    startup.register_reporting(config)
    from pytest_devcaps.session import plan

    config.pluginmanager.register(plan, "devcaps-plan")  # plan mode (its hooks ask the settings)
    if xdist:
        from pytest_devcaps.parallel import xdist_handshake

        xdist_handshake.register_hooks(config)


def _placement(config: pytest.Config) -> Any:
    from pytest_devcaps.parallel.placement import placement

    return placement(config)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    collection.generate_tests(metafunc)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    collection.collect_items(config, items)


@pytest.hookimpl(tryfirst=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Any:
    if not fixtures.set_up_by_us(fixturedef):
        return None  # pytest's: every fixture of every session comes here, importing nothing
    from pytest_devcaps.session import runtest  # on the first device fixture a test sets up

    return runtest.fixture_setup(fixturedef, request)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    return startup.header(config, collected=False)


def pytest_report_collectionfinish(config: pytest.Config) -> list[str] | None:
    return startup.header(config, collected=True)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The session's worlds end with it (their ranks would otherwise wait until exit). No
    world was started unless the pool was imported: a session without one imports nothing."""
    pool = sys.modules.get("pytest_devcaps.distributed.pool")
    if pool is not None:
        pool.close_worlds()


def pytest_unconfigure(config: pytest.Config) -> None:
    startup.finish(config)
