"""``requires_ranks(n)``: a multi-process test needs a world of at least ``n`` ranks on a device
type that has a process-group backend.

PyTorch's ``skip_if_lt_x_gpu(n)`` on a multi-process class (``MultiProcessTestCase``, ``FSDPTest``,
``DTensorTestBase``, ``MultiThreadedTestCase``...) counts accelerators: it says nothing of the world
the class spawns (zero ranks spawned "pass") nor of a backend for the device ("No backend type
associated with device type emu"), and it skips on the CPU, where ranks share the device and gloo
runs them. ``requires_ranks(n)`` says what such a test needs. The world is the class's, so it is
checked when the test is about to run (pytest's setup, the unittest bridge before ``setUp``), in
this order; the first unmet check is the skip, naming what is missing, the device type and class:

1. the world the class would spawn for the method, read as PyTorch's ``_start_processes`` reads it
   (:func:`~pytest_devcaps.marks.pytorch_gates.world_size_of`): fewer than ``n`` ranks (0 included)
   skips. PyTorch's "unset" world (``-2``, ``MultiProcContinuousTest``) is what the class's own
   ``_get_world_size`` makes of it (the device type's device count, common_distributed.py:2025);
2. the device type the world runs on (:func:`world_device_type`): the test's own ``device_type``
   (an attribute, property or classmethod, as on ``DTensorTestBase`` and the classes
   ``instantiate_device_type_tests`` makes), else the test module's global ``device_type`` (what a
   converted file defines), else ``torch.accelerator.current_accelerator(check_available=True)``,
   else ``cpu``. A value with an index (``"hpu:0"``) counts by its type;
3. ``torch.distributed`` in this build, a default backend for that device type
   (``dist.get_default_backend_for_device``, read by :func:`pytest_devcaps.runtime.default_dist_backend`)
   and that backend built into this torch (``dist.is_backend_available``: ``nccl`` is the CUDA
   default even in a CPU-only wheel);
4. on an accelerator, ``n`` devices of that type (the count PyTorch's gate checked), unless ranks may
   share one (``PYTEST_DEVCAPS_DIST_SHARE_DEVICES=1``: then one device is enough). On the CPU the
   ranks share the device.

A class without ``world_size`` (a plain TestCase, a pytest function) is a :class:`MarkerError` of
that test. The skips are :class:`~pytest_devcaps.marks.evaluation.Missing` records of kind
``devices`` with requirement ``ranks>=n``: like ``requires_devices``, they name no capability, so
``--devcaps-require`` never turns them into errors. The hardware class is unchanged by the mark
(``generic`` unless something else narrows it): such a test runs on the CPU.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable

from pytest_devcaps._util.environ import ENV_DIST_SHARE_DEVICES
from pytest_devcaps.errors import DevcapsError, MarkerError, UnknownDeviceError
from pytest_devcaps.marks.evaluation import Evaluation, Missing, validate_marks
from pytest_devcaps.marks.names import RANKS_MARKER
from pytest_devcaps.marks.pytorch_gates import world_size_of

if TYPE_CHECKING:
    import pytest

    from pytest_devcaps.registry import CapabilityRegistry

MARKER = RANKS_MARKER
_UNSET_WORLD = -2  # MultiProcContinuousTest.world_size before its world starts
_PLACEHOLDER = "generic_device_type"  # DeviceTypeTestBase.device_type before a base sets one


@dataclass(frozen=True)
class World:
    """The world a multi-process test would start: its class, size and device type, and where
    the device type was read (``TestX.device_type``, ``test_x.device_type``, ``torch.accelerator``)."""

    owner: str
    size: int
    device_type: str
    device_source: str
    backend: str | None = None  # the process-group backend the class itself initializes
    backend_source: str = ""


def wanted(marks: Iterable[pytest.Mark]) -> int:
    """The ranks the ``requires_ranks`` marks ask for (the largest; 0: none)."""
    return max((int(m.args[0]) for m in marks if m.name == MARKER), default=0)


def is_multiprocess_class(cls: type | None) -> bool:
    """``cls`` declares the world it spawns (``world_size``: an attribute or property)."""
    return cls is not None and inspect.getattr_static(cls, "world_size", None) is not None


def _device_type_of(value: Any) -> str | None:
    """A ``device_type`` value as a device type: a string (``"hpu:0"`` -> ``hpu``, PyTorch's
    ``"privateuse1"`` -> the backend's name) or a ``torch.device``; None for anything else."""
    value = getattr(value, "type", value)  # a torch.device
    if not isinstance(value, str) or not value or value == _PLACEHOLDER:
        return None
    from pytest_devcaps.backends.dispatch import torch_device_type

    return torch_device_type(value.partition(":")[0])


def world_device_type(test: Any, cls: type) -> tuple[str, str]:
    """The device type ``cls``'s world runs on and where it was read (see the module's order).
    ``test`` is an instance of ``cls``; a ``device_type`` that raises is a :class:`DevcapsError`."""
    try:
        own = getattr(test, "device_type", None)
        if callable(own):  # MultiProcContinuousTest.device_type is a classmethod
            own = own()
    except Exception as exc:
        raise DevcapsError(f"{MARKER}: {cls.__name__}.device_type raised "
                           f"{type(exc).__name__}: {exc}") from None
    found = _device_type_of(own)
    if found is not None:
        return found, f"{cls.__name__}.device_type"
    module = sys.modules.get(cls.__module__)
    found = _device_type_of(getattr(module, "device_type", None))
    if found is not None:
        return found, f"{cls.__module__}.device_type"
    import torch

    accelerator = torch.accelerator.current_accelerator(check_available=True)
    if accelerator is not None:
        return accelerator.type, "torch.accelerator"
    return "cpu", "no accelerator"


def _instance(cls: type, method: str) -> Any:
    try:
        return cls(method)
    except Exception as exc:
        raise DevcapsError(f"{MARKER}: {cls.__name__}({method!r}) could not be made to read its "
                           f"world: {type(exc).__name__}: {exc}") from None


def _size(cls: type, method: str, test: Any, device_type: str) -> int:
    size = world_size_of(cls, method)
    if size is None:
        try:
            size = int(test.world_size)
        except Exception as exc:
            raise DevcapsError(f"{MARKER}: {cls.__name__}.world_size could not be read: "
                               f"{type(exc).__name__}: {exc}") from None
    resolve = getattr(cls, "_get_world_size", None)
    if size == _UNSET_WORLD and callable(resolve):
        try:
            size = int(resolve(device_type))
        except Exception:  # unittest.SkipTest("No cpu devices available"): no rank
            size = 0
    return size


def world_of(cls: type | None, method: str, test_name: str = "") -> World:
    """The world ``cls`` would start for ``method``; a class without one is a
    :class:`MarkerError` (``test_name`` names the test in it)."""
    if cls is None or not is_multiprocess_class(cls):
        what = f"{cls.__name__} has no world_size" if cls is not None else "it is not in a class"
        raise MarkerError(MARKER, f"applies to multi-process test classes (MultiProcessTestCase, "
                          f"FSDPTest, DTensorTestBase, MultiThreadedTestCase...: a class with "
                          f"world_size); {test_name or method}: {what}. A pytest test starts its "
                          "world with the distributed fixture, which checks the devices itself")
    test = _instance(cls, method)
    device_type, source = world_device_type(test, cls)
    backend, backend_source = class_backend(cls)
    return World(cls.__name__, _size(cls, method, test, device_type), device_type, source,
                 backend, backend_source)


_FSDP_TEST = ("torch.testing._internal.common_fsdp", "FSDPTest")


def class_backend(cls: type) -> tuple[str | None, str]:
    """The process-group backend ``cls`` initializes whatever the device, where it says so:
    PyTorch's ``FSDPTest._run`` calls ``init_process_group(backend=DISTRIBUTED_BACKEND)``, a
    module constant of ``common_fsdp`` (nccl, hccl or xccl for CUDA, HPU, XPU; gloo for anything
    else, an out-of-tree accelerator included), then a barrier on the current accelerator.
    (None, ""): the class takes the device type's default backend (``DTensorTestBase.backend``)."""
    for base in cls.__mro__:
        if (base.__module__, base.__qualname__) == _FSDP_TEST:
            backend = getattr(sys.modules.get(_FSDP_TEST[0]), "DISTRIBUTED_BACKEND", None)
            if isinstance(backend, str):
                return backend, "common_fsdp.DISTRIBUTED_BACKEND (FSDPTest._run)"
    return None, ""


def _missing(n: int, world: World, found: str, source: str, why: str) -> Missing:
    return Missing("devices", f"ranks>={n}", world.device_type, found, source, why)


def _backend_missing(n: int, world: World) -> Missing | None:
    """Check 3: ``torch.distributed`` and a built default backend for the world's device type."""
    import torch.distributed as dist

    from pytest_devcaps.runtime import default_dist_backend

    kind, where = world.device_type, f"{world.owner}; device type from {world.device_source}"
    if not dist.is_available():
        return _missing(n, world, "no torch.distributed", "torch.distributed.is_available",
                        f"requires {n} ranks on {kind}; torch.distributed is not available in "
                        f"this torch build ({where})")
    if world.backend is not None:
        return _class_backend_missing(n, world, where)
    backend = default_dist_backend(kind)
    if backend is None:
        return _missing(n, world, "no process-group backend",
                        "torch.distributed.get_default_backend_for_device",
                        f"requires {n} ranks on {kind}; no process-group backend is registered "
                        f"for device type {kind} ({where})")
    if not dist.is_backend_available(backend):
        return _missing(n, world, f"backend {backend} not built", "torch.distributed.is_backend_available",
                        f"requires {n} ranks on {kind}; the default process-group backend for "
                        f"device type {kind}, {backend}, is not available in this torch build "
                        f"({where})")
    return None


def _class_backend_missing(n: int, world: World, where: str) -> Missing | None:
    """Check 3 for a class that names its own backend: built, and serving the world's device
    type (``torch.distributed.Backend.backend_capability``: gloo serves cpu and cuda)."""
    import torch.distributed as dist

    kind, backend, source = world.device_type, str(world.backend), world.backend_source
    if not dist.is_backend_available(backend):
        return _missing(n, world, f"backend {backend} not built", source,
                        f"requires {n} ranks on {kind}; {world.owner} initializes {backend} "
                        f"({source}), which this torch build lacks ({where})")
    served = getattr(dist.Backend, "backend_capability", {}).get(backend, [])
    if kind.split(":")[0] not in served:
        return _missing(n, world, f"{backend} serves {', '.join(served) or 'no device type'}", source,
                        f"requires {n} ranks on {kind}; {world.owner} initializes {backend} "
                        f"({source}), which has no {kind} support (it serves "
                        f"{', '.join(served) or 'no device type'}) ({where})")
    return None


def device_count(registry: CapabilityRegistry, device_type: str) -> int:
    """Devices of ``device_type``: the registry's discovery, else torch's own count."""
    try:
        return registry.identity(device_type).count
    except UnknownDeviceError:
        from pytest_devcaps.runtime import device_count as torch_count

        try:
            return torch_count(device_type)
        except Exception:  # not a device type torch knows
            return 0


def shortfall(n: int, world: World, registry: CapabilityRegistry,
              share: Callable[[], bool]) -> Missing | None:
    """What ``world`` lacks for ``requires_ranks(n)`` (the first unmet check), or None.
    ``share`` reads whether ranks may share an accelerator (asked only on one)."""
    kind = world.device_type
    if world.size < n:
        none = " (no rank would run: the test would pass without running)" if world.size <= 0 else ""
        return _missing(n, world, str(world.size), f"{world.owner}.world_size",
                        f"requires {n} ranks; {world.owner}.world_size is {world.size} on {kind}{none}")
    backend = _backend_missing(n, world)
    if backend is not None or kind == "cpu":
        return backend
    count = device_count(registry, kind)
    if count >= n or (count >= 1 and share()):
        return None
    where = f"{world.owner}; device type from {world.device_source}"
    hint = f"; ranks share a device only with {ENV_DIST_SHARE_DEVICES}=1" if count else ""
    return _missing(n, world, f"{count} {kind}", "discovery",
                    f"requires {n} ranks on {kind}; found {count} {kind} "
                    f"device{'' if count == 1 else 's'} ({where}{hint})")


def ranks_missing(marks: Iterable[pytest.Mark], cls: type | None, method: str,
                  registry: CapabilityRegistry, share: Callable[[], bool],
                  test_name: str = "") -> Missing | None:
    """``requires_ranks`` checked for the test ``method`` of ``cls`` (its marks checked first:
    a bad one is the :class:`MarkerError` validation gives), or None when nothing is missing."""
    ranks = [m for m in marks if m.name == MARKER]
    if not ranks:
        return None
    validate_marks(ranks, registry)
    return shortfall(wanted(ranks), world_of(cls, method, test_name), registry, share)


def with_ranks(evaluation: Evaluation, n: int, missing: Missing | None) -> Evaluation:
    """``evaluation`` with the ``ranks>=n`` requirement and, if any, what is missing."""
    return dataclasses.replace(
        evaluation, required=tuple(dict.fromkeys((*evaluation.required, f"ranks>={n}"))),
        missing=(*evaluation.missing, missing) if missing is not None else evaluation.missing)
