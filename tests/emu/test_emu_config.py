"""What needs no compiler: the device count's rules, the entry point, refusals, loud failures."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import torch

from pytest_devcaps.emu import DEVICES_ENV, VISIBLE_ENV
from pytest_devcaps.emu.autoload import autoload
from pytest_devcaps.emu.extension import CACHE_ENV, EmuBuildError, ensure_built
from pytest_devcaps.emu.loader import check_location
from pytest_devcaps.emu.config import EmuConfigError, check_requested, device_count, device_memory, requested


@pytest.mark.parametrize(("devices", "visible", "count"), [
    ("2", None, 2), (" 3 ", None, 3), ("0", None, 0), ("4", "1,3", 2), ("4", " 2 ", 1),
    ("2", "", 0),  # as CUDA_VISIBLE_DEVICES="" hides every device
])
def test_device_count(devices: str, visible: str | None, count: int) -> None:
    environ = {DEVICES_ENV: devices} if visible is None else {DEVICES_ENV: devices,
                                                               VISIBLE_ENV: visible}
    assert device_count(environ) == count


@pytest.mark.parametrize(("devices", "visible", "message"), [
    ("two", None, "'two' is not a whole number"),
    ("65", None, "65 is out of range"),
    ("-1", None, "-1 is out of range"),
    ("2", "0,0", "entry '0' is repeated"),
    ("2", "2", "entry '2' is not an index below PYTEST_DEVCAPS_EMU_DEVICES=2"),
    ("2", "GPU-1", "entry 'GPU-1' is not an index"),
])
def test_device_count_refuses(devices: str, visible: str | None, message: str) -> None:
    environ = {DEVICES_ENV: devices} if visible is None else {DEVICES_ENV: devices,
                                                               VISIBLE_ENV: visible}
    with pytest.raises(EmuConfigError, match=message.replace("(", r"\(")):
        device_count(environ)


def test_unset_or_empty_requests_nothing() -> None:
    assert not requested({})
    assert not requested({DEVICES_ENV: "  "})
    assert requested({DEVICES_ENV: "1"})


def test_torch_autoload_entry_point_is_registered() -> None:
    found = {e.name: e.value for e in entry_points(group="torch.backends")}
    assert found.get("devcaps_emu") == "pytest_devcaps.emu.autoload:autoload"


def test_autoload_does_nothing_when_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEVICES_ENV, raising=False)
    autoload()
    assert torch._C._get_privateuse1_backend_name() == "privateuseone"


def test_no_compiler_is_a_build_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    with pytest.raises(EmuBuildError, match="no C..? compiler: .*no-such-compiler"):
        ensure_built(str(torch.__version__))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX file owners only")
def test_a_library_others_can_write_is_refused(tmp_path: Path) -> None:
    library = tmp_path / "devcaps_emu.so"
    library.write_bytes(b"\x7fELF")
    library.chmod(0o666)
    with pytest.raises(EmuBuildError, match="writable by others"):
        check_location(library, tmp_path)
    assert check_location(tmp_path / "missing.so", tmp_path) is None


def test_import_torch_fails_loudly_when_it_cannot_build(tmp_path: Path) -> None:
    """Asked for emu devices and unable to build them, torch's import fails saying why: never
    a silent "no device"."""
    env = dict(os.environ, **{DEVICES_ENV: "1", CACHE_ENV: str(tmp_path),
                              "CXX": str(tmp_path / "no-such-compiler")})
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    done = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode != 0
    assert "Failed to load the backend extension: devcaps_emu" in done.stderr
    assert "pytest-devcaps emu backend: cannot build the emu backend: no C++ compiler" in done.stderr


def test_bad_count_fails_loudly_in_every_process(tmp_path: Path) -> None:
    env = dict(os.environ, **{DEVICES_ENV: "many", CACHE_ENV: str(tmp_path)})
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    done = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode != 0
    assert "PYTEST_DEVCAPS_EMU_DEVICES='many' is not a whole number" in done.stderr


@pytest.mark.parametrize(("text", "count", "expected"), [
    (None, 2, 4 << 30), (None, 1, 8 << 30), (None, 0, 8 << 30), ("4GiB", 2, 4 << 30), ("4GB", 2, 4 * 10**9),
    (" 512MiB ", 8, 512 << 20), (str(3 << 20), 2, 3 << 20),
])
def test_device_memory(text: str | None, count: int, expected: int) -> None:
    """Each device's memory: by default half the host's RAM (16 GiB here) shared by the devices."""
    environ = {} if text is None else {"PYTEST_DEVCAPS_EMU_MEMORY": text}
    assert device_memory(environ, count, host_ram=16 << 30) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("lots", "'lots' is not a size like '4GiB'"),
    ("17GiB", "at least 1MiB and at most the host's RAM (16GiB)"),
    ("1KiB", "at least 1MiB"),
])
def test_device_memory_refuses(text: str, message: str) -> None:
    with pytest.raises(EmuConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        device_memory({"PYTEST_DEVCAPS_EMU_MEMORY": text}, 2, host_ram=16 << 30)


def test_a_bad_device_memory_is_refused_where_devices_are_asked_for() -> None:
    check_requested({"PYTEST_DEVCAPS_EMU_MEMORY": "lots"})  # no devices asked: nothing read
    with pytest.raises(EmuConfigError, match="is not a size"):
        check_requested({DEVICES_ENV: "2", "PYTEST_DEVCAPS_EMU_MEMORY": "lots"})
