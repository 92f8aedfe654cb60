"""Plans for PyTorch-style suites: under --devcaps-profile, instantiate_device_type_tests classes are
planned as the profile's host would generate them, PyTorch's gates evaluated against the profile,
this host's own instances left out, expectations applied and every skip counted once."""

from __future__ import annotations

import json

import pytest

from pytest_devcaps.gate_table import GATES

pytest.importorskip("expecttest", reason="torch.testing._internal needs expecttest (the test extra)")

SUITE = '''
import unittest

import pytest
import torch
from torch.testing._internal.common_cuda import SM90OrLater, TEST_CUDA
from torch.testing._internal.common_device_type import (
    CUDATestBase, deviceCountAtLeast, dtypes, dtypesIfCUDA, instantiate_device_type_tests,
    largeTensorTest, onlyCPU, onlyCUDA, skipCUDAIf, skipCUDAIfRocm)
from torch.testing._internal.common_utils import TEST_WITH_ROCM, TestCase


class TestOps(TestCase):
    @dtypes(torch.float32)
    @dtypesIfCUDA(torch.float16, torch.bfloat16)
    def test_add(self, device, dtype):
        pass

    @onlyCPU
    def test_cpu_only(self, device):
        pass

    @onlyCUDA
    def test_cuda_only(self, device):
        pass

    @largeTensorTest("100GB")
    def test_huge(self, device):
        pass

    @largeTensorTest("12GB")
    def test_big(self, device):
        pass

    @deviceCountAtLeast(16)
    def test_many(self, devices):
        pass

    @skipCUDAIf(not SM90OrLater, "needs sm_90")
    def test_hopper(self, device):
        pass

    @skipCUDAIfRocm
    def test_not_rocm(self, device):
        pass

    @unittest.skipIf(TEST_WITH_ROCM, "broken on ROCm")
    def test_rocm_broken(self, device):
        pass

    @pytest.mark.requires_capability("dtype.fp8_e4m3fn")
    @pytest.mark.requires_capability("dtype.fp4_e2m1")
    def test_fp8_fp4(self, device):
        pass

    def test_excluded(self, device):
        pass


class TestCpuOnly(TestCase):
    def test_x(self, device):
        pass


class TestHost(TestCase):
    @unittest.skipIf(not TEST_CUDA, "CUDA unavailable")
    def test_cuda_host(self):
        pass

    def test_plain(self):
        pass


CUDATestBase.set_test_configs(test_exclusions={"TestOps": ["test_excluded"]})
instantiate_device_type_tests(TestOps, globals())
instantiate_device_type_tests(TestCpuOnly, globals(), only_for="cpu")
'''


def _cited(gate: str) -> str:
    """The line the plan names for ``gate``: the gate table's citation for the installed torch
    (the table's lines are checked against torch's source in tests/plugin/test_pytorch_gates.py)."""
    import torch

    return str(GATES[gate].citation(torch.__version__))


def plan(pytester: pytest.Pytester, profile: str, *args: str) -> tuple[pytest.RunResult, dict]:
    pytester.makepyfile(test_ops=SUITE)
    report = pytester.path / f"{profile}.json"
    result = pytester.runpytest_subprocess(f"--devcaps-profile={profile}",
                                           f"--devcaps-json={report}", *args)
    assert result.ret == 0, result.stdout.str()
    return result, json.loads(report.read_text())


def outcomes(data: dict) -> dict[str, tuple[str, str | None]]:
    return {t["nodeid"].split("::", 1)[1]: (t["outcome"], t.get("reason")) for t in data["tests"]}


def test_an_h100_plan_lists_the_cuda_instances_with_pytorch_gates_evaluated(pytester: pytest.Pytester) -> None:
    result, data = plan(pytester, "nvidia-h100")
    found = outcomes(data)
    assert found == {
        "TestOpsCUDA::test_add_cuda_float16": ("would-run", None),
        "TestOpsCUDA::test_add_cuda_bfloat16": ("would-run", None),
        "TestOpsCUDA::test_cpu_only_cuda": ("would-skip", "Only runs on cpu"),
        "TestOpsCUDA::test_cuda_only_cuda": ("would-run", None),
        "TestOpsCUDA::test_huge_cuda": ("would-skip", "Insufficient cuda:0 memory"),
        "TestOpsCUDA::test_big_cuda": ("would-run", None),
        "TestOpsCUDA::test_many_cuda": ("would-skip", "fewer than 16 devices detected"),
        "TestOpsCUDA::test_hopper_cuda": ("would-run", None),
        "TestOpsCUDA::test_not_rocm_cuda": ("would-run", None),
        "TestOpsCUDA::test_rocm_broken_cuda": ("would-run", None),
        "TestOpsCUDA::test_fp8_fp4_cuda": ("would-skip", None),  # fp4 is Blackwell's
        "TestOpsCUDA::test_excluded": ("would-skip", "not generated: CUDATestBase.test_exclusions "
                                       "excludes TestOps.test_excluded"),
        "TestHost::test_cuda_host": ("would-run", None),  # skipIf(not TEST_CUDA): on an H100, runs
        "TestHost::test_plain": ("would-run", None),
    }
    assert data["plan"]["left_out"] == {"cpu": 12}
    assert data["plan"]["generated"] == {"cuda": 11}
    assert data["plan"]["notes"] == ["test_ops.py::TestCpuOnly: no cuda class: only_for='cpu' / "
                                     "except_for=None leave cuda out"]
    huge = next(t for t in data["tests"] if t["nodeid"].endswith("test_huge_cuda"))
    assert huge["gate"] == {"gate": "largeTensorTest(100 GiB)",
                            "source": _cited("largeTensorTest")}
    assert huge["notes"] == ["largeTensorTest(100 GiB): needs 100 GiB free; cuda:0 has 80 GiB in all"]
    result.stdout.fnmatch_lines([
        "SKIP test_ops.py::TestOpsCUDA::test_cpu_only_cuda: Only runs on cpu (onlyCPU, "
        f"{_cited('onlyCPU')})",
        "*1  Insufficient cuda:0 memory (largeTensorTest(100 GiB))",
        "9 would run, 5 would be skipped on nvidia-h100 (nothing was run); PyTorch "
        "device-generic tests generated as the profile's host would: 11 cuda; this host's own "
        "instances left out: 12 cpu",
    ])


def test_an_mi300x_plan_reads_rocm_and_its_own_memory_and_arch(pytester: pytest.Pytester) -> None:
    _, data = plan(pytester, "amd-mi300x")
    found = outcomes(data)
    assert found["TestOpsCUDA::test_huge_cuda"] == ("would-run", None)  # 192 GiB
    assert found["TestOpsCUDA::test_hopper_cuda"] == ("would-run", None)  # gfx942: (9, 4)
    assert found["TestOpsCUDA::test_not_rocm_cuda"] == (
        "would-skip", "skipCUDAIfRocm: test doesn't currently work on the ROCm stack")
    assert found["TestOpsCUDA::test_rocm_broken_cuda"] == ("would-skip", "broken on ROCm")
    assert found["TestOpsCUDA::test_cpu_only_cuda"] == ("would-skip", "Only runs on cpu")


def test_an_older_gpu_plan_skips_what_its_arch_and_memory_cannot_run(pytester: pytest.Pytester) -> None:
    result, data = plan(pytester, "nvidia-t4")
    found = outcomes(data)
    assert found["TestOpsCUDA::test_hopper_cuda"] == ("would-skip", "needs sm_90")
    assert found["TestOpsCUDA::test_big_cuda"] == ("would-run", None)  # 12 GiB of 16
    hopper = next(t for t in data["tests"] if t["nodeid"].endswith("test_hopper_cuda"))
    assert hopper["gate"]["gate"] == "skipCUDAIf(not SM90OrLater)"
    # a test missing two capabilities is one test: one group, counted once
    result.stdout.fnmatch_lines(["    1  dtype.fp4_e2m1 on cuda:0: *; dtype.fp8_e4m3fn on cuda:0: "
                                 "*  [[]the test misses 2 things[]]"])
    assert footer_total(result, "nvidia-t4") == sum(t["outcome"] == "would-skip" for t in data["tests"])


def test_each_planned_skip_is_counted_once_and_expectations_apply(pytester: pytest.Pytester) -> None:
    pytester.path.joinpath("expect.yaml").write_text(
        "expectations:\n"
        "  - match: {device_type: cuda, vendor: nvidia}\n"
        "    skip: [{test: 'TestOps::test_add_cuda_bfloat16', reason: 'bf16 kernels missing', "
        "issue: ACME-3}]\n"
        "    xfail: [{test: 'TestOps::test_big', reason: 'oom in the allocator'}]\n"
        "    pass: ['TestOps::test_cpu_only']\n")
    result, data = plan(pytester, "nvidia-h100", "--devcaps-expect=expect.yaml")
    found = outcomes(data)
    assert found["TestOpsCUDA::test_add_cuda_bfloat16"] == (
        "would-skip", "expected skip on cuda:0 (expect.yaml:3): bf16 kernels missing [issue: ACME-3]")
    big = next(t for t in data["tests"] if t["nodeid"].endswith("test_big_cuda"))
    assert (big["outcome"], big["expectation"]["outcome"]) == ("would-run", "xfail")
    assert footer_total(result, "nvidia-h100") == sum(
        t["outcome"] == "would-skip" for t in data["tests"]) == 6
    result.stdout.fnmatch_lines(["MUST PASS test_ops.py::TestOpsCUDA::test_cpu_only_cuda: must pass "
                                 "on cuda:0 (expect.yaml:5), but it would be skipped"])


def footer_total(result: pytest.RunResult, profile: str) -> int:
    """The plan footer's group counts, added up."""
    footer = result.stdout.str().split(f"devcaps plan for profile {profile}", 1)[1]
    return sum(int(line[:5]) for line in footer.splitlines()
               if line[:5].strip().isdigit() and line[5:7] == "  ")
