"""The isolating runner: crashes, exits, hangs and exceptions become UNKNOWN, never errors."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import _bad_probes as bad
import pytest

from pytest_devcaps.model import Level, ProbeOutcome
from pytest_devcaps.probes import ProbeSpec, run_probes
from pytest_devcaps.probes import runner


@pytest.fixture(autouse=True)
def _no_torch_preload(monkeypatch: pytest.MonkeyPatch) -> None:
    """These probes do not use torch: skip importing it so each child starts in ~0.1 s."""
    monkeypatch.setattr(runner, "PRELOAD", ())


def specs(**functions: object) -> dict[str, ProbeSpec]:
    return {name: ProbeSpec(name, function) for name, function in functions.items()}  # type: ignore[arg-type]


def pid_of(outcome: ProbeOutcome) -> int:
    assert outcome.level is Level.NATIVE, outcome.reason
    return int(outcome.reason.removeprefix("pid="))


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def gone_soon(pid: int) -> bool:
    """A killed grandchild is reaped by init, which may take a moment."""
    for _ in range(100):
        if not process_exists(pid):
            return True
        time.sleep(0.05)
    return False


def test_good_probes_share_one_child_that_is_gone_afterwards() -> None:
    results = run_probes("cpu", specs(a=bad.good, b=bad.good))
    assert pid_of(results["a"]) == pid_of(results["b"]) != os.getpid()
    assert not process_exists(pid_of(results["a"]))


def test_exception_is_unknown_with_the_message() -> None:
    results = run_probes("cpu", specs(err=bad.raises, after=bad.good))
    assert results["err"] == ProbeOutcome(Level.UNKNOWN, "probe raised ValueError: boom")
    assert results["after"].level is Level.NATIVE


@pytest.mark.skipif(os.name != "posix", reason="SIGSEGV is a POSIX signal")
def test_segfault_is_unknown_and_a_new_child_continues() -> None:
    results = run_probes("cpu", specs(before=bad.good, crash=bad.segfaults, after=bad.good))
    assert results["crash"] == ProbeOutcome(Level.UNKNOWN, "probe crashed: signal SIGSEGV")
    first, second = pid_of(results["before"]), pid_of(results["after"])
    assert first != second
    assert not process_exists(first) and not process_exists(second)


def test_os_exit_is_unknown_with_the_code() -> None:
    results = run_probes("cpu", specs(exit=bad.exits, after=bad.good))
    assert results["exit"] == ProbeOutcome(Level.UNKNOWN, "probe exited with code 3")
    assert results["after"].level is Level.NATIVE


def test_system_exit_inside_a_probe_is_caught() -> None:
    results = run_probes("cpu", specs(exit=bad.system_exit, after=bad.good))
    assert results["exit"] == ProbeOutcome(Level.UNKNOWN, "probe raised SystemExit: 0")
    assert results["after"].level is Level.NATIVE


@pytest.mark.skipif(os.name != "posix", reason="checks the POSIX process group kill")
def test_hang_times_out_and_the_whole_process_group_is_killed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pid_file = tmp_path / "grandchild.pid"
    monkeypatch.setenv(bad.GRANDCHILD_PID_FILE, str(pid_file))
    started = time.monotonic()
    results = run_probes("cpu", specs(before=bad.good, hang=bad.hangs, after=bad.good),
                         timeout=1.0)
    assert time.monotonic() - started < 10
    assert results["hang"] == ProbeOutcome(Level.UNKNOWN, "probe timed out after 1.0s")
    assert results["after"].level is Level.NATIVE
    assert not process_exists(pid_of(results["before"]))
    assert gone_soon(int(pid_file.read_text())), "the hanging probe's grandchild survived"


def test_every_kind_of_failure_in_one_run() -> None:
    results = run_probes("cpu", specs(a=bad.good, b=bad.raises, c=bad.exits, d=bad.good,
                                      e=bad.hangs, f=bad.not_an_outcome, g=bad.good),
                         timeout=1.0)
    assert [results[k].level for k in "abcdefg"] == [
        Level.NATIVE, Level.UNKNOWN, Level.UNKNOWN, Level.NATIVE, Level.UNKNOWN, Level.UNKNOWN,
        Level.NATIVE]
    assert list(results) == list("abcdefg")
    assert results["f"].reason == "probe returned str, not ProbeOutcome"


def test_probe_output_on_stdout_does_not_corrupt_results() -> None:
    results = run_probes("cpu", specs(noisy=bad.prints, after=bad.good))
    assert results["noisy"] == ProbeOutcome(Level.NATIVE, "printed")
    assert results["after"].level is Level.NATIVE


def test_child_gets_the_device_and_imports_neither_pytest_nor_the_plugin() -> None:
    results = run_probes("fakedev:1", specs(m=bad.reports_modules))
    assert results["m"].reason == "device=fakedev:1 forbidden=none"


def test_non_isolated_probes_run_here_and_exceptions_are_caught() -> None:
    results = run_probes("cpu", {
        "here": ProbeSpec("here", bad.good, isolated=False),
        "err": ProbeSpec("err", bad.raises, isolated=False),
        "odd": ProbeSpec("odd", bad.not_an_outcome, isolated=False),
        "exit": ProbeSpec("exit", bad.system_exit, isolated=False),
    })
    assert pid_of(results["here"]) == os.getpid()
    assert results["err"] == ProbeOutcome(Level.UNKNOWN, "probe raised ValueError: boom")
    assert results["odd"].level is Level.UNKNOWN
    assert results["exit"] == ProbeOutcome(Level.UNKNOWN, "probe raised SystemExit: 0")


def test_a_probe_the_child_cannot_import_is_unknown() -> None:
    results = run_probes("cpu", {"lam": ProbeSpec("lam", lambda device: bad.good(device)),
                                 "ok": ProbeSpec("ok", bad.good)})
    assert results["lam"].level is Level.UNKNOWN
    assert results["lam"].reason.startswith(
        "probe 'lam': test_probes_runner.test_a_probe_the_child_cannot_import_is_unknown."
        "<locals>.<lambda> cannot be imported by name in a fresh interpreter: it is a local "
        "function or lambda; define it at module level")
    assert results["ok"].level is Level.NATIVE


def test_sys_path_is_what_the_child_imports_from(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "vendor_probe_mod.py").write_text(
        "from pytest_devcaps.model import Level, ProbeOutcome\n"
        "def probe(device):\n    return ProbeOutcome(Level.NATIVE, 'vendor ' + device)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import vendor_probe_mod  # type: ignore[import-not-found]

    spec = specs(v=vendor_probe_mod.probe)
    assert run_probes("cpu", spec)["v"] == ProbeOutcome(Level.NATIVE, "vendor cpu")
    without = [p for p in sys.path if p != str(tmp_path)]
    answer = run_probes("cpu", spec, sys_path=without)["v"]
    assert answer.level is Level.UNKNOWN and "No module named 'vendor_probe_mod'" in answer.reason


def test_a_child_that_cannot_start_answers_unknown_for_all(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_BOOTSTRAP", "import sys; print('no luck', file=sys.stderr); "
                                              "sys.exit(5)")
    results = run_probes("cpu", specs(a=bad.good, b=bad.good))
    for outcome in results.values():
        assert outcome == ProbeOutcome(Level.UNKNOWN,
                                       "probe child failed to start: exited with code 5: no luck")


def test_a_missing_interpreter_answers_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner.sys, "executable", "/nonexistent/python")
    results = run_probes("cpu", specs(a=bad.good))
    assert results["a"].level is Level.UNKNOWN
    assert results["a"].reason.startswith("could not start the probe child: FileNotFoundError")


def test_empty_specs_start_nothing() -> None:
    assert run_probes("cpu", {}) == {}
