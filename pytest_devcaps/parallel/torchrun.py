"""pytest under torchrun (``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` set): one session per rank,
reported as one run.

- Each rank's ``device`` is ``LOCAL_RANK`` of its type (``plugin`` selects it, then makes it
  current).
- Terminal output comes from rank 0; the others are quiet unless ``--devcaps-all-ranks``: their
  terminal reporter stays registered (pytest-timeout's ``thread`` method and other plugins call
  ``config.get_terminal_writer()``) but writes nowhere, except what another thread writes while
  the main thread is stuck (pytest-timeout's dump before it ends the process), which goes to
  standard error. Rank 0 reports every other rank's failures with the rank's id, and its exit
  status and JSON report (``peers``) count them, and the ranks that never reported.
- The launcher stops every rank with SIGTERM when one dies, and passes on a Ctrl-C as SIGINT
  (torch ``torch/distributed/elastic/multiprocessing/api.py`` ``_close``: the signal, 30 s,
  SIGKILL): a rank turns either into an interrupt (pytest's exit status 2), stops waiting for
  the others, and still writes its JSON report. A rank also watches its parent, the launcher:
  when it is gone (SIGKILL, an OOM kill) the rank interrupts itself the same way instead of
  running on as an orphan. A rank is a child subreaper (Linux): what its tests left running,
  ``setsid`` processes included, is killed when the rank exits.
- Every rank must collect the same tests in the same order (``distributed`` bodies meet in
  collectives): the ranks compare their collected ids when collection finishes, and a mismatch
  is a usage error naming the ids that differ. pytest-randomly gets rank 0's seed on every rank
  (it draws one per process otherwise, pytest-randomly 5.1 ``pytest_configure``).

Everything goes through the launcher's store (``rankstore``). Registered with the plugin module
(its ``pytest_plugins``); in a session without a launched world its hooks return at once.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import signal
import sys
import threading
from collections import Counter
from typing import TYPE_CHECKING, Any, TextIO

import pytest

from pytest_devcaps.errors import DevcapsError
from pytest_devcaps._util.host import host_name
from pytest_devcaps.distributed.ranks import LaunchInfo, RankUnreachable, launched_world
from pytest_devcaps.session.keys import STORE_KEY, session_state

if TYPE_CHECKING:  # imported by the ranks of a launched world only
    from pytest_devcaps.distributed.rankstore import RankStore

SEED, DIGEST, IDS, RESULTS, DONE = "randomly-seed", "collected-digest", "collected", "results", "done"
SHOWN_IDS = 5


def active(config: pytest.Config) -> LaunchInfo | None:
    """The launched world this session is a rank of; None without one, for a world of one, and
    under xdist (whose workers are not ranks)."""
    try:
        info = launched_world()
    except DevcapsError as exc:
        raise pytest.UsageError(f"pytest-devcaps: {exc}") from None
    if info is None or info.world_size < 2:
        return None
    if getattr(config, "workerinput", None) is not None or getattr(config.option, "tx", None):
        return None
    return info


def _store(config: pytest.Config, info: LaunchInfo) -> RankStore:
    if STORE_KEY not in config.stash:
        from pytest_devcaps.distributed.rankstore import RankStore

        config.stash[STORE_KEY] = RankStore(info, session_state(config).settings.rank_timeout)
    return config.stash[STORE_KEY]


def receive_seed(config: pytest.Config) -> None:
    """On ranks other than 0, before pytest-randomly's ``pytest_configure``: take rank 0's seed
    (called from the plugin's ``tryfirst`` configure)."""
    info = active(config)
    if info is None or info.rank == 0 or not config.pluginmanager.hasplugin("randomly"):
        return
    try:
        seed = _store(config, info).read(SEED, 0)
    except RankUnreachable as exc:
        raise pytest.UsageError(f"pytest-devcaps: rank {info.rank} needs rank 0's "
                                f"pytest-randomly seed: {exc}") from None
    if seed.isdigit():
        config.option.randomly_seed = int(seed)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    info = active(config)
    if info is None:
        return
    store = _store(config, info)
    config.pluginmanager.register(RankSession(config, info, store), "devcaps-ranks")
    if info.rank == 0:
        seed = config.getoption("randomly_seed", None) if config.pluginmanager.hasplugin(
            "randomly") else None
        try:
            store.publish(SEED, str(seed) if isinstance(seed, int) else "none")
        except RankUnreachable as exc:
            raise pytest.UsageError(f"pytest-devcaps: rank 0: {exc}") from None
    elif not session_state(config).settings.all_ranks:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            quiet(config, reporter)  # rank 0 speaks for this rank


class QuietStream:
    """A terminal that discards what the main thread writes and passes on what other threads
    write (pytest-timeout's ``thread`` method dumps the stacks from its timer thread, then ends
    the process: the one thing a quiet rank must still say)."""

    def __init__(self, target: TextIO) -> None:
        self.target = target

    def write(self, text: str) -> int:
        if threading.current_thread() is not threading.main_thread():
            self.target.write(text)
        return len(text)

    def flush(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            self.target.flush()

    def isatty(self) -> bool:
        return False


def quiet(config: pytest.Config, reporter: Any) -> None:
    """Silence ``reporter`` but keep it registered: ``config.get_terminal_writer()`` returns
    its writer (pytest ``_pytest/config/__init__.py``), which pytest-timeout 2.x's
    ``timeout_timer`` calls first; unregistering the reporter made that raise in the timer
    thread, so the timeout never fired. The writer is made the way pytest makes the
    reporter's own (``_pytest/terminal.py`` ``TerminalReporter.__init__``)."""
    from _pytest.config import create_terminal_writer

    reporter._tw = create_terminal_writer(config, QuietStream(sys.stderr))  # type: ignore[arg-type]


def pytest_report_header(config: pytest.Config) -> str | None:
    info = active(config)
    if info is None:
        return None
    quiet = "" if session_state(config).settings.all_ranks else \
        "; other ranks are quiet (--devcaps-all-ranks shows them)"
    return (f"devcaps: rank {info.rank} of {info.world_size} (local rank {info.local_rank}) "
            f"on {host_name()}{quiet}")


def compare_collections(store: RankStore, ids: list[str]) -> str | None:
    """Publish this rank's collected ids and compare every rank's; the problem, or None."""
    digest = hashlib.sha256("\n".join(ids).encode()).hexdigest()
    store.publish(IDS, json.dumps(ids))
    store.publish(DIGEST, digest)
    digests = store.gather(DIGEST)
    silent = [rank for rank, value in digests.items() if value is None]
    if silent:
        return (f"ranks {silent} did not report their collected tests within "
                f"{store.timeout_s:g} s (--devcaps-rank-timeout)")
    differing = [rank for rank, value in digests.items() if value != digests[0]]
    if not differing:
        return None
    reference = json.loads(store.read(IDS, 0))
    lines = ["the ranks collected different tests; every rank of a launched world must run the "
             "same tests in the same order:"]
    for rank in differing:
        lines.append(describe_difference(reference, json.loads(store.read(IDS, rank)), rank))
    return "\n".join(lines)


def _some(ids: list[str]) -> str:
    more = f" (and {len(ids) - SHOWN_IDS} more)" if len(ids) > SHOWN_IDS else ""
    return ", ".join(ids[:SHOWN_IDS]) + more


def describe_difference(reference: list[str], other: list[str], rank: int) -> str:
    """How rank ``rank``'s collection differs from rank 0's, naming the ids."""
    mine, theirs = set(reference), set(other)
    only_zero = [i for i in reference if i not in theirs]
    only_other = [i for i in other if i not in mine]
    if only_zero or only_other:
        parts = []
        if only_zero:
            parts.append(f"only rank 0 has {_some(only_zero)}")
        if only_other:
            parts.append(f"only rank {rank} has {_some(only_other)}")
        return f"  rank {rank}: " + "; ".join(parts)
    position = next(i for i, (a, b) in enumerate(zip(reference, other)) if a != b)
    return (f"  rank {rank}: the same tests in another order: test {position + 1} is "
            f"{reference[position]} on rank 0 but {other[position]} on rank {rank} "
            f"(a plugin that reorders tests, such as pytest-randomly with another seed?)")


class RankSession:
    """This rank's side of a launched session: the collection check, its outcomes, and on rank
    0 everyone else's."""

    def __init__(self, config: pytest.Config, info: LaunchInfo, store: RankStore) -> None:
        self.config = config
        self.info = info
        self.store = store
        self.counts: Counter[str] = Counter()
        self.failures: list[dict[str, str]] = []
        self.others: dict[int, dict[str, Any]] = {}
        self.silent: list[int] = []
        self.problems: list[str] = []
        self.exitstatus = 0
        self.finishing = False
        self.terminated = False
        store.stopped = lambda: self.terminated
        self.why_stopped = ""
        self._previous_handlers: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for number in (signal.SIGTERM, signal.SIGINT):
                self._previous_handlers[number] = signal.signal(number, self._on_stop)
            watch_launcher(self)
        reap_at_exit()

    def _on_stop(self, signum: int, frame: Any) -> None:
        """The launcher stops this rank (another one died: SIGTERM; Ctrl-C: SIGINT), or the
        launcher is gone: end the tests as an interrupt; once the session is finishing, only
        stop waiting for the other ranks."""
        self.terminated = True
        if not self.why_stopped:  # the launcher watch sets its own reason first
            self.why_stopped = (f"the launcher sent {signal.Signals(signum).name}: another rank "
                                "failed or died, or the run was interrupted")
        if not self.finishing:
            raise KeyboardInterrupt(f"rank {self.info.rank} stopped: {self.why_stopped}")

    def peer_fields(self) -> dict[str, Any]:
        """What this rank's JSON report says about the others (``session.reporting`` asks the
        plugin registered as ``devcaps-ranks``): on rank 0 ``peers.failed`` and
        ``peers.silent`` (never reported: died or hung); nothing on the other ranks."""
        if self.info.rank != 0:
            return {}
        failed, silent = self.failed_and_silent()
        return {"peers": {"failed": failed, "silent": silent}}

    def failed_and_silent(self) -> tuple[list[int], list[int]]:
        """The other ranks that failed, and those that never reported (rank 0's view)."""
        failed = [rank for rank, r in sorted(self.others.items())
                  if r.get("failures") or r.get("exitstatus")]
        return failed, list(self.silent)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        try:
            problem = compare_collections(self.store, [item.nodeid for item in session.items])
        except RankUnreachable as exc:
            problem = str(exc)
        if problem is not None:
            raise pytest.UsageError(f"pytest-devcaps: rank {self.info.rank}: {problem}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            outcome = "failed" if report.when == "call" else "error"
            self.counts[outcome] += 1
            self.failures.append({"nodeid": report.nodeid, "when": report.when,
                                  "outcome": outcome, "message": _message(report)})
        elif report.when == "call" or (report.when == "setup" and report.skipped):
            self.counts[report.outcome] += 1

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Rank 0 waits for every other rank's results here, before its JSON report
        (``reporting``) and its terminal summary."""
        self.finishing = True
        self.exitstatus = int(exitstatus)
        if self.info.rank != 0:
            return
        try:
            self._gather()
        except RankUnreachable as exc:
            self.problems.append(str(exc))
        failed, silent = self.failed_and_silent()
        if (failed or silent or self.problems) and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """Other ranks publish their results last, once their own reports are written. The
        launcher stops every rank as soon as one exits with an error, so no rank may leave
        before rank 0 has said everything: rank 0 says it is done at interpreter exit (after
        pytest printed its last line), the others wait for that before they exit."""
        for number, handler in self._previous_handlers.items():
            signal.signal(number, handler)
        if self.info.rank == 0:
            atexit.register(_say_done, self.store)
            return
        payload = {"host": host_name(), "exitstatus": self.exitstatus,
                   "counts": dict(self.counts), "failures": self.failures}
        try:
            self.store.publish(RESULTS, json.dumps(payload))
        except RankUnreachable:
            return  # rank 0 reports this rank as silent
        atexit.register(_wait_done, self.store)

    def _gather(self) -> None:
        for rank, text in self.store.gather(RESULTS, range(1, self.info.world_size)).items():
            if text is None:
                self.silent.append(rank)
                why = f"before rank 0 stopped ({self.why_stopped or 'interrupted'})" \
                    if self.terminated else \
                    f"within {self.store.timeout_s:g} s (--devcaps-rank-timeout)"
                self.problems.append(f"rank {rank} did not report its results {why}: it died "
                                     f"or hung")
            else:
                self.others[rank] = json.loads(text)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.info.rank != 0 or not (self.others or self.problems):
            return
        terminalreporter.section("devcaps: other ranks", sep="-")
        for rank, result in sorted(self.others.items()):
            counts = ", ".join(f"{n} {k}" for k, n in sorted(result.get("counts", {}).items()))
            terminalreporter.line(f"rank {rank} on {result.get('host')}: {counts or 'no tests'} "
                                  f"(exit status {result.get('exitstatus')})")
            for failure in result.get("failures", []):
                terminalreporter.line(f"{failure['outcome'].upper()} [rank {rank}] "
                                      f"{failure['nodeid']} ({failure['when']}) - "
                                      f"{failure['message']}", red=True)
        for problem in self.problems:
            terminalreporter.line(problem, red=True)


def _say_done(store: RankStore) -> None:
    try:
        store.publish(DONE, "done")
    except (RankUnreachable, KeyboardInterrupt):
        pass  # the launcher (and its store) is gone, or a second Ctrl-C: leave anyway


def _wait_done(store: RankStore) -> None:
    try:
        store.read(DONE, 0)
    except (RankUnreachable, KeyboardInterrupt):
        pass  # rank 0 is gone or stuck: leave anyway


_LAUNCHER_GONE = signal.SIGTERM
"""The signal a rank sends itself when its launcher is gone (the SIGTERM path, then)."""


def watch_launcher(session: RankSession) -> None:
    """A thread that notices the launcher (this process's parent) is gone, and stops the rank
    as the launcher's SIGTERM would: a rank never runs on as an orphan (a SIGKILLed torchrun
    sends nothing). The reason is set first so the rank says the launcher died."""
    from pytest_devcaps._util.process_lifetime import watch_parent

    def stop() -> None:
        session.why_stopped = "the launcher is gone (killed), and this rank with it"
        session.store.gone = True
        try:
            os.kill(os.getpid(), _LAUNCHER_GONE)
        except OSError:
            pass

    watch_parent(stop, name="devcaps-launcher-watch")


def reap_at_exit() -> None:
    """Make this rank a child subreaper (Linux) and kill what is left below it at exit: a
    ``setsid`` grandchild a test started no longer outlives the run. Registered first, so it
    runs after the ranks' last words (atexit runs in reverse)."""
    from pytest_devcaps._util.process_lifetime import become_subreaper, kill_descendants

    if become_subreaper():
        atexit.register(kill_descendants, os.getpid(), deadline_s=5.0)


def _message(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message).splitlines()[0] if crash.message else ""
    lines = [line for line in report.longreprtext.splitlines() if line.strip()]
    return lines[-1] if lines else ""
