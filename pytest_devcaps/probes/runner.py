"""Runs probes for one device in an isolated child process, surviving crashes and hangs.

An outcome that says more about this run than about the device is marked ``transient`` and
is never cached: a timeout, a child that could not start or died between probes, a probe
killed from outside (SIGKILL, SIGTERM: the OOM killer, a user), a failure of the runner
itself. A probe that raised, crashed on its own (SIGSEGV, SIGABRT) or exited is an answer.

The child leaves no orphan, nor do the processes a probe starts: it runs in its own session
under a guardian (:mod:`pytest_devcaps._util.process_lifetime`, Linux) that kills the whole tree, ``setsid``
descendants included, when the probes end, when :meth:`_Child.stop` asks (SIGTERM) and when
pytest dies (SIGKILL included); elsewhere it watches its parent's pid (:mod:`pytest_devcaps.probes._child`).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Any, Mapping, Sequence

from pytest_devcaps.model import Level, ProbeOutcome
from pytest_devcaps.probes.base import ProbeSpec, brief, call_probe
from pytest_devcaps._util.process_lifetime import stop_tree
from pytest_devcaps._util.qualnames import NotImportableError

#: Seconds a fresh child may take to import torch and the probe modules before "ready".
STARTUP_TIMEOUT = 120.0

#: Modules the child imports before ``ready`` (so importing torch is not part of a probe's time).
PRELOAD: tuple[str, ...] = ("torch",)

_BOOTSTRAP = (
    "import json, sys; sys.path[:0] = json.loads(sys.argv[1]); "
    "from pytest_devcaps.probes._child import serve; serve(int(sys.argv[2]))"
)
# Signals that come from outside the probe (a user, the OOM killer): not the device's answer.
_OUTSIDE_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT}
                             if os.name == "posix" else ())

# Counting devices through NVML keeps a parent-side check from creating a CUDA context.
_CHILD_ENV = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}


def run_probes(device: str, specs: Mapping[str, ProbeSpec], *, timeout: float = 10.0,
               sys_path: Sequence[str] | None = None) -> dict[str, ProbeOutcome]:
    """Answer every probe in ``specs`` (keyed by capability) for the torch ``device`` string.

    Isolated probes run in one child process, ``timeout`` seconds each; a probe that crashes,
    exits or hangs is answered ``UNKNOWN`` and a new child takes the remaining ones.
    Non-isolated probes run in this process. Never raises.
    """
    results: dict[str, ProbeOutcome] = {}
    isolated = [(name, spec) for name, spec in specs.items() if spec.isolated]
    try:
        results.update(_run_isolated(device, isolated, timeout, sys_path))
    except Exception as exc:  # a bug here must not take the test session down
        failed = ProbeOutcome(Level.UNKNOWN, f"probe runner failed: {brief(exc)}",
                              transient=True)
        for name, _ in isolated:
            results.setdefault(name, failed)
    for name, spec in specs.items():
        if not spec.isolated:
            results[name] = run_probe_in_this_process(spec, device)
    return {name: results[name] for name in specs}


def run_probe_in_this_process(spec: ProbeSpec, device: str) -> ProbeOutcome:
    """Call one probe here, turning anything it raises into ``UNKNOWN``."""
    return call_probe(spec.function, device)


def _run_isolated(device: str, items: list[tuple[str, ProbeSpec]], timeout: float,
                  sys_path: Sequence[str] | None) -> dict[str, ProbeOutcome]:
    results: dict[str, ProbeOutcome] = {}
    pending: list[tuple[str, str]] = []
    for name, spec in items:
        try:
            pending.append((name, spec.target))
        except NotImportableError as exc:  # a local function or lambda: only this one is unknown
            results[name] = ProbeOutcome(Level.UNKNOWN, str(exc))
    paths = _child_sys_path(sys.path if sys_path is None else sys_path)
    while pending:
        child = _Child(device, pending, paths)
        try:
            answered, failure = child.collect(timeout)
        finally:
            child.stop()
        results.update(answered)
        if failure is not None and failure.probe is not None:
            results[failure.probe] = failure.outcome()
        remaining = [(name, target) for name, target in pending if name not in results]
        if len(remaining) == len(pending):  # the child answered nothing: do not respawn forever
            failure = failure or _Failure(None, "probe child ended without answering")
            for name, _ in remaining:
                results[name] = failure.outcome()
            break
        pending = remaining
    return results


def _child_sys_path(paths: Sequence[str]) -> list[str]:
    """The parent's import path with "" (the current directory) made absolute."""
    cwd = os.getcwd()
    return [os.path.abspath(p) if p else cwd for p in paths]


class _Failure:
    """Why a child stopped early; ``probe`` is the probe it was running (None: before any).

    ``transient`` unless the probe itself ended the child (a crash of its own, an exit).
    """

    def __init__(self, probe: str | None, reason: str, transient: bool = True) -> None:
        self.probe = probe
        self.reason = reason
        self.transient = transient

    def outcome(self) -> ProbeOutcome:
        return ProbeOutcome(Level.UNKNOWN, self.reason, transient=self.transient)


class _Child:
    """One probe child process and the thread reading its result lines."""

    def __init__(self, device: str, items: list[tuple[str, str]], paths: list[str]) -> None:
        """``items``: (probe name, ``module:qualname`` of its function)."""
        self.stderr: IO[bytes] = tempfile.TemporaryFile()
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.process: subprocess.Popen[bytes] | None = None
        self.start_error: str | None = None
        self.reader: threading.Thread | None = None
        request = json.dumps({"device": device, "preload": list(PRELOAD),
                              "probes": [list(item) for item in items]})
        env = {**os.environ, **_CHILD_ENV}
        group = ({"start_new_session": True} if os.name == "posix"
                 else {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)})
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _BOOTSTRAP, json.dumps(paths), str(os.getpid())],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                env=env, **group)
        except OSError as exc:
            self.start_error = f"could not start the probe child: {brief(exc)}"
            return
        self.reader = threading.Thread(target=self._read, args=(self.process.stdout,),
                                       daemon=True)
        self.reader.start()
        try:
            assert self.process.stdin is not None
            self.process.stdin.write(request.encode())
            self.process.stdin.close()
        except OSError:
            pass  # the child died at once; collect() reports how

    def _read(self, stream: IO[bytes]) -> None:
        for raw in stream:
            try:
                self.lines.put(json.loads(raw))
            except ValueError:
                continue
        self.lines.put(None)

    def collect(self, timeout: float) -> tuple[dict[str, ProbeOutcome], _Failure | None]:
        """Read results until ``done``, a crash or a timeout."""
        answered: dict[str, ProbeOutcome] = {}
        if self.start_error is not None:
            return answered, _Failure(None, self.start_error)
        current: str | None = None
        ready = False
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            try:
                event = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                if not ready:
                    return answered, _Failure(None, f"probe child did not start within "
                                                    f"{STARTUP_TIMEOUT}s")
                return answered, _Failure(current, f"probe timed out after {float(timeout)}s")
            if event is None:
                return answered, self._ended(current, ready)
            kind = event.get("event")
            if kind == "done":
                return answered, None
            if kind == "ready":
                ready = True
            elif kind == "start":
                current = event["name"]
            elif kind == "result":
                answered[event["name"]] = ProbeOutcome(Level(event["level"]), event["reason"])
                current = None
            deadline = time.monotonic() + timeout

    def _ended(self, current: str | None, ready: bool) -> _Failure:
        """The child closed its output: say how it ended."""
        assert self.process is not None
        try:
            code: int | None = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            words = "closed its output"
        elif code < 0:
            words = f"was killed by signal {_signal_name(-code)}"
        else:
            words = f"exited with code {code}"
        if not ready:
            return _Failure(None, f"probe child failed to start: {words}{self._stderr_tail()}")
        if current is None:
            return _Failure(None, f"probe child {words} between probes")
        if code is not None and code < 0:
            return _Failure(current, f"probe crashed: signal {_signal_name(-code)}",
                            transient=-code in _OUTSIDE_SIGNALS)
        return _Failure(current, f"probe {words}", transient=code is None)

    def _stderr_tail(self) -> str:
        self.stderr.seek(0)
        lines = [line for line in self.stderr.read().decode(errors="replace").splitlines()
                 if line.strip()]
        return f": {lines[-1].strip()}" if lines else ""

    def stop(self) -> None:
        """Kill the child's whole tree (its guardian kills what left its process group, then
        the group is killed) and reap it."""
        process = self.process
        if process is not None:
            stop_tree(process)
            if self.reader is not None:
                self.reader.join(timeout=5)
            if process.stdout is not None and (self.reader is None or not self.reader.is_alive()):
                process.stdout.close()
        self.stderr.close()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)
