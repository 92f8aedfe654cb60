from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import yaml  # noqa: F401

if torch.distributed.is_available():
    import torch.distributed.tensor  # noqa: F401 (see below)

# torch and PyYAML are imported once, here, for the whole session: pytester's in-process runs drop
# the modules an inner run imported, and importing torch's extension a second time in one process
# crashes (PyYAML's C loader keeps the first module's classes). The plugin imports both only when
# a test needs them, so nothing else imports them this early. The same holds for DTensor: its
# modules define operator libraries (c10d_functional, _dtensor), which a second import refuses
# ("Only a single TORCH_LIBRARY can be used to register the namespace c10d_functional", "Tried to
# register an operator ... multiple times"); torch.testing.assert_close imports DTensor, so a test
# comparing tensors after an inner run that first imported it failed (pytest-randomly, seed
# 3482684126 on tests/plugin tests/marks tests/util with -n 2). About 0.5 s per process.

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _shared_probe_cache(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """pytester runs share one probe cache per session (warm after the first), unless a test
    sets its own ``PYTEST_DEVCAPS_CACHE_DIR``."""
    if "PYTEST_DEVCAPS_CACHE_DIR" not in os.environ:
        root = Path(str(tmp_path_factory.getbasetemp())).parent / "devcaps-probe-cache"
        monkeypatch.setenv("PYTEST_DEVCAPS_CACHE_DIR", str(root))


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytester runs keep their file order: tests match their output line by line, and
    pytest-randomly (when installed) would shuffle it; the outer session stays shuffled.
    (Set after pytester's own setup, which clears ``PYTEST_ADDOPTS``.)"""
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:randomly")
    return pytester
