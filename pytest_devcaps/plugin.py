"""pytest entry point (``pytest11: devcaps``): the hook table. Each hook delegates to
``session/`` (settings and state in ``session.startup``, collection in ``session.collection``,
the per-test hooks in ``session.runtest``, fixtures in ``session.fixtures``, plan mode in
``session.plan``) or ``parallel/`` (the xdist handshake in ``parallel.xdist_handshake``, a
process's place in ``parallel.placement``, torchrun in ``parallel.torchrun``). Importing it
imports no torch.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from pytest_devcaps.distributed.ranks import launched
from pytest_devcaps.session import collection, fixtures, runtest, startup

pytest_plugins = [
    "pytest_devcaps.session.plan",  # plan mode, with its pytest_cmdline_main hook
    # ranks of a launched world (torchrun) run as one; only imported under a launcher
    *(["pytest_devcaps.parallel.torchrun"] if launched() else []),
]


def pytest_addoption(parser: pytest.Parser) -> None:
    from pytest_devcaps.session.options import add_options

    add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_devcaps import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    settings = startup.resolve(config)
    config.pluginmanager.register(fixtures, "devcaps-fixtures")  # device, dtype, devcaps...
    worker = getattr(config, "workerinput", None) is not None  # xdist sets it in workers only
    if worker:
        from pytest_devcaps.parallel import xdist_handshake

        xdist_handshake.apply_worker_environment(config)  # before anything initialises a device
    state = startup.start(config, settings, lambda: _placement(config))
    if launched():
        from pytest_devcaps.parallel import torchrun  # registered through pytest_plugins

        torchrun.receive_seed(config)
    startup.build_if_asked(state)
    startup.register_plugins(config)
    if worker or getattr(config.option, "tx", None):  # an xdist worker or controller (-n / --tx)
        from pytest_devcaps.parallel import xdist_handshake

        xdist_handshake.register_hooks(config)


def _placement(config: pytest.Config) -> startup.Placement:
    from pytest_devcaps.parallel.placement import placement

    return placement(config)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    collection.generate_tests(metafunc)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    collection.collect_items(config, items)


@pytest.hookimpl(tryfirst=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Any:
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
