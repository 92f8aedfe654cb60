"""Bounded reads of regular files, and atomic writes that only ever replace regular files.

Plain standard library (no torch, no pytest): YAML files, probe caches, reports and rank
outcomes use it.

* :func:`read_regular_file` reads a regular file of at most ``limit`` bytes: a FIFO, a device
  (``/dev/zero``, ``/dev/urandom``) or a directory is refused at once instead of read forever.
  With ``trusted=True`` (cache files) it also refuses a symbolic link and a file that another
  user owns or that others may write, since what a cache says is believed.
* :func:`write_atomic_bytes` writes beside the target and renames over it, so a reader sees
  the old file or the new one. It refuses a target that exists and is not a regular file (as
  root, ``--devcaps-json=/dev/null`` would otherwise replace the device node); a symbolic link
  is replaced as a link, its target is never written. On Linux the data goes to an unnamed
  file (``O_TMPFILE``) that gets a name only once complete, so a process killed mid-write
  leaves nothing behind; elsewhere (and where linking the unnamed file fails, as under gVisor)
  a named temporary file ``.<name>.<host>-<pid>-<random>.tmp`` is removed on every error, and
  one left by a writer killed with SIGKILL is removed by the next write of the same target
  (its writer is gone from this host, or it is older than :data:`STALE_TEMP_S`).
* Files are created as ``open()`` creates them (mode 0666 less the user's umask: reports a
  fleet merges are readable by the group the umask allows), or with ``private=True`` (caches,
  pickled rank outcomes) mode 0600 in directories created 0700.
* :func:`directory_refusal` is the ownership rule of cache directories: a cache is read from
  and written to a directory only when this user owns it and nobody else may write it.
"""

from __future__ import annotations

import errno
import os
import stat
import time
import zlib
from pathlib import Path
from typing import BinaryIO, Callable

from pytest_devcaps._util.environ import ENV_CACHE_DIR
from pytest_devcaps.errors import UnsafeFileError

#: The largest file :func:`read_regular_file` reads by default (YAML files, caches).
MAX_READ_BYTES = 16 * 2**20

#: Seconds after which a temporary file of ours beside a target is stale whoever wrote it
#: (a writer on another host of a shared file system: its pid cannot be checked from here).
STALE_TEMP_S = 3600.0

_PUBLIC_MODE = 0o666  # less the umask, as open() creates files
_PRIVATE_MODE = 0o600
_unnamed_links = [True]  # False once linking an unnamed file failed here (gVisor: EXDEV)

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


def file_kind(mode: int) -> str:
    """``a FIFO``, ``a directory``...: what a non-regular file is, for an error message."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_regular_file(path: str | os.PathLike[str], *, limit: int = MAX_READ_BYTES,
                      trusted: bool = False) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes.

    Raises :class:`UnsafeFileError` for anything else (and, with ``trusted``, for a symbolic
    link or a file not owned by this user or writable by group or others); ``OSError`` when
    the file cannot be opened at all.
    """
    shown = os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if trusted:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)  # O_NONBLOCK: opening a FIFO must not wait for a writer
    except OSError as exc:
        if trusted and exc.errno == errno.ELOOP:
            raise UnsafeFileError(shown, "a symbolic link; cache files are read only when they "
                                         "are regular files") from None
        raise
    try:
        info = os.fstat(fd)  # the file opened, not whatever the name points at by now
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFileError(shown, f"{file_kind(info.st_mode)}, not a regular file")
        if trusted:
            _check_trusted(shown, info)
        if info.st_size > limit:
            raise UnsafeFileError(shown, f"{info.st_size} bytes; files over {_size(limit)} "
                                         "are not read")
        data = _read_at_most(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew while being read
        raise UnsafeFileError(shown, f"files over {_size(limit)} are not read")
    return data


def _size(limit: int) -> str:
    return f"{limit // 2**20} MiB" if limit >= 2**20 else f"{limit} bytes"


def _read_at_most(fd: int, count: int) -> bytes:
    chunks: list[bytes] = []
    left = count
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def untrusted(info: os.stat_result) -> str | None:
    """Why a file or folder with ``info`` must not be trusted to hold what this user's process
    loads (``owned by uid ...`` / ``writable by others ...``); None when this user owns it and
    nobody else may write it. The one ownership rule of caches and the Inductor cache."""
    getuid = getattr(os, "getuid", None)
    if getuid is None:  # no POSIX owners (Windows): the directory's ACL is all there is
        return None
    if info.st_uid != getuid():
        return f"owned by uid {info.st_uid}, not by this user (uid {getuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by others (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def _check_trusted(path: str, info: os.stat_result) -> None:
    """A cache file is believed only when this user owns it and nobody else may write it, in a
    directory of the same kind (in a directory others may write, they could swap the file)."""
    problem = untrusted(info)
    if problem is not None:
        why = "its owner runs devcaps" if problem.startswith("owned") else "nobody else can write it"
        raise UnsafeFileError(path, f"{problem}; a cache file is read only when {why}")
    refusal = directory_refusal(Path(os.path.abspath(path)).parent)
    if refusal is not None:
        raise UnsafeFileError(path, refusal)


def directory_refusal(directory: Path) -> str | None:
    """Why a cache must not be read from or written to ``directory`` (None: it may): it is not
    a directory, another user owns it, or group or others may write it (they could replace
    or plant its files). A missing directory is no refusal: it is created private."""
    try:
        info = os.stat(directory)  # a link to a private directory of ours is fine
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cache directory {str(directory)!r} cannot be inspected: {exc.strerror or exc}"
    if not stat.S_ISDIR(info.st_mode):
        kind = "a regular file" if stat.S_ISREG(info.st_mode) else file_kind(info.st_mode)
        return f"cache directory {str(directory)!r} is {kind}, not a directory"
    problem = untrusted(info)
    if problem is None:
        return None
    return (f"cache directory {str(directory)!r} is {problem}; a cache is used only in a "
            "directory this user owns and nobody else may write (chmod go-w, or set "
            f"{ENV_CACHE_DIR} to a private directory)")


def _unreplaceable(path: Path) -> str | None:
    """What ``path`` is when it exists and a write must not replace it (None: it may). A
    symbolic link to a regular file may be replaced: the rename replaces the link, never its
    target."""
    if not os.path.lexists(path) or path.is_file():
        return None
    if path.is_dir():
        return "a directory"
    try:
        kind = file_kind(os.stat(path).st_mode)
    except OSError:
        kind = "a dangling symbolic link"
    return f"not a regular file ({kind})"


def _file_parent(path: Path) -> Path | None:
    """The nearest existing ancestor of ``path`` when it is not a directory (None: fine)."""
    for parent in path.parents:
        if os.path.lexists(parent):
            return None if parent.is_dir() else parent
    return None


def replace_refusal(path: Path) -> str | None:
    """Why an atomic write must not replace ``path``, or None when it may.

    The rename replaces whatever ``path`` names, so only a regular file (or nothing) may be
    there: not a directory, a device node (``/dev/null``: as root the rename would replace it),
    a FIFO or a socket. A parent that exists but is not a directory is refused too.
    Callers check early (options, command line) so a user gets a usage error, not a traceback;
    :func:`write_atomic_bytes` checks again when it writes.
    """
    kind = _unreplaceable(path)
    if kind is not None:
        return f"{str(path)!r} exists and is {kind}; give the path of a regular file to write"
    parent = _file_parent(path)
    if parent is not None:
        return f"{str(parent)!r} is not a directory, so {str(path)!r} cannot be written"
    return None


def check_replaceable(path: Path) -> None:
    """Raise :class:`UnsafeFileError` when ``path`` exists and must not be replaced."""
    kind = _unreplaceable(path)
    if kind is not None:
        raise UnsafeFileError(str(path), f"exists and is {kind}; devcaps only replaces "
                                         "regular files")


def write_atomic(path: Path, text: str, *, private: bool = False) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically; see :func:`write_atomic_bytes`."""
    write_atomic_bytes(path, text.encode("utf-8"), private=private)


#: Called with the complete temporary file's descriptor before it is renamed over the target:
#: set its mode and owner, check the target was not changed meanwhile (raise to abort).
Prepare = Callable[[int], None]


def write_atomic_bytes(path: Path, data: bytes, *, private: bool = False,
                       prepare: Prepare | None = None, durable: bool = False) -> None:
    """Write ``data`` beside ``path``, then rename it over ``path`` (``os.replace`` is atomic
    on POSIX and Windows). Creates missing parent directories. The file gets mode 0666 less
    the umask, as ``open()`` would create it; ``private``: 0600, new directories 0700 (caches).
    Raises :class:`UnsafeFileError` when ``path`` is a directory, FIFO, device or socket; on
    any failure no temporary file is left and the old file is untouched. Temporary files of
    killed writers of ``path`` are removed first (:func:`remove_stale_temporaries`).

    ``prepare(fd)`` runs on the complete temporary file just before the rename (it may
    ``fchmod``/``fchown`` it, or raise to abort the write); ``durable`` fsyncs the file before
    the rename and the folder after it."""
    path = Path(path)
    check_replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True, **({"mode": 0o700} if private else {}))
    mode = _PRIVATE_MODE if private else _PUBLIC_MODE
    remove_stale_temporaries(path)
    if _write_unnamed(path, data, mode, prepare, durable):
        return
    tmp, fd = _create_named(path, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            _finish(handle, prepare, durable)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    _replace(tmp, path, durable)


def _replace(tmp: str, path: Path, durable: bool) -> None:
    """Rename the finished temporary file over ``path`` (removed if that fails), then make the
    rename itself durable where asked."""
    try:
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    if durable:
        _fsync_dir(path.parent)


def _finish(handle: BinaryIO, prepare: Prepare | None, durable: bool) -> None:
    handle.flush()
    if durable:
        os.fsync(handle.fileno())
    if prepare is not None:
        prepare(handle.fileno())


def _fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (POSIX; a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


_HOST = f"{zlib.crc32(os.uname().nodename.encode()) if hasattr(os, 'uname') else 0:08x}"


def _temp_name(path: Path) -> str:
    """``.<name>.<host>-<pid>-<random>.tmp`` beside ``path``: the next writer can tell whether
    the process that left it is gone."""
    return str(path.parent / f".{path.name}.{_HOST}-{os.getpid()}-{os.urandom(4).hex()}.tmp")


def _create_named(path: Path, mode: int) -> tuple[str, int]:
    for _ in range(16):
        tmp = _temp_name(path)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
            return tmp, os.open(tmp, flags | getattr(os, "O_NOFOLLOW", 0), mode)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path))


def remove_stale_temporaries(path: Path, *, now: float | None = None) -> list[str]:
    """Remove the temporary files a killed writer of ``path`` left beside it: ours (this user's
    regular files named as :func:`_temp_name` names them) whose writer is gone from this host,
    or older than :data:`STALE_TEMP_S`. Returns the names removed; never raises."""
    prefix, removed = f".{path.name}.", list[str]()
    now = time.time() if now is None else now
    try:
        entries = [e for e in os.scandir(path.parent)
                   if e.name.startswith(prefix) and e.name.endswith(".tmp")]
    except OSError:
        return removed
    for entry in entries:
        if _stale(entry, entry.name[len(prefix):-len(".tmp")], now):
            try:
                os.unlink(entry.path)
                removed.append(entry.name)
            except OSError:
                pass
    return removed


def _stale(entry: os.DirEntry[str], tag: str, now: float) -> bool:
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return False
    getuid = getattr(os, "getuid", None)
    if not stat.S_ISREG(info.st_mode) or (getuid is not None and info.st_uid != getuid()):
        return False
    if now - info.st_mtime > STALE_TEMP_S:
        return True
    host, _, rest = tag.partition("-")
    pid_text = rest.partition("-")[0]
    return host == _HOST and pid_text.isdigit() and not _alive(int(pid_text))


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def _write_unnamed(path: Path, data: bytes, mode: int = _PUBLIC_MODE,
                   prepare: Prepare | None = None, durable: bool = False) -> bool:
    """Linux: write into an ``O_TMPFILE`` file, link it under a temporary name once complete
    and rename that over ``path``. False (nothing written) where the platform or the file
    system cannot, so the caller falls back to a named temporary file."""
    flag = getattr(os, "O_TMPFILE", None)
    if flag is None or not _unnamed_links[0] or not os.path.isdir("/proc/self/fd"):
        return False
    try:
        fd = os.open(path.parent, flag | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError:  # EOPNOTSUPP, EISDIR, EINVAL: this file system has no unnamed files
        return False
    try:
        with os.fdopen(fd, "wb", closefd=False) as handle:
            handle.write(data)
            _finish(handle, prepare, durable)
        tmp = _link_unnamed(fd, path)
    finally:
        os.close(fd)
    if tmp is None:
        return False
    _replace(tmp, path, durable)
    return True


def _link_unnamed(fd: int, path: Path) -> str | None:
    """Give the complete unnamed file a temporary name beside ``path`` (None: cannot)."""
    for _ in range(8):
        tmp = _temp_name(path)
        try:
            os.link(f"/proc/self/fd/{fd}", tmp)  # linkat(AT_SYMLINK_FOLLOW) names the fd's file
        except FileExistsError:
            continue
        except OSError:
            _unnamed_links[0] = False  # the next writes go straight to a named file
            return None
        return tmp
    return None


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


#: The earlier name of the constant (the table in ``_util.environ`` is the source).
CACHE_ENV = ENV_CACHE_DIR


def default_cache_dir() -> Path:
    """``$PYTEST_DEVCAPS_CACHE_DIR``, else ``$XDG_CACHE_HOME/pytest-devcaps``, else ``~/.cache/...``."""
    explicit = os.environ.get(ENV_CACHE_DIR)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pytest-devcaps"
