"""The records that travel between the parent and its ranks (as pickle files in a task directory)."""

from __future__ import annotations

import sys
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from pytest_devcaps._util.qualnames import qualified_name, resolve, source_file

TASK_FILE = "task.pkl"


@dataclass(frozen=True)
class FunctionRef:
    """A module-level function by name (``module:qualname``, and its file), so a fresh
    interpreter can import it."""

    target: str
    file: str | None

    @classmethod
    def of(cls, fn: Callable[..., Any]) -> FunctionRef:
        """Raises :class:`NotImportableError` when a rank could not import ``fn`` by name."""
        return cls(target=qualified_name(fn, "distributed.run"), file=source_file(fn))

    def resolve(self) -> Callable[..., Any]:
        """Import the module (by name, else from its file under the same name) and find the function."""
        return resolve(self.target, self.file)

    def __str__(self) -> str:
        return self.target.replace(":", ".", 1)


@dataclass(frozen=True)
class Task:
    """Everything a rank needs; ``args`` is pickled separately, after the function's module is imported."""

    function: FunctionRef
    args: bytes
    world_size: int
    device: str
    backend: str
    pg_timeout_s: float
    sys_path: tuple[str, ...]
    cwd: str
    """The caller's working directory (a reused rank changes to it for each task)."""


@dataclass(frozen=True)
class RankOutcome:
    """What one rank reports: ``status`` is ``ok``, ``error`` or ``skipped``.

    ``value`` is the pickled return value (ok), ``message`` the traceback (error) or skip reason,
    ``summary`` the exception's type and first line (error).
    """

    rank: int
    status: str
    value: bytes = b""
    message: str = ""
    summary: str = ""

    @classmethod
    def from_exception(cls, rank: int, exc: BaseException) -> RankOutcome:
        """The outcome of a body that raised ``exc``: ``skipped`` with the reason for pytest's
        ``Skipped`` (``pytest.skip``), else ``error`` with the traceback and a one-line summary."""
        reason = _skip_reason(exc)
        if reason is not None:
            return cls(rank=rank, status="skipped", message=reason)
        first = (str(exc).strip().splitlines() or [""])[0]
        return cls(rank=rank, status="error",
                   message="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
                   summary=f"{type(exc).__name__}: {first}" if first else type(exc).__name__)


def _skip_reason(exc: BaseException) -> str | None:
    """The reason of pytest's Skipped (pytest is only looked up if the body already imported it)."""
    outcomes = sys.modules.get("_pytest.outcomes")
    if outcomes is not None and isinstance(exc, outcomes.Skipped):
        return str(exc.msg)
    return None
