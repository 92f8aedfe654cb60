"""The scaled-GEMM probes tell oneDNN's reference fp8 kernel from a real datapath (its verbose
log), and try rowwise scales where tensorwise ones are refused, so probe and rule agree on AMX
CPUs. This CPU has no AMX: oneDNN's log is fed in where only an AMX machine would write it."""

from __future__ import annotations

import os
from typing import Any, Callable

import pytest
import torch

from pytest_devcaps.config import classify, load_catalogue, load_profile
from pytest_devcaps.model import Level, ProbeOutcome
from pytest_devcaps.probes import matmul
from pytest_devcaps.registry.layers import merge_answer

# What oneDNN 3.12 prints for torch._scaled_mm on an AMX-INT8 Xeon (torch 2.13.0+cpu), and
# lines that are not an fp8 reference kernel.
REF_FP8 = ("onednn_verbose,v1,primitive,exec,cpu,matmul,ref:any,undef,src:f8_e4m3::blocked:ab::f0 "
           "wei:f8_e4m3::blocked:ba::f0 dst:bf16::blocked:ab::f0,attr-scales:src0:0:f32+wei:0:f32,"
           ",16x16:16x16,0.51")
BRGEMM_FP8 = REF_FP8.replace("ref:any", "brg_matmul:avx10_1_512_amx_fp16")
REF_F32 = REF_FP8.replace("f8_e4m3", "f32")
OLD_FORMAT = REF_FP8.replace("onednn_verbose,v1,", "onednn_verbose,")  # oneDNN < 3.4: no v1


def test_reference_fp8_kernels_are_found_in_the_verbose_log() -> None:
    assert matmul.fp8_reference_kernels([REF_FP8]) == [
        "matmul ref:any (src:f8_e4m3 wei:f8_e4m3 dst:bf16)"]
    assert matmul.fp8_reference_kernels([OLD_FORMAT]) == matmul.fp8_reference_kernels([REF_FP8])
    # an optimised fp8 kernel, a reference fp32 one, and lines that are no execution at all
    assert matmul.fp8_reference_kernels([BRGEMM_FP8, REF_F32, "onednn_verbose,v1,info,cpu",
                                         "garbage", ""]) == []


def test_the_verbose_log_is_read_from_a_real_onednn_execution(capfd: pytest.CaptureFixture[str]) -> None:
    if not torch.backends.mkldnn.is_available():  # type: ignore[no-untyped-call]
        pytest.skip("torch built without oneDNN")
    x = torch.ones(16, 16)
    out, lines = matmul.onednn_executions(
        lambda: torch.ops.mkldnn._linear_pointwise(x, x, None, "none", [], ""))
    assert torch.equal(out, torch.full((16, 16), 16.0))
    assert any(",primitive,exec,cpu," in line and "f32" in line for line in lines), lines
    assert matmul.fp8_reference_kernels(lines) == []  # an fp32 kernel is no fp8 reference one
    os.write(1, b"after\n")  # file descriptor 1 is back where it was
    assert capfd.readouterr().out.endswith("after\n")


def test_an_error_inside_the_watched_call_propagates_and_restores_stdout(
        capfd: pytest.CaptureFixture[str]) -> None:
    def fail() -> None:
        raise RuntimeError("refused")

    with pytest.raises(RuntimeError, match="refused"):
        matmul.onednn_executions(fail)
    os.write(1, b"still here\n")
    assert "still here" in capfd.readouterr().out


def _log(lines: list[str]) -> Callable[[Callable[[], Any]], tuple[Any, list[str]]]:
    return lambda call: (call(), list(lines))


def test_a_scaled_mm_run_by_the_reference_kernel_is_emulated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(matmul, "onednn_executions", _log([REF_FP8]))
    outcome = matmul.probe_scaled_mm("cpu")
    assert outcome.level is Level.EMULATED
    assert matmul.ONEDNN_REFERENCE in outcome.reason and "ref:any" in outcome.reason
    monkeypatch.setattr(matmul, "onednn_executions", _log([BRGEMM_FP8]))
    assert matmul.probe_scaled_mm("cpu").level is Level.NATIVE  # "it ran": the rule decides


@pytest.mark.parametrize("profile", ["cpu-amx", "cpu-granite-rapids"])
def test_probe_and_rule_agree_on_amx_profiles(monkeypatch: pytest.MonkeyPatch, profile: str) -> None:
    """On an AMX CPU the probe sees ref:any and the rule says the same thing: the merged answer
    is emulated and names the oneDNN reference kernel, whichever of the two speaks."""
    catalogue = load_catalogue()
    identity = load_profile(profile, catalogue).identities[0]
    verdict = classify(catalogue, identity)["mm.scaled"]
    monkeypatch.setattr(matmul, "onednn_executions", _log([REF_FP8]))
    outcome = matmul.probe_scaled_mm("cpu")
    assert verdict.level is outcome.level is Level.EMULATED
    merged = merge_answer("mm.scaled", "cpu", outcome, verdict)
    assert merged.level is Level.EMULATED
    assert merged.reason.count(matmul.ONEDNN_REFERENCE) == 2


def test_fnuz_refused_with_tensorwise_scales_runs_with_rowwise_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """AMX-INT8 + AMX-FP16: every tensorwise fnuz pair goes to oneDNN, which has no fnuz types;
    rowwise scales take the fp32 upcast. The probe must try both."""
    real = torch._scaled_mm

    def amx_scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
                      scale_b: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        if scale_a.numel() == 1 and scale_b.numel() == 1:
            raise RuntimeError("mkldnn_scaled_mm: unsupported data type Float8_e4m3fnuz")
        return real(a, b, scale_a=scale_a, scale_b=scale_b, **kwargs)

    monkeypatch.setattr(torch, "_scaled_mm", amx_scaled_mm)
    outcome = matmul.fp8_format("cpu", "float8_e4m3fnuz")
    assert outcome.level is Level.NATIVE, outcome.reason  # it ran; the rule says emulated
    assert outcome.reason.startswith("rowwise _scaled_mm ran with float8_e4m3fnuz")
    assert "tensorwise scales: tensorwise _scaled_mm raised RuntimeError" in outcome.reason


def test_refused_both_ways_reports_the_tensorwise_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> torch.Tensor:
        raise RuntimeError("no fp8 here")

    monkeypatch.setattr(torch, "_scaled_mm", refuse)
    outcome = matmul.fp8_format("cpu", "float8_e5m2")
    assert outcome.level is Level.UNSUPPORTED
    assert outcome.reason.startswith("tensorwise _scaled_mm raised RuntimeError: no fp8 here")


def test_an_unavailable_outcome_is_never_turned_emulated() -> None:
    refused = ProbeOutcome(Level.UNSUPPORTED, "refused")
    assert matmul._on_reference_kernel(refused, ["matmul ref:any"]) is refused
