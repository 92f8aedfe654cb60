"""How ``backend="auto"`` picks: from torch and Triton themselves (faked here), or a caller's
predicate; never from the test plugin's registry."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

import devcaps_kernels.triton_backend as triton_backend
import devcaps_kernels.triton_plan as triton_plan
import devcaps_kernels.triton_support as triton_support
from devcaps_kernels import Reduce, choose_backend, last_backend, scaled_mm
from devcaps_kernels.problem import build_problem


@dataclass(frozen=True)
class FakeTarget:
    """Shaped like triton.backends.compiler.GPUTarget."""

    backend: str
    arch: int | str = 0
    warp_size: int = 32


class FakeDriver:
    """A Triton driver: ``torch_device`` set gives it ``get_active_torch_device`` (Triton 3.3+)."""

    def __init__(self, target: FakeTarget, torch_device: str | None = None) -> None:
        self.target = target
        if torch_device is not None:
            self.get_active_torch_device = lambda: torch.device(torch_device)

    def get_current_target(self) -> FakeTarget:
        return self.target


def _world(monkeypatch: pytest.MonkeyPatch, accelerator: str | None, driver: object | None) -> None:
    """This process's current accelerator type and Triton's active driver."""
    current = None if accelerator is None else torch.device(accelerator)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda check_available=False: current)
    monkeypatch.setattr(triton_support, "active_driver", lambda: driver)


@pytest.mark.parametrize(("drives", "triton", "expected"), [
    (True, True, "triton"), (True, False, "reference"),
])
def test_the_callers_predicate_narrows_where_triton_runs(
        monkeypatch: pytest.MonkeyPatch, drives: bool, triton: bool, expected: str) -> None:
    _world(monkeypatch, "xpu", FakeDriver(FakeTarget("xpu"), "xpu") if drives else None)
    asked: list[torch.device] = []

    def triton_available(dev: torch.device) -> bool:
        asked.append(dev)
        return triton

    assert choose_backend(torch.device("xpu"), triton_available=triton_available) == expected
    assert asked == [torch.device("xpu")]


@pytest.mark.parametrize(("device", "expected"), [("cpu", "cpu"), ("meta", "reference")])
def test_a_yes_predicate_never_brings_triton_where_it_cannot_run(device: str, expected: str) -> None:
    """auto only narrows: the docstring's own kind of predicate, saying yes for CPU tensors,
    still runs the cpu backend (Triton would raise there), and the call works."""
    def yes(dev: torch.device) -> bool:
        return True

    assert choose_backend(torch.device(device), triton_available=yes) == expected
    if device == "cpu":
        a = torch.randn(8, 16).to(torch.float8_e4m3fn)
        b = torch.randn(16, 4).to(torch.float8_e4m3fn)
        y, _ = scaled_mm(a, b, 0.5, 2.0, triton_available=yes)
        assert last_backend() == "cpu" and y is not None
        assert torch.allclose(y.float(), (a.float() @ b.float()).to(torch.bfloat16).float())


def test_scaled_mm_hands_its_predicate_to_auto_only() -> None:
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    asked: list[torch.device] = []

    def no_triton(dev: torch.device) -> bool:
        asked.append(dev)
        return False

    scaled_mm(a, b, triton_available=no_triton)
    assert last_backend() == "cpu" and asked == []  # Triton cannot run on CPU: nothing to narrow

    def never(dev: torch.device) -> bool:
        raise AssertionError("an explicit backend must not ask")

    scaled_mm(a, b, backend="reference", triton_available=never)
    assert last_backend() == "reference"


@pytest.mark.parametrize(("accelerator", "driver", "device", "expected"), [
    # Triton 3.3+: the driver names its torch device.
    ("cuda", FakeDriver(FakeTarget("cuda", 90), "cuda"), "cuda", "triton"),
    ("xpu", FakeDriver(FakeTarget("xpu"), "xpu"), "xpu", "triton"),
    # Older drivers: GPUTarget.backend, where ROCm's "hip" drives torch's "cuda" tensors.
    ("cuda", FakeDriver(FakeTarget("hip", "gfx942", 64)), "cuda", "triton"),
    ("cuda", FakeDriver(FakeTarget("cuda", 80)), "cuda", "triton"),
    ("xpu", FakeDriver(FakeTarget("xpu")), "xpu", "triton"),
    ("mps", FakeDriver(FakeTarget("metal")), "mps", "reference"),   # a backend we cannot map
    ("cuda", None, "cuda", "reference"),                            # no active driver
    ("cuda", FakeDriver(FakeTarget("cuda", 90), "cuda"), "cpu", "cpu"),  # CPU tensors on a GPU host
    (None, FakeDriver(FakeTarget("cuda", 90), "cuda"), "cpu", "cpu"),
    ("xpu", FakeDriver(FakeTarget("cuda", 90), "cuda"), "xpu", "reference"),  # driver for another type
])
def test_auto_asks_triton_for_the_device_type(monkeypatch: pytest.MonkeyPatch, accelerator: str | None,
                                             driver: object | None, device: str, expected: str) -> None:
    _world(monkeypatch, accelerator, driver)
    assert choose_backend(torch.device(device)) == expected


def test_a_driver_that_cannot_name_its_target_drives_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    class BrokenDriver:
        def get_current_target(self) -> FakeTarget:
            raise RuntimeError("no device")

    _world(monkeypatch, "xpu", BrokenDriver())
    assert choose_backend(torch.device("xpu")) == "reference"
    assert triton_support.fp8_dot_types() == frozenset()


def test_no_driver_is_asked_for_a_device_triton_does_not_drive(monkeypatch: pytest.MonkeyPatch) -> None:
    def active_driver() -> object:
        raise AssertionError("triton must not be consulted for CPU tensors")

    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda check_available=False: None)
    monkeypatch.setattr(triton_support, "active_driver", active_driver)
    assert choose_backend(torch.device("cpu")) == "cpu"


@pytest.mark.parametrize(("options", "expected"), [
    # Triton 3.9, CUDA sm90: fp8e4b15 is supported but tl.dot upcasts it (deprecated).
    (SimpleNamespace(supported_fp8_dtypes=("fp8e4b15", "fp8e4nv", "fp8e5"),
                     deprecated_fp8_dot_operand_dtypes=("fp8e4b15",)), {"fp8e4nv", "fp8e5"}),
    # HIP gfx950: the fnuz kinds are upcast by tl.dot.
    (SimpleNamespace(supported_fp8_dtypes=("fp8e4b8", "fp8e4nv", "fp8e5", "fp8e5b16"),
                     deprecated_fp8_dot_operand_dtypes=("fp8e4b8", "fp8e5b16")), {"fp8e4nv", "fp8e5"}),
    # A Triton whose options predate the deprecation list.
    (SimpleNamespace(supported_fp8_dtypes=("fp8e5",)), {"fp8e5"}),
    # A Triton whose options say nothing about fp8: decode with integer ops.
    (SimpleNamespace(), set()),
])
def test_fp8_dot_types_from_backend_options(options: object, expected: set[str]) -> None:
    assert triton_support.options_fp8_dot_types(options) == expected


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
@pytest.mark.parametrize(("backend", "arch", "warp", "has", "lacks"), [
    ("cuda", 80, 32, {"fp8e5"}, {"fp8e4nv", "fp8e4b8", "fp8e5b16"}),  # no e4m3 before sm89
    ("cuda", 90, 32, {"fp8e4nv", "fp8e5"}, {"fp8e4b8", "fp8e5b16"}),   # no fnuz on NVIDIA
    ("hip", "gfx942", 64, {"fp8e4nv", "fp8e5", "fp8e4b8", "fp8e5b16"}, set()),
    ("hip", "gfx950", 64, {"fp8e4nv", "fp8e5"}, {"fp8e4b8", "fp8e5b16"}),  # fnuz upcast by tl.dot
])
def test_fp8_dot_types_of_real_triton_targets(monkeypatch: pytest.MonkeyPatch, backend: str,
                                              arch: int | str, warp: int, has: set[str],
                                              lacks: set[str]) -> None:
    from triton.backends.compiler import GPUTarget

    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9 warns when it is unset
    monkeypatch.setattr(triton_support, "active_driver", lambda: FakeDriver(GPUTarget(backend, arch, warp)))
    types = triton_support.fp8_dot_types()
    assert has <= types and not lacks & types, types


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
@pytest.mark.parametrize(("backend", "arch", "warp", "imprecise"), [
    ("cuda", 90, 32, True),       # Hopper: Triton's default max_num_imprecise_acc is 2**30
    ("cuda", 89, 32, False),
    ("cuda", 100, 32, False),
    ("hip", "gfx942", 64, False),
])
def test_fp8_dot_imprecise_of_real_triton_targets(monkeypatch: pytest.MonkeyPatch, backend: str,
                                                  arch: int | str, warp: int, imprecise: bool) -> None:
    from triton.backends.compiler import GPUTarget

    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    monkeypatch.setattr(triton_support, "active_driver", lambda: FakeDriver(GPUTarget(backend, arch, warp)))
    assert triton_support.fp8_dot_imprecise() is imprecise
    assert triton_support.target_vendor() == backend


@pytest.mark.parametrize(("options", "imprecise"), [
    (SimpleNamespace(max_num_imprecise_acc_default=2**30), True),
    (SimpleNamespace(max_num_imprecise_acc_default=0), False),
    (SimpleNamespace(), True),  # a Triton that does not say: ask for fp32 accumulation explicitly
])
def test_fp8_dot_imprecise_from_backend_options(options: object, imprecise: bool) -> None:
    assert triton_support.options_fp8_dot_imprecise(options) is imprecise


def test_no_driver_means_no_vendor_and_precise_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triton_support, "active_driver", lambda: None)
    assert triton_support.target_vendor() == "" and triton_support.fp8_dot_imprecise() is True


@pytest.mark.parametrize(("a_dtype", "b_dtype", "dot_types", "native"), [
    (torch.float8_e4m3fn, torch.float8_e4m3fn, {"fp8e4nv", "fp8e5"}, True),
    (torch.float8_e4m3fn, torch.float8_e4m3fn, {"fp8e5"}, False),       # sm80: decode e4m3
    (torch.float8_e4m3fnuz, torch.float8_e4m3fnuz, {"fp8e4nv"}, False),  # CUDA: no fnuz
    (torch.float8_e4m3fnuz, torch.float8_e4m3fnuz, {"fp8e4b8"}, True),
    (torch.float8_e4m3fn, torch.float8_e5m2, {"fp8e4nv", "fp8e5"}, False),  # mixed: decoded
    (torch.bfloat16, torch.bfloat16, {"fp8e4nv"}, False),
])
def test_fp8_goes_to_tl_dot_as_fp8_where_triton_takes_it(a_dtype: torch.dtype, b_dtype: torch.dtype,
                                                         dot_types: set[str], native: bool) -> None:
    target = triton_plan.KernelTarget("cuda", 90, frozenset(dot_types), False, None)
    a, b = torch.zeros(4, 8).to(a_dtype), torch.zeros(8, 16).to(b_dtype)
    p = build_problem(a, b, None, None, None, torch.bfloat16, [], [Reduce("sum")], True)
    assert triton_plan.plan_for(p, target).native_fp8 is native


def test_fp8_is_decoded_where_triton_does_not_drive_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    def current_target() -> triton_plan.KernelTarget:
        raise AssertionError("no Triton target to ask for CPU tensors")

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(triton_plan, "current_target", current_target)
    a = torch.zeros(4, 8).to(torch.float8_e4m3fn)
    p = build_problem(a, a.t().contiguous(), None, None, None, torch.bfloat16, [], [], True)
    assert triton_backend.plan(p).native_fp8 is False


# Subprocesses are refused after ``import torch``: torch 2.14's CUDA build runs ``/sbin/ldconfig
# -p`` while it imports (torch.cuda -> cuda.bindings -> cuda.pathfinder's
# ctypes.util.find_library("dl")), GPU or not. That is torch's import; what is measured here is
# what importing devcaps_kernels and one scaled_mm call add on CPU tensors.
_FRESH_PROCESS = """
import json, subprocess, sys
import torch

def refuse(*args, **kwargs):
    raise AssertionError(f"scaled_mm started a subprocess: {args}")

subprocess.Popen = refuse
before = set(sys.modules)  # torch's backend autoload may import pytest_devcaps.emu's entry point
import devcaps_kernels

y, (total,) = devcaps_kernels.scaled_mm(torch.ones(8, 16), torch.ones(16, 4),
                                        reductions=[devcaps_kernels.Reduce("sum")])
print(json.dumps({"backend": devcaps_kernels.last_backend(), "total": float(total.sum()),
                  "modules": sorted(m for m in set(sys.modules) - before
                                    if m.split(".")[0] in ("pytest_devcaps", "pytest", "_pytest", "triton"))}))
"""


def test_auto_on_cpu_needs_neither_the_plugin_nor_a_subprocess(tmp_path) -> None:
    result = subprocess.run([sys.executable, "-c", _FRESH_PROCESS], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"backend": "cpu", "total": 8 * 4 * 16.0, "modules": []}


def _triton_version() -> str:
    import triton

    return str(getattr(triton, "__version__", "?"))


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_reading_a_targets_options_leaves_tritons_one_time_notices_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a target's options (for its fp8 dot types) emits no Triton notice with
    TRITON_DEFAULT_FP_FUSION unset, and does not spend the one a later compile would give:
    the notice is emitted once per process (``triton._utils.warn_once``), so its cache is
    emptied first, or an earlier test's would hide it."""
    import warnings

    from triton import _utils, knobs
    from triton.backends.compiler import GPUTarget

    from devcaps_kernels.triton_plan import target_for

    if not hasattr(_utils, "warn_once") or not hasattr(knobs.language, "fp_fusion_enabled"):
        pytest.skip(f"Triton {_triton_version()} has no once-per-process FP-fusion notice (Triton 3.9 added it)")
    monkeypatch.delenv("TRITON_DEFAULT_FP_FUSION", raising=False)
    monkeypatch.delenv("TRITON_FORCE_DISABLE_FP_FUSION", raising=False)
    _utils.warn_once.cache_clear()
    triton_support._target_options.cache_clear()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for backend, arch, warp in (("cuda", 90, 32), ("hip", "gfx942", 64)):
            assert target_for(GPUTarget(backend, arch, warp)).fp8_dot_types
    assert [str(w.message) for w in seen] == []
    with warnings.catch_warnings(record=True) as later:  # what a compile would still say
        warnings.simplefilter("always")
        knobs.language.fp_fusion_enabled(None)
    assert any("TRITON_DEFAULT_FP_FUSION" in str(w.message) for w in later)
