"""A guardian between pytest and a child process it starts, so the child's whole tree dies with it.

A probe child or a rank may start processes of its own (a compiler, ``sleep 1000``, a helper that
calls ``setsid`` and leaves the process group). Killing the child's process group misses those
that left it, and a child killed by ``PR_SET_PDEATHSIG`` leaves its own children to init. So, on
Linux, the child calls :func:`guard` first thing (it was started in a new session): the process
forks; the original becomes the *guardian*, a child subreaper (``PR_SET_CHILD_SUBREAPER``: every
orphan below it is reparented to it, ``setsid`` or not), and the fork goes on as the worker.

The guardian waits. When the worker exits, it kills every descendant left and exits as the worker
did (the same code, or the same signal), so the caller sees the worker's fate. When pytest dies
(SIGKILL included: ``PR_SET_PDEATHSIG`` sends the guardian SIGTERM, and a timer checks the parent
pid) or the caller stops it with SIGTERM, it kills the whole tree, worker included, with SIGKILL
(no Python in the tree has to cooperate: a rank stuck in C code holding the GIL dies too). SIGUSR1
(stack dumps of a hung rank) is passed on to the worker. The worker itself dies by SIGKILL if the
guardian dies. Elsewhere (no ``prctl``) :func:`guard` returns without forking and the caller's own
parent watch applies. Standard library only; the guardian never imports anything heavy.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from types import FrameType
from typing import Any, Callable, NoReturn

from pytest_devcaps.errors import DevcapsError

#: Exit code of a guardian that stopped because pytest went away or asked it to.
STOPPED_EXIT_CODE = 70
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_PR_SET_CHILD_SUBREAPER = 36
_PARENT_CHECK_S = 1.0


class _Stop(DevcapsError):
    """Raised in the guardian by SIGTERM or by the parent check: kill the tree and leave."""


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux") or not os.path.isdir("/proc"):
        return None
    try:
        import ctypes

        function: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
        return function
    except (OSError, AttributeError):
        return None


def die_with_parent(parent_pid: int, exit_code: int = STOPPED_EXIT_CODE) -> bool:
    """Ask the kernel for SIGKILL when ``parent_pid`` (our parent) dies; exit at once when it is
    already gone. False where the kernel cannot be asked (the caller watches instead)."""
    prctl = _prctl()
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(exit_code)
    return prctl is not None


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux): orphans below it, ``setsid`` ones too, are
    reparented to it, so :func:`kill_descendants` finds them. False where it cannot be."""
    prctl = _prctl()
    return prctl is not None and prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def guard(parent_pid: int) -> int | None:
    """Split into guardian and worker (see the module); returns in the worker only, with the
    guardian's pid (the worker's parent), or None where nothing was forked (not Linux)."""
    prctl = _prctl()
    if prctl is None or not hasattr(os, "fork"):
        return None
    if prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return None
    guardian = os.getpid()
    worker: list[int] = []
    previous = _install_handlers(parent_pid, worker)  # before the fork: no signal is missed
    pid = os.fork()
    if pid == 0:
        for number, handler in previous.items():
            signal.signal(number, handler)
        die_with_parent(guardian)
        return guardian
    worker.append(pid)
    _serve_as_guardian(pid, parent_pid, prctl)


def _install_handlers(parent_pid: int, worker: list[int]) -> dict[int, Any]:
    """SIGTERM stops, SIGALRM checks the parent, SIGUSR1 goes on to the worker; returns the
    handlers they replace (the worker puts them back)."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise _Stop()

    def check_parent(signum: int, frame: FrameType | None) -> None:
        if os.getppid() != parent_pid:
            raise _Stop()

    def forward(signum: int, frame: FrameType | None) -> None:
        for pid in worker:
            try:
                os.kill(pid, signum)
            except OSError:
                pass

    handlers: dict[int, Any] = {signal.SIGTERM: stop, signal.SIGALRM: check_parent}
    if hasattr(signal, "SIGUSR1"):
        handlers[signal.SIGUSR1] = forward
    return {number: signal.signal(number, handler) for number, handler in handlers.items()}


def _serve_as_guardian(worker: int, parent_pid: int, prctl: Callable[..., int]) -> NoReturn:
    _quiet_standard_streams()
    status: int | None = None
    try:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        signal.setitimer(signal.ITIMER_REAL, _PARENT_CHECK_S, _PARENT_CHECK_S)
        if os.getppid() != parent_pid:
            raise _Stop()
        status = _wait_for(worker)
    except _Stop:
        status = None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    kill_descendants(os.getpid())
    _exit_like(status)


def _quiet_standard_streams() -> None:
    """The guardian keeps no pipe end open: the caller sees end of output when the worker (and
    what it started) is gone, not when the guardian is."""
    try:
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)
    except OSError:
        pass


def _wait_for(worker: int) -> int:
    """Reap children (the worker, and orphans handed to us) until the worker is reaped."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 0
        if pid == worker:
            return status


def _exit_like(status: int | None) -> NoReturn:
    if status is None:
        os._exit(STOPPED_EXIT_CODE)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the worker dumped core already
        except (ImportError, ValueError, OSError):
            pass
        try:
            signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL and SIGSTOP have no handler to reset
        os.kill(os.getpid(), number)
        os._exit(128 + number)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else STOPPED_EXIT_CODE)


def descendants(root: int) -> list[int]:
    """The live (not zombie) processes below ``root``, read from ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields and fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    pending = [root]
    while pending:
        below = children.get(pending.pop(), [])
        found.extend(below)
        pending.extend(below)
    return found


def kill_descendants(root: int, *, deadline_s: float = 10.0) -> None:
    """SIGKILL every process below ``root`` (this process) until none is left, reaping them;
    orphans of killed processes come to ``root`` as the subreaper and are killed in turn."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        left = descendants(root)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        _reap()
        if not left:
            return
        time.sleep(0.01)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def stop_tree(process: subprocess.Popen[bytes], wait_s: float = 5.0) -> None:
    """Stop a child started in its own session with :func:`guard` in it, and everything below:
    SIGTERM asks the guardian to kill the tree (``setsid`` descendants included); then its
    process group is killed outright (what is left, or a child without a guardian); reaped."""
    if os.name != "posix":
        if process.poll() is None:
            process.kill()
        process.wait()
        return
    if process.poll() is None:
        try:
            os.kill(process.pid, signal.SIGTERM)
            process.wait(timeout=wait_s)
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        pass
    if process.poll() is None:
        process.kill()
    process.wait()
