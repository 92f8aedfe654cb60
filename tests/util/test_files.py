"""pytest_devcaps._util.files: atomic writes leave the old file or the new one, no litter, and replace
only regular files; reads take regular files of bounded size (and, trusted, only our own)."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from pytest_devcaps.errors import DevcapsError, UnsafeFileError
from pytest_devcaps._util.files import (
    MAX_READ_BYTES,
    read_regular_file,
    replace_refusal,
    write_atomic,
    write_atomic_bytes,
)


def test_writes_replace_and_create_parents(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "report.json"
    write_atomic(path, "first é")
    write_atomic(path, "second")
    assert path.read_text(encoding="utf-8") == "second"
    write_atomic_bytes(path, b"\x00\xff")
    assert path.read_bytes() == b"\x00\xff"
    assert [p.name for p in path.parent.iterdir()] == ["report.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary(tmp_path: Path) -> None:
    path = tmp_path / "outcome"
    write_atomic_bytes(path, b"old")
    with pytest.raises(TypeError):
        write_atomic_bytes(path, "not bytes")  # type: ignore[arg-type]
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["outcome"]


def test_imports_neither_torch_nor_pytest() -> None:
    code = ("import sys, pytest_devcaps._util.files; "
            "print(sorted(m for m in ('torch', 'pytest', '_pytest') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- writes replace only regular files ---------------------------------------------------------

def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _socket(path: Path) -> Path:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.close()
    return path


@pytest.mark.skipif(os.name != "posix", reason="FIFOs and UNIX sockets are POSIX")
@pytest.mark.parametrize(("make", "kind"), [
    (lambda p: p.mkdir() or p, "a directory"),
    (_fifo, r"not a regular file \(a FIFO\)"),
    (_socket, r"not a regular file \(a socket\)"),
])
def test_a_write_refuses_a_path_that_is_not_a_regular_file(
        tmp_path: Path, make: Callable[[Path], Path], kind: str) -> None:
    target = make(tmp_path / "report.json")
    with pytest.raises(UnsafeFileError, match=f"exists and is {kind}; devcaps only replaces "
                                              "regular files") as info:
        write_atomic(target, "{}")
    assert isinstance(info.value, DevcapsError) and info.value.path == str(target)
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # untouched, no litter


@pytest.mark.skipif(os.name != "posix", reason="device nodes are POSIX")
def test_a_write_refuses_a_device_node(tmp_path: Path) -> None:
    """As root, renaming over /dev/null would replace the device node itself (so as root the
    test makes its own node, and a regression cannot break the machine's /dev/null)."""
    device = Path("/dev/null")
    if os.getuid() == 0:
        device = tmp_path / "null"
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    with pytest.raises(UnsafeFileError, match=f"{device}: exists and is not a regular file "
                                              r"\(a character device\)"):
        write_atomic(device, "{}")
    assert stat.S_ISCHR(os.stat(device).st_mode)


@pytest.mark.skipif(os.name != "posix", reason="symbolic links")
def test_a_symbolic_link_is_replaced_and_its_target_never_written(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    link = tmp_path / "report.json"
    link.symlink_to(victim)
    write_atomic(link, "report")
    assert not link.is_symlink() and link.read_text() == "report"
    assert victim.read_text() == "precious"


_KILLED_MID_WRITE = """
import os, sys, time
from pathlib import Path
from pytest_devcaps._util import files

def stall(*args, **kwargs):  # the data is written, the file not yet named: die here
    print("writing", flush=True)
    time.sleep(60)

files.os.link = stall
files.write_atomic_bytes(Path(sys.argv[1]), b"new" * 1000)
"""


@pytest.mark.skipif(not hasattr(os, "O_TMPFILE"), reason="unnamed temporary files are Linux's")
def test_a_process_killed_mid_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    target.write_bytes(b"old")
    child = subprocess.Popen([sys.executable, "-c", _KILLED_MID_WRITE, str(target)],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "writing\n"
    child.kill()
    child.wait()
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]
    assert target.read_bytes() == b"old"


# --- bounded reads of regular files ---------------------------------------------------------

def test_reads_a_regular_file_up_to_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_bytes(b"x" * 100)
    assert read_regular_file(path, limit=100) == b"x" * 100
    with pytest.raises(UnsafeFileError, match="100 bytes; files over 99 bytes are not read"):
        read_regular_file(path, limit=99)
    assert MAX_READ_BYTES == 16 * 2**20


@pytest.mark.skipif(os.name != "posix", reason="FIFOs and device files are POSIX")
@pytest.mark.parametrize(("path", "kind"), [
    ("/dev/zero", "a character device"),
    ("/dev/urandom", "a character device"),
    (None, "a FIFO"),  # nobody writes to it: reading must not wait
    (".", "a directory"),
])
def test_reads_refuse_what_would_never_end(tmp_path: Path, path: str | None, kind: str) -> None:
    target = _fifo(tmp_path / "fifo") if path is None else Path(path)
    with pytest.raises(UnsafeFileError, match=f"{kind}, not a regular file"):
        read_regular_file(target)


@pytest.mark.skipif(os.name != "posix", reason="POSIX owners and modes")
def test_trusted_reads_refuse_files_others_may_write_or_own(tmp_path: Path) -> None:
    path = tmp_path / "probes-x.json"
    path.write_text("{}")
    path.chmod(0o600)
    assert read_regular_file(path, trusted=True) == b"{}"
    path.chmod(0o666)
    with pytest.raises(UnsafeFileError, match="writable by others"):
        read_regular_file(path, trusted=True)
    assert read_regular_file(path) == b"{}"  # an untrusted read only needs a regular file
    path.chmod(0o620)
    with pytest.raises(UnsafeFileError, match="writable by others"):
        read_regular_file(path, trusted=True)
    link = tmp_path / "link.json"
    link.symlink_to(path)
    with pytest.raises(UnsafeFileError, match="a symbolic link"):
        read_regular_file(link, trusted=True)


@pytest.mark.skipif(os.name != "posix", reason="POSIX owners")
def test_trusted_reads_refuse_another_users_file(tmp_path: Path) -> None:
    if os.getuid() == 0:  # root can make a file that someone else owns
        path = tmp_path / "foreign.json"
        path.write_text("{}")
        path.chmod(0o644)
        os.chown(path, 4242, 4242)
    else:  # a file root owns
        path = Path("/etc/hostname" if os.path.isfile("/etc/hostname") else "/etc/passwd")
    owner = os.stat(path).st_uid
    with pytest.raises(UnsafeFileError, match=f"owned by uid {owner}, not by this user"):
        read_regular_file(path, trusted=True)


@pytest.mark.skipif(os.name != "posix", reason="symbolic links and FIFOs")
def test_the_early_refusal_and_the_write_agree(tmp_path: Path) -> None:
    """replace_refusal (options, devcaps check) and the write itself judge a path alike."""
    (tmp_path / "file.json").write_text("{}")
    _fifo(tmp_path / "fifo")
    (tmp_path / "to_file").symlink_to(tmp_path / "file.json")
    (tmp_path / "to_fifo").symlink_to(tmp_path / "fifo")
    (tmp_path / "dangling").symlink_to(tmp_path / "missing")
    for name, refused in [("new.json", False), ("file.json", False), ("to_file", False),
                          ("fifo", True), ("to_fifo", True), ("dangling", True)]:
        path = tmp_path / name
        assert (replace_refusal(path) is not None) is refused, name
        if refused:
            with pytest.raises(UnsafeFileError):
                write_atomic(path, "{}")
    assert "(a dangling symbolic link)" in str(replace_refusal(tmp_path / "dangling"))
    assert replace_refusal(tmp_path / "file.json" / "x.json") == (
        f"{str(tmp_path / 'file.json')!r} is not a directory, so "
        f"{str(tmp_path / 'file.json' / 'x.json')!r} cannot be written")


# --- modes: reports follow the umask, caches stay private --------------------------------------

@pytest.mark.skipif(os.name != "posix", reason="POSIX modes")
@pytest.mark.parametrize(("umask", "public"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600),
                                               (0o000, 0o666)])
def test_writes_follow_the_umask_unless_private(tmp_path: Path, umask: int, public: int) -> None:
    old = os.umask(umask)
    try:
        write_atomic(tmp_path / "report.json", "{}")
        write_atomic(tmp_path / "private" / "cache.json", "{}", private=True)
        write_atomic(tmp_path / "report.json", "{}")  # a replacement gets the mode again
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "report.json").stat().st_mode) == public
    assert stat.S_IMODE((tmp_path / "private" / "cache.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "private").stat().st_mode) == 0o700


# --- SIGKILL with a named temporary file (where unnamed files cannot be linked: gVisor) --------

_KILLED_NAMED = """
import os, sys, time
from pathlib import Path
from pytest_devcaps._util import files

files._unnamed_links[0] = False  # as where linking an unnamed file fails
real_replace = files.os.replace

def stall(*args, **kwargs):  # the temporary file is complete and named: die here
    print("writing", flush=True)
    time.sleep(60)

files.os.replace = stall
files.write_atomic_bytes(Path(sys.argv[1]), b"new" * 100000)
"""


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL")
def test_a_temporary_file_left_by_sigkill_is_removed_by_the_next_write(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    target.write_bytes(b"old")
    (tmp_path / "report.json.tmp").write_bytes(b"not ours: another tool's name")
    (tmp_path / ".other.json.00000000-1-ab.tmp").write_bytes(b"another target's")
    child = subprocess.Popen([sys.executable, "-c", _KILLED_NAMED, str(target)],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "writing\n"
    child.kill()
    child.wait()
    child.stdout.close()
    (left,) = tmp_path.glob(".report.json.*.tmp")
    assert f"-{child.pid}-" in left.name and left.stat().st_size == 300000
    assert target.read_bytes() == b"old"  # never partial: the rename had not happened
    write_atomic(target, "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".other.json.00000000-1-ab.tmp", "report.json", "report.json.tmp"]
    assert target.read_text() == "new"


@pytest.mark.skipif(os.name != "posix", reason="pids")
def test_a_live_writers_temporary_file_is_kept_until_it_is_old(tmp_path: Path) -> None:
    from pytest_devcaps._util import files

    target = tmp_path / "r.json"
    live = tmp_path / f".r.json.{files._HOST}-{os.getppid()}-00.tmp"  # a writer still running
    foreign = tmp_path / f".r.json.ffffffff-{2**22 + 7}-00.tmp"  # another host's: pid unknown
    for path in (live, foreign):
        path.write_bytes(b"partial")
    assert files.remove_stale_temporaries(target) == []
    later = time.time() + files.STALE_TEMP_S + 1
    assert sorted(files.remove_stale_temporaries(target, now=later)) == sorted(
        [live.name, foreign.name])
