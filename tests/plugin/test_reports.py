"""Header, skip summary, --devcaps-require, JSON report, JUnit properties, profile planning."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

SUITE = """
import pytest
import torch

@pytest.mark.requires_capability("dtype.fp8_e4m3fn")
def test_fp8(device):
    pass

@pytest.mark.requires_capability("dtype.fp8_e4m3fnuz")
def test_fp8_fnuz(device):
    pass

@pytest.mark.requires_capability("attention.flash")
@pytest.mark.parametrize("n", [1, 2, 3])
def test_flash(device, n):
    pass

@pytest.mark.requires_capability("runtime.graphs")
def test_graphs(device):
    pass

def test_plain():
    pass
"""

SETS = ("--devcaps-devices=cpu", "--devcaps-set=dtype.fp8_e4m3fn=native", "--devcaps-set=dtype.fp8_e4m3fnuz=unsupported",
        "--devcaps-set=attention.flash=unsupported", "--devcaps-set=runtime.graphs=unsupported")


def test_header_lists_devices_and_reproducing_flags(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--devcaps-set=dtype.bf16=unsupported@cpu")
    import torch

    # a CUDA build on a machine without a GPU: "torch 2.14.1+cu130: CUDA build, no device"
    no_device = torch.accelerator.current_accelerator() is not None and \
        torch.accelerator.current_accelerator(check_available=True) is None
    build = "* build, no device" if no_device else "* build"
    result.stdout.fnmatch_lines([
        f"devcaps: * device(s), *; device tests run on: *; torch {torch.__version__}: {build}",
        "devcaps: cpu: *vendor=cpu, arch=*",
        "  native *; emulated *; unsupported *; unknown *",
        "devcaps: reproduce with: --devcaps-set=dtype.bf16=unsupported@cpu",
    ])
    # Without a devcaps option the registry is built when a test first needs it, and the
    # header follows the collection.
    pytester.makepyfile(test_device="def test_d(device): pass")
    verbose = pytester.runpytest("-v")
    verbose.stdout.fnmatch_lines(["*collected 2 items", "devcaps: * device(s), *",
                                  "  dist.gloo * native * probe: *"])


def test_no_header_when_nothing_asks(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_subprocess("-v")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("devcaps: * device(s)*")


def test_skip_summary_groups_by_capability_and_device(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE)
    result = pytester.runpytest(*SETS)
    result.assert_outcomes(passed=2, skipped=5)
    result.stdout.fnmatch_lines([
        "*devcaps: skipped tests by reason*",
        "    3  attention.flash on cpu: unsupported (cli)",
        "    1  dtype.fp8_e4m3fnuz on cpu: unsupported (cli)",
        "    1  runtime.graphs on cpu: unsupported (cli)",
        "5 test(s) skipped: 5 for missing capabilities, 0 for other reasons",
    ])


def test_require_turns_skips_into_setup_errors(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE)
    result = pytester.runpytest(*SETS, "--devcaps-require=attention.flash")
    result.assert_outcomes(passed=2, skipped=2, errors=3)
    result.stdout.fnmatch_lines(["*attention.flash required on this runner (--devcaps-require) but: "
                                 "requires attention.flash on cpu: unsupported*"])


def test_require_from_env(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(SUITE)
    monkeypatch.setenv("PYTEST_DEVCAPS_REQUIRE", "runtime.graphs")
    result = pytester.runpytest(*SETS)
    result.assert_outcomes(passed=2, skipped=4, errors=1)


def test_json_report_contents(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE)
    result = pytester.runpytest(*SETS, "--devcaps-json=out/report.json")
    result.assert_outcomes(passed=2, skipped=5)
    data = json.loads((pytester.path / "out" / "report.json").read_text())
    assert data["mode"] == "run" and data["exitstatus"] == 0
    from pytest_devcaps.version import __version__

    assert (data["kind"], data["devcaps_version"]) == ("pytest", __version__)  # stamped as all are
    assert data["selected_devices"] == ["cpu"]
    assert [d["type"] for d in data["devices"]][0] == "cpu"
    caps = {(c["capability"], c["device"]): c for c in data["capabilities"]}
    assert caps[("attention.flash", "cpu")]["source"] == "cli"
    assert caps[("dist.gloo", "cpu")]["level"] == "native"
    tests = {t["nodeid"]: t for t in data["tests"]}
    fnuz = tests["test_json_report_contents.py::test_fp8_fnuz[cpu]"]
    assert fnuz["outcome"] == "skipped" and fnuz["device"] == "cpu"
    assert fnuz["requires"] == ["dtype.fp8_e4m3fnuz"]
    assert fnuz["missing"][0]["requirement"] == "dtype.fp8_e4m3fnuz"
    assert tests["test_json_report_contents.py::test_fp8[cpu]"]["outcome"] == "passed"
    assert tests["test_json_report_contents.py::test_plain"]["outcome"] == "passed"
    assert not list((pytester.path / "out").glob(".*tmp"))  # atomic write left nothing behind


def test_junit_properties(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE)
    pytester.runpytest(*SETS, "--junitxml=junit.xml")
    root = ET.parse(pytester.path / "junit.xml").getroot()
    props = {}
    for case in root.iter("testcase"):
        props[case.get("name")] = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["test_fp8[cpu]"] == {"devcaps_device": "cpu", "devcaps_requires": "dtype.fp8_e4m3fn"}
    assert props["test_flash[cpu-1]"]["devcaps_requires"] == "attention.flash"


PLAN_SUITE = """
import pytest

@pytest.mark.requires_capability("dtype.fp8_e4m3fn", native=True)
def test_ocp_fp8(device):
    pass

@pytest.mark.requires_capability("dtype.fp8_e4m3fnuz", native=True)
def test_fnuz_fp8(device):
    pass

@pytest.mark.requires_capability("attention.flash", "runtime.graphs")
def test_flash_graphs(device):
    pass

def test_plain():
    raise AssertionError("plan mode must not run tests")
"""


def _plan(pytester: pytest.Pytester, profile: str) -> dict:
    result = pytester.runpytest(f"--devcaps-profile={profile}", f"--devcaps-json={profile}.json")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([f"*devcaps plan for profile {profile}*", "*(nothing was run)*"])
    data = json.loads((pytester.path / f"{profile}.json").read_text())
    assert data["mode"] == "plan"
    return {t["nodeid"].split("::")[1]: t for t in data["tests"]}


def test_profile_plans_differ_between_h100_and_mi300x(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PLAN_SUITE)
    h100 = _plan(pytester, "nvidia-h100")
    mi300x = _plan(pytester, "amd-mi300x")
    assert h100["test_ocp_fp8[cuda]"]["outcome"] == "would-run"
    assert h100["test_fnuz_fp8[cuda]"]["outcome"] == "would-skip"
    assert mi300x["test_ocp_fp8[cuda]"]["outcome"] == "would-skip"
    assert mi300x["test_fnuz_fp8[cuda]"]["outcome"] == "would-run"
    assert h100["test_flash_graphs[cuda]"]["outcome"] == "would-run"
    assert mi300x["test_ocp_fp8[cuda]"]["missing"][0]["source"] == "vendor-rule"
    assert h100["test_plain"]["outcome"] == "would-run"


def test_profile_plan_prints_skips_with_capability(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PLAN_SUITE)
    result = pytester.runpytest("--devcaps-profile=apple-m3")
    result.stdout.fnmatch_lines([
        "SKIP *test_ocp_fp8?mps?: requires native dtype.fp8_e4m3fn on mps*",
        "*would run, * would be skipped on apple-m3 (nothing was run)",
    ])
    assert result.ret == 0


def test_unknown_profile_is_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--devcaps-profile=nvidia-h1000")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *nvidia-h1000*"])


@pytest.mark.parametrize("args", [
    ("-n", "2"),
    ("-d", "--tx", "2*popen"),
    # registered before xdist's entry point: the rewrite must not depend on plugin order
    ("-p", "pytest_devcaps", "--dist", "load", "--tx", "2*popen"),
], ids=["numprocesses", "distload", "dist-early-plugin"])
def test_profile_plan_under_xdist_plans_in_one_process(pytester: pytest.Pytester, args: tuple[str, ...]) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(PLAN_SUITE)
    result = pytester.runpytest_subprocess("--devcaps-profile=amd-mi300x", *args)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["3 would run, 1 would be skipped on amd-mi300x (nothing was run)"])
    result.stdout.no_fnmatch_line("*workers*")  # xdist started none ("created: 2/2 workers")
