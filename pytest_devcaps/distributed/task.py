"""The records that travel between the parent and its ranks (as pickle files in the run directory)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Callable

TASK_FILE = "task.pkl"


class NotImportableError(TypeError):
    """The rank function cannot be found by name in a fresh interpreter."""


@dataclass(frozen=True)
class FunctionRef:
    """Where a module-level function lives, so a fresh interpreter can import it."""

    module: str
    qualname: str
    file: str | None

    @classmethod
    def of(cls, fn: Callable[..., Any]) -> FunctionRef:
        module = getattr(fn, "__module__", None)
        qualname = getattr(fn, "__qualname__", None)
        if not callable(fn) or not module or not qualname:
            raise NotImportableError(f"distributed.run needs a function, got {fn!r}")
        hint = ("define it at module level of an importable module (a test module is fine) "
                "so each rank, a fresh interpreter, can import it by name")
        if "<locals>" in qualname or "<lambda>" in qualname:
            raise NotImportableError(
                f"distributed.run cannot send {module}.{qualname} to the ranks: it is a local "
                f"function or lambda; {hint}")
        if module == "__main__":
            raise NotImportableError(
                f"distributed.run cannot send {qualname}: it lives in __main__; {hint}")
        try:
            file = inspect.getsourcefile(fn)
        except TypeError:
            file = None
        ref = cls(module=module, qualname=qualname, file=file)
        if ref._lookup(sys.modules.get(module)) is not fn:
            raise NotImportableError(
                f"distributed.run cannot send {module}.{qualname}: that name does not resolve to "
                f"the function passed (decorated or replaced?); {hint}")
        return ref

    def _lookup(self, module: Any) -> Any:
        target = module
        for part in self.qualname.split("."):
            target = getattr(target, part, None)
        return target

    def resolve(self) -> Callable[..., Any]:
        """Import the module (by name, else from its file under the same name) and find the function."""
        try:
            module = importlib.import_module(self.module)
        except ImportError:
            if not self.file:
                raise
            spec = importlib.util.spec_from_file_location(self.module, self.file)
            if spec is None or spec.loader is None:
                raise
            module = importlib.util.module_from_spec(spec)
            sys.modules[self.module] = module
            spec.loader.exec_module(module)
        fn = self._lookup(module)
        if not callable(fn):
            raise NotImportableError(f"{self.qualname} not found in module {self.module}")
        return fn  # type: ignore[no-any-return]

    def __str__(self) -> str:
        return f"{self.module}.{self.qualname}"


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
