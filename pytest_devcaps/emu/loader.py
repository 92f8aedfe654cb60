"""The emu library checked, then loaded from the very file that was checked.

Native code runs the moment a library is mapped (its constructors), so nothing is loaded that
we did not build and that someone else could have written or swapped:

* the library's real path (symbolic links resolved) must lie in its build folder: a link to
  anywhere else is refused;
* the real file and every folder from it up to the emu cache root must be owned by this user
  and writable by nobody else (``files.untrusted``, the one ownership rule of our caches);
* the file is opened once (``O_NOFOLLOW``); its descriptor is checked again (the same inode,
  a regular file, not empty), its SHA-256 compared with the digest recorded beside it when it
  was built (``devcaps_emu.so.sha256``), and the process loads that descriptor
  (``/proc/self/fd/N``), so a file swapped after the check is never the file loaded;
* a library is recorded only after it loaded in a child process (:func:`load_in_child`): a
  truncated or corrupt file crashes a child we survive and report, never pytest.

Every refusal is an :class:`EmuBuildError` (a ``ConfigError``) with one line saying what is
wrong and what to do. Standard library only (torch is imported by the child alone).
"""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pytest_devcaps._util.environ import ENV_EMU_CACHE_DIR
from pytest_devcaps.errors import ConfigError

#: Beside the library: the hex SHA-256 of the file that loaded in a child.
DIGEST_SUFFIX = ".sha256"
#: A child load of the library (import torch, dlopen) on a loaded machine.
CHILD_LOAD_TIMEOUT_S = 300.0
#: Entry points the child looks up: a library without them is not ours.
REQUIRED_SYMBOLS = ("devcaps_emu_set_device_count", "devcaps_emu_device_count")


class EmuBuildError(ConfigError):
    """The emu extension cannot be built or loaded here (no compiler, a failed build, a
    library refused or corrupt...)."""


@dataclass(frozen=True)
class OpenLibrary:
    """A checked library open by descriptor: load :attr:`load_path`, then :meth:`close`."""

    path: Path
    fd: int
    digest: str

    @property
    def load_path(self) -> str:
        """The name the dynamic loader opens: the descriptor itself where ``/proc`` has it."""
        proc = f"/proc/self/fd/{self.fd}"
        return proc if os.path.exists(proc) else str(self.path)

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


def digest_path(library: Path) -> Path:
    return library.with_name(library.name + DIGEST_SUFFIX)


def _refuse(library: Path, why: str) -> EmuBuildError:
    return EmuBuildError(f"refusing to load {library}: {why}; remove it (devcaps emu build "
                         f"rebuilds it) or set {ENV_EMU_CACHE_DIR} to a folder of your own")


def _untrusted(info: os.stat_result) -> str | None:
    from pytest_devcaps._util.files import untrusted

    return untrusted(info)


def check_location(library: Path, root: Path) -> tuple[Path, os.stat_result] | None:
    """The library's real path and its ``lstat`` when it may be loaded; None when there is
    nothing at ``library``; raises :class:`EmuBuildError` when it must not be loaded."""
    if not os.path.lexists(library):
        return None
    real = Path(os.path.realpath(library))
    folder = Path(os.path.realpath(library.parent))
    if real.parent != folder:
        raise _refuse(library, f"it is a symbolic link to {real}, outside its build folder")
    top = Path(os.path.realpath(root))
    if folder != top and top not in folder.parents:
        raise _refuse(library, f"its folder {folder} is outside the emu cache {top}")
    info = os.lstat(real)
    if not stat.S_ISREG(info.st_mode):
        from pytest_devcaps._util.files import file_kind

        raise _refuse(library, f"{real} is {file_kind(info.st_mode)}, not a regular file")
    problem = _untrusted(info)
    if problem is not None:
        raise _refuse(library, f"{real} is {problem}")
    for item in (folder, *folder.parents):
        problem = _untrusted(os.stat(item))
        if problem is not None:
            raise _refuse(library, f"the folder {item} is {problem}")
        if item == top:
            break
    return real, info


def open_checked(library: Path, root: Path) -> OpenLibrary | None:
    """The library open by descriptor after :func:`check_location` and the descriptor's own
    checks (the same file, regular, not empty, trusted), with its digest; None when absent."""
    located = check_location(library, root)
    if located is None:
        return None
    real, checked = located
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(real, flags)
    except OSError as exc:
        why = "it was replaced by a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise _refuse(library, f"it cannot be opened: {why}") from None
    try:
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != (checked.st_dev, checked.st_ino):
            raise _refuse(library, "it was replaced while it was being checked")
        problem = _untrusted(info)
        if problem is not None:
            raise _refuse(library, f"{real} is {problem}")
        digest = _digest_of(fd)
    except BaseException:
        os.close(fd)
        raise
    return OpenLibrary(library, fd, digest)


def _digest_of(fd: int) -> str:
    digest = hashlib.sha256()
    offset = 0
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            return digest.hexdigest()
        digest.update(chunk)
        offset += len(chunk)


def recorded_digest(library: Path) -> str | None:
    """The digest recorded when the library was built and loaded in a child (None: none, or
    not a file we may believe)."""
    from pytest_devcaps._util.files import read_regular_file
    from pytest_devcaps.errors import UnsafeFileError

    try:
        text = read_regular_file(digest_path(library), limit=256, trusted=True)
    except (OSError, UnsafeFileError):
        return None
    value = text.decode("ascii", "replace").strip()
    return value if len(value) == 64 else None


def record_digest(library: Path, digest: str) -> None:
    from pytest_devcaps._util.files import write_atomic

    write_atomic(digest_path(library), digest + "\n", private=True)


def forget(library: Path) -> None:
    """Remove a corrupt library and its digest (the next build writes both anew)."""
    for item in (library, digest_path(library)):
        try:
            os.unlink(item)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise EmuBuildError(f"cannot remove the corrupt {item}: {exc.strerror}") from None


def corruption(opened: OpenLibrary) -> str | None:
    """Why the open library must not be loaded as it is (None: it may): empty, or not the file
    that was recorded after its child load."""
    if os.fstat(opened.fd).st_size == 0:
        return "it is empty"
    recorded = recorded_digest(opened.path)
    if recorded is None:
        return "no digest was recorded for it (not built by this devcaps, or the build was cut short)"
    if recorded != opened.digest:
        return f"its SHA-256 {opened.digest[:16]}... is not the one recorded at build time ({recorded[:16]}...)"
    return None


_CHILD_LOAD = (
    "import ctypes, os, sys; import torch; "
    "fd = os.open(sys.argv[2], os.O_RDONLY | os.O_NOFOLLOW); "
    "name = '/proc/self/fd/%d' % fd if os.path.exists('/proc/self/fd/%d' % fd) else sys.argv[2]; "
    "library = ctypes.CDLL(name); "
    "[getattr(library, symbol) for symbol in sys.argv[3].split(',')]"
)


def load_in_child(library: Path) -> str | None:
    """Load the library in a throwaway interpreter (torch imported, autoload off); None when
    it loaded, else what went wrong (a signal, an error's last line). The child and what it
    starts die with this process."""
    from pytest_devcaps._util.process_lifetime import ENTER_CODE, stop_tree

    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    command = [sys.executable, "-c", ENTER_CODE + _CHILD_LOAD, str(os.getpid()), str(library),
               ",".join(REQUIRED_SYMBOLS)]
    with tempfile.TemporaryFile() as output:
        child = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=output,
                                 stderr=subprocess.STDOUT, start_new_session=os.name == "posix")
        try:
            code = child.wait(timeout=CHILD_LOAD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"loading it did not finish in {CHILD_LOAD_TIMEOUT_S:.0f} s"
        finally:
            stop_tree(child)
        output.seek(0)
        lines = [line for line in output.read().decode(errors="replace").splitlines() if line.strip()]
    if code == 0:
        return None
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"loading it killed a child process with {name}"
    return f"it does not load: {lines[-1].strip() if lines else f'exit code {code}'}"
