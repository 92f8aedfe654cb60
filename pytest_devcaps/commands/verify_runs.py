"""One pytest run of one test file for ``devcaps lint --fix --verify``: the file as it is, or the
text ``--fix`` would write, under the plugin, in one device environment, within a deadline.

**Where the converted text runs.** In a temporary file *next to the original*
(``_devcaps_verify_<stem>_<token>.py``, created exclusively, removed when the run ends, whatever
happened): the same folder, so the same ``conftest.py`` chain, rootdir and ini file, the same
package for relative imports, and the same ``sys.path`` for the processes a test spawns
(``MultiProcessTestCase`` ranks import the test module again by name: a module that only existed
in memory, or a copy in another tree, would not be found there). The name matches neither
``test_*.py`` nor ``*_test.py``, so a concurrent pytest run does not collect it; no bytecode is
written (``PYTHONDONTWRITEBYTECODE``). The original runs in place; nothing else is written in
the user's tree.

**Processes.** Each run is ``python -c`` in a new session that first splits into a guardian and
the pytest worker (:func:`pytest_devcaps._util.guardian.guard`): the guardian kills the whole tree
(ranks, compilers, ``setsid`` descendants) when pytest ends, when we stop it at the deadline, and
when this process dies; :func:`~pytest_devcaps._util.guardian.stop_tree` then kills the process
group and reaps. Outcomes come from :mod:`._verify_recorder`, one JSON line per event, so a run
that crashes or times out still names the test that was running.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterator, Mapping

from pytest_devcaps._util.guardian import stop_tree

FAILING = frozenset({"failed", "error", "crashed", "timeout"})
RECORDER = "pytest_devcaps.commands._verify_recorder"
_BOOTSTRAP = (
    "import sys; from pytest_devcaps._util.guardian import die_with_parent, guard; "
    "parent = int(sys.argv[1]); guardian = guard(parent); "
    "die_with_parent(parent if guardian is None else guardian); "
    "import pytest; sys.exit(pytest.main(sys.argv[2:]))"
)
_PYTEST_ARGS = ("-p", "pytest_devcaps", "-p", RECORDER, "-p", "no:cacheprovider", "-p", "no:randomly",
                "-p", "no:xdist", "-q", "--assert=plain", "--color=no", "-rN")


@dataclass(frozen=True)
class Outcome:
    nodeid: str
    name: str
    qualname: str | None  # the def in the file (None: a test whose function lives elsewhere)
    device: str | None
    outcome: str  # passed, skipped, xfailed, xpassed, failed, error, crashed, timeout, not run
    message: str = ""

    @property
    def failing(self) -> bool:
        return self.outcome in FAILING


@dataclass(frozen=True)
class CollectionError:
    nodeid: str
    message: str
    lines: tuple[int, ...]  # lines of the file itself in the traceback, outermost first


@dataclass
class RunResult:
    environment: str
    tests: dict[str, Outcome] = field(default_factory=dict)
    collection_errors: list[CollectionError] = field(default_factory=list)
    exit_code: int | None = None
    timed_out: bool = False
    seconds: float = 0.0
    output_tail: str = ""

    @property
    def crashed(self) -> bool:
        return self.exit_code is not None and self.exit_code < 0


@contextmanager
def converted_copy(original: Path, text: str) -> Iterator[Path]:
    """``text`` in a new file beside ``original`` (see the module), removed on the way out."""
    folder = original.parent
    while True:
        path = folder / f"_devcaps_verify_{original.stem}_{secrets.token_hex(4)}.py"
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8", newline="") as stream:
            stream.write(text)
        yield path
    finally:
        path.unlink(missing_ok=True)


def run_pytest(path: Path, environment: str, env: Mapping[str, str], timeout_s: float,
               cwd: Path | None = None, shown_as: Path | None = None, python: str = sys.executable) -> RunResult:
    """Run ``pytest path`` in a guarded child with ``env``; stop it after ``timeout_s`` seconds.
    ``shown_as``: the file the node ids name (the original, for a converted copy beside it)."""
    result = RunResult(environment)
    with tempfile.TemporaryDirectory(prefix="devcaps-verify-") as scratch:
        record, output = Path(scratch) / "record.jsonl", Path(scratch) / "output.txt"
        command = [python, "-c", _BOOTSTRAP, str(os.getpid()), str(path), *_PYTEST_ARGS,
                   "--devcaps-verify-record", str(record)]
        started = time.monotonic()
        with open(output, "wb") as sink:
            process = subprocess.Popen(command, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=sink,
                                       stderr=subprocess.STDOUT, start_new_session=True)
            try:
                result.exit_code = process.wait(timeout=max(timeout_s, 1.0))
            except subprocess.TimeoutExpired:
                result.timed_out = True
            finally:
                stop_tree(process)
        result.seconds = round(time.monotonic() - started, 1)
        result.output_tail = output.read_text(encoding="utf-8", errors="replace")[-3000:]
        _read_record(record, path, result)
    if shown_as is not None and shown_as.name != path.name:
        result.tests = {_renamed(k, path, shown_as): replace(t, nodeid=_renamed(t.nodeid, path, shown_as))
                        for k, t in result.tests.items()}
        result.collection_errors = [replace(e, nodeid=_renamed(e.nodeid, path, shown_as),
                                            message=e.message.replace(path.name, shown_as.name))
                                    for e in result.collection_errors]
    return result


def _renamed(nodeid: str, path: Path, shown_as: Path) -> str:
    head, sep, tail = nodeid.partition("::")
    return (head[: -len(path.name)] + shown_as.name if head.endswith(path.name) else head) + sep + tail


def _read_record(record: Path, path: Path, result: RunResult) -> None:
    """The recorder's events into ``result``; a test that started and never ended crashed or ran
    out of time; one collected and never started did not run."""
    items: dict[str, dict[str, object]] = {}
    reports: dict[str, tuple[str, str]] = {}
    started: list[str] = []
    real = os.path.realpath(path)
    lines = record.read_text(encoding="utf-8", errors="replace").splitlines() if record.is_file() else []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue  # the last line of a killed run may be cut short
        kind = event.get("event")
        if kind == "item":
            items[event["nodeid"]] = event
        elif kind == "start":
            started.append(event["nodeid"])
        elif kind == "report":
            reports[event["nodeid"]] = (event["outcome"], event.get("message", ""))
        elif kind == "collect_error":
            own = tuple(int(n) for f, n in event.get("frames", ()) if f == real)
            result.collection_errors.append(CollectionError(event["nodeid"], event.get("message", ""), own))
    unfinished = "timeout" if result.timed_out else "crashed"
    for nodeid, item in items.items():
        outcome, message = reports.get(nodeid, ("", ""))
        if not outcome:
            outcome = unfinished if nodeid in started else "not run"
            message = f"the run {'timed out' if result.timed_out else 'ended'} during this test" \
                if nodeid in started else "the run ended before this test"
        qualname = item.get("qualname") if item.get("file") == real else None
        result.tests[nodeid] = Outcome(nodeid, str(item.get("name", nodeid)), qualname,  # type: ignore[arg-type]
                                           item.get("device"), outcome, message)  # type: ignore[arg-type]
