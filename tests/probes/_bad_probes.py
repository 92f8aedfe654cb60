"""Misbehaving probes for the runner's isolation tests (imported by the probe child)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from pytest_devcaps.model import Level, ProbeOutcome

#: The hanging probe writes the pid of a grandchild it started here (set by the test).
GRANDCHILD_PID_FILE = "DEVCAPS_TEST_GRANDCHILD_PID_FILE"


def good(device: str) -> ProbeOutcome:
    """Answers with the pid of the process it ran in."""
    return ProbeOutcome(Level.NATIVE, f"pid={os.getpid()}")


def raises(device: str) -> ProbeOutcome:
    raise ValueError("boom")


def segfaults(device: str) -> ProbeOutcome:
    os.kill(os.getpid(), signal.SIGSEGV)
    time.sleep(10)
    raise AssertionError("still alive after SIGSEGV")


def exits(device: str) -> ProbeOutcome:
    os._exit(3)


def system_exit(device: str) -> ProbeOutcome:
    sys.exit(0)


def hangs(device: str) -> ProbeOutcome:
    """Starts a sleeping grandchild (it must die with the child), then hangs."""
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    path = os.environ.get(GRANDCHILD_PID_FILE)
    if path:
        with open(path, "w") as handle:
            handle.write(str(grandchild.pid))
    time.sleep(60)
    return ProbeOutcome(Level.NATIVE, "woke up")


def prints(device: str) -> ProbeOutcome:
    """Writes junk to stdout, which must not corrupt the result protocol."""
    print("not json {")
    os.write(1, b"raw bytes on fd 1\n")
    return ProbeOutcome(Level.NATIVE, "printed")


def not_an_outcome(device: str) -> ProbeOutcome:
    return "native"  # type: ignore[return-value]


def reports_modules(device: str) -> ProbeOutcome:
    """Says which of the modules a probe child must not import were imported."""
    forbidden = [m for m in ("pytest", "_pytest", "pytest_devcaps.plugin") if m in sys.modules]
    return ProbeOutcome(Level.NATIVE, f"device={device} forbidden={','.join(forbidden) or 'none'}")


#: The hanging probe writes its own pid here (set by the orphan tests).
CHILD_PID_FILE = "DEVCAPS_TEST_CHILD_PID_FILE"


def kills_itself(device: str) -> ProbeOutcome:
    """Dies of SIGKILL, as if the OOM killer or a user had ended it."""
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(10)
    raise AssertionError("still alive after SIGKILL")


def hangs_with_pid(device: str) -> ProbeOutcome:
    """Writes the probe child's pid where the test said, then hangs."""
    with open(os.environ[CHILD_PID_FILE], "w") as handle:
        handle.write(str(os.getpid()))
    time.sleep(600)
    return ProbeOutcome(Level.NATIVE, "woke up")


#: The escaping probe writes the pids of its grandchildren here, one per line.
ESCAPEES_PID_FILE = "DEVCAPS_TEST_ESCAPEES_PID_FILE"


def spawns_escapees(device: str) -> ProbeOutcome:
    """Starts ``sleep 1000`` twice: one stays in the child's process group, one leaves it for a
    session of its own (``setsid``), as daemonising helpers do; then hangs."""
    stay = subprocess.Popen(["sleep", "1000"])
    escape = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    path = os.environ[ESCAPEES_PID_FILE]
    with open(path + ".tmp", "w") as handle:
        handle.write(f"{stay.pid}\n{escape.pid}\n")
    os.replace(path + ".tmp", path)
    if os.environ.get("DEVCAPS_TEST_ESCAPEES_RETURN"):
        return ProbeOutcome(Level.NATIVE, "left two sleepers behind")
    time.sleep(600)
    return ProbeOutcome(Level.NATIVE, "woke up")
