"""The kernels' fp32 GEMMs and their reference do not follow the process-wide matmul precision:
under float32_matmul_precision("medium") oneDNN would compute them in bf16 (error ~0.25 at
K=1024 on AMX) and cuBLAS in TF32 ("high"), yet every backend still meets float64 tolerances.
The pin is a restoring, thread-safe context (devcaps_kernels.precision)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import torch
from torch.overrides import TorchFunctionMode

import devcaps_kernels.cpu_backend as cpu_backend
from devcaps_kernels import precision, scaled_mm
from pytest_devcaps.suites.kernels._checks import FP32_ACCUMULATION_RTOL, accumulation_error

SUITE = Path(__file__).resolve().parents[2] / "pytest_devcaps" / "suites" / "kernels"


@pytest.fixture
def user_precision() -> Iterator[Callable[[str], None]]:
    """Set the legacy global precision the way a user would; torch's defaults come back after."""
    saved = {name: getattr(torch.backends, name).matmul.fp32_precision for name in ("cuda", "mkldnn")}
    yield torch.set_float32_matmul_precision
    torch.set_float32_matmul_precision("highest")
    for name, value in saved.items():
        getattr(torch.backends, name).matmul.fp32_precision = value


def test_the_context_pins_and_restores(user_precision: Callable[[str], None]) -> None:
    user_precision("medium")
    before = precision.current()
    assert before == {"cuda": "tf32", "mkldnn": "bf16"}
    with precision.fp32_matmul_precision():
        assert precision.current() == {"cuda": "ieee", "mkldnn": "ieee"}
        with precision.fp32_matmul_precision("bf16"):  # nested: another value, then back
            assert precision.current() == {"cuda": "ieee", "mkldnn": "bf16"}  # cuBLAS has no bf16
        assert precision.current() == {"cuda": "ieee", "mkldnn": "ieee"}
    assert precision.current() == before
    assert torch.get_float32_matmul_precision() == "medium"
    with pytest.raises(RuntimeError, match="inside"):
        with precision.fp32_matmul_precision():
            raise RuntimeError("inside")
    assert precision.current() == before
    with pytest.raises(ValueError, match="precision must be one of"):
        with precision.fp32_matmul_precision("highest"):
            pass


def test_pinned_blocks_of_two_threads_do_not_interleave(user_precision: Callable[[str], None]) -> None:
    user_precision("high")
    inside, release, seen = threading.Event(), threading.Event(), []

    def holder() -> None:
        with precision.fp32_matmul_precision("bf16"):
            inside.set()
            release.wait(10)
            seen.append(precision.current()["mkldnn"])

    def other() -> None:
        with precision.fp32_matmul_precision("ieee"):
            seen.append(precision.current()["mkldnn"])

    first = threading.Thread(target=holder)
    first.start()
    assert inside.wait(10)
    second = threading.Thread(target=other)
    second.start()
    second.join(0.2)
    assert second.is_alive()  # waits for the first block to end
    release.set()
    first.join(10)
    second.join(10)
    assert seen == ["bf16", "ieee"]
    assert precision.current() == {"cuda": "tf32", "mkldnn": "tf32"}


class _MatmulPrecisions(TorchFunctionMode):
    """The mkldnn fp32 precision in force at every matmul/mm call."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if getattr(func, "__name__", "") in ("matmul", "__matmul__", "mm"):
            self.seen.append(precision.current()["mkldnn"])
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("setting", ["medium", "high"])
def test_every_fp32_gemm_runs_ieee_whatever_the_setting(
        user_precision: Callable[[str], None], monkeypatch: pytest.MonkeyPatch, setting: str) -> None:
    """Seen at the GEMM itself, so the check holds on a CPU where "medium" changes nothing."""
    user_precision(setting)
    a, b = torch.randn(64, 96), torch.randn(96, 48)
    with _MatmulPrecisions() as mode:
        scaled_mm(a, b, out_dtype=torch.float32, backend="reference")
    assert mode.seen == ["ieee"]
    original, seen = torch.ops.mkldnn._linear_pointwise, []

    def spy(*args: Any) -> torch.Tensor:
        seen.append(precision.current()["mkldnn"])
        return original(*args)

    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", spy)
    monkeypatch.setattr(cpu_backend, "onednn_problem", lambda dtype: "")
    scaled_mm(a, b, out_dtype=torch.float32, backend="cpu")
    assert seen and set(seen) == {"ieee"}
    assert precision.current()["mkldnn"] == {"medium": "bf16", "high": "tf32"}[setting]


@pytest.mark.parametrize("setting", ["medium", "high"])
@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float8_e4m3fn])
def test_results_meet_float64_tolerances_under_reduced_precision(
        user_precision: Callable[[str], None], setting: str, backend: str, dtype: torch.dtype) -> None:
    user_precision(setting)
    a = torch.randn(96, 1024).to(dtype)
    b = torch.randn(1024, 80).to(dtype)
    y, _ = scaled_mm(a, b, out_dtype=torch.float32, backend=backend)
    assert y is not None
    assert accumulation_error(y, a.float(), b.float()) < FP32_ACCUMULATION_RTOL


def test_an_exact_bf16_fpmath_path_is_used_only_where_it_checked_exact(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """fp8/bf16 inputs with an fp32 GEMM may run oneDNN's bf16 fpmath (exact for bf16 values);
    fp32 inputs never do."""
    p8 = scaled_mm.__globals__["build_problem"](
        torch.randn(8, 16).to(torch.float8_e5m2), torch.randn(16, 8).to(torch.float8_e5m2),
        2.0, None, None, torch.bfloat16, (), (), True, False)
    p32 = scaled_mm.__globals__["build_problem"](torch.randn(8, 16), torch.randn(16, 8), None, None,
                                                 None, torch.float32, (), (), True, False)
    monkeypatch.setattr(cpu_backend, "bf16_fpmath_problem", lambda: "")
    assert cpu_backend._make_plan(p8).precision == "bf16"
    assert not cpu_backend._make_plan(p8).inside  # the bias and epilogue stay out of oneDNN
    assert cpu_backend._make_plan(p32).precision == "ieee"
    monkeypatch.setattr(cpu_backend, "bf16_fpmath_problem", lambda: "no native bf16")
    assert cpu_backend._make_plan(p8).precision == "ieee"


def test_the_bf16_fpmath_check_answers_for_this_cpu() -> None:
    cpu_backend.bf16_fpmath_problem.cache_clear()
    problem = cpu_backend.bf16_fpmath_problem()
    if not cpu_backend._native_bf16():
        assert problem == "this CPU has no native bf16 (AMX-BF16 or AVX512-BF16)"
    else:  # AMX / AVX512-BF16: oneDNN's bf16 fpmath must keep 1 + 2^-9 in fp32, or say why not
        assert problem == "" or "oneDNN bf16 fpmath" in problem


PIN_PLUGIN = '''
import torch

def pytest_configure(config):
    torch.set_float32_matmul_precision({setting!r})

def pytest_sessionfinish(session):
    with open("precision_after.txt", "w") as out:
        out.write(torch.get_float32_matmul_precision() + " "
                  + torch.backends.mkldnn.matmul.fp32_precision)
'''


@pytest.mark.parametrize("setting", ["medium", "high"])
def test_the_kernel_suite_passes_under_reduced_precision(pytester: pytest.Pytester, setting: str) -> None:
    """The whole kernel suite (its checks against the reference and against float64), run with
    the process-wide precision lowered; the setting is the user's again afterwards."""
    pytester.makepyfile(pin_precision=PIN_PLUGIN.format(setting=setting))
    result = pytester.runpytest_subprocess("-p", "pin_precision", "-q", "-p", "no:randomly",
                                           "-p", "no:cacheprovider", str(SUITE))
    result.assert_outcomes(failed=0, errors=0, passed=result.parseoutcomes()["passed"])
    assert result.parseoutcomes()["passed"] > 100
    expected = {"medium": "medium bf16", "high": "high tf32"}[setting]
    assert (pytester.path / "precision_after.txt").read_text() == expected
