"""Process lifetime: no child devcaps starts, nor anything it starts, outlives pytest or the CLI.

The one place that says how a child dies with its parent (probe children, ranks, the emu build,
``lint --fix --verify`` runs all use it). A child started in a new session calls :func:`enter`
first thing (``python -c`` with :data:`ENTER_CODE` in front of its own code):

* on Linux the process forks (:func:`guard`); the original becomes the *guardian*, a child
  subreaper (``PR_SET_CHILD_SUBREAPER``: every orphan below it is reparented to it, ``setsid``
  or not), and the fork goes on as the worker. The guardian waits. When the worker exits, it
  kills every descendant left and exits as the worker did (the same code, or the same signal),
  so the caller sees the worker's fate. When the caller dies (SIGKILL included:
  ``PR_SET_PDEATHSIG`` sends the guardian SIGTERM, and a timer checks the parent pid) or stops
  it with SIGTERM (:func:`stop_tree`), it kills the whole tree, worker included, with SIGKILL (no
  Python in the tree has to cooperate: a rank stuck in C code holding the GIL dies too). SIGUSR1
  (stack dumps of a hung rank) is passed on to the worker.
* the worker dies by SIGKILL when the guardian dies (:func:`die_with_parent`), and a thread
  watches its parent's pid where the kernel cannot be asked (other POSIX systems).

Descendants are found through ``/proc`` and followed through zombies: a worker with threads (torch
imports thread pools) is a zombie leader while its other threads exit, and its children are still
its own until the last thread is gone; they are killed and waited for, not missed. Standard
library only; nothing heavy is imported here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
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


#: What a ``python -c`` child runs first (``sys.argv[1]``: the caller's pid); its own code follows.
ENTER_CODE = ("import sys; from pytest_devcaps._util.process_lifetime import enter; "
              "enter(int(sys.argv[1])); ")


def enter(parent_pid: int, exit_code: int = STOPPED_EXIT_CODE) -> int:
    """What a child started in a new session calls first: :func:`guard` (Linux), then
    :func:`die_with_parent` with the parent it now has (the guardian, or ``parent_pid``) and a
    parent watch. Returns that parent's pid."""
    guardian = guard(parent_pid)  # returns in the worker; the guardian never returns
    parent = parent_pid if guardian is None else guardian
    die_with_parent(parent, exit_code)
    return parent


def die_with_parent(parent_pid: int, exit_code: int = STOPPED_EXIT_CODE, *,
                    watch: bool = True) -> bool:
    """Ask the kernel for SIGKILL when ``parent_pid`` (our parent) dies; exit at once when it is
    already gone; with ``watch``, a thread exits too (killing our process group when we lead
    it) once the parent pid changes, where the kernel cannot be asked or a thread-scoped
    ``PR_SET_PDEATHSIG`` was missed. False where the kernel cannot be asked."""
    prctl = _prctl()
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(exit_code)
    if watch:
        watch_parent(lambda: _leave(exit_code), parent_pid)
    return prctl is not None


def _leave(exit_code: int) -> None:
    if hasattr(os, "killpg") and os.getpgrp() == os.getpid():
        os.killpg(os.getpgrp(), signal.SIGKILL)  # we lead our own group: it goes with us
    os._exit(exit_code)


WATCH_S = 0.5
"""How often a parent watch looks at the parent's pid."""


def watch_parent(on_gone: Callable[[], None], parent_pid: int | None = None,
                 name: str = "devcaps-parent-watch") -> threading.Thread:
    """A daemon thread that calls ``on_gone`` once this process's parent is no longer
    ``parent_pid`` (default: the parent now): the one parent watch of ranks, probe children and
    launched ranks."""
    parent = os.getppid() if parent_pid is None else parent_pid

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(WATCH_S)
        on_gone()

    thread = threading.Thread(target=watch, name=name, daemon=True)
    thread.start()
    return thread


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


def process_tree(root: int) -> tuple[list[int], list[int]]:
    """(live, zombie) processes below ``root``, read from ``/proc``. The walk goes on through
    zombies: a process whose leader thread has exited shows as a zombie while its other
    threads still run, and its children are still its own."""
    children: dict[int, list[tuple[int, bool]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append((int(entry), fields[0] == b"Z"))
    live: list[int] = []
    zombies: list[int] = []
    pending = [root]
    while pending:
        for pid, zombie in children.get(pending.pop(), []):
            (zombies if zombie else live).append(pid)
            pending.append(pid)
    return live, zombies


def descendants(root: int) -> list[int]:
    """The live (not zombie) processes below ``root``."""
    return process_tree(root)[0]


def kill_descendants(root: int, *, deadline_s: float = 10.0) -> None:
    """SIGKILL every process below ``root`` (this process) until none is left, zombies
    reaped; orphans of killed processes come to ``root`` as the subreaper and are killed in
    turn. A zombie leader is signalled too (its other threads may still run)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        live, zombies = process_tree(root)
        for pid in (*live, *zombies):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        _reap()
        if not live and not zombies:
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
