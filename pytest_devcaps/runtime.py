"""Device-neutral runtime helpers, for tests to use instead of ``torch.cuda.*``.

Each helper calls the device module's function (``torch.<type>``, what
``torch.get_device_module`` returns) and, where the module lacks it, the generic
``torch.accelerator`` / ``torch.accelerator.memory`` one when the device is the accelerator
torch was built for. The module comes first because ``torch.accelerator`` dispatches to the
same code for in-tree backends, while a PrivateUse1 backend registered from Python only
(no C++ hooks) is reachable through its module alone.

On the CPU: :func:`synchronize`, :func:`empty_cache`, :func:`reset_peak_memory_stats` and
:func:`set_device` do nothing; :func:`device_count` is 1; the memory readers
(:func:`memory_allocated`, :func:`max_memory_allocated`, :func:`memory_stats`) raise
:class:`MemoryStatsUnavailableError` (a ``DevcapsError`` and a ``RuntimeError``): torch keeps no allocator statistics
for host memory, and a made-up 0 would let memory tests pass vacuously. Require the
``runtime.memory_stats`` capability in tests that read them.

This module is also the one answer, for the probes and fixtures too, to which module serves a
device type (:func:`device_module`), which accelerator torch was built for
(:func:`accelerator_type`, :func:`is_accelerator`) and which ``torch.distributed`` backend is a
device type's default (:func:`default_dist_backend`). It never imports pytest: the probe child
process imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Union

from pytest_devcaps.errors import DeviceRuntimeError

if TYPE_CHECKING:
    import torch

Device = Union[str, "torch.device"]

_import_failure: list[str] = []


def import_torch() -> Any:
    """``import torch`` for code that must not crash when it fails: a device backend's autoload
    that refused (emu's library or its device count: ``torch.backends`` entry points run inside
    torch's import) becomes a :class:`~pytest_devcaps.errors.ConfigError` with the reason in
    one line, raised again on later calls without importing again (a second import of a
    half-imported torch crashes the process)."""
    from pytest_devcaps.errors import ConfigError

    if _import_failure:
        raise ConfigError(_import_failure[0])
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - torch wraps the backend's own error
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        text = " ".join(str(cause).split()) or type(cause).__name__
        _import_failure.append(f"import torch failed: {text}")
        raise ConfigError(_import_failure[0]) from None
    return torch

__all__ = [
    "MemoryStatsUnavailableError", "accelerator_text", "import_torch", "accelerator_type", "default_dist_backend",
    "device_count", "device_module", "empty_cache", "free_memory", "is_accelerator", "manual_seed",
    "max_memory_allocated",
    "memory_allocated", "memory_stats", "reset_peak_memory_stats", "set_device", "synchronize",
    "cycles_per_ms",
]


class MemoryStatsUnavailableError(DeviceRuntimeError):
    """The device keeps no allocator statistics (the CPU, or a backend without them)."""


def _device(device: Device) -> torch.device:
    import torch

    return torch.device(device)


def device_module(kind: str) -> Any | None:
    """``torch.<kind>`` (``torch.cuda``, ``torch.xpu``, a renamed PrivateUse1 module...), as
    ``torch.get_device_module`` finds it, without its cache; None when torch has no such module."""
    import torch

    return getattr(torch, kind, None)


def accelerator_type() -> str | None:
    """The accelerator type torch was built for (``torch.accelerator.current_accelerator()``);
    None on a CPU-only build."""
    import torch

    accelerator = torch.accelerator.current_accelerator()
    return None if accelerator is None else accelerator.type


def accelerator_text() -> str:
    """How a reason names torch's accelerator: its type (``cuda``); ``cuda, with no device
    here`` for a build whose accelerator has no device on this machine (a CUDA build without a
    GPU is a CPU-only machine); ``none in this build``."""
    kind = accelerator_type()
    if kind is None:
        return "none in this build"
    return kind if device_count(kind) > 0 else f"{kind}, with no device here"


def is_accelerator(kind: str) -> bool:
    """True when device type ``kind`` is the accelerator torch was built for (never ``cpu``)."""
    return accelerator_type() == kind


def default_dist_backend(kind: str) -> str | None:
    """``torch.distributed``'s default backend for device type ``kind`` (``gloo`` for the CPU,
    ``nccl`` for CUDA...), as ``get_default_backend_for_device`` reads it from
    ``Backend.default_device_backend_map``; None when this torch has no ``torch.distributed``
    or registers no default backend for ``kind``."""
    import torch.distributed as dist

    if not dist.is_available():
        return None
    try:
        return str(dist.get_default_backend_for_device(kind))
    except (RuntimeError, ValueError):  # an unknown device string; no backend registered
        return None


def _function(device: torch.device, name: str, *, memory: bool = False,
              accelerator_name: str | None = None) -> Callable[..., Any] | None:
    """The device module's ``name`` function, else torch.accelerator[.memory]'s."""
    import torch

    found = getattr(device_module(device.type), name, None)
    if found is None and is_accelerator(device.type):
        namespace = getattr(torch.accelerator, "memory", None) if memory else torch.accelerator
        found = getattr(namespace, accelerator_name or name, None)
    return found


def _call_with_index(function: Callable[..., Any], device: torch.device) -> Any:
    return function() if device.index is None else function(device.index)


def synchronize(device: Device) -> None:
    """Wait for all work queued on ``device`` (a no-op on the CPU)."""
    dev = _device(device)
    if dev.type == "cpu":
        return
    function = _function(dev, "synchronize")
    if function is None:
        raise DeviceRuntimeError(f"torch has no synchronize for device type {dev.type!r}")
    _call_with_index(function, dev)


def manual_seed(seed: int, device: Device | None = None) -> None:
    """Seed the CPU generator and ``device``'s generators (every device of its type).

    ``torch.manual_seed`` already seeds the built-in accelerators; the explicit call covers
    out-of-tree device types it does not know.
    """
    import torch

    torch.manual_seed(seed)
    if device is None:
        return
    dev = _device(device)
    module = None if dev.type == "cpu" else device_module(dev.type)
    seeder = getattr(module, "manual_seed_all", None) or getattr(module, "manual_seed", None)
    if seeder is not None:
        seeder(seed)


def empty_cache(device: Device) -> None:
    """Release cached, unused device memory (a no-op on the CPU and without an allocator)."""
    _call_if_kept(device, "empty_cache", per_device=False)


def _call_if_kept(device: Device, name: str, *, per_device: bool) -> None:
    """Call an allocator maintenance function where the device has one; else do nothing."""
    dev = _device(device)
    function = None if dev.type == "cpu" else _function(dev, name, memory=True)
    if function is None:
        return
    if per_device:
        _call_with_index(function, dev)
    else:
        function()


def _memory_reader(device: Device, name: str) -> tuple[Callable[..., Any], torch.device]:
    dev = _device(device)
    function = None if dev.type == "cpu" else _function(dev, name, memory=True)
    if function is None:
        raise MemoryStatsUnavailableError(
            f"{name}: {dev.type} keeps no allocator statistics; require the "
            "runtime.memory_stats capability in tests that read them")
    return function, dev


def memory_allocated(device: Device) -> int:
    """Bytes currently allocated by tensors on ``device``."""
    function, dev = _memory_reader(device, "memory_allocated")
    return int(_call_with_index(function, dev))


def max_memory_allocated(device: Device) -> int:
    """Peak bytes allocated on ``device`` since start or :func:`reset_peak_memory_stats`."""
    function, dev = _memory_reader(device, "max_memory_allocated")
    return int(_call_with_index(function, dev))


def memory_stats(device: Device) -> dict[str, Any]:
    """The device allocator's statistics (``allocated_bytes.all.current``...)."""
    function, dev = _memory_reader(device, "memory_stats")
    return dict(_call_with_index(function, dev))


def reset_peak_memory_stats(device: Device) -> None:
    """Restart peak tracking (a no-op where no statistics are kept, e.g. the CPU)."""
    _call_if_kept(device, "reset_peak_memory_stats", per_device=True)


def device_count(device_type: str) -> int:
    """How many devices of ``device_type`` torch sees (1 for the CPU, 0 for unknown types)."""
    if device_type == "cpu":
        return 1
    counter = _function(_device(device_type), "device_count")
    return int(counter()) if counter is not None else 0


def set_device(device: Device) -> None:
    """Make ``device`` current for its type (a no-op on the CPU or without an index)."""
    dev = _device(device)
    if dev.type == "cpu" or dev.index is None:
        return
    setter = _function(dev, "set_device", accelerator_name="set_device_index")
    if setter is None:
        raise DeviceRuntimeError(f"torch has no set_device for device type {dev.type!r}")
    setter(dev.index)


def free_memory(device: Device) -> int | None:
    """Bytes free on ``device`` now; None where nothing reports it.

    An accelerator: the device module's ``mem_get_info`` (free, total), which ``torch.cuda`` and
    ``torch.xpu`` have, else ``torch.accelerator.get_memory_info`` for torch's accelerator. The
    CPU: ``MemAvailable`` of ``/proc/meminfo`` (what the kernel estimates can be allocated
    without swapping; Linux only).
    """
    dev = _device(device)
    if dev.type == "cpu":
        return _meminfo_available()
    reader = _function(dev, "mem_get_info", accelerator_name="get_memory_info")
    if reader is None:
        return None
    try:
        free, _total = _call_with_index(reader, dev)
    except (RuntimeError, TypeError, ValueError):  # a backend without the query behind it
        return None
    return int(free)


def _meminfo_available(path: str = "/proc/meminfo") -> int | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the kernel reports kB (KiB)
    except (OSError, ValueError, IndexError):
        return None
    return None


# What one measurement of cycles_per_ms spins (PyTorch's get_cycles_per_ms: 1,000,000 cycles, ten
# timings, the two fastest and two slowest dropped).
_SPIN_CYCLES = 1_000_000
_SPIN_TIMINGS = 10
_cycles_per_ms: dict[str, float] = {}


def cycles_per_ms(device: Device) -> float:
    """How many cycles of the device's spin (``torch.<type>._sleep(cycles)``, which queues work of
    that length on the current stream) make a millisecond, measured once per device type as
    PyTorch's ``common_utils.get_cycles_per_ms`` measures CUDA's: a 1,000,000-cycle spin timed
    ten times between two timing events, the mean of the middle six. For tests that stand a
    spin in for kernel time (``_sleep(int(ms * cycles_per_ms(device)))``); torch's own function
    times CUDA alone before torch 2.14. A device whose module has no ``_sleep`` raises
    :class:`~pytest_devcaps.errors.DeviceRuntimeError`: require the ``runtime.sleep`` capability."""
    import torch

    dev = _device(device)
    cached = _cycles_per_ms.get(dev.type)
    if cached is not None:
        return cached
    spin = getattr(device_module(dev.type), "_sleep", None)
    if spin is None:
        raise DeviceRuntimeError(f"torch.{dev.type} has no _sleep: {dev.type} devices have no device-side spin "
                                 "(require the runtime.sleep capability)")
    timings = []
    for _ in range(_SPIN_TIMINGS):
        start = torch.Event(device=dev, enable_timing=True)
        end = torch.Event(device=dev, enable_timing=True)
        start.record()
        spin(_SPIN_CYCLES)
        end.record()
        end.synchronize()
        timings.append(_SPIN_CYCLES / start.elapsed_time(end))
    middle = sorted(timings)[2:-2]
    _cycles_per_ms[dev.type] = result = sum(middle) / len(middle)
    return result
