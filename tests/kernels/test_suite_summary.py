"""The bundled kernel suite says which backend it tested on each device, against float64."""

from __future__ import annotations

from pathlib import Path

import pytest

SUITE = Path(__file__).resolve().parents[2] / "pytest_devcaps" / "suites" / "kernels"


def test_the_suite_names_the_backend_it_tested(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess(str(SUITE / "test_scaled_mm.py"), "-q", "-p", "no:randomly",
                                           "-p", "no:cacheprovider", "-k", "auto_records_backend or every_reduction")
    outcomes = result.parseoutcomes()
    assert result.ret == 0 and "failed" not in outcomes and "errors" not in outcomes, outcomes
    assert outcomes["passed"] >= 10
    result.stdout.fnmatch_lines(["devcaps_kernels: backends tested",
                                 "  cpu: backend 'cpu', the fused CPU path * tests; outputs checked against "
                                 "float64 math on the CPU"])


def test_summary_lines_count_tests_per_device_and_backend() -> None:
    from pytest_devcaps.suites.kernels.conftest import summary_lines

    lines = summary_lines({"emu:0=reference": {"t1", "t2"}, "cuda:0=triton": {"t1"}})
    assert lines == [
        "  cuda:0: backend 'triton', the compiled Triton kernel: 1 tests; outputs checked against float64 math on the CPU",
        "  emu:0: backend 'reference', the reference backend (plain torch): no fused backend runs on this device: "
        "2 tests; outputs checked against float64 math on the CPU"]
