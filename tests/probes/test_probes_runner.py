"""The isolating runner: crashes, exits, hangs and exceptions become UNKNOWN, never errors."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
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


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def gone_soon(pid: int, seconds: float = 5.0) -> bool:
    """A killed grandchild is reaped by init, which may take a moment (a zombie is gone)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not process_exists(pid) or _zombie(pid):
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
    assert results["hang"] == ProbeOutcome(Level.UNKNOWN, "probe timed out after 1.0s",
                                           transient=True)
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
                                       "probe child failed to start: exited with code 5: no luck",
                                       transient=True)


def test_a_missing_interpreter_answers_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner.sys, "executable", "/nonexistent/python")
    results = run_probes("cpu", specs(a=bad.good))
    assert results["a"].level is Level.UNKNOWN
    assert results["a"].reason.startswith("could not start the probe child: FileNotFoundError")


def test_empty_specs_start_nothing() -> None:
    assert run_probes("cpu", {}) == {}


@pytest.mark.skipif(os.name != "posix", reason="SIGSEGV and SIGKILL are POSIX signals")
def test_only_failures_of_the_run_not_of_the_probe_are_transient() -> None:
    """A timeout, an outside kill or a child that cannot start say nothing about the device:
    they are transient (never cached). A probe's own exception, crash or exit is an answer."""
    results = run_probes("cpu", specs(raised=bad.raises, crashed=bad.segfaults, exited=bad.exits,
                                      killed=bad.kills_itself, hung=bad.hangs, ok=bad.good),
                         timeout=1.0)
    transient = {name for name, outcome in results.items() if outcome.transient}
    assert transient == {"killed", "hung"}, results
    assert results["killed"].reason == "probe crashed: signal SIGKILL"


def test_a_failing_runner_answers_transient_unknowns(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object) -> dict[str, ProbeOutcome]:
        raise OverflowError("timeout value is too large")

    monkeypatch.setattr(runner, "_run_isolated", broken)
    results = run_probes("cpu", specs(a=bad.good))
    assert results["a"] == ProbeOutcome(
        Level.UNKNOWN, "probe runner failed: OverflowError: timeout value is too large",
        transient=True)


def _kill_parent_then_expect_child_gone(parent_argv: list[str], pid_file: Path, sig: int,
                                        env: dict[str, str] | None = None) -> None:
    """Start ``parent_argv``, wait until its child wrote its pid to ``pid_file``, kill the
    parent with ``sig`` and check the child is gone (killing it ourselves if it is not)."""
    parent = subprocess.Popen(parent_argv, env=env)
    child = None
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text().strip()):
            assert parent.poll() is None, "the parent ended before its child started"
            assert time.monotonic() < deadline, "the child never started"
            time.sleep(0.05)
        child = int(pid_file.read_text())
        os.kill(parent.pid, sig)
        parent.wait(timeout=30)
        assert gone_soon(child, seconds=10), f"child {child} outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.wait()
        if child is not None and process_exists(child):
            with contextlib.suppress(ProcessLookupError):  # it may end between check and kill
                os.kill(child, signal.SIGKILL)


_RUNNER_PARENT = textwrap.dedent("""
    import sys
    sys.path[:0] = {paths!r}
    import _bad_probes as bad
    from pytest_devcaps.probes import ProbeSpec, runner
    runner.PRELOAD = ()
    runner.run_probes("cpu", {{"hang": ProbeSpec("hang", bad.hangs_with_pid)}}, timeout=600)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_hanging_probe_child_dies_with_its_killed_parent(tmp_path: Path, sig: int) -> None:
    """pytest killed (SIGKILL, SIGTERM) while a probe hangs leaves no orphan child."""
    pid_file = tmp_path / "child.pid"
    code = _RUNNER_PARENT.format(paths=[str(Path(bad.__file__).parent), *sys.path])
    _kill_parent_then_expect_child_gone([sys.executable, "-c", code], pid_file, sig,
                                        env={**os.environ, bad.CHILD_PID_FILE: str(pid_file)})


_WATCHED_CHILD = textwrap.dedent("""
    import subprocess, sys
    code = ("import os, sys, time; sys.platform = 'darwin'; "  # no prctl: the watch thread only
            "from pytest_devcaps._util.process_lifetime import die_with_parent; "
            "die_with_parent(os.getppid()); "
            "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)")
    subprocess.Popen([sys.executable, "-c", code, sys.argv[1]], start_new_session=True).wait()
""")


@pytest.mark.skipif(os.name != "posix", reason="parent pids are POSIX")
def test_without_prctl_the_parent_watch_ends_the_orphaned_child(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    _kill_parent_then_expect_child_gone([sys.executable, "-c", _WATCHED_CHILD, str(pid_file)],
                                        pid_file, signal.SIGKILL)


_ESCAPING_PARENT = textwrap.dedent("""
    import sys
    sys.path[:0] = {paths!r}
    import _bad_probes as bad
    from pytest_devcaps.probes import ProbeSpec, runner
    runner.PRELOAD = ()
    runner.run_probes("cpu", {{"escape": ProbeSpec("escape", bad.spawns_escapees)}}, timeout=600)
""")


def _escapees(pid_file: Path) -> list[int]:
    deadline = time.monotonic() + 60
    while not pid_file.exists():
        assert time.monotonic() < deadline, "the probe never started its grandchildren"
        time.sleep(0.05)
    return [int(line) for line in pid_file.read_text().split()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the guardian is Linux's")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_grandchildren_of_a_probe_die_with_killed_pytest_setsid_ones_too(
        tmp_path: Path, sig: int) -> None:
    """Hostile: a probe starts ``sleep 1000`` in its group and another in a session of its own;
    the process running the probes (pytest) is killed, SIGKILL included. Neither sleeper may
    survive: the guardian between them kills its whole tree when its parent dies."""
    pid_file = tmp_path / "escapees"
    code = _ESCAPING_PARENT.format(paths=[str(Path(bad.__file__).parent), *sys.path])
    parent = subprocess.Popen([sys.executable, "-c", code],
                              env={**os.environ, bad.ESCAPEES_PID_FILE: str(pid_file)})
    sleepers: list[int] = []
    try:
        sleepers = _escapees(pid_file)
        os.kill(parent.pid, sig)
        parent.wait(timeout=30)
        survivors = [pid for pid in sleepers if not gone_soon(pid, seconds=10)]
        assert survivors == [], f"{survivors} outlived the killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.wait()
        for pid in sleepers:
            if process_exists(pid) and not _zombie(pid):
                # init may reap the zombie between the two checks: gone is what we want here
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the guardian is Linux's")
def test_what_a_probe_leaves_running_is_killed_when_its_child_ends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A probe that returns and leaves two sleepers (one setsid) behind: both are gone once
    run_probes returns, and the answer is the probe's."""
    monkeypatch.setattr(runner, "PRELOAD", ())
    pid_file = tmp_path / "escapees"
    monkeypatch.setenv(bad.ESCAPEES_PID_FILE, str(pid_file))
    monkeypatch.setenv("DEVCAPS_TEST_ESCAPEES_RETURN", "1")
    results = run_probes("cpu", specs(escape=bad.spawns_escapees))
    assert results["escape"] == ProbeOutcome(Level.NATIVE, "left two sleepers behind")
    sleepers = _escapees(pid_file)
    try:
        assert [pid for pid in sleepers if not gone_soon(pid, seconds=10)] == []
    finally:
        for pid in sleepers:
            if process_exists(pid) and not _zombie(pid):
                # init may reap the zombie between the two checks: gone is what we want here
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
