"""The tests ``instantiate_device_type_tests`` would generate on a host of another device type.

A plan against a profile (``--devcaps-profile nvidia-h100``) runs on a machine without that
device: PyTorch generated only this host's classes (``TestFooCPU``), and deleted the generic
tests from the generic class (torch 2.13 ``common_device_type.py:1095``). In plan mode,
:func:`start_recording` wraps ``instantiate_device_type_tests`` (the module's attribute, before
any test module imports it; nothing else changes) to keep each call's generic class, its test
functions and arguments. :func:`generate` then makes the classes a host of the profile's device
type would make, with PyTorch's own ``instantiate_test`` on a test base of that type whose
device queries answer from the profile (``cuda:0`` and the profile's device count) instead of
the runtime: the same names, dtypes (``dtypesIfCUDA``), parametrizations and decorators.

Which test bases such a host uses mirrors ``get_device_type_test_bases`` /
``get_desired_device_type_test_bases`` (``common_device_type.py:825`` and ``:941``): CPU always,
CUDA and HPU when present, MPS with ``allow_mps``, XPU with ``allow_xpu``; then torch's own
``filter_desired_device_types`` with the call's ``only_for`` / ``except_for`` and the
``PYTORCH_TESTING_DEVICE_ONLY_FOR`` / ``_EXCEPT_FOR`` variables; then the base's
``test_exclusions`` (``:1030``), whose tests are not generated (the plan lists them as skipped).
"""

from __future__ import annotations

import copy
import functools
import importlib.abc
import importlib.machinery
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

CDT = "torch.testing._internal.common_device_type"
CDT_FILE = "torch/testing/_internal/common_device_type.py"
#: device type -> the test base class PyTorch uses for it, and who decides it is used.
BASES = {"cpu": ("CPUTestBase", None), "cuda": ("CUDATestBase", None),
         "hpu": ("HPUTestBase", None), "mps": ("MPSTestBase", "allow_mps"),
         "xpu": ("XPUTestBase", "allow_xpu")}


@dataclass
class Instantiation:
    """One ``instantiate_device_type_tests`` call as it was made."""

    generic: type
    tests: dict[str, Any]
    module: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class Generated:
    """One test a host of ``device_type`` would generate."""

    class_name: str
    name: str
    function: Any
    generic_class: str
    generic_test: str
    device_class: type


@dataclass
class Generation:
    """What a host of one device type would make of one instantiation."""

    instantiation: Instantiation
    device_type: str
    tests: list[Generated] = field(default_factory=list)
    excluded: list[tuple[str, str]] = field(default_factory=list)
    """(generic test or ``*``, why): ``test_exclusions`` of the base, not generated."""
    not_generated: str | None = None
    """Why this host makes no class of it at all (``only_for``, no test base for the type)."""
    errors: list[tuple[str, str]] = field(default_factory=list)
    """(generic test, error): PyTorch could not instantiate it for this type."""


RECORDED: list[Instantiation] = []


def _recording(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def instantiate_device_type_tests(generic_test_class: Any, scope: Any, except_for: Any = None,
                                      only_for: Any = None, include_lazy: bool = False,
                                      allow_mps: bool = False, allow_xpu: bool = False) -> Any:
        tests = {name: value for name, value in vars(generic_test_class).items()
                 if name.startswith("test")}
        RECORDED.append(Instantiation(generic_test_class, tests, generic_test_class.__module__, {
            "except_for": except_for, "only_for": only_for, "include_lazy": include_lazy,
            "allow_mps": allow_mps, "allow_xpu": allow_xpu}))
        return original(generic_test_class, scope, except_for, only_for, include_lazy,
                        allow_mps, allow_xpu)

    instantiate_device_type_tests.__devcaps_recording__ = original  # type: ignore[attr-defined]
    return instantiate_device_type_tests


def _patch(module: Any) -> None:
    current = getattr(module, "instantiate_device_type_tests", None)
    if current is not None and not hasattr(current, "__devcaps_recording__"):
        module.instantiate_device_type_tests = _recording(current)


class _Loader(importlib.abc.Loader):
    """The module's own loader, then the patch."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of ``common_device_type`` when it is imported."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != CDT:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


_FINDER = _Finder()


def start_recording() -> None:
    """Record every ``instantiate_device_type_tests`` call from now on (plan mode only)."""
    RECORDED.clear()
    if CDT in sys.modules:
        _patch(sys.modules[CDT])
    elif _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def stop_recording() -> None:
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    module = sys.modules.get(CDT)
    current = getattr(module, "instantiate_device_type_tests", None)
    original = getattr(current, "__devcaps_recording__", None)
    if original is not None:
        module.instantiate_device_type_tests = original  # type: ignore[union-attr]


# -- generating ----------------------------------------------------------------------------------

def _plan_base(base: type, device_type: str, count: int) -> type:
    """``base`` whose device queries answer from a profile: PyTorch's instantiate_test asks
    them (``_init_and_get_primary_device``, ``get_all_devices``), the runtime is never asked."""
    primary = device_type if device_type == "cpu" else f"{device_type}:0"
    devices = [primary] if device_type == "cpu" else [f"{device_type}:{i}" for i in range(max(count, 1))]
    namespace = {
        "get_primary_device": classmethod(lambda cls: primary),
        "_init_and_get_primary_device": classmethod(lambda cls: primary),
        "get_all_devices": classmethod(lambda cls: list(devices)),
        "setUpClass": classmethod(lambda cls: None),
        "__module__": base.__module__,
    }
    return type(base.__name__, (base,), namespace)


def _host_uses(cdt: Any, base: type, device_type: str, arguments: Mapping[str, Any]) -> str | None:
    """Why a host of ``device_type`` would make no class from this call, or None."""
    allow = BASES[device_type][1]
    if allow is not None and not arguments.get(allow):
        return f"instantiate_device_type_tests without {allow}=True makes no {device_type} class"
    try:
        kept = list(cdt.filter_desired_device_types([base], arguments.get("except_for"),
                                                    arguments.get("only_for")))
        for name in ("PYTORCH_TESTING_DEVICE_EXCEPT_FOR", "PYTORCH_TESTING_DEVICE_ONLY_FOR"):
            if os.environ.get(name):
                wanted = os.environ[name].split(",")
                kept = list(cdt.filter_desired_device_types(
                    kept, wanted if "EXCEPT" in name else None, wanted if "ONLY" in name else None))
    except AssertionError as error:
        return f"PyTorch refuses the call: {error}"
    if not kept:
        return (f"only_for={arguments.get('only_for')!r} / except_for="
                f"{arguments.get('except_for')!r} leave {device_type} out")
    return None


def generate(instantiation: Instantiation, device_type: str, count: int) -> Generation:
    """The tests a host with ``count`` devices of ``device_type`` would generate from it."""
    found = Generation(instantiation, device_type)
    cdt = sys.modules.get(CDT)
    base = getattr(cdt, BASES.get(device_type, ("", None))[0], None) if cdt is not None else None
    if base is None:
        found.not_generated = f"PyTorch has no test base for device type {device_type!r} here"
        return found
    found.not_generated = _host_uses(cdt, base, device_type, instantiation.arguments)
    if found.not_generated is not None:
        return found
    generic = instantiation.generic
    skipped = base._get_test_exclusions(generic.__name__)
    if "*" in skipped:
        found.excluded.append(("*", f"{base.__name__}.test_exclusions excludes {generic.__name__}"))
        return found
    plan_base = _plan_base(base, device_type, count)
    device_class = type(generic.__name__ + device_type.upper(), (plan_base, generic), {})
    device_class.__module__ = generic.__module__
    for name, test in instantiation.tests.items():
        if name in skipped:
            found.excluded.append((name, f"{base.__name__}.test_exclusions excludes "
                                         f"{generic.__name__}.{name}"))
            continue
        _instantiate(found, device_class, name, test, generic)
    return found


def _instantiate(found: Generation, device_class: type, name: str, test: Any, generic: type) -> None:
    before = set(vars(device_class))
    try:
        device_class.instantiate_test(name, copy.deepcopy(test), generic_cls=generic)  # type: ignore[attr-defined]
    except Exception as error:  # PyTorch's own refusal (dtypesIfCUDA without dtypes...)
        found.errors.append((name, f"{type(error).__name__}: {error}"))
        return
    for test_name in (n for n in vars(device_class) if n not in before):
        found.tests.append(Generated(device_class.__name__, test_name, vars(device_class)[test_name],
                                     generic.__name__, name, device_class))


def recorded_in(modules: Sequence[str]) -> list[Instantiation]:
    """The recorded calls of the given modules, in the order they were made."""
    wanted = set(modules)
    return [call for call in RECORDED if call.module in wanted]
