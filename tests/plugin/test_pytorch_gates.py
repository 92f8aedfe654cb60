"""PyTorch's own gates read as facts (issue 19): each gate of the table classes its test, the
torch line each row cites is that gate's definition, a multi-process world with fewer ranks
than its gate needs is skipped (not passed), and --devcaps-hardware selects by gate."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import torch
from pytest_devcaps.marks.pytorch_gates import GATES

# One test per gate of the table; the class each must get on a CPU machine (device-type tests
# are instantiated for the CPU here: the ids end in _cpu).
GATED = '''
import unittest
import torch
from torch.testing._internal.common_device_type import (
    instantiate_device_type_tests, onlyCUDA, onlyCPU, onlyOn, onlyAccelerator, onlyNativeDeviceTypes,
    onlyNativeDeviceTypesAnd, onlyCUDAAndPRIVATEUSE1, skipCUDAIf, skipCPUIf, dtypes, dtypesIfCUDA,
    deviceCountAtLeast, largeTensorTest, skipCUDAIfRocm, onlyXPU, onlyMPS, onlyHPU)
from torch.testing._internal.common_utils import TestCase, TEST_CUDA, TEST_XPU, TEST_PRIVATEUSE1, requires_cuda, skipIfRocm, skipIfNoXPU
from torch.testing._internal.common_cuda import TEST_MULTIGPU
from torch.testing._internal.common_distributed import (
    skip_if_lt_x_gpu, requires_nccl, nccl_skip_if_lt_x_gpu, skip_if_no_gpu, requires_world_size,
    require_n_gpus_for_nccl_backend, requires_accelerator_dist_backend)


class TestGates(TestCase):
    @onlyCUDA
    def test_only_cuda(self, device): pass
    @onlyCPU
    def test_only_cpu(self, device): pass
    @onlyXPU
    def test_only_xpu(self, device): pass
    @onlyMPS
    def test_only_mps(self, device): pass
    @onlyHPU
    def test_only_hpu(self, device): pass
    @onlyOn(["cuda", "xpu"])
    def test_only_on_two(self, device): pass
    @onlyAccelerator
    def test_only_accelerator(self, device): pass
    @onlyCUDAAndPRIVATEUSE1
    def test_cuda_and_pu1(self, device): pass
    @onlyNativeDeviceTypes
    def test_native(self, device): pass
    @onlyNativeDeviceTypesAnd(["xpu"])
    def test_native_and(self, device): pass
    @skipCUDAIf(True, "not on cuda")
    def test_skip_cuda_if(self, device): pass
    @skipCPUIf(True, "not on cpu")
    def test_skip_cpu_true(self, device): pass
    @skipCUDAIfRocm
    def test_skip_cuda_if_rocm(self, device): pass
    @dtypesIfCUDA(torch.half)
    @dtypes(torch.float)
    def test_dtypes_if_cuda(self, device, dtype): pass
    @deviceCountAtLeast(2)
    def test_device_count(self, devices): pass
    @largeTensorTest("1GB")
    def test_large(self, device): pass
    @skipIfRocm
    def test_skip_if_rocm(self, device): pass
    @skipIfNoXPU
    def test_skip_if_no_xpu(self, device): pass
    @unittest.skipIf(not TEST_CUDA, "CUDA not available")
    def test_flag_cuda(self, device): pass
    @unittest.skipIf(not TEST_MULTIGPU, "two GPUs")
    def test_flag_multigpu(self, device): pass
    @unittest.skipUnless(TEST_XPU, "XPU")
    def test_flag_xpu(self, device): pass
    @unittest.skipIf(not TEST_PRIVATEUSE1, "PrivateUse1")
    def test_flag_pu1(self, device): pass
    @unittest.skipIf(not (TEST_CUDA or TEST_PRIVATEUSE1), "CUDA or PrivateUse1")
    def test_flag_cuda_or_pu1(self, device): pass
    @unittest.skipIf(torch.cuda.device_count() < 2, "two GPUs")
    def test_count_condition(self, device): pass
    @requires_cuda
    def test_requires_cuda(self, device): pass
    @requires_nccl()
    def test_requires_nccl(self, device): pass
    @requires_accelerator_dist_backend()
    def test_accelerator_dist(self, device): pass


@unittest.skipIf(not TEST_CUDA, "class needs CUDA")
class TestClassGate(TestCase):
    def test_a(self): pass
    def test_b(self): pass


class TestDistGates(TestCase):
    @skip_if_lt_x_gpu(2)
    def test_lt_x_gpu(self): pass
    @skip_if_lt_x_gpu(2, allow_cpu=True)
    def test_lt_x_gpu_allow_cpu(self): pass
    @nccl_skip_if_lt_x_gpu("nccl", 4)
    def test_nccl_lt(self): pass
    @require_n_gpus_for_nccl_backend(2, "nccl")
    def test_nccl_n(self): pass
    @skip_if_no_gpu
    def test_no_gpu(self): pass
    @requires_world_size(3)
    def test_world(self): pass


instantiate_device_type_tests(TestGates, globals(), only_for="cpu")
'''

EXPECTED = {
    "test_only_cuda_cpu": ("cuda", "onlyCUDA"), "test_only_cpu_cpu": ("cpu", "onlyCPU"),
    "test_only_xpu_cpu": ("xpu", "onlyXPU"), "test_only_mps_cpu": ("mps", "onlyMPS"),
    "test_only_hpu_cpu": ("hpu", "onlyHPU"),
    "test_only_on_two_cpu": ("accelerator", "onlyOn(['cuda', 'xpu'])"),
    "test_only_accelerator_cpu": ("accelerator", "onlyAccelerator"),
    "test_cuda_and_pu1_cpu": ("accelerator", "onlyCUDAAndPRIVATEUSE1"),
    "test_native_cpu": ("generic", "onlyNativeDeviceTypes"),
    "test_native_and_cpu": ("generic", "onlyNativeDeviceTypesAnd"),
    "test_skip_cuda_if_cpu": ("generic", "skipIf(skipCUDAIf: True)"),
    "test_skip_cpu_true_cpu": ("accelerator", "skipIf(skipCPUIf: True)"),
    "test_skip_cuda_if_rocm_cpu": ("generic", "skipCUDAIfRocm"),
    "test_dtypes_if_cuda_cpu_float32": ("generic", "dtypesIfCUDA"),
    "test_device_count_cpu": ("accelerator", "deviceCountAtLeast(2)"),
    "test_large_cpu": ("generic", "largeTensorTest"),
    "test_skip_if_rocm_cpu": ("generic", "skipIfRocm"),
    "test_skip_if_no_xpu_cpu": ("xpu", "skipIfNoXPU"),
    "test_flag_cuda_cpu": ("cuda", "TEST_CUDA"), "test_flag_multigpu_cpu": ("cuda", "TEST_MULTIGPU"),
    "test_flag_xpu_cpu": ("xpu", "TEST_XPU"), "test_count_condition_cpu": ("cuda", "TEST_MULTIGPU"),
    "test_flag_pu1_cpu": ("privateuse1", "TEST_PRIVATEUSE1"),
    "test_flag_cuda_or_pu1_cpu": ("accelerator", "TEST_CUDA(or TEST_PRIVATEUSE1)"),
    "test_requires_cuda_cpu": ("cuda", "requires_cuda"),
    "test_requires_nccl_cpu": ("cuda", "requires_nccl"),
    "test_accelerator_dist_cpu": ("accelerator", "requires_accelerator_dist_backend"),
    "test_a": ("cuda", "TEST_CUDA"), "test_b": ("cuda", "TEST_CUDA"),
    "test_lt_x_gpu": ("accelerator", "skip_if_lt_x_gpu(2)"),
    "test_lt_x_gpu_allow_cpu": ("generic", "skip_if_lt_x_gpu(2, allow_cpu=True)"),
    "test_nccl_lt": ("cuda", "nccl_skip_if_lt_x_gpu('nccl', 4)"),
    "test_nccl_n": ("cuda", "require_n_gpus_for_nccl_backend('nccl', 2)"),
    "test_no_gpu": ("generic", "skip_if_no_gpu"),
    "test_world": ("cuda", "requires_world_size(3)"),
}
# skip_if_no_gpu reads as accelerator on a test: but as a gate it is unconditional only inside
# a rank (it reads WORLD_SIZE); see the table.
EXPECTED["test_no_gpu"] = ("accelerator", "skip_if_no_gpu")
DEVICES = {"test_device_count_cpu": 2, "test_lt_x_gpu": 2, "test_flag_multigpu_cpu": 2,
           "test_count_condition_cpu": 2, "test_nccl_lt": 4, "test_nccl_n": 2, "test_world": 3}


def _tests(report: Path) -> dict[str, dict]:
    return {t["nodeid"].split("::")[-1]: t for t in json.loads(report.read_text())["tests"]}


@pytest.fixture
def gated(pytester: pytest.Pytester, tmp_path: Path) -> tuple[pytest.RunResult, dict[str, dict], Path]:
    pytester.makepyfile(test_gated=GATED)
    report = tmp_path / "gates.json"
    result = pytester.runpytest_subprocess("-p", "no:randomly", f"--devcaps-json={report}")
    return result, _tests(report), report


def test_every_gate_of_the_table_classes_its_test(gated: tuple[pytest.RunResult, dict[str, dict], Path]) -> None:
    _, tests, _ = gated
    assert set(tests) == set(EXPECTED)
    for name, (hardware, gate) in EXPECTED.items():
        assert tests[name]["hardware"] == hardware, name
        assert gate in [g["gate"] for g in tests[name]["gates"]], name
        assert tests[name]["gates"][0]["source"].startswith("torch/testing/_internal/"), name
    for name, test in tests.items():
        assert max(g["devices"] for g in test["gates"]) == DEVICES.get(name, 0), name
    # every row of the table is exercised by a test above (or named by one of its gates)
    used = {g["gate"].split("(", 1)[0] for t in tests.values() for g in t["gates"]}
    assert used >= set(GATES) - {"onlyOn", "onlyPRIVATEUSE1", "dtypes", "TEST_CUDNN", "TEST_MPS",
                                 "TEST_HPU", "HAS_GPU", "HAS_CUDA_AND_TRITON", "requires_gpu",
                                 "requires_cuda_and_triton"}


def test_counts_do_not_change_and_the_footer_adds_up(pytester: pytest.Pytester,
                                                      gated: tuple[pytest.RunResult, dict[str, dict], Path]) -> None:
    result, tests, _ = gated
    plain = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:devcaps")
    assert plain.parseoutcomes() == result.parseoutcomes()
    skipped = result.parseoutcomes()["skipped"]
    groups = [int(m.group(1)) for line in result.stdout.lines
              if (m := re.match(r"^\s+(\d+)  \S", line))]
    assert sum(groups) == skipped
    result.stdout.fnmatch_lines(["*devcaps: skipped tests by reason*",
                                 "    2  class needs CUDA",  # a class-level reason, once
                                 f"{skipped} test(s) skipped: 0 for missing capabilities, "
                                 f"{skipped} for other reasons"])
    assert sum(1 for t in tests.values() if t["outcome"] == "skipped") == skipped


def test_hardware_selection_picks_the_gated_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gated=GATED)
    result = pytester.runpytest_subprocess("-p", "no:randomly", "--devcaps-hardware=cuda", "-v")
    cuda = sorted(n for n, (hardware, _) in EXPECTED.items() if hardware == "cuda")
    ran = sorted(re.sub(r"^.*::", "", line.split(" ")[0]) for line in result.stdout.lines
                 if "::" in line and (" PASSED" in line or " SKIPPED" in line or " FAILED" in line))
    assert ran == cuda
    result.stdout.fnmatch_lines([f"*selected cuda (--devcaps-hardware), {len(EXPECTED) - len(cuda)} deselected"])


@pytest.mark.parametrize("name", sorted(GATES))
def test_each_cited_torch_line_defines_its_gate(name: str) -> None:
    path, line = GATES[name].source.rsplit(":", 1)
    text = (Path(torch.__file__).parent.parent / path).read_text().splitlines()[int(line) - 1]
    word = {"skipCUDAIfRocm": "skipCUDAIfRocm", "dtypesIfCUDA": "dtypesIfCUDA"}.get(name, name)
    assert re.search(rf"\b{word}\b", text), f"{GATES[name].source}: {text!r}"


ZERO_RANKS = '''
import torch
from torch.testing._internal.common_distributed import MultiProcessTestCase, skip_if_lt_x_gpu


class TestWorld(MultiProcessTestCase):
    @property
    def world_size(self):
        return min(2, torch.cuda.device_count())   # FSDPTest's pattern: 0 on a CPU machine

    def setUp(self):
        super().setUp()
        self._spawn_processes()

    @skip_if_lt_x_gpu(2)
    def test_two_ranks(self):
        raise AssertionError("a rank ran")


class TestNoGate(MultiProcessTestCase):
    @property
    def world_size(self):
        return 0

    def setUp(self):
        super().setUp()
        self._spawn_processes()

    def test_nothing(self):
        pass
'''


def test_a_world_with_fewer_ranks_than_its_gate_needs_is_skipped(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makepyfile(test_world=ZERO_RANKS)
    plain = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:devcaps")
    plain.assert_outcomes(passed=2)  # the silent outcome: zero ranks ran, both "passed"
    report = tmp_path / "world.json"
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-rs", f"--devcaps-json={report}")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines_random([
        "SKIPPED [[]1] test_world.py:*: requires 2 devices; found 0 cuda (skip_if_lt_x_gpu(2); "
        "world_size 0 of TestWorld: no rank would run)",
        "SKIPPED [[]1] test_world.py:*: requires 1 device; found 0 cuda (world_size 0 of TestNoGate: "
        "no rank would run)"])
    tests = _tests(report)
    assert tests["test_two_ranks"]["reason"].startswith("requires 2 devices; found 0 cuda")
    assert tests["test_two_ranks"]["gates"][0]["devices"] == 2


def test_torch_alone_does_not_turn_gate_reading_on() -> None:
    """``import torch`` loads a few ``torch.testing._internal`` modules itself (common_dtype,
    logging_tensor, distributed.fake_pg): only a test-helper module with gates says a suite uses
    them (otherwise every test of every torch suite would be read for gates it cannot have)."""
    import subprocess
    import sys

    code = ("import torch, torch._dynamo, torch.distributed\n"
            "from pytest_devcaps.marks.names import pytorch_gates_in_use\n"
            "before = pytorch_gates_in_use()\n"
            "import torch.testing._internal.common_utils\n"
            "print(before, pytorch_gates_in_use())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["False", "True"], out.stderr[-2000:]
