"""PyTorch's own gates read as facts (issues 19, 32, 33): each gate of the table classes its
test, the line each row cites for the installed torch is that gate's definition there (and a
gate the table cites no line for in a cited release is not in it), a multi-process world with
fewer ranks than its gate needs is skipped (not passed), and --devcaps-hardware selects by gate."""

from __future__ import annotations

import json
import re
from pathlib import Path

import ast
import functools

import pytest

import torch
from pytest_devcaps import gate_table
from pytest_devcaps.marks.pytorch_gates import GATES, Gate, decorator_gate

# One test per gate of the table; the class each must get on a CPU machine (device-type tests
# are instantiated for the CPU here: the ids end in _cpu).
GATED = '''
import unittest
import torch
from torch.testing._internal.common_device_type import (
    instantiate_device_type_tests, onlyCUDA, onlyCPU, onlyOn, onlyAccelerator, onlyNativeDeviceTypes,
    onlyNativeDeviceTypesAnd, onlyCUDAAndPRIVATEUSE1, skipCUDAIf, skipCPUIf, dtypes, dtypesIfCUDA,
    deviceCountAtLeast, largeTensorTest, skipCUDAIfRocm, onlyXPU, onlyMPS, onlyHPU, dtypesIfCPU,
    onlyPRIVATEUSE1)
from torch.testing._internal.common_utils import (
    TestCase, TEST_CUDA, TEST_XPU, requires_cuda, skipIfRocm, skipIfNoXPU, TEST_ACCELERATOR,
    TEST_MULTIACCELERATOR, TEST_WITH_ROCM, TEST_CUDA_GRAPH, TEST_PRIVATEUSE1, requires_cuda_p2p_access,
    TEST_MPS, TEST_HPU, IS_JETSON)
from torch.testing._internal.common_cuda import TEST_MULTIGPU, TEST_CUDNN, IS_THOR
from torch.testing._internal.common_distributed import (
    skip_if_lt_x_gpu, requires_nccl, nccl_skip_if_lt_x_gpu, skip_if_no_gpu, requires_world_size,
    require_n_gpus_for_nccl_backend, requires_accelerator_dist_backend, requires_nccl_version)


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
    @unittest.skipIf(torch.cuda.device_count() < 2, "two GPUs")
    def test_count_condition(self, device): pass
    @requires_cuda
    def test_requires_cuda(self, device): pass
    @requires_nccl()
    def test_requires_nccl(self, device): pass
    @requires_accelerator_dist_backend()
    def test_accelerator_dist(self, device): pass
    @onlyPRIVATEUSE1
    def test_only_pu1(self, device): pass
    @unittest.skipIf(not TEST_ACCELERATOR, "an accelerator")
    def test_flag_accelerator(self, device): pass
    @unittest.skipUnless(TEST_MULTIACCELERATOR, "two accelerators")
    def test_flag_multiaccelerator(self, device): pass
    @unittest.skipIf(not torch.accelerator.is_available(), "an accelerator")
    def test_accelerator_call(self, device): pass
    @unittest.skipIf(not TEST_WITH_ROCM, "ROCm only")
    def test_flag_rocm_only(self, device): pass
    @unittest.skipIf(TEST_WITH_ROCM, "not on ROCm")
    def test_flag_not_rocm(self, device): pass
    @unittest.skipIf(not TEST_CUDA_GRAPH, "CUDA graphs")
    def test_flag_cuda_graph(self, device): pass
    @unittest.skipIf(not TEST_PRIVATEUSE1, "PrivateUse1")
    def test_flag_pu1(self, device): pass
    @unittest.skipIf(not (TEST_CUDA or TEST_PRIVATEUSE1), "CUDA or PrivateUse1")
    def test_flag_cuda_or_pu1(self, device): pass
    @requires_cuda_p2p_access()
    def test_p2p(self, device): pass
    @requires_nccl_version((2, 27), "shrink")
    def test_nccl_version(self, device): pass
    @unittest.skipIf(not TEST_CUDNN, "cuDNN")
    def test_flag_cudnn(self, device): pass
    @unittest.skipUnless(TEST_MPS, "MPS")
    def test_flag_mps(self, device): pass
    @unittest.skipUnless(TEST_HPU, "HPU")
    def test_flag_hpu(self, device): pass
    @unittest.skipUnless(IS_JETSON, "Jetson")
    def test_flag_jetson(self, device): pass
    @unittest.skipUnless(IS_THOR, "Thor")
    def test_flag_thor(self, device): pass
    @dtypesIfCPU(torch.double)
    @dtypes(torch.float)
    def test_dtypes_if_cpu(self, device, dtype): pass


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
    "test_requires_cuda_cpu": ("cuda", "requires_cuda"),
    "test_requires_nccl_cpu": ("cuda", "requires_nccl"),
    "test_accelerator_dist_cpu": ("accelerator", "requires_accelerator_dist_backend"),
    "test_only_pu1_cpu": ("privateuse1", "onlyPRIVATEUSE1"),
    "test_flag_accelerator_cpu": ("accelerator", "TEST_ACCELERATOR"),
    "test_flag_multiaccelerator_cpu": ("accelerator", "TEST_MULTIACCELERATOR"),
    "test_accelerator_call_cpu": ("accelerator", "TEST_ACCELERATOR"),
    "test_flag_rocm_only_cpu": ("amd", "TEST_WITH_ROCM"),
    "test_flag_cuda_graph_cpu": ("cuda", "TEST_CUDA_GRAPH"),
    "test_flag_pu1_cpu": ("privateuse1", "TEST_PRIVATEUSE1"),
    "test_flag_cuda_or_pu1_cpu": ("accelerator", "TEST_CUDA(or TEST_PRIVATEUSE1)"),
    "test_p2p_cpu": ("cuda", "requires_cuda_p2p_access"),
    "test_nccl_version_cpu": ("cuda", "requires_nccl_version"),
    "test_flag_cudnn_cpu": ("cuda", "TEST_CUDNN"), "test_flag_mps_cpu": ("mps", "TEST_MPS"),
    "test_flag_hpu_cpu": ("hpu", "TEST_HPU"), "test_flag_jetson_cpu": ("nvidia", "IS_JETSON"),
    "test_flag_thor_cpu": ("nvidia", "IS_THOR"),
    "test_dtypes_if_cpu_cpu_float64": ("generic", "dtypes(device_type='cpu')"),
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
           "test_count_condition_cpu": 2, "test_nccl_lt": 4, "test_nccl_n": 2, "test_world": 3,
           "test_flag_multiaccelerator_cpu": 2, "test_p2p_cpu": 2}
#: A test whose only gate says where it is skipped: generic, no gate recorded.
UNGATED = {"test_flag_not_rocm_cpu"}


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
    assert set(tests) == set(EXPECTED) | UNGATED
    installed = gate_table.release_of(torch.__version__)
    for name, (hardware, gate) in EXPECTED.items():
        assert tests[name]["hardware"] == hardware, name
        assert gate in [g["gate"] for g in tests[name]["gates"]], name
        source = tests[name]["gates"][0]["source"]
        assert source.startswith("torch/testing/_internal/") and f"torch {installed}" in source, (name, source)
    for name in UNGATED:
        assert (tests[name]["hardware"], tests[name].get("gates", [])) == ("generic", []), name
    for name, test in tests.items():
        assert max((g["devices"] for g in test.get("gates", [])), default=0) == DEVICES.get(name, 0), name
    # every row of the table is exercised by a test above (or named by one of its gates), but
    used = {g["gate"].split("(", 1)[0] for t in tests.values() for g in t.get("gates", [])}
    assert used >= set(GATES) - {
        name for name, row in GATES.items()
        if row.path.endswith(("inductor_utils.py", "triton_utils.py"))  # test_flags_... below
        or row.form == "class_attribute"  # a declared class: tests/plugin/test_hardware*
        # a gate that only skips somewhere narrows nothing (generic with or without it); the
        # device-type ones are reported as skipIf(<kind>: ...)
        or (row.skips and name not in ("skipIf", "skipIfRocm", "skipCUDAIfRocm"))}


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
    result.stdout.fnmatch_lines([f"*selected cuda (--devcaps-hardware), {len(EXPECTED) + len(UNGATED) - len(cuda)} deselected"])


INSTALLED = gate_table.release_of(torch.__version__)
TORCH_ROOT = Path(torch.__file__).parent.parent


@functools.lru_cache(maxsize=None)
def _definitions(path: str) -> dict[str, set[int]]:
    """Name -> the lines that define it in the installed torch's file (module level, inside
    if/else, and the members of module-level classes as ``Class.MEMBER``)."""
    found: dict[str, set[int]] = {}

    def visit(body: list[ast.stmt], prefix: str = "") -> None:
        for node in body:
            names: list[str] = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
                if isinstance(node, ast.ClassDef) and not prefix:
                    visit(node.body, f"{node.name}.")
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [t.id for t in targets if isinstance(t, ast.Name)]
            elif isinstance(node, (ast.If, ast.Try)) and not prefix:
                visit(node.body)
                visit(getattr(node, "orelse", []))
            for name in names:
                found.setdefault(prefix + name, set()).add(node.lineno)

    visit(ast.parse((TORCH_ROOT / path).read_text(encoding="utf-8")).body)
    return found


@pytest.mark.skipif(INSTALLED not in gate_table.CITED_TORCH,
                    reason=f"torch {INSTALLED}: the table cites lines for torch {gate_table.CITED_TORCH}; "
                           f"gates are recognised by name on other releases")
@pytest.mark.parametrize("name", sorted(GATES))
def test_each_citation_of_the_installed_torch_defines_its_gate(name: str) -> None:
    """The line a row cites for this torch defines the gate there; a row with no line for a
    cited release names a gate that release does not have (HardwareClassification in 2.13)."""
    row = GATES[name]
    defined = _definitions(row.path).get(name, set())
    cited = row.citation(torch.__version__)
    if cited is None:
        assert not defined, f"{name} is in torch {INSTALLED} ({row.path}:{sorted(defined)}): cite it"
    else:
        assert cited.torch == INSTALLED and cited.line in defined, (str(cited), sorted(defined))


def test_citations_name_their_torch_release() -> None:
    row = GATES["onlyCUDA"]
    assert [str(c) for c in row.citations] == [
        "torch/testing/_internal/common_device_type.py:1874 (torch 2.13.0)",
        "torch/testing/_internal/common_device_type.py:2012 (torch 2.14.1)"]
    assert str(row.citation("2.14.1+cu130")) == str(row.citations[1])
    assert row.citation("2.12.0") is None
    assert row.source("2.12.0") == ("torch/testing/_internal/common_device_type.py (torch 2.12.0: read by name; "
                                    "cited lines 2.13.0:1874, 2.14.1:2012)")
    new = GATES["HardwareClassification.ACCELERATOR"]
    assert new.citation("2.13.0") is None and new.citation("2.14.1") is not None


def test_the_table_is_consistent_with_devcaps_vocabularies() -> None:
    """Each capability is the catalogue's, each device type and vendor a known one, and a
    gate's class follows from what it names."""
    from pytest_devcaps.config import load_catalogue
    from pytest_devcaps.model import KNOWN_DEVICE_TYPES

    catalogue = load_catalogue()
    types = set(KNOWN_DEVICE_TYPES) | {"meta", "privateuse1"}
    vendors = {rule_vendor for rule_vendor in ("nvidia", "amd", "intel", "apple", "habana", "cpu")}
    for name, row in GATES.items():
        assert row.capability is None or row.capability in catalogue.capabilities, name
        assert set(row.device_types) <= types, (name, row.device_types)
        assert row.vendor is None or row.vendor in vendors, name
        assert row.lines and set(row.lines) <= set(gate_table.CITED_TORCH), name
        assert gate_table.BY_SPELLING[name] is row
        if row.hardware is None:  # narrows nothing itself, or its arguments decide
            continue
        if row.skips:
            assert row.hardware == "generic", name
        elif row.vendor is not None:
            assert row.hardware == row.vendor, name
        elif len(row.device_types) == 1:
            assert row.hardware == row.device_types[0], name
        elif "cpu" in row.device_types:
            assert row.hardware == "generic", name
        elif row.devices >= 2:
            assert row.hardware == "accelerator", name


# What the flags and named decorators mean where they must hold, written out here (not read
# from the table): (class, devices).
FLAG_MEANINGS = {
    "TEST_CUDA": ("cuda", 0), "HAS_CUDA": ("cuda", 0), "torch.cuda.is_available": ("cuda", 0),
    "TEST_MULTIGPU": ("cuda", 2), "HAS_MULTIGPU": ("accelerator", 2),
    "TEST_MULTIACCELERATOR": ("accelerator", 2), "TEST_ACCELERATOR": ("accelerator", 0),
    "torch.accelerator.is_available": ("accelerator", 0), "TEST_XPU": ("xpu", 0),
    "TEST_MPS": ("mps", 0), "HAS_MPS": ("mps", 0), "TEST_HPU": ("hpu", 0),
    "TEST_PRIVATEUSE1": ("privateuse1", 0), "TEST_CUDA_GRAPH": ("cuda", 0), "TEST_CUDNN": ("cuda", 0),
    "TEST_WITH_ROCM": ("amd", 0), "IS_JETSON": ("nvidia", 0), "IS_THOR": ("nvidia", 0),
    "HAS_GPU": ("accelerator", 0), "HAS_GPU_AND_TRITON": ("accelerator", 0),
    "HAS_CUDA_AND_TRITON": ("cuda", 0), "HAS_XPU_AND_TRITON": ("xpu", 0),
}
NAMED_MEANINGS = {
    "requires_cuda": ("cuda", 0), "requires_nccl": ("cuda", 0), "requires_nccl_version": ("cuda", 0),
    "requires_cuda_p2p_access": ("cuda", 2), "requires_accelerator_dist_backend": ("accelerator", 0),
    "requires_gpu": ("accelerator", 0), "requires_cuda_and_triton": ("cuda", 0),
    "requires_xpu_and_triton": ("xpu", 0), "requires_gpu_and_triton": ("accelerator", 0),
    "skipIfNoXPU": ("xpu", 0), "onlyPRIVATEUSE1": ("privateuse1", 0),
}


def _decorator(text: str) -> ast.expr:
    node = ast.parse(f"@{text}\ndef f(): pass").body[0]
    assert isinstance(node, ast.FunctionDef)
    return node.decorator_list[0]


@pytest.mark.parametrize("flag", sorted(FLAG_MEANINGS))
def test_each_flag_is_read_by_name_in_a_skip_condition(flag: str) -> None:
    """Also the inductor and triton flags (importing inductor_utils is too slow for the
    pytester module above): the reader reads the decorator as written."""
    hardware, devices = FLAG_MEANINGS[flag]
    gate = gate_table.BY_SPELLING[flag].name
    for written in (f"unittest.skipIf(not {flag}, 'x')", f"skipUnless({flag}, 'x')",
                    f"unittest.skipIf(not {flag} or IS_WINDOWS, 'x')", f"unittest.skipIf(not {flag}(), 'x')"):
        assert decorator_gate(_decorator(written)) == Gate(gate, hardware, devices), written
    assert decorator_gate(_decorator(f"unittest.skipIf({flag}, 'x')")) is None  # skipped where it holds
    assert set(FLAG_MEANINGS) >= {s for r in gate_table.gates("flag") for s in (r.name, *r.spellings)} - {
        "HAS_XPU", "TEST_GPU", "torch.xpu.is_available", "torch.backends.mps.is_available"}


@pytest.mark.parametrize("name", sorted(NAMED_MEANINGS))
def test_each_named_decorator_is_read_by_name(name: str) -> None:
    for written in (name, f"{name}()", f"common_utils.{name}", f"{name}((2, 27), 'msg')"):
        assert decorator_gate(_decorator(written)) == Gate(name, *NAMED_MEANINGS[name]), written


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
