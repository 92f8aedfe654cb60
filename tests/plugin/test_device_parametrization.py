"""How the device fixture is parametrized (issue 32 item 8): indirectly, through our fixture, with
the parameter sets made once per session and the marks' evaluations shared between tests whose
marks read the same; what a test sees stays what it saw before.

Two device types: the CPU and a fake PrivateUse1 backend (``acme``, two devices) registered in a
conftest; renaming PrivateUse1 is once per process, so each run is a subprocess.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

FAKE_BACKEND = (Path(__file__).parent / "_fake_acme.py").read_text()

OURS = """
import pytest
import torch

SEEN = {}

def test_first(device, request):
    # indirect: the parameter is the device key, the value our one torch.device per key
    assert request.node.callspec.params["device"] in ("cpu", "acme:0")
    assert isinstance(device, torch.device)
    SEEN[request.node.callspec.params["device"]] = device

def test_second(device, request):
    assert device is SEEN[request.node.callspec.params["device"]]

def test_devcaps_name(devcaps_device, request):
    assert devcaps_device is SEEN[request.node.callspec.params["devcaps_device"]]
"""

OWN = """
import pytest
import torch

@pytest.mark.parametrize("device", ["meta"])
def test_own_function_level(device):
    assert device == "meta"  # the test's own value, as given: no torch.device, one run

@pytest.mark.parametrize("devcaps_device", ["mine"])
class TestOwnClassLevel:
    def test_in_class(self, devcaps_device, device):
        assert devcaps_device == "mine" and isinstance(device, torch.device)

@pytest.mark.requires_devices(1)
@pytest.mark.parametrize("dtype", [[1, 2]], ids=["pair"])
def test_own_unhashable_dtype(device, dtype):
    assert dtype == [1, 2]
"""

OWN_MODULE = """
import pytest

pytestmark = pytest.mark.parametrize("device", ["meta"])

def test_module_level(device, devcaps_device):
    assert device == "meta" and devcaps_device.type in ("cpu", "acme")
"""

SHARED_MARKS = """
import pytest

@pytest.mark.requires_capability("dtype.bf16")
def test_a(device):
    pass

@pytest.mark.requires_capability("dtype.bf16")
def test_b(device):
    pass

@pytest.mark.requires_capability("dist.gloo")
def test_c(device):
    pass
"""


def _run(pytester: pytest.Pytester, *args: str, **files: str) -> pytest.RunResult:
    pytester.makepyfile(fake_acme=FAKE_BACKEND, **files)
    pytester.makeconftest("import fake_acme  # noqa: F401")
    return pytester.runpytest_subprocess("-v", "-p", "no:randomly", "-rs", *args)


def test_our_device_is_an_indirect_parameter_with_one_value_per_key(pytester: pytest.Pytester) -> None:
    result = _run(pytester, test_ours=OURS)
    result.stdout.fnmatch_lines([
        "*test_ours.py::test_first[[]cpu[]] PASSED*",
        "*test_ours.py::test_first[[]acme[]] PASSED*",
        "*test_ours.py::test_second[[]cpu[]] PASSED*",
        "*test_ours.py::test_second[[]acme[]] PASSED*",
        "*test_ours.py::test_devcaps_name[[]cpu[]] PASSED*",
        "*test_ours.py::test_devcaps_name[[]acme[]] PASSED*",
    ])
    result.assert_outcomes(passed=6)


def test_a_tests_own_parametrization_wins_at_every_level(pytester: pytest.Pytester) -> None:
    result = _run(pytester, test_own=OWN, test_own_module=OWN_MODULE)
    result.stdout.fnmatch_lines_random([
        "*test_own.py::test_own_function_level[[]meta[]] PASSED*",
        "*test_own.py::TestOwnClassLevel::test_in_class[[]cpu-mine[]] PASSED*",
        "*test_own.py::TestOwnClassLevel::test_in_class[[]acme-mine[]] PASSED*",
        "*test_own.py::test_own_unhashable_dtype[[]cpu-pair[]] PASSED*",
        "*test_own.py::test_own_unhashable_dtype[[]acme-pair[]] PASSED*",
        "*test_own_module.py::test_module_level[[]cpu-meta[]] PASSED*",
        "*test_own_module.py::test_module_level[[]acme-meta[]] PASSED*",
    ])
    result.assert_outcomes(passed=7)


def test_tests_with_the_same_marks_each_get_their_devices_answer(pytester: pytest.Pytester,
                                                                 tmp_path: Path) -> None:
    """The evaluation of one group of marks is shared per device: each test still skips, runs and
    reports with its own device's answer."""
    report = tmp_path / "report.json"
    result = _run(pytester, "--devcaps-set=dtype.bf16=unsupported@cpu", "--devcaps-set=dtype.bf16=native@acme",
                  f"--devcaps-json={report}", test_shared=SHARED_MARKS)
    result.stdout.fnmatch_lines_random([
        "*test_shared.py::test_a[[]cpu[]] SKIPPED*", "*test_shared.py::test_a[[]acme[]] PASSED*",
        "*test_shared.py::test_b[[]cpu[]] SKIPPED*", "*test_shared.py::test_b[[]acme[]] PASSED*",
        "*test_shared.py::test_c[[]cpu[]] PASSED*", "*test_shared.py::test_c[[]acme[]] SKIPPED*",
        "SKIPPED [[]1[]] test_shared.py:3: requires dtype.bf16 on cpu: unsupported (cli: set on the command line)",
        "SKIPPED [[]1[]] test_shared.py:7: requires dtype.bf16 on cpu: unsupported (cli: set on the command line)",
        "SKIPPED [[]1[]] test_shared.py:11: requires dist.gloo on acme:0: unsupported (probe: *",
    ])
    tests = {t["nodeid"].split("::")[-1]: t for t in json.loads(report.read_text())["tests"]}
    assert tests["test_a[cpu]"]["device"] == tests["test_b[cpu]"]["device"] == "cpu"
    assert tests["test_a[acme]"]["device"] == "acme:0" and tests["test_a[acme]"]["missing"] == []
    assert [m["requirement"] for m in tests["test_b[cpu]"]["missing"]] == ["dtype.bf16"]
    assert tests["test_c[cpu]"]["requires"] == tests["test_c[acme]"]["requires"] == ["dist.gloo"]
    assert tests["test_c[acme]"]["device"] == "acme:0" and tests["test_c[cpu]"]["missing"] == []


SHARING_CONFTEST = """
import pytest
from pytest_devcaps.session.keys import EVALUATION_KEY, HARDWARE_KEY

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    found = {item.name: item.stash[EVALUATION_KEY] for item in items}
    print("evaluations:", found["test_a[cpu]"] is found["test_b[cpu]"], found["test_a[cpu]"] is found["test_c[cpu]"])
    print("classes:", sorted({item.stash[HARDWARE_KEY] for item in items}))
"""


def test_one_evaluation_per_group_of_equal_marks(pytester: pytest.Pytester) -> None:
    """What keeps 2,000 device tests cheap: equal marks are evaluated once per device (the
    objects are shared; ``test_tests_with_the_same_marks_each_get_their_devices_answer`` shows
    each test still gets its device's answer)."""
    pytester.makeconftest(SHARING_CONFTEST)
    pytester.makepyfile(test_shared=SHARED_MARKS)
    result = pytester.runpytest("-s", "-p", "no:randomly", "--devcaps-devices=cpu",
                                "--devcaps-set=dtype.bf16=unsupported@cpu")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(["evaluations: True False", "classes: ['generic']"])
