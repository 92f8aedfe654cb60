"""Device-neutral runtime helpers: CPU semantics on this machine, dispatch through fakes."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from pytest_devcaps import runtime
from pytest_devcaps.runtime import MemoryStatsUnavailableError

FAKE = "privateuseone"  # a device type torch.device accepts; we give it a fake module


class FakeDeviceModule:
    """Records calls the helpers make on a device module."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def _record(self, name: str, *args: Any) -> Any:
        self.calls.append((name, args))
        return {"memory_allocated": 123, "max_memory_allocated": 456, "device_count": 3,
                "memory_stats": {"allocated_bytes.all.current": 123}}.get(name)

    def synchronize(self, *args: Any) -> None:
        self._record("synchronize", *args)

    def empty_cache(self) -> None:
        self._record("empty_cache")

    def memory_allocated(self, *args: Any) -> int:
        return self._record("memory_allocated", *args)

    def max_memory_allocated(self, *args: Any) -> int:
        return self._record("max_memory_allocated", *args)

    def memory_stats(self, *args: Any) -> dict[str, int]:
        return self._record("memory_stats", *args)

    def reset_peak_memory_stats(self, *args: Any) -> None:
        self._record("reset_peak_memory_stats", *args)

    def device_count(self) -> int:
        return self._record("device_count")

    def set_device(self, *args: Any) -> None:
        self._record("set_device", *args)

    def manual_seed_all(self, seed: int) -> None:
        self._record("manual_seed_all", seed)

    def _is_in_bad_fork(self) -> bool:  # torch.manual_seed asks PrivateUse1 modules this
        return False


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeDeviceModule:
    module = FakeDeviceModule()
    monkeypatch.setattr(torch, FAKE, module, raising=False)
    return module


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu")])
def test_cpu_waiting_and_cache_helpers_do_nothing(device: Any) -> None:
    assert runtime.synchronize(device) is None
    assert runtime.empty_cache(device) is None
    assert runtime.reset_peak_memory_stats(device) is None
    assert runtime.set_device(device) is None


@pytest.mark.parametrize("reader", [runtime.memory_allocated, runtime.max_memory_allocated,
                                    runtime.memory_stats])
def test_cpu_memory_readers_raise_a_clear_runtime_error(reader: Any) -> None:
    with pytest.raises(MemoryStatsUnavailableError, match="cpu keeps no allocator statistics"):
        reader("cpu")
    assert issubclass(MemoryStatsUnavailableError, RuntimeError)


def test_device_count() -> None:
    assert runtime.device_count("cpu") == 1
    accelerator = torch.accelerator.current_accelerator()
    if accelerator is not None:
        assert runtime.device_count(accelerator.type) == torch.accelerator.device_count()
    assert runtime.device_count("meta") == 0  # a device type without a device module


@pytest.mark.parametrize("device", [None, "cpu"])
def test_manual_seed_makes_random_draws_repeat(device: str | None) -> None:
    runtime.manual_seed(1234, device)
    first = torch.randn(4)
    runtime.manual_seed(1234, device)
    assert torch.equal(first, torch.randn(4))


def test_non_accelerator_device_uses_its_device_module(fake: FakeDeviceModule) -> None:
    runtime.synchronize(f"{FAKE}:1")
    runtime.empty_cache(FAKE)
    assert runtime.memory_allocated(f"{FAKE}:1") == 123
    assert runtime.max_memory_allocated(FAKE) == 456
    assert runtime.memory_stats(f"{FAKE}:0") == {"allocated_bytes.all.current": 123}
    runtime.reset_peak_memory_stats(f"{FAKE}:2")
    assert runtime.device_count(FAKE) == 3
    runtime.set_device(f"{FAKE}:2")
    assert fake.calls == [
        ("synchronize", (1,)), ("empty_cache", ()), ("memory_allocated", (1,)),
        ("max_memory_allocated", ()), ("memory_stats", (0,)), ("reset_peak_memory_stats", (2,)),
        ("device_count", ()), ("set_device", (2,)),
    ]


def test_manual_seed_seeds_the_device_module(fake: FakeDeviceModule) -> None:
    runtime.manual_seed(7, FAKE)
    assert ("manual_seed_all", (7,)) in fake.calls


def test_missing_functions_raise_or_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, FAKE, SimpleNamespace(), raising=False)
    with pytest.raises(RuntimeError, match="no synchronize"):
        runtime.synchronize(FAKE)
    with pytest.raises(MemoryStatsUnavailableError):
        runtime.memory_allocated(FAKE)
    runtime.empty_cache(FAKE)  # nothing cached, nothing to do
    assert runtime.device_count(FAKE) == 0


def test_the_accelerator_falls_back_to_torch_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, Any]] = []
    monkeypatch.setattr(torch, FAKE, SimpleNamespace(), raising=False)  # a module without them
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a: torch.device(FAKE))
    monkeypatch.setattr(torch.accelerator, "synchronize", lambda i=None: seen.append(("sync", i)))
    monkeypatch.setattr(torch.accelerator, "device_count", lambda: 5)
    monkeypatch.setattr(torch.accelerator, "set_device_index", lambda i: seen.append(("set", i)))
    monkeypatch.setattr(torch.accelerator.memory, "memory_allocated", lambda i=None: 99)
    runtime.synchronize(f"{FAKE}:3")
    runtime.set_device(f"{FAKE}:1")
    assert runtime.memory_allocated(FAKE) == 99
    assert runtime.device_count(FAKE) == 5
    assert seen == [("sync", 3), ("set", 1)]


def test_the_device_module_comes_before_torch_accelerator(
        monkeypatch: pytest.MonkeyPatch, fake: FakeDeviceModule) -> None:
    # a PrivateUse1 backend registered from Python alone has no C++ hooks for torch.accelerator
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a: torch.device(FAKE))
    runtime.set_device(f"{FAKE}:1")
    assert fake.calls == [("set_device", (1,))]


def test_accelerator_lookups_follow_torch_accelerator(
        monkeypatch: pytest.MonkeyPatch, fake: FakeDeviceModule) -> None:
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a: torch.device(FAKE))
    assert runtime.accelerator_type() == FAKE
    assert runtime.is_accelerator(FAKE) and not runtime.is_accelerator("cpu")
    assert runtime.device_module(FAKE) is fake
    assert runtime.device_module("nosuchdevice") is None
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a: None)  # a CPU-only build
    assert runtime.accelerator_type() is None
    assert not runtime.is_accelerator("cpu") and not runtime.is_accelerator(FAKE)
    assert runtime.accelerator_text() == "none in this build"


def test_reasons_name_an_accelerator_without_devices_as_such(
        monkeypatch: pytest.MonkeyPatch, fake: FakeDeviceModule) -> None:
    """A build with an accelerator compiled in and no device of it here (a CUDA build on a
    machine without a GPU) is a CPU-only machine: reasons say so."""
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a: torch.device(FAKE))
    assert runtime.accelerator_text() == FAKE  # the fake module has 3 devices
    monkeypatch.setattr(fake, "device_count", lambda: 0, raising=False)
    assert runtime.accelerator_text() == f"{FAKE}, with no device here"


def test_default_dist_backend_reads_torchs_table(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    assert runtime.default_dist_backend("cpu") == "gloo"
    assert runtime.default_dist_backend("meta") is None  # no backend registered for it
    assert runtime.default_dist_backend("nosuchdevice") is None  # torch.device refuses the name
    # an out-of-tree backend registering itself as a device type's default is seen too
    monkeypatch.setitem(dist.Backend.default_device_backend_map, FAKE, "fakeccl")
    assert runtime.default_dist_backend(FAKE) == "fakeccl"


class FakeSpinModule:
    """A device module with a ``_sleep`` whose spins the fake events time: each timing is the
    next of ``milliseconds`` (what a device's spin of 1,000,000 cycles took)."""

    def __init__(self, milliseconds: list[float]) -> None:
        self.milliseconds = list(milliseconds)
        self.spun: list[int] = []

    def _sleep(self, cycles: int) -> None:
        self.spun.append(cycles)


def _fake_events(module: FakeSpinModule) -> type:
    class Event:
        def __init__(self, *, device: Any, enable_timing: bool) -> None:
            assert enable_timing and torch.device(device).type == FAKE

        def record(self) -> None:
            pass

        def synchronize(self) -> None:
            pass

        def elapsed_time(self, end: Any) -> float:
            return module.milliseconds.pop(0)

    return Event


def test_cycles_per_ms_times_the_devices_spin_as_pytorch_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten 1,000,000-cycle spins, the two fastest and two slowest dropped, the mean of the six
    left (PyTorch's get_cycles_per_ms); measured once per device type."""
    timings = [1.0, 2.0, 2.0, 2.0, 2.0, 4.0, 4.0, 4.0, 100.0, 0.001]  # ms per spin
    module = FakeSpinModule(timings)
    monkeypatch.setattr(torch, FAKE, module, raising=False)
    monkeypatch.setattr(torch, "Event", _fake_events(module))
    monkeypatch.setattr(runtime, "_cycles_per_ms", {})
    # cycles per ms of each spin, 1e6 / ms, sorted: 1e4, 2.5e5 x3, 5e5 x4, 1e6, 1e9; the middle
    # six: 2.5e5 x2 and 5e5 x4
    expected = (2 * 250_000 + 4 * 500_000) / 6
    assert runtime.cycles_per_ms(f"{FAKE}:0") == pytest.approx(expected)
    assert module.spun == [1_000_000] * 10
    assert runtime.cycles_per_ms(FAKE) == pytest.approx(expected)  # cached: no more spins
    assert len(module.spun) == 10


def test_cycles_per_ms_on_a_device_without_a_spin_says_which_capability(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_devcaps.errors import DeviceRuntimeError

    monkeypatch.setattr(runtime, "_cycles_per_ms", {})
    with pytest.raises(DeviceRuntimeError, match=r"torch.cpu has no _sleep.*runtime.sleep"):
        runtime.cycles_per_ms("cpu")
