"""Suite-local fixtures: a clean Dynamo state around every test, one Inductor cache.

``device``, ``dtype``, ``devcaps`` and the markers come from the pytest-devcaps plugin.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from pytest_devcaps._util.environ import ENV_DYNAMO_CACHE, ENV_DYNAMO_ORDER, lookup
from pytest_devcaps._util.files import default_cache_dir
from pytest_devcaps.errors import ConfigError
from pytest_devcaps.suites.dynamo.inductor_cache import (
    INDUCTOR_VARIABLE,
    cache_mode,
    choose_cache_dir,
)
from pytest_devcaps.suites.dynamo.ordering import reorder

SUITE_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        order = lookup(ENV_DYNAMO_ORDER)
        if order is not None:
            reorder(items, SUITE_DIR, order.value, order.variable)
        mode = lookup(ENV_DYNAMO_CACHE)
        if mode is not None:
            cache_mode(mode.value, mode.variable)
    except ConfigError as error:
        raise pytest.UsageError(str(error)) from None


@pytest.fixture(scope="session", autouse=True)
def inductor_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point ``TORCHINDUCTOR_CACHE_DIR`` at the suite's Inductor cache, restored afterwards
    (see ``inductor_cache``: persistent per torch version unless ``PYTEST_DEVCAPS_DYNAMO_CACHE=fresh``).

    Session scope and autouse make it precede every compile of the suite: Inductor reads the
    variable lazily. A fresh cache belongs to the run: under pytest-xdist each worker's basetemp
    is ``<run basetemp>/gwN``, so the workers share ``<run basetemp>/inductor-cache``.
    """
    basetemp = tmp_path_factory.getbasetemp()
    run_dir = basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp
    try:
        cache = choose_cache_dir(os.environ, run_dir, default_cache_dir(), torch.__version__)
    except ConfigError as error:
        pytest.fail(str(error), pytrace=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(INDUCTOR_VARIABLE, str(cache))
        yield cache


@pytest.fixture(autouse=True)
def reset_dynamo() -> Iterator[None]:
    """Forget compiled frames, guards and counters before and after each test.

    Without it a frame compiled by an earlier test (same code object) would change the
    frame counts of a later one, so outcomes would depend on test order and xdist placement.
    """
    _reset()
    yield
    _reset()


def _reset() -> None:
    torch._dynamo.reset()
    counters.clear()  # reset() leaves the global counters (graph breaks, cudagraph skips)
