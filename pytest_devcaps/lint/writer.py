"""Safe reads and writes of the files ``devcaps lint --fix`` rewrites.

:func:`read_source` takes a snapshot of a file (its bytes and what ``os.stat`` said of it);
:func:`write_source` writes a new text back over that file only when it is safe:

* **Bounded, non-blocking reads.** A FIFO, a device, a socket or a directory is refused at once
  (opened ``O_NONBLOCK``, checked with ``fstat`` before a byte is read: reading a FIFO would wait
  for a writer forever, ``/dev/zero`` never ends); so is a file over ``limit`` bytes.
* **Inside the tree.** The file, resolved through every symbolic link, must lie inside the tree
  the command was given (``root``: a folder, or a file whose folder is then the tree). A link
  inside the tree is written through (the link stays a link); a link that leads out of the tree
  is refused, never followed.
* **Not changed meanwhile.** Just before the rename the file is looked at again: when its size or
  its content digest differs from the snapshot (an editor saved it while the lint ran) nothing is
  written and :class:`FileChangedError` says so.
* **Atomic, durable, the same file.** The new text goes to a temporary file beside the target
  (``pytest_devcaps._util.files.write_atomic_bytes``: ``O_TMPFILE`` on Linux), is fsynced, gets the
  old file's permission bits and (where this user may) its owner and group, and is renamed over
  the target; the folder is fsynced. A reader sees the old file or the new one, never a mix.
* **Same bytes on disk as a person would expect.** The text is encoded as the file was: its
  ``# coding:`` declaration, a UTF-8 byte-order mark kept, and when every line of the old file
  ended in CRLF (or CR) the new lines do too. A character the encoding cannot hold is an error,
  not a ``?``.

Everything is linear in the size of the file. Errors are :class:`LintWriteError`
(a :class:`~pytest_devcaps.errors.DevcapsError`); nothing here imports torch or LibCST.
"""

from __future__ import annotations

import codecs
import hashlib
import io
import os
import stat
import tokenize
from dataclasses import dataclass
from pathlib import Path

from pytest_devcaps.errors import DevcapsError, UnsafeFileError
from pytest_devcaps._util.files import file_kind, read_regular_file, write_atomic_bytes

#: The largest source file the lint reads or rewrites (a 20,000-line test file is about 1 MiB).
MAX_SOURCE_BYTES = 8 * 2**20


class LintWriteError(DevcapsError):
    """A file ``devcaps lint`` will not read or rewrite; the message names the file and why."""


class OutsideTreeError(LintWriteError):
    """The file (through a symbolic link) lies outside the tree the command was given."""


class FileChangedError(LintWriteError):
    """The file changed on disk after the lint read it; rewriting it would lose that change."""


@dataclass(frozen=True)
class SourceSnapshot:
    """A file as the lint read it: where it really is, its bytes and its ``stat``."""

    path: Path  # as given
    real: Path  # every symbolic link resolved: the file that is read and replaced
    data: bytes
    mode: int
    uid: int
    gid: int
    size: int
    mtime_ns: int
    digest: str

    @property
    def encoding(self) -> str:
        """The source encoding (``utf-8-sig`` with a BOM, a ``# coding:`` line, else UTF-8)."""
        return _detect_encoding(self.path, self.data)

    @property
    def newline(self) -> str | None:
        """``"\\r\\n"`` or ``"\\r"`` when every line break of the file is that; None otherwise."""
        return _uniform_newline(self.data)

    def text(self) -> str:
        """The decoded text, line endings as they are (``\\r\\n`` stays ``\\r\\n``)."""
        try:
            return self.data.decode(self.encoding)
        except UnicodeDecodeError as exc:
            line = self.data[: exc.start].count(b"\n") + 1
            raise LintWriteError(f"{self.path}:{line}: cannot decode as {self.encoding}: "
                                 f"{exc.reason}") from None


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _detect_encoding(path: Path, data: bytes) -> str:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:  # an unknown `# coding:` or a BOM that contradicts it
        raise LintWriteError(f"{path}: {exc.msg}") from None
    return encoding


def _uniform_newline(data: bytes) -> str | None:
    crlf = data.count(b"\r\n")
    cr, lf = data.count(b"\r") - crlf, data.count(b"\n") - crlf
    if crlf and not cr and not lf:
        return "\r\n"
    if cr and not crlf and not lf:
        return "\r"
    return None


def tree_of(root: str | os.PathLike[str]) -> Path:
    """The folder a command-line path stands for, symbolic links resolved: the folder itself,
    or for a file the folder it was named in (not where a link would take it)."""
    given = Path(os.path.abspath(root))
    folder = given if given.is_dir() else given.parent
    return folder.resolve()


def _inside(path: Path, root: str | os.PathLike[str] | None) -> Path:
    """``path`` with every link resolved; OutsideTreeError when that leaves ``root``'s tree."""
    try:
        real = Path(os.path.realpath(path, strict=True))
    except OSError as exc:  # missing, or a loop of links
        raise LintWriteError(f"{path}: cannot resolve: {exc.strerror or exc}") from None
    if root is not None:
        tree = tree_of(root)
        if real != tree and tree not in real.parents:
            raise OutsideTreeError(f"{path}: resolves to {real}, outside {tree} (the tree given "
                                   "on the command line); a symbolic link out of the tree is "
                                   "never followed for writing")
    return real


def read_source(path: str | os.PathLike[str], limit: int = MAX_SOURCE_BYTES, *,
                root: str | os.PathLike[str] | None = None) -> SourceSnapshot:
    """Read ``path`` without ever blocking: refuse (LintWriteError) a FIFO, device, socket or
    folder before reading, a file over ``limit`` bytes, and, given ``root``, a file whose real
    location is outside that tree."""
    given = Path(path)
    real = _inside(given, root)
    try:
        data, info = _read_with_stat(real, limit)
    except UnsafeFileError as exc:
        raise LintWriteError(f"{given}: {exc.reason}") from None
    except OSError as exc:
        raise LintWriteError(f"{given}: cannot read: {exc.strerror or exc}") from None
    return SourceSnapshot(given, real, data, stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid,
                          len(data), info.st_mtime_ns, _digest(data))


def _read_with_stat(real: Path, limit: int) -> tuple[bytes, os.stat_result]:
    """The bytes (files.read_regular_file: O_NONBLOCK, fstat before reading) and a ``stat``
    taken before them, so a write during the read shows up as a change later."""
    before = os.stat(real)
    if not stat.S_ISREG(before.st_mode):  # say what it is without opening it
        raise UnsafeFileError(str(real), f"{file_kind(before.st_mode)}, not a regular file; "
                                         "devcaps lint reads only regular files")
    return read_regular_file(real, limit=limit), before


def read_source_text(path: str | os.PathLike[str],
                     limit: int = MAX_SOURCE_BYTES) -> str | tuple[int, int, str]:
    """Drop-in for ``lint.source.read_text`` that never blocks: the text, or (line, column, why)
    when the file cannot be read (a FIFO, a device, too large...) or decoded."""
    try:
        snapshot = read_source(path, limit)
    except LintWriteError as exc:
        why = str(exc).split(": ", 1)[-1]
        return 1, 1, why if why.startswith("cannot ") else f"cannot read: {why}"
    try:
        return snapshot.data.decode(snapshot.encoding)
    except LintWriteError as exc:  # the encoding itself: an unknown `# coding:`
        return 1, 1, f"cannot decode: {str(exc).split(': ', 1)[-1]}"
    except UnicodeDecodeError as exc:
        return snapshot.data[: exc.start].count(b"\n") + 1, 1, f"cannot decode: {exc}"


def encode_source(snapshot: SourceSnapshot, text: str) -> bytes:
    """``text`` as the file's bytes: its encoding and BOM, and its uniform line ending when it
    had one (CRLF files stay CRLF whatever line breaks the rewrite added)."""
    newline = snapshot.newline
    if newline is not None:
        text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", newline)
    encoding = snapshot.encoding
    if encoding == "utf-8-sig" and text.startswith("\ufeff"):
        text = text[1:]  # the codec writes the mark; a text that kept it would get two
    try:
        return codecs.encode(text, encoding)
    except UnicodeEncodeError as exc:
        line = text.count("\n", 0, exc.start) + 1
        raise LintWriteError(f"{snapshot.path}:{line}: the new text has {exc.object[exc.start]!r},"
                             f" which the file's encoding ({encoding}) cannot hold; "
                             "nothing written") from None


def write_source(snapshot: SourceSnapshot, text: str, *,
                 root: str | os.PathLike[str] | None = None) -> bool:
    """Replace the file ``snapshot`` was read from with ``text``, safely (see the module);
    False when the bytes would not change (nothing is written then). Raises
    :class:`FileChangedError` when the file changed since the snapshot,
    :class:`OutsideTreeError` when it now resolves outside ``root``'s tree, and
    :class:`LintWriteError` for every other refusal or failure (read-only file or folder...)."""
    data = encode_source(snapshot, text)
    if data == snapshot.data:
        return False
    real = _inside(snapshot.path, root)
    if real != snapshot.real:
        raise FileChangedError(f"{snapshot.path}: now resolves to {real}, not {snapshot.real} as "
                               "when it was read; nothing written")
    if not os.access(real, os.W_OK):
        raise LintWriteError(f"{snapshot.path}: not writable by this user (mode "
                             f"{snapshot.mode:o}); nothing written")
    try:
        write_atomic_bytes(real, data, prepare=lambda fd: _prepare(fd, snapshot), durable=True)
    except UnsafeFileError as exc:  # replaced by a folder, FIFO... since it was read
        raise FileChangedError(f"{snapshot.path}: {exc.reason}; nothing written") from None
    except OSError as exc:
        raise LintWriteError(f"{snapshot.path}: cannot write: {exc.strerror or exc}"
                             f"{'' if exc.filename is None else f' ({exc.filename})'}; "
                             "the file is unchanged") from None
    return True


def _prepare(fd: int, snapshot: SourceSnapshot) -> None:
    """The new file gets the old one's mode and (where permitted) owner; then, as late as
    possible before the rename, the old file is checked to be the one that was read."""
    if not hasattr(os, "fchmod"):  # Windows: no POSIX mode bits or owners to keep
        _check_unchanged(snapshot)
        return
    os.fchmod(fd, snapshot.mode)
    if hasattr(os, "fchown") and (snapshot.uid, snapshot.gid) != _owner(fd):
        try:
            os.fchown(fd, snapshot.uid, snapshot.gid)
        except PermissionError:  # only root may give a file away; keep what we may
            try:
                os.fchown(fd, -1, snapshot.gid)
            except PermissionError:
                pass
            os.fchmod(fd, snapshot.mode)  # chown can clear set-id bits
    _check_unchanged(snapshot)


def _owner(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_uid, info.st_gid


def _check_unchanged(snapshot: SourceSnapshot) -> None:
    try:
        info = os.stat(snapshot.real)
        data = read_regular_file(snapshot.real, limit=max(snapshot.size, MAX_SOURCE_BYTES))
    except (OSError, UnsafeFileError) as exc:
        raise FileChangedError(f"{snapshot.path}: changed while devcaps lint ran (now "
                               f"{getattr(exc, 'reason', None) or getattr(exc, 'strerror', exc)});"
                               " nothing written") from None
    if len(data) != snapshot.size or _digest(data) != snapshot.digest:
        when = "modified" if info.st_mtime_ns != snapshot.mtime_ns else "same modification time"
        raise FileChangedError(f"{snapshot.path}: changed while devcaps lint ran ({when}, "
                               f"{snapshot.size} -> {len(data)} bytes, content differs); "
                               "nothing written: run the lint again")
