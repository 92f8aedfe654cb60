"""Loading native code (issue 29, item 1): the emu library that is loaded is the one we built.

Hostile cases, each run as a user would (``devcaps emu build``, ``devcaps probe``,
``import torch``, ``default_registry()``) in a fresh emu cache holding a copy of the session's
real build, or a planted library (a tiny shared object whose constructor leaves a marker: if
the marker exists, foreign code ran). Every refusal and every bad count is one line and an
exit status, never a signal or a traceback; a corrupt library is rebuilt, never "already built".
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pytest_devcaps.emu import DEVICES_ENV
from pytest_devcaps.emu.extension import CACHE_ENV, build_directory
from pytest_devcaps.emu.loader import EmuBuildError, OpenLibrary, digest_path, open_checked

pytestmark = pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX file owners")

_PLANTED_C = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void) {
    const char *path = getenv("DEVCAPS_TEST_PLANTED_MARKER");
    if (path) { FILE *f = fopen(path, "w"); if (f) { fputs("ran", f); fclose(f); } }
}
int devcaps_emu_device_count(void) { return 1; }
void devcaps_emu_set_device_count(int n) { (void)n; }
"""


@pytest.fixture(scope="module")
def planted_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shared object that is not ours: its constructor writes the marker file."""
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to make the planted library")
    folder = tmp_path_factory.mktemp("planted")
    source = folder / "planted.c"
    source.write_text(_PLANTED_C)
    library = folder / "planted.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh emu cache root (private), set for this process and its children."""
    root = tmp_path / "emu-cache"
    root.mkdir(mode=0o700)
    monkeypatch.setenv(CACHE_ENV, str(root))
    monkeypatch.setenv("DEVCAPS_TEST_PLANTED_MARKER", str(tmp_path / "marker"))
    monkeypatch.delenv("TORCH_DEVICE_BACKEND_AUTOLOAD", raising=False)
    monkeypatch.delenv(DEVICES_ENV, raising=False)
    return root


def _library_slot(cache: Path) -> Path:
    folder = build_directory(str(torch.__version__))
    assert cache in folder.parents
    folder.mkdir(parents=True, mode=0o700, exist_ok=True)
    return folder / "devcaps_emu.so"


def _copy_build(emu_build: Path, cache: Path) -> Path:
    slot = _library_slot(cache)
    shutil.copy2(emu_build, slot)
    shutil.copy2(digest_path(emu_build), digest_path(slot))
    return slot


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "CXX": "/nonexistent/no-such-compiler", **env}
    return subprocess.run(args, env=environ, capture_output=True, text=True, timeout=600,
                          check=False)


def _devcaps(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return _run([sys.executable, "-m", "pytest_devcaps.commands.main", *args], **env)


def _one_line_error(done: subprocess.CompletedProcess[str], code: int, words: str) -> None:
    assert done.returncode == code, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("devcaps: error:")]
    assert len(errors) == 1 and words in errors[0], done.stderr[-2000:]


def _plant_link(cache: Path, planted: Path, tmp_path: Path) -> Path:
    """A build folder whose library is a link to a file in a world-writable folder."""
    public = tmp_path / "public"
    public.mkdir()
    public.chmod(0o777)
    target = public / "devcaps_emu.so"
    shutil.copy2(planted, target)
    slot = _library_slot(cache)
    slot.symlink_to(target)
    return slot


def test_a_link_out_of_the_build_folder_is_refused_and_never_runs(
        cache: Path, planted_library: Path, tmp_path: Path) -> None:
    _plant_link(cache, planted_library, tmp_path)
    done = _devcaps("emu", "build")
    _one_line_error(done, 2, "is a symbolic link to")
    loaded = _run([sys.executable, "-c", "import torch"], **{DEVICES_ENV: "1"})
    assert loaded.returncode == 1 and "outside its build folder" in loaded.stderr
    assert not (tmp_path / "marker").exists(), "the planted library's constructor ran"


def test_a_planted_library_under_devcaps_probe_is_one_line_not_sigsegv(
        cache: Path, planted_library: Path, tmp_path: Path) -> None:
    _plant_link(cache, planted_library, tmp_path)
    done = _devcaps("probe", **{DEVICES_ENV: "1"})
    _one_line_error(done, 2, "outside its build folder")
    assert not (tmp_path / "marker").exists()


def test_a_library_in_a_folder_others_can_write_is_refused(
        cache: Path, planted_library: Path, tmp_path: Path) -> None:
    slot = _library_slot(cache)
    shutil.copy2(planted_library, slot)
    slot.parent.chmod(0o777)
    done = _devcaps("emu", "build")
    _one_line_error(done, 2, "writable by others")
    assert not (tmp_path / "marker").exists()


def test_a_world_writable_cache_root_is_refused(cache: Path, planted_library: Path,
                                                tmp_path: Path) -> None:
    slot = _library_slot(cache)
    shutil.copy2(planted_library, slot)
    cache.chmod(0o777)
    with pytest.raises(EmuBuildError, match=f"the folder {cache} is writable by others"):
        open_checked(slot, cache)


def test_a_library_without_our_digest_is_never_loaded_and_is_rebuilt(
        cache: Path, planted_library: Path, tmp_path: Path) -> None:
    """Well placed, well owned, but no digest was recorded for it at build time: its code is not
    known to be ours, so it is loaded nowhere (not even in a child), never recorded, and rebuilt
    (here: no compiler, so a one-line error, exit 2)."""
    slot = _library_slot(cache)
    shutil.copy2(planted_library, slot)
    done = _devcaps("emu", "build")
    assert not (tmp_path / "marker").exists()  # its constructor never ran
    assert not digest_path(slot).exists()
    assert "no digest was recorded for it" in done.stderr and "rebuilding it" in done.stderr
    _one_line_error(done, 2, "no C++ compiler")


@pytest.mark.parametrize("damage", ["truncated", "empty", "text", "corrupt"])
def test_a_damaged_library_is_never_already_built(damage: str, cache: Path,
                                                  emu_build: Path) -> None:
    """A truncated, empty, text or bit-flipped library with the build's digest beside it:
    devcaps emu build says what is wrong and rebuilds (here: no compiler, so exit 2)."""
    slot = _copy_build(emu_build, cache)
    data = slot.read_bytes()
    damaged = {"truncated": data[: len(data) // 3], "empty": b"", "text": b"not a library\n",
               "corrupt": data[:4096] + bytes(b ^ 0xFF for b in data[4096:8192]) + data[8192:]}
    slot.write_bytes(damaged[damage])
    done = _devcaps("emu", "build")
    assert "already built" not in done.stderr
    assert f"{slot} " in done.stderr and "rebuilding it" in done.stderr
    _one_line_error(done, 2, "no C++ compiler")


def test_a_truncated_unrecorded_library_does_not_crash_pytests_torch(cache: Path,
                                                                     emu_build: Path) -> None:
    """The SIGBUS case: a truncated, well-owned library and no digest. It is never mapped (no
    digest: not known to be ours) and is rebuilt; this process gets an error, not a signal."""
    slot = _copy_build(emu_build, cache)
    digest_path(slot).unlink()
    slot.write_bytes(emu_build.read_bytes()[:200_000])
    done = _run([sys.executable, "-c", "import torch"], **{DEVICES_ENV: "1"})
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert "no digest was recorded for it" in done.stderr and "rebuilding it" in done.stderr


def test_an_intact_copy_loads_by_descriptor(cache: Path, emu_build: Path) -> None:
    _copy_build(emu_build, cache)
    done = _run([sys.executable, "-c", "import torch; m = torch.emu; "
                 "from pytest_devcaps.emu import _native; "
                 "print(m.device_count(), _native.module().__spec__.origin)"], **{DEVICES_ENV: "2"})
    assert done.returncode == 0, done.stderr
    count, origin = done.stdout.split()
    assert count == "2" and origin.startswith("/proc/self/fd/")


def test_a_file_replaced_after_the_check_is_refused(cache: Path, planted_library: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The time-of-check/time-of-use swap: the descriptor opened is not the file checked."""
    from pytest_devcaps.emu import loader

    slot = _library_slot(cache)
    shutil.copy2(planted_library, slot)
    other = slot.with_name("other.so")
    shutil.copy2(planted_library, other)
    checked = loader.check_location

    def then_swap(library: Path, root: Path) -> tuple[Path, os.stat_result] | None:
        found = checked(library, root)
        os.replace(other, slot)  # swapped between the check and the open
        return found

    monkeypatch.setattr(loader, "check_location", then_swap)
    with pytest.raises(EmuBuildError, match="replaced while it was being checked"):
        open_checked(slot, cache)


def test_an_open_library_loads_the_descriptor() -> None:
    opened = OpenLibrary(Path("/x/devcaps_emu.so"), 0, "0" * 64)
    assert opened.load_path in ("/proc/self/fd/0", "/x/devcaps_emu.so")


@pytest.mark.parametrize("kind", ["a file", "read-only"])
def test_an_unusable_cache_folder_is_one_line(kind: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "emu-cache"
    if kind == "a file":
        root.write_text("not a folder")
    else:
        if os.geteuid() == 0:
            root = Path("/proc/devcaps-emu-cache")  # read-only even for root
        else:
            root.mkdir()
            root.chmod(0o500)
    done = _devcaps("emu", "build", **{CACHE_ENV: str(root), "CXX": sys.executable})
    _one_line_error(done, 2, "cannot use the emu cache folder")


def test_a_bad_count_under_devcaps_probe_is_one_line_not_sigsegv(cache: Path) -> None:
    done = _devcaps("probe", **{DEVICES_ENV: "abc"})
    _one_line_error(done, 2, "PYTEST_DEVCAPS_EMU_DEVICES='abc' is not a whole number")


def test_a_bad_count_in_default_registry_is_a_config_error_not_sigsegv(cache: Path) -> None:
    code = ("from pytest_devcaps.errors import ConfigError\n"
            "from pytest_devcaps.library import default_registry\n"
            "for attempt in range(2):\n"
            "    try:\n"
            "        default_registry()\n"
            "    except ConfigError as exc:\n"
            "        print('ConfigError:', exc)\n")
    done = _run([sys.executable, "-c", code], **{DEVICES_ENV: "abc"})
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all("'abc' is not a whole number" in line for line in lines)


def test_a_bad_count_under_pytest_is_a_usage_error(pytester: pytest.Pytester,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the first module's ``import torch`` failed in the autoload and the second
    crashed on the half-imported torch (two collection errors, one about triton)."""
    monkeypatch.setenv(DEVICES_ENV, "abc")
    monkeypatch.delenv("TORCH_DEVICE_BACKEND_AUTOLOAD", raising=False)
    for name in ("test_a", "test_b"):
        pytester.makepyfile(**{name: "import torch\n\ndef test_it():\n    pass\n"})
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: PYTEST_DEVCAPS_EMU_DEVICES='abc' is not a whole number*"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
