"""``requires_ranks(n)`` (issue 27, item 2): what ``skip_if_lt_x_gpu(n)`` on a multi-process class
becomes. A real ``MultiProcessTestCase`` world of 2 gloo ranks runs on the CPU under pytest and
under ``python -m unittest``; smaller worlds, device types without a process-group backend and
accelerators with too few devices skip naming what is missing; bad marks error their test.

The runs are subprocesses (PyTorch's test helpers change global state on import; renaming
PrivateUse1 for the fake ``acme`` accelerator is once per process). The unit tests use plain
TestCase classes with a ``world_size``: that is all the check reads of a class.
"""

from __future__ import annotations

import json
import re
import sys
import unittest
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch.distributed as dist

from pytest_devcaps.errors import ConfigError, DevcapsError, MarkerError, UnknownDeviceError
from pytest_devcaps.marks import multiprocess
from pytest_devcaps.marks.classification import classify
from pytest_devcaps.marks.multiprocess import World, ranks_missing, shortfall, world_of

pytest.importorskip("expecttest", reason="torch.testing._internal needs expecttest (the test extra)")

# -- a real world on the CPU, under both runners ----------------------------------------------

WORLD = '''
import unittest

import pytest
import torch
import torch.distributed as dist
from torch.testing._internal.common_distributed import MultiProcessTestCase, MultiThreadedTestCase

from pytest_devcaps import requires_ranks


class TestTwoRanks(MultiProcessTestCase):
    @property
    def world_size(self):
        return 2

    def setUp(self):
        super().setUp()
        self._spawn_processes()

    @requires_ranks(2)
    def test_all_reduce(self):
        dist.init_process_group("gloo", rank=self.rank, world_size=self.world_size,
                                init_method=f"file://{self.file_name}")
        total = torch.tensor([float(self.rank + 1)])
        dist.all_reduce(total)
        assert total.item() == 3.0, total


class TestOneRank(TestTwoRanks):
    @property
    def world_size(self):
        return 1


class TestNoRank(TestTwoRanks):          # PyTorch alone "passes" this one: no rank runs
    @property
    def world_size(self):
        return 0


@requires_ranks(3)                       # on the class too: every test needs the most asked
class TestClassMark(MultiProcessTestCase):
    world_size = 2

    def setUp(self):
        raise AssertionError("the skip comes before setUp")

    @requires_ranks(2)
    def test_two_of_three(self):
        pass


class TestThreads(MultiThreadedTestCase):  # ranks are threads, on the threaded process group
    @property
    def world_size(self):
        return 2

    def setUp(self):
        super().setUp()
        self._spawn_threads()

    @requires_ranks(2)
    def test_threads(self):
        total = torch.ones(1)
        dist.all_reduce(total)
        assert total.item() == 2.0, total


class TestBadCount(MultiProcessTestCase):
    world_size = 2

    def setUp(self):
        raise AssertionError("a bad mark errors before setUp")

    @requires_ranks("2")
    def test_string_count(self):
        pass


class TestNotMultiProcess(unittest.TestCase):
    @requires_ranks(2)
    def test_plain(self):
        pass
'''

NO_BACKEND = '''
import torch
from torch.testing._internal.common_distributed import MultiProcessTestCase

from pytest_devcaps import requires_ranks

device_type = "meta"      # what a converted file defines; no process-group backend serves meta


class TestMetaWorld(MultiProcessTestCase):
    world_size = 2

    def setUp(self):
        raise AssertionError("the skip comes before setUp")

    @requires_ranks(2)
    def test_on_meta(self):
        pass


class TestOwnDeviceType(MultiProcessTestCase):  # DTensorTestBase's kind: the test's own device_type
    world_size = 2                              # (setUp spawns nothing: the check is under test)

    @property
    def device_type(self):
        return "cpu"

    @requires_ranks(2)
    def test_on_cpu(self):
        pass
'''

SKIPS = {
    "TestOneRank": "requires 2 ranks; TestOneRank.world_size is 1 on cpu",
    "TestNoRank": "requires 2 ranks; TestNoRank.world_size is 0 on cpu (no rank would run: the "
                  "test would pass without running)",
    "TestClassMark": "requires 3 ranks; TestClassMark.world_size is 2 on cpu",
    "TestMetaWorld": "requires 2 ranks on meta; no process-group backend is registered for device "
                     "type meta (TestMetaWorld; device type from test_no_backend.device_type)",
}
NOT_MULTIPROCESS = ("requires_ranks: applies to multi-process test classes (MultiProcessTestCase, "
                    "FSDPTest, DTensorTestBase, MultiThreadedTestCase...: a class with world_size); "
                    "test_plain: TestNotMultiProcess has no world_size")
BAD_COUNT = "requires_ranks: count must be a positive int, got '2'"


@pytest.fixture
def world_files(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_world=WORLD, test_no_backend=NO_BACKEND)
    return pytester


def _tests(report: Path) -> dict[str, dict[str, Any]]:
    return {t["nodeid"].split("::", 1)[1]: t for t in json.loads(report.read_text())["tests"]}


def test_a_two_rank_world_runs_on_the_cpu_under_pytest(world_files: pytest.Pytester, tmp_path: Path) -> None:
    report = tmp_path / "ranks.json"
    result = world_files.runpytest_subprocess("-rsE", f"--devcaps-json={report}", timeout=600)
    result.assert_outcomes(passed=3, skipped=4, errors=2)
    result.stdout.fnmatch_lines_random([f"SKIPPED [[]1] test_*.py:*: {reason}" for reason in SKIPS.values()])
    result.stdout.fnmatch_lines_random([f"*test_plain: {NOT_MULTIPROCESS}*", f"*{BAD_COUNT}*"])
    result.stdout.no_fnmatch_line("*Traceback*")
    result.stdout.no_fnmatch_line("*a bad mark errors before setUp*")
    result.stdout.no_fnmatch_line("*the skip comes before setUp*")
    tests = _tests(report)
    ran = tests["TestTwoRanks::test_all_reduce"]
    assert (ran["outcome"], ran["requires"], ran["missing"], ran["hardware"]) == \
        ("passed", ["ranks>=2"], [], "generic")  # runs on the CPU: generic, not accelerator
    assert tests["TestOwnDeviceType::test_on_cpu"]["outcome"] == "passed"
    assert tests["TestThreads::test_threads"]["outcome"] == "passed"
    one = tests["TestOneRank::test_all_reduce"]["missing"]
    assert one == [{"kind": "devices", "requirement": "ranks>=2", "device": "cpu", "found": "1",
                    "source": "TestOneRank.world_size", "reason": SKIPS["TestOneRank"]}]
    # grouped in the footer like any requirement a device lacks
    result.stdout.fnmatch_lines_random(["*1  ranks>=2 on cpu: found 1 (TestOneRank.world_size)",
                                        "*1  ranks>=2 on meta: found no process-group backend *"])


def _passed(out: str, test: str) -> bool:
    """``python -m unittest -v`` says ``test`` (module.Class.method) passed: ``name (module.Class)``
    (Python 3.10) or ``name (module.Class.name)`` then ``... ok``, torch's log lines in between."""
    where, name = test.rsplit(".", 1)
    pattern = rf"^{name} \({re.escape(where)}(?:\.{name})?\) \.\.\. (?:[IWE]\d{{4}} [^\n]*\n)*ok$"
    return re.search(pattern, out, re.MULTILINE) is not None


def test_the_same_world_under_python_m_unittest(world_files: pytest.Pytester) -> None:
    result = world_files.run(sys.executable, "-m", "unittest", "-v", "test_world", "test_no_backend",
                             timeout=600)
    out = result.stdout.str() + result.stderr.str()
    assert "Ran 9 tests" in out, out[-3000:]
    assert "FAILED (errors=2, skipped=4)" in out, out[-3000:]
    assert _passed(out, "test_world.TestTwoRanks.test_all_reduce"), out[-3000:]
    assert _passed(out, "test_no_backend.TestOwnDeviceType.test_on_cpu"), out[-3000:]
    assert _passed(out, "test_world.TestThreads.test_threads"), out[-3000:]
    for cls, reason in SKIPS.items():
        assert f"{cls}.test_" in out and f"skipped {reason!r}" in out, (cls, out[-3000:])
    assert NOT_MULTIPROCESS in out and BAD_COUNT in out
    assert "a bad mark errors before setUp" not in out and "the skip comes before setUp" not in out


# -- an accelerator: the fake acme device (2 devices) -----------------------------------------

FAKE_BACKEND = (Path(__file__).parent / "_fake_acme.py").read_text()

ACME = '''
import fake_acme  # noqa: F401  (python -m unittest has no conftest)
import torch.distributed as dist
from torch.testing._internal.common_distributed import MultiProcessTestCase

from pytest_devcaps import requires_ranks

device_type = "acme"
dist.Backend.register_backend("acmepg", lambda *args: None, devices=["acme"])


class TestTwoOnTwo(MultiProcessTestCase):
    world_size = 2                # setUp spawns nothing: the check alone is under test

    @requires_ranks(2)
    def test_two(self):
        pass


class TestFourOnTwo(MultiProcessTestCase):
    world_size = 4

    def setUp(self):
        raise AssertionError("the skip comes before setUp")

    @requires_ranks(4)
    def test_four(self):
        pass
'''
FOUR_ON_TWO = ("requires 4 ranks on acme; found 2 acme devices (TestFourOnTwo; device type from "
               "test_acme.device_type; ranks share a device only with PYTEST_DEVCAPS_DIST_SHARE_DEVICES=1)")


def test_an_accelerator_needs_a_device_per_rank_under_both_runners(pytester: pytest.Pytester,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """acme (2 devices) with a process-group backend registered for it: 2 ranks run, 4 skip."""
    pytester.makepyfile(fake_acme=FAKE_BACKEND, test_acme=ACME)
    pytester.makeconftest("import fake_acme  # noqa: F401")
    monkeypatch.delenv("PYTEST_DEVCAPS_DIST_SHARE_DEVICES", raising=False)
    result = pytester.runpytest_subprocess("-rs", timeout=600)
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines([f"SKIPPED [[]1] test_acme.py:*: {FOUR_ON_TWO}"])
    plain = pytester.run(sys.executable, "-m", "unittest", "-v", "test_acme", timeout=600)
    out = plain.stdout.str() + plain.stderr.str()
    assert _passed(out, "test_acme.TestTwoOnTwo.test_two"), out[-3000:]
    assert f"skipped {FOUR_ON_TWO!r}" in out and "OK (skipped=1)" in out, out[-3000:]


# -- unit tests: the checks in order ---------------------------------------------------------


class _Registry:
    """Discovery only: how many devices of each type (UnknownDeviceError for the others)."""

    def __init__(self, **counts: int) -> None:
        self.counts = counts

    def identity(self, device: str) -> SimpleNamespace:
        if device not in self.counts:
            raise UnknownDeviceError(device, self.counts)
        return SimpleNamespace(count=self.counts[device])


class _Sized(unittest.TestCase):
    world_size = 2

    def test_a(self) -> None:
        pass


class _OnAcme(_Sized):
    device_type = "acme:0"  # with an index, as common_fsdp's "hpu:0"


def _mark(*args: Any, **kwargs: Any) -> pytest.Mark:
    return pytest.mark.requires_ranks(*args, **kwargs).mark


def _never() -> bool:
    raise AssertionError("sharing is asked only on an accelerator")


def test_world_size_is_read_from_the_class_for_the_method() -> None:
    world = world_of(_Sized, "test_a")
    assert world == World("_Sized", 2, "cpu", "no accelerator")
    assert ranks_missing([_mark(2)], _Sized, "test_a", _Registry(cpu=1), _never) is None
    missing = ranks_missing([_mark(2), _mark(3)], _Sized, "test_a", _Registry(cpu=1), _never)
    assert missing is not None and missing.reason == "requires 3 ranks; _Sized.world_size is 2 on cpu"
    assert (missing.key, missing.found, missing.source, missing.capabilities) == \
        ("ranks>=3", "2", "_Sized.world_size", ())  # names no capability: --devcaps-require ignores it


def test_an_unset_world_is_what_the_class_makes_of_it() -> None:
    """MultiProcContinuousTest: world_size -2 until its world starts; _get_world_size(device_type)
    then takes the device type's device count (common_distributed.py:2025)."""
    class Continuous(_Sized):
        world_size = -2

        @classmethod
        def _get_world_size(cls, device_type: str) -> int:
            return {"cpu": 1}[device_type]

    assert world_of(Continuous, "test_a").size == 1


def test_the_device_type_order_test_then_module_then_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    assert world_of(_OnAcme, "test_a").device_type == "acme"  # the class's own, index dropped
    assert world_of(_OnAcme, "test_a").device_source == "_OnAcme.device_type"

    class Method(_Sized):
        @classmethod
        def device_type(cls) -> str:  # MultiProcContinuousTest's classmethod
            return "meta"

    assert world_of(Method, "test_a").device_type == "meta"
    module = sys.modules[__name__]
    monkeypatch.setattr(module, "device_type", "meta", raising=False)
    assert (world_of(_Sized, "test_a").device_type, world_of(_Sized, "test_a").device_source) == \
        ("meta", f"{__name__}.device_type")
    assert world_of(_OnAcme, "test_a").device_type == "acme"  # the test's own comes first
    monkeypatch.delattr(module, "device_type")
    monkeypatch.setattr(torch.accelerator, "current_accelerator",
                        lambda check_available=False: torch.device("meta") if check_available else None)
    assert world_of(_Sized, "test_a") == World("_Sized", 2, "meta", "torch.accelerator")


def test_a_device_type_without_a_backend_skips_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_backend(device: str) -> str:
        raise ValueError(f"Default backend not registered for device : {device}")

    monkeypatch.setattr(dist, "get_default_backend_for_device", no_backend)
    missing = ranks_missing([_mark(2)], _Sized, "test_a", _Registry(cpu=1), _never)
    assert missing is not None
    assert missing.reason == ("requires 2 ranks on cpu; no process-group backend is registered for "
                              "device type cpu (_Sized; device type from no accelerator)")
    assert (missing.device, missing.found) == ("cpu", "no process-group backend")


def test_a_backend_this_torch_lacks_and_no_torch_distributed(monkeypatch: pytest.MonkeyPatch) -> None:
    world = World("TestX", 2, "cpu", "no accelerator")
    monkeypatch.setattr(dist, "is_backend_available", lambda backend: False)
    missing = shortfall(2, world, _Registry(cpu=1), _never)  # type: ignore[arg-type]
    assert missing is not None and missing.reason == (
        "requires 2 ranks on cpu; the default process-group backend for device type cpu, gloo, is "
        "not available in this torch build (TestX; device type from no accelerator)")
    monkeypatch.setattr(dist, "is_available", lambda: False)
    missing = shortfall(2, world, _Registry(cpu=1), _never)  # type: ignore[arg-type]
    assert missing is not None and missing.reason == (
        "requires 2 ranks on cpu; torch.distributed is not available in this torch build (TestX; "
        "device type from no accelerator)")


def test_an_fsdp_test_world_needs_its_own_backend_to_serve_the_device() -> None:
    """FSDPTest._run initializes common_fsdp.DISTRIBUTED_BACKEND (gloo where CUDA, HPU and XPU
    are absent), then a barrier on the current accelerator: on a device gloo does not serve (an
    out-of-tree one) it failed with "No backend type associated with device type emu"; it skips,
    saying which backend the class starts. On the CPU gloo serves, and the world runs."""
    from torch.testing._internal.common_fsdp import DISTRIBUTED_BACKEND, FSDPTest

    class TestSharded(FSDPTest):
        @property
        def world_size(self) -> int:
            return 2

        def test_a(self) -> None:
            pass

    source = "common_fsdp.DISTRIBUTED_BACKEND (FSDPTest._run)"
    assert multiprocess.class_backend(TestSharded) == (DISTRIBUTED_BACKEND, source)
    assert world_of(TestSharded, "test_a").backend == DISTRIBUTED_BACKEND
    assert multiprocess.class_backend(_Sized) == (None, "")  # the device type's default backend
    world = World("TestSharded", 2, "acme", "X.device_type", "gloo", source)
    missing = shortfall(2, world, _Registry(acme=2), _never)  # type: ignore[arg-type]
    served = ", ".join(dist.Backend.backend_capability["gloo"])
    assert missing is not None and missing.reason == (
        f"requires 2 ranks on acme; TestSharded initializes gloo ({source}), which has no acme "
        f"support (it serves {served}) (TestSharded; device type from X.device_type)")
    assert missing.found == f"gloo serves {served}"
    on_cpu = World("TestSharded", 2, "cpu", "no accelerator", "gloo", source)
    assert shortfall(2, on_cpu, _Registry(cpu=1), _never) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(("count", "share", "expected"), [
    (2, False, None),
    (1, True, None),
    (1, False, "requires 2 ranks on acme; found 1 acme device (TestX; device type from X.device_type; "
               "ranks share a device only with PYTEST_DEVCAPS_DIST_SHARE_DEVICES=1)"),
    (0, True, "requires 2 ranks on acme; found 0 acme devices (TestX; device type from X.device_type)"),
])
def test_an_accelerator_needs_a_device_per_rank_unless_shared(monkeypatch: pytest.MonkeyPatch, count: int,
                                                              share: bool, expected: str | None) -> None:
    monkeypatch.setattr(dist, "get_default_backend_for_device", lambda device: "gloo")
    missing = shortfall(2, World("TestX", 2, "acme", "X.device_type"), _Registry(acme=count),  # type: ignore[arg-type]
                        lambda: share)
    assert (None if missing is None else missing.reason) == expected


def test_a_bad_sharing_variable_is_an_error_of_the_test(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_devcaps.distributed.settings import share_devices

    monkeypatch.setattr(dist, "get_default_backend_for_device", lambda device: "gloo")
    monkeypatch.setenv("PYTEST_DEVCAPS_DIST_SHARE_DEVICES", "maybe")
    with pytest.raises(ConfigError, match="PYTEST_DEVCAPS_DIST_SHARE_DEVICES.*got 'maybe'"):
        shortfall(2, World("TestX", 2, "acme", "X.device_type"), _Registry(acme=1), share_devices)  # type: ignore[arg-type]
    monkeypatch.setenv("PYTEST_DEVCAPS_DIST_SHARE_DEVICES", "yes")
    assert shortfall(2, World("TestX", 2, "acme", "X.device_type"), _Registry(acme=1), share_devices) is None  # type: ignore[arg-type]
    # on the CPU the variable is not needed, so not read (a bad value errors only where it counts)
    monkeypatch.setenv("PYTEST_DEVCAPS_DIST_SHARE_DEVICES", "maybe")
    assert shortfall(2, World("TestX", 2, "cpu", "no accelerator"), _Registry(cpu=1), share_devices) is None  # type: ignore[arg-type]


def test_marker_errors_name_the_marker() -> None:
    registry = _Registry(cpu=1)
    for args, message in [((True,), "count must be a positive int, got True"),
                          ((0,), "count must be a positive int, got 0"),
                          (("2",), "count must be a positive int, got '2'"),
                          ((1, 2), "takes one rank count, got 2 positional arguments")]:
        with pytest.raises(MarkerError, match=f"^requires_ranks: {message}$"):
            ranks_missing([_mark(*args)], _Sized, "test_a", registry, _never)  # type: ignore[arg-type]
    with pytest.raises(MarkerError, match="unexpected keyword argument 'world_size'; it takes no keyword"):
        ranks_missing([_mark(2, world_size=2)], _Sized, "test_a", registry, _never)  # type: ignore[arg-type]
    with pytest.raises(MarkerError, match="test_it: it is not in a class"):
        ranks_missing([_mark(2)], None, "test_it", registry, _never)  # type: ignore[arg-type]

    class Broken(_Sized):
        @property
        def world_size(self) -> int:
            raise RuntimeError("no devices")

    with pytest.raises(DevcapsError, match=r"Broken.world_size could not be read: RuntimeError: no devices"):
        ranks_missing([_mark(2)], Broken, "test_a", registry, _never)  # type: ignore[arg-type]


def test_requires_ranks_leaves_the_hardware_class_generic() -> None:
    """A test that runs on the CPU with n ranks is generic; requires_devices(2) is not (a CPU is
    one device)."""
    def registry_of() -> Any:
        from pytest_devcaps.library import default_registry

        return default_registry()

    assert classify([_mark(4)], _Sized, registry_of).value == "generic"
    assert classify([pytest.mark.requires_devices(2).mark], _Sized, registry_of).value == "accelerator"


# -- the decorator ----------------------------------------------------------------------------


def test_the_decorator_guards_the_class_it_is_written_in() -> None:
    from pytest_devcaps import requires_ranks

    class Guarded(unittest.TestCase):
        world_size = 1

        @requires_ranks(2)
        def test_a(self) -> None:
            raise AssertionError("not run")

    assert Guarded.__dict__.get("__devcaps_checked__") is True  # run() wrapped: checks before setUp
    assert not any(name.startswith("__devcaps_guard") for name in vars(Guarded))
    assert [m.args for m in Guarded.test_a.pytestmark] == [(2,)]  # type: ignore[attr-defined]

    class Later(unittest.TestCase):
        def test_a(self) -> None:
            pass

    Later.test_a = requires_ranks(2)(Later.test_a)  # type: ignore[method-assign]
    assert "__devcaps_checked__" not in Later.__dict__  # nothing to guard from here: call-time check

    with pytest.raises(MarkerError, match="unexpected keyword argument 'wrold_size'; it takes no keyword"):
        requires_ranks(2, wrold_size=2)
    assert multiprocess.MARKER == "requires_ranks"
