"""Spawn a world of fresh interpreters, watch it, and bring back every rank's result or story.

One call of :func:`spawn_world` is one world: a private run directory holds the FileStore
rendezvous (no ports, so parallel runs never collide), the pickled task, and per rank a log,
a faulthandler stack file and the outcome. The parent polls; when a rank fails, crashes or the
deadline passes, it gives the others a short grace to report, makes the survivors dump their
stacks (SIGUSR1), kills each rank's process group and raises :class:`DistributedRunError`
with every rank's traceback. Nothing outlives the call.
"""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from pytest_devcaps.distributed._worker import LOG_FILE, OUTCOME_FILE, STACKS_FILE
from pytest_devcaps.distributed.task import TASK_FILE, FunctionRef, RankOutcome, Task

DEFAULT_TIMEOUT_S = float(os.environ.get("DEVCAPS_DIST_TIMEOUT", "240"))
DEFAULT_PG_TIMEOUT_S = float(os.environ.get("DEVCAPS_DIST_PG_TIMEOUT", "60"))
GRACE_S = 2.0
"""How long the other ranks get to report their own error once one rank failed."""
DUMP_WAIT_S = 0.5
TEARDOWN_S = 10.0
"""How long ranks that all reported get to leave the process group and exit."""
LOG_TAIL_LINES = 40
_POLL_S = 0.02
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


class DistributedRunError(AssertionError):
    """One or more ranks raised, crashed or hung; the message holds every rank's story."""


class AllRanksSkipped(Exception):
    """Every rank skipped with the same reason (callers turn this into pytest.skip)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class _Rank:
    rank: int
    proc: subprocess.Popen[bytes]
    outcome: RankOutcome | None = None
    stack_dumped: bool = False
    fate: str = ""
    """Why the rank did not report: ``crashed`` (exit code/signal) or ``still running``."""


@dataclass
class WorldOptions:
    """How to run a world; ``env`` adds to (and overrides) the per-rank environment."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    pg_timeout_s: float | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    keep_run_dir: bool = False

    def effective_pg_timeout(self) -> float:
        # Shorter than the watchdog so a rank stuck in a collective raises (with its traceback)
        # before the parent has to kill it.
        requested = DEFAULT_PG_TIMEOUT_S if self.pg_timeout_s is None else self.pg_timeout_s
        return max(1.0, min(requested, self.timeout_s * 0.8))


def rank_environment(rank: int, world_size: int, device: torch.device,
                     extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of one spawned rank."""
    env = dict(os.environ)
    for launcher_var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                         "TORCHELASTIC_RUN_ID"):
        env.pop(launcher_var, None)
    env.update({
        "MASTER_ADDR": "127.0.0.1",
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size),
        "PYTHONUNBUFFERED": "1",
    })
    env.pop("MASTER_PORT", None)
    if device.type == "cpu":
        # world_size ranks share the cores; OpenMP pools per rank would oversubscribe them.
        env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def _launch(run_dir: Path, rank: int, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    bootstrap = (
        "import sys; sys.path.insert(0, sys.argv[3]); "
        "from pytest_devcaps.distributed._worker import main; main(sys.argv[1], int(sys.argv[2]))"
    )
    log = open(run_dir / LOG_FILE.format(rank=rank), "wb")
    try:
        kwargs: dict[str, Any] = {}
        if os.name == "posix":
            kwargs["start_new_session"] = True  # its own process group: killpg reaps helpers too
        return subprocess.Popen(
            [sys.executable, "-c", bootstrap, str(run_dir), str(rank), _PACKAGE_ROOT],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=dict(env),
            cwd=os.getcwd(), **kwargs,
        )
    finally:
        log.close()


def _read_outcome(run_dir: Path, rank: int) -> RankOutcome | None:
    path = run_dir / OUTCOME_FILE.format(rank=rank)
    if not path.exists():
        return None
    with open(path, "rb") as f:
        outcome: RankOutcome = pickle.load(f)
    return outcome


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if os.name == "posix":
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if proc.poll() is None:
        proc.kill()
    proc.wait()


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


def _watch(ranks: list[_Rank], run_dir: Path, deadline: float) -> bool:
    """Poll until every rank exited, or one failed (plus grace), or the deadline. True if timed out."""
    failed_at: float | None = None
    reported_at: float | None = None
    while True:
        now = time.monotonic()
        exited = 0
        for r in ranks:
            code = r.proc.poll()  # before reading: an exited rank has written all it ever will
            if r.outcome is None:
                r.outcome = _read_outcome(run_dir, r.rank)
            exited += code is not None
            failed = (r.outcome is not None and r.outcome.status == "error") or (
                r.outcome is None and code is not None)
            if failed and failed_at is None:
                failed_at = now
        if exited == len(ranks):
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


def _dump_and_kill(ranks: list[_Rank]) -> None:
    alive = [r for r in ranks if r.proc.poll() is None and r.outcome is None]
    if alive and hasattr(signal, "SIGUSR1"):
        for r in alive:
            try:
                r.proc.send_signal(signal.SIGUSR1)
                r.stack_dumped = True
            except ProcessLookupError:
                pass
        time.sleep(DUMP_WAIT_S)
    for r in ranks:
        if r.outcome is None:
            r.fate = _exit_description(r.proc.poll())
        _kill(r.proc)


def _report(fn: FunctionRef, world_size: int, device: torch.device, backend: str,
            ranks: list[_Rank], run_dir: Path, timed_out: bool, timeout_s: float) -> str:
    head = (f"distributed run of {fn} failed (world size {world_size}, device {device}, "
            f"backend {backend})")
    if timed_out:
        head += f": watchdog timeout after {timeout_s:g}s"
    summary, details = [], []
    for r in ranks:
        stacks = (run_dir / STACKS_FILE.format(rank=r.rank)).read_text(errors="replace").strip() \
            if (run_dir / STACKS_FILE.format(rank=r.rank)).exists() else ""
        if r.outcome is not None and r.outcome.status == "error":
            summary.append(f"  rank {r.rank}: raised {r.outcome.summary}")
            details.append(f"----- rank {r.rank}: traceback -----\n{r.outcome.message.rstrip()}")
        elif r.outcome is not None:
            summary.append(f"  rank {r.rank}: {r.outcome.status}")
            continue
        else:
            what = "hung (still running)" if r.fate == "still running" else r.fate
            summary.append(f"  rank {r.rank}: {what}")
        if stacks:
            label = "stacks when stopped (faulthandler)" if r.stack_dumped else "faulthandler"
            details.append(f"----- rank {r.rank}: {label} -----\n{stacks}")
        log = _tail(run_dir / LOG_FILE.format(rank=r.rank))
        if log:
            details.append(f"----- rank {r.rank}: output (last {LOG_TAIL_LINES} lines) -----\n{log}")
    return "\n".join([head, *summary, *details])


def _echo_logs(ranks: list[_Rank], run_dir: Path) -> None:
    """Rank output goes to our stdout, where pytest captures it and shows it on failure."""
    for r in ranks:
        path = run_dir / LOG_FILE.format(rank=r.rank)
        if path.exists() and path.stat().st_size:
            sys.stdout.write(f"----- rank {r.rank} output -----\n{path.read_text(errors='replace')}")


def spawn_world(fn: Callable[..., Any], args: Sequence[Any], *, world_size: int,
                device: torch.device | str, backend: str,
                options: WorldOptions | None = None) -> list[Any]:
    """Run ``fn(ctx, *args)`` on ``world_size`` fresh processes; return the results by rank.

    ``fn`` must be a module-level function (the ranks import it by name). Raises
    :class:`DistributedRunError` when a rank fails, crashes or hangs, and
    :class:`AllRanksSkipped` when every rank skipped.
    """
    __tracebackhide__ = True
    options = options or WorldOptions()
    device = torch.device(device)
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    ref = FunctionRef.of(fn)
    try:
        payload = pickle.dumps(tuple(args))
    except Exception as exc:
        raise TypeError(f"distributed.run: the arguments for {ref} cannot be pickled: {exc}") from exc
    run_dir = Path(tempfile.mkdtemp(prefix="devcaps-dist-"))
    task = Task(function=ref, args=payload, world_size=world_size, device=str(device),
                backend=backend, pg_timeout_s=options.effective_pg_timeout(),
                sys_path=tuple(sys.path), parent_pid=os.getpid())
    with open(run_dir / TASK_FILE, "wb") as f:
        pickle.dump(task, f)
    ranks: list[_Rank] = []
    try:
        for rank in range(world_size):
            env = rank_environment(rank, world_size, device, options.env)
            ranks.append(_Rank(rank=rank, proc=_launch(run_dir, rank, env)))
        timed_out = _watch(ranks, run_dir, time.monotonic() + options.timeout_s)
        for r in ranks:
            if r.outcome is None:
                r.outcome = _read_outcome(run_dir, r.rank)
        _dump_and_kill(ranks)
        _echo_logs(ranks, run_dir)
        outcomes = [r.outcome for r in ranks]
        if timed_out or any(o is None or o.status == "error" for o in outcomes):
            raise DistributedRunError(
                _report(ref, world_size, device, backend, ranks, run_dir, timed_out,
                        options.timeout_s))
        return collect_results(ref, [o for o in outcomes if o is not None])
    finally:
        for r in ranks:
            if r.proc.poll() is None:
                _kill(r.proc)
        if not options.keep_run_dir:
            shutil.rmtree(run_dir, ignore_errors=True)


def collect_results(ref: FunctionRef, outcomes: Sequence[RankOutcome]) -> list[Any]:
    """Values by rank from all-successful outcomes; all-skipped raises AllRanksSkipped."""
    skipped = [o for o in outcomes if o.status == "skipped"]
    if skipped:
        reasons = sorted({o.message for o in skipped})
        if len(skipped) == len(outcomes) and len(reasons) == 1:
            raise AllRanksSkipped(reasons[0])
        raise DistributedRunError(
            f"{ref}: ranks {[o.rank for o in skipped]} skipped ({'; '.join(reasons)}) but others "
            "did not; decide skips before distributed.run so every rank agrees")
    return [pickle.loads(o.value) for o in outcomes]
