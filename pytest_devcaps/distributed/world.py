"""One world: ``world_size`` live rank processes on this machine, serving tasks one at a time.

A world owns a private directory (``devcaps-dist-*`` in the temp dir). Each rank is a fresh
interpreter in its own process group that imports torch once and then waits for tasks on its
stdin (``_worker``). A task gets its own subdirectory: the FileStore rendezvous (no ports, so
parallel worlds never collide), the pickled task, and per rank a log, a faulthandler stack file,
the outcome and a done marker. The parent polls; when a rank fails, crashes or the deadline
passes, it gives the others a short grace to report, makes the survivors dump their stacks
(SIGUSR1, only to ranks whose handler is installed), kills every rank's process group and
returns every rank's story. A world that failed is closed, never reused.

Nothing outlives the world: :meth:`World.close` kills the ranks and removes the directory, and
while any world is open a SIGTERM handler does the same before the process dies (ranks also
leave when their parent disappears: each runs under a guardian that kills the rank and every
process it started, SIGKILL of pytest included).
"""

from __future__ import annotations

import itertools
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any, Callable, Mapping, Sequence

from pytest_devcaps.distributed._worker import (
    BOOTED_FILE,
    DONE_FILE,
    LOG_FILE,
    OUTCOME_FILE,
    READY_FILE,
    STACKS_FILE,
)
from pytest_devcaps.distributed.task import TASK_FILE, RankOutcome, Task
from pytest_devcaps._util.process_lifetime import stop_tree

GRACE_S = 2.0
"""How long the other ranks get to report their own error once one rank failed."""
DUMP_WAIT_S = 0.5
TEARDOWN_S = 10.0
"""How long ranks that all reported get to leave the process group before the parent returns."""
SETTLE_S = 60.0
"""How long a reused world's ranks may still take to finish the last task (leave its process
group, put the process state back) before the next task; past that the world is closed."""
CLOSE_WAIT_S = 5.0
"""How long idle ranks get to exit by themselves when their world closes."""
LOG_TAIL_LINES = 40
RUN_DIR_PREFIX = "devcaps-dist-"
_POLL_S = 0.02
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
_BOOTSTRAP = (
    "import sys; sys.path.insert(0, sys.argv[4]); "
    "from pytest_devcaps.distributed._worker import main; "
    "main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))"
)


@dataclass
class _Rank:
    rank: int
    proc: subprocess.Popen[bytes]
    stdin: IO[bytes]
    outcome: RankOutcome | None = None
    stack_dumped: bool = False
    fate: str = ""
    """Why the rank did not report: ``crashed`` (exit code/signal) or ``still running``."""


@dataclass(frozen=True)
class TaskResult:
    """Every rank's outcome, or ``failure``: the report of a task that failed, crashed or hung."""

    outcomes: list[RankOutcome]
    failure: str | None = None


class World:
    """``len(environments)`` ranks of ``device`` with ``backend``; rank r runs with
    ``environments[r]``. Use :meth:`run` any number of times while :attr:`reusable`, then
    :meth:`close`."""

    def __init__(self, environments: Sequence[Mapping[str, str]], device: str, backend: str, *,
                 keep_dir: bool = False) -> None:
        self.size = len(environments)
        self.device = device
        self.backend = backend
        self.keep_dir = keep_dir
        self.dir = Path(tempfile.mkdtemp(prefix=RUN_DIR_PREFIX))
        self.reusable = True
        self._tasks = itertools.count()
        self._last_task = ""
        self._booted = False
        self._ranks: list[_Rank] = []
        _open_worlds.add(self)
        try:
            for rank, env in enumerate(environments):
                self._ranks.append(self._launch(rank, env))
        except BaseException:
            self.close()
            raise

    def _launch(self, rank: int, env: Mapping[str, str]) -> _Rank:
        kwargs: dict[str, Any] = {}
        if os.name == "posix":
            kwargs["start_new_session"] = True  # its own process group: killpg reaps helpers too
        with open(self.dir / LOG_FILE.format(rank=rank), "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-c", _BOOTSTRAP, str(self.dir), str(rank), str(os.getpid()),
                 _PACKAGE_ROOT],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=dict(env),
                cwd=os.getcwd(), **kwargs)
        assert proc.stdin is not None
        return _Rank(rank=rank, proc=proc, stdin=proc.stdin)

    @property
    def alive(self) -> bool:
        """Every rank is still running (an idle rank that died makes the world useless)."""
        return bool(self._ranks) and all(r.proc.poll() is None for r in self._ranks)

    def settle(self, timeout_s: float = SETTLE_S) -> bool:
        """Wait until every rank finished the last task; True when the world can take another."""
        deadline = time.monotonic() + timeout_s
        while self.alive and not all(self._done(r) for r in self._ranks):
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S)
        return self.alive

    def _done(self, r: _Rank) -> bool:
        """``r`` finished the last task (wrote its name to its done file)."""
        try:
            return (self.dir / DONE_FILE.format(rank=r.rank)).read_text() == self._last_task
        except OSError:
            return False

    def run(self, task: Task, timeout_s: float, describe: str) -> TaskResult:
        """Run ``task`` on every rank; ``describe`` heads the failure report. The watchdog
        (``timeout_s``) starts once the ranks have started; start-up gets the same time."""
        self._last_task = f"task{next(self._tasks)}"
        task_dir = self.dir / self._last_task
        task_dir.mkdir()
        try:
            with open(task_dir / TASK_FILE, "wb") as f:
                pickle.dump(task, f)
            for r in self._ranks:
                r.outcome, r.stack_dumped, r.fate = None, False, ""
                _send(r, f"{task_dir}\n")
            booted = self._await_boot(timeout_s)
            timed_out = _watch(self._ranks, task_dir, self._done,
                               time.monotonic() + (timeout_s if booted else 0.0))
            for r in self._ranks:
                if r.outcome is None:
                    r.outcome = _read_outcome(task_dir, r.rank)
            _echo_logs(self._ranks, task_dir)
            outcomes = [r.outcome for r in self._ranks]
            if timed_out or any(o is None or o.status == "error" for o in outcomes):
                self.reusable = False
                self._dump_and_kill()
                if timed_out:
                    describe += (f": watchdog timeout after {timeout_s:g}s" if booted
                                 else f": ranks still starting after {timeout_s:g}s")
                return TaskResult([], _report(describe, self._ranks, task_dir, self.dir))
            return TaskResult([o for o in outcomes if o is not None])
        except BaseException:
            self.reusable = False
            raise
        finally:
            if not self.keep_dir:
                shutil.rmtree(task_dir, ignore_errors=True)

    def _await_boot(self, timeout_s: float) -> bool:
        """Wait until every rank has started (imported torch) or one exited: start-up is the
        harness's cost, so a task's watchdog starts after it. False when start-up itself took
        longer than ``timeout_s`` (the task then gets no time of its own)."""
        deadline = time.monotonic() + timeout_s
        while not self._booted:
            self._booted = all((self.dir / BOOTED_FILE.format(rank=r.rank)).exists()
                               for r in self._ranks)
            if any(r.proc.poll() is not None for r in self._ranks):
                return True  # the watch reports the rank that died
            if not self._booted and time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S)
        return True

    def _dump_and_kill(self) -> None:
        alive = [r for r in self._ranks if r.proc.poll() is None and r.outcome is None]
        ready = [r for r in alive if (self.dir / READY_FILE.format(rank=r.rank)).exists()]
        if ready and hasattr(signal, "SIGUSR1"):
            for r in ready:  # a rank without its handler yet would die of SIGUSR1
                try:
                    r.proc.send_signal(signal.SIGUSR1)
                    r.stack_dumped = True
                except ProcessLookupError:
                    pass
            time.sleep(DUMP_WAIT_S)
        for r in self._ranks:
            if r.outcome is None:
                r.fate = _exit_description(r.proc.poll())
                if r.fate == "still running" and r not in ready:
                    r.fate = "still starting (stopped before its stack-dump handler was installed)"
            _kill(r.proc)

    def close(self) -> None:
        """Stop every rank and remove the world's directory: end of input lets idle ranks exit
        on their own (atexit handlers run: coverage.py writes its data there); busy ranks, and
        idle ones still running after :data:`CLOSE_WAIT_S`, are killed with their process group."""
        self.reusable = False
        for r in self._ranks:
            try:
                r.stdin.close()
            except OSError:
                pass
        idle = all(self._done(r) for r in self._ranks) if self._last_task else True
        deadline = time.monotonic() + (CLOSE_WAIT_S if idle else 0.0)
        while any(r.proc.poll() is None for r in self._ranks) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        for r in self._ranks:
            _kill(r.proc)
        self._ranks = []
        if not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        _open_worlds.discard(self)


def _send(r: _Rank, line: str) -> None:
    try:
        r.stdin.write(line.encode())
        r.stdin.flush()
    except (BrokenPipeError, OSError):
        pass  # the rank died: the watch reports how


def _read_outcome(task_dir: Path, rank: int) -> RankOutcome | None:
    path = task_dir / OUTCOME_FILE.format(rank=rank)
    if not path.exists():
        return None
    with open(path, "rb") as f:
        outcome: RankOutcome = pickle.load(f)
    return outcome


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """The rank's guardian kills its whole tree (``setsid`` descendants too), then its process
    group is killed (:func:`pytest_devcaps._util.process_lifetime.stop_tree`)."""
    stop_tree(proc)


def _exit_description(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code} without reporting"


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    if not path.exists():
        return ""
    text = path.read_text(errors="replace").rstrip()
    return "\n".join(text.splitlines()[-lines:])


def _watch(ranks: list[_Rank], task_dir: Path, done: Callable[[_Rank], bool],
           deadline: float) -> bool:
    """Poll until every rank is done or exited, or one failed (plus grace), or the deadline.
    True if timed out."""
    failed_at: float | None = None
    reported_at: float | None = None
    while True:
        now = time.monotonic()
        finished = 0
        for r in ranks:
            code = r.proc.poll()  # before reading: an exited rank has written all it ever will
            if r.outcome is None:
                r.outcome = _read_outcome(task_dir, r.rank)
            finished += code is not None or done(r)
            failed = (r.outcome is not None and r.outcome.status == "error") or (
                r.outcome is None and code is not None)
            if failed and failed_at is None:
                failed_at = now
        if finished == len(ranks):
            return False
        if failed_at is not None and now - failed_at >= GRACE_S:
            return False
        if reported_at is None and all(r.outcome is not None for r in ranks):
            reported_at = now
        if reported_at is not None and now - reported_at >= TEARDOWN_S:
            return False  # every rank reported; a slow teardown does not change the results
        if now >= deadline:
            return True
        time.sleep(_POLL_S)


def _report(head: str, ranks: list[_Rank], task_dir: Path, world_dir: Path) -> str:
    summary, details = [], []
    for r in ranks:
        if r.outcome is not None and r.outcome.status == "error":
            summary.append(f"  rank {r.rank}: raised {r.outcome.summary}")
            details.append(f"----- rank {r.rank}: traceback -----\n{r.outcome.message.rstrip()}")
        elif r.outcome is not None:
            summary.append(f"  rank {r.rank}: {r.outcome.status}")
            continue
        else:
            what = "hung (still running)" if r.fate == "still running" else r.fate
            summary.append(f"  rank {r.rank}: {what}")
        details += _rank_files(r, task_dir, world_dir)
    return "\n".join([head, *summary, *details])


def _rank_files(r: _Rank, task_dir: Path, world_dir: Path) -> list[str]:
    """The stack dump and output of a rank that did not succeed (task files, else start-up's)."""
    details = []
    for where in (task_dir, world_dir):
        stacks = _tail(where / STACKS_FILE.format(rank=r.rank), lines=10**6)
        if stacks:
            label = "stacks when stopped (faulthandler)" if r.stack_dumped else "faulthandler"
            details.append(f"----- rank {r.rank}: {label} -----\n{stacks}")
        log = _tail(where / LOG_FILE.format(rank=r.rank))
        if log:
            phase = "" if where == task_dir else "start-up "
            details.append(f"----- rank {r.rank}: {phase}output (last {LOG_TAIL_LINES} lines) "
                           f"-----\n{log}")
    return details


def _echo_logs(ranks: list[_Rank], task_dir: Path) -> None:
    """Rank output goes to our stdout, where pytest captures it and shows it on failure."""
    for r in ranks:
        path = task_dir / LOG_FILE.format(rank=r.rank)
        if path.exists() and path.stat().st_size:
            sys.stdout.write(f"----- rank {r.rank} output -----\n{path.read_text(errors='replace')}")


# ----- nothing outlives the process: SIGTERM closes every open world first -----

class _OpenWorlds:
    """The worlds of this process; a SIGTERM handler is installed while there are any."""

    def __init__(self) -> None:
        self.worlds: dict[int, World] = {}
        self.previous: Any = None
        self.installed = False

    def add(self, world: World) -> None:
        if not self.worlds:
            self._install()
        self.worlds[id(world)] = world

    def discard(self, world: World) -> None:
        self.worlds.pop(id(world), None)
        if not self.worlds:
            self._uninstall()

    def close_all(self) -> None:
        for world in list(self.worlds.values()):
            world.close()

    def _install(self) -> None:
        if self.installed or threading.current_thread() is not threading.main_thread():
            return
        current = signal.getsignal(signal.SIGTERM)
        if current == signal.SIG_IGN:
            return  # the process survives SIGTERM: so do its worlds
        self.previous, self.installed = current, True
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _uninstall(self) -> None:
        if not self.installed or threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
            signal.signal(signal.SIGTERM, self.previous if self.previous is not None
                          else signal.SIG_DFL)
        self.installed = False

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        previous = self.previous
        self.close_all()  # ranks killed, directories removed; uninstalls this handler
        if callable(previous):
            handler: Callable[[int, FrameType | None], Any] = previous
            handler(signum, frame)
            return
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)  # die of SIGTERM, as without us


_open_worlds = _OpenWorlds()


def close_all_worlds() -> None:
    """Close every world of this process (pooled or running)."""
    _open_worlds.close_all()
