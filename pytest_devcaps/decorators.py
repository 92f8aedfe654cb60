"""Decorators that work with and without pytest.

``from pytest_devcaps import requires_capability, requires_devices, requires_ranks, requires_memory,
skip_on, xfail_on, tolerance, hardware`` decorate test functions, ``unittest.TestCase`` methods and
TestCase classes. Each puts the pytest mark of the same name on the test, so under pytest it is
exactly the marker; outside pytest (``python -m unittest``, PyTorch's ``run_tests``) the test
is checked by :mod:`pytest_devcaps.testcase` before it runs and skipped with
``unittest.SkipTest`` carrying the reason text pytest shows. A keyword the marker does not take
fails at decoration, naming the closest one.

On a TestCase class, ``run()`` is wrapped so that the skip comes before ``setUp`` (as with
``@unittest.skip``); a decorated method alone is checked when it is called. ``requires_ranks``
on a method, decorated in its class's body, wraps that class's ``run()`` too: a multi-process class
runs the method only in the ranks it spawns in ``setUp``, so a check at the call would come after
the world started (and a world of 0 ranks would never call it).
``requires_capabilities`` is ``requires_capability`` under the name of PyTorch's decorator.
"""

from __future__ import annotations

import functools
import inspect
import sys
import unittest
from types import FrameType
from typing import Any, Callable, TypeVar

import pytest

from pytest_devcaps.errors import DevcapsTypeError
from pytest_devcaps.marks import hardware as _classes
from pytest_devcaps.marks.evaluation import check_keywords
from pytest_devcaps.testcase import checked_call, guard

T = TypeVar("T")
_CHECKED = "__devcaps_checked__"

__all__ = ["hardware", "requires_capabilities", "requires_capability", "requires_devices",
           "requires_memory", "requires_ranks", "skip_on", "tolerance", "xfail_on"]


def _guard_class(cls: type) -> None:
    """Wrap ``cls.run`` once so that the marks are honoured before ``setUp``."""
    if not issubclass(cls, unittest.TestCase) or cls.__dict__.get(_CHECKED):
        return
    own = cls.__dict__.get("run")

    def run(self: unittest.TestCase, result: Any = None) -> Any:
        guard(self)
        if own is not None:
            return own(self, result)
        return super(cls, self).run(result)  # type: ignore[misc]

    run.__doc__ = getattr(own, "__doc__", None)
    setattr(cls, "run", run)
    setattr(cls, _CHECKED, True)


class _GuardWhenDefined:
    """Left in a class body by a method decorator: once the class exists (``__set_name__``,
    PEP 487), it removes itself and guards the class's ``run()`` as a class decorator does."""

    def __set_name__(self, owner: type, name: str) -> None:
        delattr(owner, name)  # type.__new__ iterates over a copy of the namespace
        _guard_class(owner)


_GUARD_NAME = "__devcaps_guard_run__"


def _guard_defining_class(function: Callable[..., Any]) -> None:
    """Where ``function`` is being decorated in its class's body (its ``__qualname__`` names the
    class), have that class's ``run()`` guarded once it is made. Elsewhere (a module function, a
    method decorated after its class was made) nothing: the call-time check remains."""
    owner = getattr(function, "__qualname__", "").rpartition(".")[0]
    if not owner or owner.endswith(">"):  # a module function, or one local to a function
        return
    frame: FrameType | None = sys._getframe(2)
    for _ in range(8):  # the class body calls decorate (or a helper a few frames down does)
        if frame is None:
            return
        if not frame.f_code.co_flags & inspect.CO_OPTIMIZED:  # a class or module body: f_locals
            namespace = frame.f_locals                          # is its namespace itself
            if namespace.get("__qualname__") == owner and \
                    namespace.get("__module__") == function.__module__:
                namespace.setdefault(_GUARD_NAME, _GuardWhenDefined())
                return
        frame = frame.f_back


def _checked(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` wrapped (once) to honour its marks when pytest does not run it."""
    if getattr(function, _CHECKED, False):
        return function

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return checked_call(wrapper, function, args, kwargs)

    setattr(wrapper, _CHECKED, True)
    return wrapper


def _decorator(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[T], T]:
    check_keywords(name, kwargs)
    mark = getattr(pytest.mark, name)(*args, **kwargs)

    def decorate(target: T) -> T:
        if isinstance(target, type):
            _guard_class(target)
            return mark(target)  # type: ignore[no-any-return]
        if not callable(target):
            raise DevcapsTypeError(f"@{name}(...) decorates test functions, methods and classes, "
                                   f"not {target!r}")
        return mark(_checked(target))  # type: ignore[no-any-return]

    return decorate


def requires_capability(*capabilities: str, any_of: Any = None, native: bool = False) -> Callable[[T], T]:
    """Skip unless the test's device has every capability (and one of ``any_of``)."""
    kwargs: dict[str, Any] = {"native": native} if native else {}
    if any_of is not None:
        kwargs["any_of"] = any_of
    return _decorator("requires_capability", capabilities, kwargs)


def requires_capabilities(*capabilities: Any) -> Callable[[T], T]:
    """PyTorch's ``@requires_capabilities(...)`` (PR #190846) answered by devcaps: names are
    ``"<category>.<name>"`` strings (or enum members whose value is one)."""
    return requires_capability(*[str(getattr(c, "value", c)) for c in capabilities])


def requires_devices(count: int, **kwargs: Any) -> Callable[[T], T]:
    """Skip unless ``count`` devices of the test's device type are present."""
    return _decorator("requires_devices", (count,), kwargs)


def requires_ranks(count: int, **kwargs: Any) -> Callable[[T], T]:
    """On a multi-process test class (``MultiProcessTestCase``, ``FSDPTest``, ``DTensorTestBase``...):
    skip unless the world it spawns has ``count`` ranks, on a device type with a process-group
    backend (and, on an accelerator, ``count`` devices unless ranks may share one); checked before
    ``setUp`` (:mod:`pytest_devcaps.marks.multiprocess`)."""
    inner = _decorator("requires_ranks", (count,), kwargs)

    def decorate(target: T) -> T:
        if not isinstance(target, type) and callable(target):
            _guard_defining_class(target)
        return inner(target)

    return decorate


def requires_memory(size: int | str, **kwargs: Any) -> Callable[[T], T]:
    """Skip unless the device has ``size`` memory (``"24GiB"`` = 24 * 2**30 bytes, ``"24GB"``
    = 24 * 10**9); ``free=True`` checks free memory, ``per_allocation=`` one allocation."""
    return _decorator("requires_memory", (size,), kwargs)


def skip_on(when: str, **kwargs: Any) -> Callable[[T], T]:
    """Skip where a condition over device facts holds (``reason=`` required)."""
    return _decorator("skip_on", (when,), kwargs)


def xfail_on(when: str, **kwargs: Any) -> Callable[[T], T]:
    """Expect failure where a condition over device facts holds (``reason=``, ``strict=``,
    ``raises=``)."""
    return _decorator("xfail_on", (when,), kwargs)


def tolerance(**kwargs: Any) -> Callable[[T], T]:
    """Per-device tolerance: ``tolerance(dtype=torch.float16, atol=1e-3, rtol=1e-3, when=...)``."""
    return _decorator("tolerance", (), kwargs)


def hardware(classification: Any, **kwargs: Any) -> Callable[[T], T]:
    """The hardware class of a test or class: ``generic``, ``accelerator``, a device type or
    vendor. On a class it also sets ``hw_classification``, the attribute PyTorch reads."""
    check_keywords(_classes.MARKER, kwargs)
    value = _classes.normalise(classification)
    inner = _decorator(_classes.MARKER, (value,), {})

    def decorate(target: T) -> T:
        if isinstance(target, type):
            setattr(target, _classes.ATTRIBUTE, value)
        return inner(target)

    return decorate
