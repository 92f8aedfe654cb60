"""The records that travel between the parent and its ranks (as pickle files in the run directory)."""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any, Callable

from pytest_devcaps.qualnames import qualified_name, resolve, source_file

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
    parent_pid: int


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
    def failed(cls, rank: int, exc: BaseException) -> RankOutcome:
        """The outcome of a body that raised ``exc`` (call inside the ``except`` block)."""
        first = (str(exc).strip().splitlines() or [""])[0]
        return cls(rank=rank, status="error", message=traceback.format_exc(),
                   summary=f"{type(exc).__name__}: {first}" if first else type(exc).__name__)
