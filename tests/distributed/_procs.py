"""Process inspection through /proc for the harness tests (Linux)."""

from __future__ import annotations

from pathlib import Path

HAVE_PROC = Path("/proc/self/stat").exists()


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def gone(pid: int) -> bool:
    """The process exited (a zombie only waits for its parent to reap it)."""
    return _state(pid) in (None, "Z")


def children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found
