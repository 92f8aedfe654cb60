"""``devcaps lint --fix --verify``: the ``untouched`` lint API, the matching of converted tests to
the original's, and whole runs on small files of our own: a rewrite that makes a test fail (on
the CPU, or only on emu) is undone and reported, a gain is reported, nothing is written when no
rewrite holds, and no process is left behind."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
import torch

from pytest_devcaps.commands.main import main
from pytest_devcaps.commands.verify import Environment, environments, verify_file
from pytest_devcaps.commands.verify_match import compare, variant
from pytest_devcaps.commands.verify_runs import Outcome, RunResult
from pytest_devcaps.emu import DEVICES_ENV, VISIBLE_ENV
from pytest_devcaps.emu.extension import CACHE_ENV, build_root, ensure_built, toolchain_problem
from pytest_devcaps.lint.analyze import analyze
from pytest_devcaps.lint.fix import fix_text

pytest.importorskip("libcst")

EMU_CACHE = build_root()  # read before the autouse fixture points the devcaps cache elsewhere

TWO_TESTS = textwrap.dedent('''\
    import pytest
    import torch


    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
    def test_add():
        x = torch.ones(2).cuda()
        assert (x + x).sum().item() == 4


    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
    def test_primary_context():
        x = torch.ones(2).cuda()
        assert str(x.device) != "cpu"
''')
# test_primary_context asserts a fact of every accelerator the lint cannot see (the tensor is not
# on the CPU): converted, its [cpu] copy fails on the CPU; --verify undoes it.

# test_kind holds only on the CPU and CUDA: converted, its emu copy fails (and only there).
HELPER_GUARD = textwrap.dedent('''\
    import pytest
    import torch


    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
    def test_add():
        x = torch.ones(2).cuda()
        assert (x + x).sum().item() == 4


    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
    def test_kind():
        x = torch.ones(2).cuda()
        assert x.device.type in ("cpu", "cuda")
''')


# -- the lint API: untouched functions ------------------------------------------------------


def test_untouched_function_keeps_its_gate_and_its_findings_leave_the_report() -> None:
    fixed = fix_text(TWO_TESTS, "t.py", untouched={"test_primary_context"})
    assert "def test_add(device):" in fixed.after
    kept = fixed.after.split("def test_add")[1]
    assert '@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")\ndef test_primary_context():' \
        in kept and "torch.ones(2).cuda()" in kept
    # its findings stay in the report, left, saying why (the code is still there)
    found = analyze(TWO_TESTS, "t.py", untouched={"test_primary_context"}).findings
    assert {f.line for f in found if f.fixable} == {5, 7}
    assert {f.line for f in found if not f.fixable} == {11, 13}
    assert all("--verify undid its rewrite" in f.message for f in found if not f.fixable)


def test_untouched_takes_qualified_method_names_and_ignores_unknown_ones() -> None:
    source = textwrap.dedent('''\
        import torch
        import unittest


        class TestX(unittest.TestCase):
            def test_a(self):
                torch.cuda.synchronize()

            def test_b(self):
                torch.cuda.synchronize()
    ''')
    lines = {f.line for f in analyze(source, "t.py").findings}
    fixable = {f.line for f in analyze(source, "t.py", untouched={"TestX.test_a", "test_b", "TestY.test_a"}).findings
               if f.fixable}
    assert lines == {7, 10} and fixable == {10}


# -- matching converted tests to the original's ---------------------------------------------


@pytest.mark.parametrize(("name", "function", "expected"), [
    ("test_a", "test_a", ""), ("test_a_cpu", "test_a", ""), ("test_a_emu_float32", "test_a", "float32"),
    ("test_b[cpu]", "test_b", ""), ("test_b[emu-x1]", "test_b", "x1"), ("test_b[x1]", "test_b", "x1"),
])
def test_variant_drops_device_names(name: str, function: str, expected: str) -> None:
    assert variant(name, function) == expected


def outcome(nodeid: str, qualname: str, result: str, device: str | None = None) -> Outcome:
    return Outcome(nodeid, nodeid.rsplit("::", 1)[-1], qualname, device, result, "why" if result != "passed" else "")


def test_compare_maps_instantiated_and_parametrized_tests_and_says_what_changed() -> None:
    original = RunResult("emu", {t.nodeid: t for t in [
        outcome("f.py::TestX::test_a", "TestX.test_a", "skipped"),
        outcome("f.py::test_b", "test_b", "skipped"),
        outcome("f.py::test_c", "test_c", "passed"),
        outcome("f.py::test_gone", "test_gone", "passed"),
    ]})
    converted = RunResult("emu", {t.nodeid: t for t in [
        outcome("f.py::TestXCPU::test_a_cpu", "TestX.test_a", "passed", "cpu"),
        outcome("f.py::TestXEMU::test_a_emu", "TestX.test_a", "failed", "emu"),
        outcome("f.py::test_b[cpu]", "test_b", "passed", "cpu"),
        outcome("f.py::test_c", "test_c", "passed"),
        outcome("f.py::TestXAccelerator::test_new", "TestXAccelerator.test_new", "passed"),
    ]})
    result = compare(original, converted)
    assert [(c.nodeid, c.qualname, c.before, c.after) for c in result.worse] == [
        ("f.py::TestXEMU::test_a_emu", "TestX.test_a", "skipped", "failed"),
        ("f.py::test_gone", "test_gone", "passed", "absent")]
    assert [c.nodeid for c in result.gained] == ["f.py::TestXCPU::test_a_cpu", "f.py::test_b[cpu]",
                                                 "f.py::TestXAccelerator::test_new"]
    assert [c.nodeid for c in result.new] == ["f.py::TestXAccelerator::test_new"]
    assert [c.nodeid for c in result.vanished] == ["f.py::test_gone"]


def test_an_accelerator_copy_is_compared_with_the_original_accelerator_copy() -> None:
    """``parametrize("device", ["cpu", "xpu"])`` made ``[cpu]`` (passed) and ``[xpu]`` (skipped
    here; ``"cuda"`` is the usual second entry); the device fixture makes ``[cpu]`` and ``[emu]``.
    The emu copy stands for the other accelerator's: passing, it is gained; failing, it is worse
    than the skip (not compared with the cpu pass)."""
    original = RunResult("emu", {t.nodeid: t for t in [
        outcome("f.py::test_b[cpu]", "test_b", "passed", "cpu"),
        outcome("f.py::test_b[xpu]", "test_b", "skipped", "xpu"),
        outcome("f.py::test_c[cpu]", "test_c", "passed", "cpu"),
        outcome("f.py::test_c[xpu]", "test_c", "skipped", "xpu"),
    ]})
    converted = RunResult("emu", {t.nodeid: t for t in [
        outcome("f.py::test_b[cpu]", "test_b", "passed", "cpu"),
        outcome("f.py::test_b[emu]", "test_b", "passed", "emu"),
        outcome("f.py::test_c[cpu]", "test_c", "passed", "cpu"),
        outcome("f.py::test_c[emu]", "test_c", "failed", "emu"),
    ]})
    result = compare(original, converted)
    assert [(c.nodeid, c.before, c.after) for c in result.gained] == [("f.py::test_b[emu]", "skipped", "passed")]
    assert [(c.nodeid, c.before, c.after) for c in result.worse] == [("f.py::test_c[emu]", "skipped", "failed")]
    assert [c.nodeid for c in result.vanished] == []


def test_each_device_copy_is_compared_with_the_same_device_copy() -> None:
    """The CPU with emu devices runs a PyTorch class's cpu and emu copies side by side (as
    test_multihead_attention's compile test, which Inductor cannot lower for emu): the emu copy
    that failed before and fails after is no worse, though the cpu copy of the same def passed."""
    def run(emu_outcome: str) -> RunResult:
        return RunResult("emu", {t.nodeid: t for t in [
            outcome("f.py::TestXCPU::test_a_cpu_float64", "TestX.test_a", "passed", "cpu"),
            outcome("f.py::TestXPRIVATEUSE1::test_a_emu_float64", "TestX.test_a", emu_outcome, "emu"),
        ]})

    same = compare(run("failed"), run("failed"))
    assert (same.worse, same.gained, same.vanished) == ([], [], [])
    fixed = compare(run("failed"), run("passed"))
    assert [(c.nodeid, c.before, c.after) for c in fixed.gained] == [
        ("f.py::TestXPRIVATEUSE1::test_a_emu_float64", "failed", "passed")]
    broken = compare(run("passed"), run("failed"))
    assert [(c.nodeid, c.before, c.after) for c in broken.worse] == [
        ("f.py::TestXPRIVATEUSE1::test_a_emu_float64", "passed", "failed")]


def test_a_test_the_original_run_never_reached_is_not_compared() -> None:
    original = RunResult("cpu", {"f.py::test_a": outcome("f.py::test_a", "test_a", "not run")})
    converted = RunResult("cpu", {"f.py::test_a": outcome("f.py::test_a", "test_a", "timeout")})
    result = compare(original, converted)
    assert (result.worse, result.gained, result.vanished) == ([], [], [])


def test_a_collection_error_is_worse_only_where_the_original_collected() -> None:
    from pytest_devcaps.commands.verify_runs import CollectionError

    broken = RunResult("emu", collection_errors=[CollectionError("f.py", "AssertionError: no CUDA", (8,))])
    assert compare(RunResult("emu"), broken).collection == ["AssertionError: no CUDA"]
    assert compare(broken, broken).collection == []


# -- whole runs ----------------------------------------------------------------------------


def test_a_rewrite_that_fails_on_the_cpu_is_undone_and_the_gain_reported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(DEVICES_ENV, "0")  # the CPU alone, built emu or not
    monkeypatch.chdir(tmp_path)  # node ids relative to the file's folder, wherever the checkout is
    path = tmp_path / "test_two.py"
    path.write_text(TWO_TESTS)
    assert main(["lint", "--fix", "--verify", str(path)]) == 1  # findings left: the undone test's
    written = path.read_text()
    assert "def test_add(device):" in written
    assert '@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")\ndef test_primary_context():' \
        in written
    out, err = capsys.readouterr()
    assert f"{DEVICES_ENV}=0 gives no emu devices" in err
    assert "gained 1 passing test(s): cpu 1\n    + " in err and "test_two.py::test_add[cpu] (cpu run): skipped -> passed" in err
    assert "- test_primary_context: " in err and "test_two.py::test_primary_context[cpu] (cpu run): skipped -> " \
        "failed: AssertionError" in err
    assert "found 4 (DC001 2, DC002 2); fixed 2 (DC001 1, DC002 1); left 2 (DC001 1, DC002 1)" in err
    assert "devcaps lint: fixed 2 finding(s) in 1 file(s); 2 left" in err
    left = [line for line in out.splitlines() if line.startswith(f"{path}:") and ": DC00" in line]
    assert len(left) == 2 and all("not fixed: left as it was: --verify undid its rewrite" in line for line in left), left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test_two.py"]  # the converted copy is gone


@pytest.fixture
def emu_environments(monkeypatch: pytest.MonkeyPatch) -> list[Environment]:
    problem = toolchain_problem()
    if problem is not None:
        pytest.skip(f"the emu backend needs a C++ toolchain: {problem}")
    monkeypatch.setenv(CACHE_ENV, str(EMU_CACHE))
    ensure_built(str(torch.__version__))
    monkeypatch.delenv(VISIBLE_ENV, raising=False)
    monkeypatch.delenv("TORCH_DEVICE_BACKEND_AUTOLOAD", raising=False)
    monkeypatch.setenv(DEVICES_ENV, "2")
    envs, note = environments()
    assert [e.name for e in envs] == ["cpu", "emu"] and f"{DEVICES_ENV}=2" in note
    return envs


def test_a_rewrite_that_fails_only_on_emu_is_undone_there(tmp_path: Path,
                                                          emu_environments: list[Environment]) -> None:
    path = tmp_path / "test_guard.py"
    path.write_text(HELPER_GUARD)
    # run from the file's folder: with no ini file, pytest's rootdir (and so every node id) is the
    # common ancestor of the working directory and the file (/tmp for a checkout under /tmp)
    verdict = verify_file(path, HELPER_GUARD, envs=emu_environments, timeout_s=600, cwd=tmp_path)
    assert verdict.text is not None and verdict.untouched == {"test_kind"}
    assert '@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")\ndef test_kind():' in verdict.text
    assert "def test_add(device):" in verdict.text
    assert ("cpu", "test_guard.py::test_add[cpu]") in {(c.environment, c.nodeid) for c in verdict.gained}
    assert ("emu", "test_guard.py::test_add[emu]") in {(c.environment, c.nodeid) for c in verdict.gained}
    assert "test_kind: " in verdict.report() and "emu" in verdict.report()


OWN_DEVICE_LIST = textwrap.dedent('''\
    import pytest
    import torch


    @pytest.mark.parametrize("device", ["cpu", "cuda"])
    def test_sum(device):
        if "cuda" in device and not torch.cuda.is_available():
            pytest.skip("test requires a GPU")
        x = torch.ones(3, device=device)
        assert x.sum().item() == 3
''')


def test_an_own_cpu_cuda_list_converted_runs_on_emu_and_nothing_gets_worse(
        tmp_path: Path, emu_environments: list[Environment]) -> None:
    """The fairscale pattern, verified: the original's [cuda] copy skips on this machine; the
    converted test keeps its [cpu] run and gains an emu one; nothing is undone."""
    path = tmp_path / "test_own.py"
    path.write_text(OWN_DEVICE_LIST)
    verdict = verify_file(path, OWN_DEVICE_LIST, envs=emu_environments, timeout_s=600, cwd=tmp_path)
    assert verdict.text is not None and verdict.untouched == set()
    assert "def test_sum(device):" in verdict.text and "parametrize" not in verdict.text
    gained = {(c.environment, c.nodeid) for c in verdict.gained}
    assert ("emu", "test_own.py::test_sum[emu]") in gained, (verdict.report(), verdict)


HANGS = textwrap.dedent('''\
    import subprocess
    import sys
    import time

    import pytest
    import torch


    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
    def test_hangs():
        x = torch.ones(2).cuda()
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "MARKER"],
                         start_new_session=True)
        time.sleep(600)
''')


def test_nothing_holds_nothing_written_and_no_process_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # node ids relative to the file's folder, wherever the checkout is
    marker = f"devcaps-verify-{os.getpid()}-{tmp_path.name}"
    path = tmp_path / "test_hangs.py"
    path.write_text(HANGS.replace("MARKER", marker))
    before = path.read_bytes()
    assert main(["lint", "--fix", "--verify", "--verify-timeout", "90", str(path)]) in (0, 1)
    err = capsys.readouterr().err
    assert path.read_bytes() == before
    assert "test_hangs.py: not written" in err and "-> timeout" in err
    assert "- test_hangs: test_hangs.py::test_hangs[cpu] (cpu run): skipped -> timeout" in err
    assert "every rewrite was undone: the file is left as it was" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test_hangs.py"]
    left = [pid for pid in _all_pids() if marker in _cmdline(pid)]
    assert left == [], f"processes left: {left}"


def _all_pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_verify_goes_with_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "test_two.py"
    path.write_text(TWO_TESTS)
    assert main(["lint", "--diff", "--verify", str(path)]) == 2
    assert "--verify goes with --fix" in capsys.readouterr().err
    assert main(["lint", "--fix", "--verify-timeout", "5", str(path)]) == 2
    assert "--verify-timeout takes a positive number of seconds and goes with --verify" in capsys.readouterr().err
    assert path.read_text() == TWO_TESTS
