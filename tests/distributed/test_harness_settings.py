"""The harness's environment variables and world sizes are validated where they are read, and
a bad one is a clear error naming it; a rank is never killed by the stack-dump signal."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pytest_devcaps.distributed import DistributedRunner, WorldMemoryWarning, WorldOptions
from pytest_devcaps.distributed import settings
from pytest_devcaps.distributed.harness import spawn_world
from pytest_devcaps.errors import ConfigError

import _dist_bodies as _bodies


# the one duration parser (pytest_devcaps._util.durations): finite, above 0, at most what a wait accepts
# (1e300 would pass a plain finiteness check and then overflow timedelta inside every rank)
_REFUSED = f"must be a finite number of seconds above 0 and at most {threading.TIMEOUT_MAX:g}"


@pytest.mark.parametrize("value, message", [
    (value, f"PYTEST_DEVCAPS_DIST_TIMEOUT: {_REFUSED}, got '{value}'")
    for value in ("abc", "nan", "inf", "-5", "0", "1e300")
])
def test_a_bad_watchdog_variable_fails_before_any_rank_starts(
        monkeypatch: pytest.MonkeyPatch, value: str, message: str) -> None:
    monkeypatch.setenv("PYTEST_DEVCAPS_DIST_TIMEOUT", value)
    runner = DistributedRunner("cpu", "gloo", launch=None)
    with pytest.raises(ConfigError) as error:
        runner.run(_bodies.pid, world_size=2)
    assert str(error.value) == message


def test_other_variables_and_explicit_timeouts_are_checked_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_DEVCAPS_DIST_PG_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match="^PYTEST_DEVCAPS_DIST_PG_TIMEOUT: .* got 'soon'"):
        WorldOptions(timeout_s=10).effective_pg_timeout()
    monkeypatch.delenv("PYTEST_DEVCAPS_DIST_PG_TIMEOUT")
    with pytest.raises(ConfigError, match="^timeout_s: must be a finite number .* got nan"):
        DistributedRunner("cpu", "gloo", launch=None).run(_bodies.pid, timeout_s=float("nan"))
    monkeypatch.setenv("PYTEST_DEVCAPS_DIST_SHARE_DEVICES", "maybe")
    with pytest.raises(ConfigError, match="^PYTEST_DEVCAPS_DIST_SHARE_DEVICES: expected 1/true/yes/on or "
                                          "0/false/no/off, got 'maybe'"):
        settings.share_devices()
    monkeypatch.setenv("PYTEST_DEVCAPS_DIST_REUSE", "2")
    with pytest.raises(ConfigError, match="^PYTEST_DEVCAPS_DIST_REUSE: "):
        WorldOptions().reused()
    monkeypatch.setenv("PYTEST_DEVCAPS_DIST_REUSE", " Off ")
    assert WorldOptions().reused() is False


@pytest.mark.parametrize("variables, message", [
    ({"PYTEST_DEVCAPS_DIST_TIMEOUT": "abc"},
     f"PYTEST_DEVCAPS_DIST_TIMEOUT: {_REFUSED}, got 'abc'"),
    ({"PYTEST_DEVCAPS_DIST_PG_TIMEOUT": "nan"},
     f"PYTEST_DEVCAPS_DIST_PG_TIMEOUT: {_REFUSED}, got 'nan'"),
    ({"PYTEST_DEVCAPS_DIST_SHARE_DEVICES": "maybe"},
     "PYTEST_DEVCAPS_DIST_SHARE_DEVICES: expected 1/true/yes/on or 0/false/no/off, got 'maybe'"),
    ({"DEVCAPS_DIST_REUSE": "2"}, "DEVCAPS_DIST_REUSE: expected 1/true/yes/on or 0/false/no/off"),
    ({"PYTEST_DEVCAPS_DIST_TIMEOUT": "10", "DEVCAPS_DIST_TIMEOUT": "20"},
     "PYTEST_DEVCAPS_DIST_TIMEOUT: PYTEST_DEVCAPS_DIST_TIMEOUT='10' and its old name "
     "DEVCAPS_DIST_TIMEOUT='20' are both set and differ; unset DEVCAPS_DIST_TIMEOUT"),
])
def test_a_bad_variable_is_a_usage_error_at_configure_time(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, variables: dict[str, str],
        message: str) -> None:
    """As every other bad setting: exit 4 with one line, before a test runs (it was a FAILED
    test with the harness's 50-line traceback, and only for the tests that spawn)."""
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n",
                        test_world="def test_world(distributed):\n"
                                   "    distributed.run(print, world_size=2)\n")
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    result = pytester.runpytest_subprocess("-p", "no:randomly")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.strip()]
    assert len(errors) == 1 and errors[0].startswith(f"ERROR: pytest-devcaps: {message}"), errors
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert "passed" not in result.stdout.str()


def test_an_old_name_set_alone_still_works_with_a_warning(pytester: pytest.Pytester,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    monkeypatch.setenv("DEVCAPS_DIST_TIMEOUT", "30")
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-W", "error")
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()


def test_a_bad_variable_does_not_break_importing() -> None:
    """Read where used and at configure time, not at import: the plugin and harness import
    fine with a bad value."""
    env = {**os.environ, "PYTEST_DEVCAPS_DIST_TIMEOUT": "abc", "PYTEST_DEVCAPS_DIST_PG_TIMEOUT": "nan"}
    done = subprocess.run([sys.executable, "-c", "import pytest_devcaps.distributed.harness, "
                           "pytest_devcaps.distributed.fixture; print('ok')"],
                          env=env, capture_output=True, text=True)
    assert done.stdout == "ok\n", done.stderr


@pytest.mark.parametrize("size, message", [
    ("x", "world_size must be an int, got 'x' (str)"),
    (2.0, "world_size must be an int, got 2.0 (float)"),
    (True, "world_size must be an int, got True (bool)"),
    (0, "world_size must be >= 1, got 0"),
    (-3, "world_size must be >= 1, got -3"),
    (10**9, "world_size 1000000000 is more ranks than one machine spawns (at most 1024); "
            "start bigger worlds with a launcher (torchrun) across machines"),
])
def test_bad_world_sizes_are_clear_errors(size: object, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        DistributedRunner("cpu", "gloo", launch=None).run(_bodies.pid, world_size=size)  # type: ignore[arg-type]
    assert str(error.value) == f"distributed.run: {message}"


def test_memory_shortfall_names_the_sizes() -> None:
    assert settings.memory_shortfall(4, 64 * 2**30) is None
    assert settings.memory_shortfall(4, None) is None
    assert settings.memory_shortfall(64, 8 * 2**30) == (
        "a world of 64 ranks needs about 16.0 GiB of host memory (256 MiB per rank before the "
        "test's own tensors); 8.0 GiB is available: expect swapping or the OOM killer")


def test_a_world_bigger_than_memory_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "available_host_memory", lambda: 100 * 2**20)
    with pytest.warns(WorldMemoryWarning, match="a world of 1 ranks needs about 0.2 GiB"):
        assert spawn_world(_bodies.pid, (), world_size=1, device="cpu", backend="gloo",
                           options=WorldOptions(timeout_s=60, reuse=False))


def test_the_rank_entry_point_installs_its_handlers_before_torch_is_imported() -> None:
    """Importing the worker imports no torch, so SIGUSR1 finds its handler installed."""
    done = subprocess.run([sys.executable, "-c", "import sys, pytest_devcaps.distributed._worker; "
                           "print('torch' in sys.modules)"], capture_output=True, text=True)
    assert done.stdout == "False\n", done.stderr


def test_a_rank_still_starting_is_not_sent_the_stack_dump_signal(tmp_path: Path) -> None:
    """A rank stopped before its handler exists is reported as still starting, never as
    'killed by SIGUSR1' (sitecustomize delays the rank's interpreter before any of our code)."""
    (tmp_path / "sitecustomize.py").write_text("import os, time\n"
                                               "if os.environ.get('RANK') == '1': time.sleep(30)\n")
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    with pytest.raises(AssertionError) as error:
        spawn_world(_bodies.pid, (), world_size=2, device="cpu", backend="gloo",
                    options=WorldOptions(timeout_s=1, env=env, reuse=False))
    message = str(error.value)
    assert "ranks still starting after 1s" in message and "watchdog timeout" not in message
    assert "rank 1: still starting (stopped before its stack-dump handler was installed)" in message
    assert "SIGUSR1" not in message
