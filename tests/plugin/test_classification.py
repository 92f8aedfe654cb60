"""Hardware classes: declared, inferred, selected with --devcaps-hardware (env, ini), counted."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

SUITE = """
import unittest
import pytest

def test_plain():
    pass

def test_plain_device(device):
    pass

@pytest.mark.requires_capability("runtime.graphs")
def test_needs_graphs(device):
    pass

@pytest.mark.requires_capability("dtype.bf16")
def test_bf16_runs_on_cpus_too(device):
    pass

@pytest.mark.requires_capability("dtype.fp8_e4m3fn", native=True)
def test_native_fp8(device):
    pass

@pytest.mark.requires_devices(2)
def test_two_devices(device):
    pass

@pytest.mark.hardware("nvidia")
def test_vendor():
    pass

@pytest.mark.hardware("generic")
@pytest.mark.requires_capability("runtime.graphs")
def test_declared_beats_inferred(device):
    pass

class TestPytorchStyle(unittest.TestCase):
    hw_classification = "ACCELERATOR"   # PyTorch's enum name, or the enum itself

    def test_method(self):
        pass
"""

CLASSES = {
    "test_plain": "generic", "test_plain_device[cpu]": "generic",
    "test_needs_graphs[cpu]": "accelerator", "test_bf16_runs_on_cpus_too[cpu]": "generic",
    "test_native_fp8[cpu]": "accelerator", "test_two_devices[cpu]": "accelerator",
    "test_vendor": "nvidia", "test_declared_beats_inferred[cpu]": "generic",
    "test_method": "accelerator",
}


def _by_test(report: Path) -> dict[str, str]:
    data = json.loads(report.read_text())
    return {t["nodeid"].split("::")[-1]: t["hardware"] for t in data["tests"]}


def test_classes_are_declared_or_inferred_and_counted(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makepyfile(SUITE)
    report = tmp_path / "report.json"
    result = pytester.runpytest("--devcaps-devices=cpu", f"--devcaps-json={report}")
    counts = Counter(CLASSES.values())
    result.stdout.fnmatch_lines([
        f"devcaps: hardware classes: generic {counts['generic']}, accelerator "
        f"{counts['accelerator']}, nvidia 1 (6 without a declared class)"])
    assert _by_test(report) == CLASSES
    assert json.loads(report.read_text())["hardware"] == dict(counts)


@pytest.mark.parametrize("how", ["option", "env", "ini"])
def test_selection_deselects_the_other_classes(pytester: pytest.Pytester, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    pytester.makepyfile(SUITE)
    args = ["--devcaps-devices=cpu", "--devcaps-set=runtime.graphs=native",
            "--devcaps-set=runtime.streams=native", "--devcaps-set=runtime.events=native",
            "--devcaps-set=dtype.fp8_e4m3fn=native"]
    if how == "option":
        args.append("--devcaps-hardware=accelerator,NVIDIA")
    elif how == "env":
        monkeypatch.setenv("PYTEST_DEVCAPS_HARDWARE", "accelerator,nvidia")
    else:
        pytester.makeini("[pytest]\ndevcaps_hardware = accelerator, nvidia\n")
    report = tmp_path / "report.json"
    # PyTorch's reading: the class only selects, so the declared ones run on the CPU too.
    result = pytester.runpytest(*args, f"--devcaps-json={report}", "--devcaps-hardware-reading=pytorch")
    result.assert_outcomes(passed=4, skipped=1, deselected=4)  # two_devices skips: one CPU
    result.stdout.fnmatch_lines(["devcaps: hardware classes: *; selected accelerator, nvidia (*), "
                                 "4 deselected"])
    assert set(_by_test(report).values()) == {"accelerator", "nvidia"}
    assert json.loads(report.read_text())["hardware_selection"] == ["accelerator", "nvidia"]


def test_a_misspelled_class_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE)
    result = pytester.runpytest("--devcaps-hardware=generic,acclerator")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--devcaps-hardware: unknown hardware class 'acclerator' "
                                 "(did you mean 'accelerator'?)*"])


def test_a_misspelled_mark_fails_collection(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_function="""
        import pytest

        @pytest.mark.hardware("nvidai")
        def test_function():
            pass
        """,
        test_testcase="""
        import unittest

        class TestCase(unittest.TestCase):
            hw_classification = "acelerator"

            def test_method(self):
                pass
        """,
    )
    # The function's mark fails its module's collection; a TestCase method (never passed
    # through pytest_generate_tests) fails at setup.
    result = pytester.runpytest("--continue-on-collection-errors")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines_random([
        "*test_function*hardware: unknown hardware class 'nvidai' (did you mean 'nvidia'?)*",
        "*TestCase::test_method: hardware: unknown hardware class 'acelerator' "
        "(did you mean 'accelerator'?)*"])


def test_a_misspelled_class_alone_in_a_session_still_errors(pytester: pytest.Pytester) -> None:
    """The only test of the session has no devcaps mark and no device parameter: its misspelled
    class alone must bring the setup check that reports it (it passed silently when the
    collection pass looked only for marks and parameters)."""
    pytester.makepyfile(
        test_testcase="""
        import unittest

        class TestCase(unittest.TestCase):
            hw_classification = "acelerator"

            def test_method(self):
                pass
        """,
    )
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*TestCase::test_method: hardware: unknown hardware class "
                                 "'acelerator' (did you mean 'accelerator'?)*"])


INTERLEAVED = """
import unittest
import pytest

def test_plain_a():
    pass

class TestDeclared:
    hw_classification = "accelerator"

    def test_declared_a(self):
        pass

    def test_declared_b(self):
        pass

@pytest.mark.hardware("nvidia")
class TestMarked:
    def test_marked_a(self):
        pass

class TestUnittestPlain(unittest.TestCase):
    def test_unittest_plain(self):
        pass

@pytest.mark.requires_devices(2)
class TestTwoDevices:
    def test_two_devices(self):
        pass

@pytest.mark.hardware("nvidia")
def test_own_mark():
    pass

def test_plain_b():
    pass
"""

INTERLEAVED_CLASSES = {
    "test_plain_a": "generic", "test_declared_a": "accelerator", "test_declared_b": "accelerator",
    "test_marked_a": "nvidia", "test_unittest_plain": "generic", "test_own_mark": "nvidia",
    "test_plain_b": "generic", "test_two_devices": "accelerator",
}


@pytest.mark.parametrize("selection", [None, "generic"])
def test_tests_of_parents_in_turn_keep_their_own_class(pytester: pytest.Pytester, tmp_path: Path,
                                                       selection: str | None) -> None:
    """The collection pass asks once per parent whether its plain tests are generic: tests of
    several parents and item types in turn (a reordering plugin runs before it) must each keep
    their parent's class and marks (the evaluation pass asks the same once per parent), and a
    selection must deselect exactly the others."""
    pytester.makeconftest(
        """
        import pytest

        @pytest.hookimpl(wrapper=True)
        def pytest_collection_modifyitems(items):
            order = ["test_plain_a", "test_declared_a", "test_marked_a", "test_unittest_plain",
                     "test_plain_b", "test_two_devices", "test_declared_b", "test_own_mark"]
            items.sort(key=lambda item: order.index(item.name))
            return (yield)
        """
    )
    pytester.makepyfile(INTERLEAVED)
    report = tmp_path / "report.json"
    args = ["--devcaps-devices=cpu", f"--devcaps-json={report}", "--devcaps-hardware-reading=pytorch"]
    if selection:
        args.append(f"--devcaps-hardware={selection}")
    result = pytester.runpytest(*args)
    wanted = {name: value for name, value in INTERLEAVED_CLASSES.items() if selection in (None, value)}
    assert _by_test(report) == wanted
    skipped = 1 if "test_two_devices" in wanted else 0  # its class's mark: one CPU, not two
    result.assert_outcomes(passed=len(wanted) - skipped, skipped=skipped,
                           deselected=len(INTERLEAVED_CLASSES) - len(wanted))
    result.stdout.fnmatch_lines(["devcaps: hardware classes: generic 3, accelerator 3, nvidia 2 "
                                 "(4 without a declared class)*"])
