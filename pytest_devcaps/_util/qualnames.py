"""Functions sent to a fresh interpreter by name: ``module:qualname`` made here, resolved there.

The probe child and each spawned rank import functions this way. Standard library only (the
probe child imports neither pytest nor the plugin).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from typing import Any, Callable

from pytest_devcaps.errors import DevcapsError

_HINT = "define it at module level of an importable module (a test module is fine)"


class NotImportableError(DevcapsError, TypeError):
    """A function cannot be found by name in a fresh interpreter."""


def qualified_name(fn: Callable[..., Any], who: str) -> str:
    """``module:qualname`` of ``fn``, checked that a fresh interpreter finds ``fn`` by it.

    Raises :class:`NotImportableError` (message starting with ``who``, e.g.
    ``"distributed.run"``) for a non-function, a local function or lambda, a function of
    ``__main__`` and a name that resolves to something else (a decorator that did not
    ``functools.wraps``, a replaced global).
    """
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not callable(fn) or not module or not qualname:
        raise NotImportableError(f"{who} needs a module-level function, got {fn!r}")
    dotted = f"{module}.{qualname}"
    if "<locals>" in qualname or "<lambda>" in qualname:
        why = "it is a local function or lambda"
    elif module == "__main__":
        why = "it lives in __main__, which a fresh interpreter does not run"
    elif _lookup(sys.modules.get(module), qualname) is not fn:
        why = "that name does not resolve to the function passed (decorated or replaced?)"
    else:
        return f"{module}:{qualname}"
    raise NotImportableError(f"{who}: {dotted} cannot be imported by name in a fresh "
                             f"interpreter: {why}; {_HINT}")


def source_file(fn: Callable[..., Any]) -> str | None:
    """The file ``fn`` was defined in, for :func:`resolve` when its module is not on the path."""
    try:
        return inspect.getsourcefile(fn)
    except TypeError:
        return None


def resolve(target: str, file: str | None = None) -> Callable[..., Any]:
    """Import ``module:qualname``: the module by name, else (given ``file``) from that file
    under the same module name. What the import raises propagates; :class:`NotImportableError`
    when the target is malformed, the file cannot be loaded, or the name is missing or not
    callable."""
    module_name, _, qualname = target.partition(":")
    if not module_name or not qualname:
        raise NotImportableError(f"{target!r} is not of the form module:qualname")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        if not file:
            raise
        module = _import_file(module_name, file)
    fn = _lookup(module, qualname)
    if not callable(fn):
        raise NotImportableError(f"{qualname} not found in module {module_name}")
    return fn  # type: ignore[no-any-return]


def _lookup(module: Any, qualname: str) -> Any:
    target = module
    for part in qualname.split("."):
        target = getattr(target, part, None)
    return target


def _import_file(module_name: str, file: str) -> Any:
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise NotImportableError(f"cannot import {module_name} from {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
