"""Atomic file writes: a reader sees the old file or the new one, never a torn one.

Plain standard library (no torch, no pytest): probe caches, reports and rank outcomes use it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically; see :func:`write_atomic_bytes`."""
    write_atomic_bytes(path, text.encode("utf-8"))


def write_atomic_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it over ``path``
    (``os.replace`` is atomic on POSIX and Windows). Creates missing parent directories;
    on failure the temporary file is removed and the error raised."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def replace_refusal(path: Path) -> str | None:
    """Why an atomic write must not replace ``path``, or None when it may.

    The rename replaces whatever ``path`` names, so only a regular file (or nothing) may be
    there: not a directory, a device node (``/dev/null``: as root the rename would replace it),
    a FIFO or a socket. A parent that exists but is not a directory is refused too.
    Callers check early (options, command line) so a user gets a usage error, not a traceback.
    """
    if os.path.lexists(path) and not path.is_file():
        kind = "a directory" if path.is_dir() else "not a regular file"
        return f"{str(path)!r} exists and is {kind}; give the path of a regular file to write"
    for parent in path.parents:
        if os.path.lexists(parent):
            if not parent.is_dir():
                return f"{str(parent)!r} is not a directory, so {str(path)!r} cannot be written"
            break
    return None
