"""The probe child process: runs probe functions for one device, one JSON line per event.

Started by :mod:`pytest_devcaps.probes.runner` as ``python -c``; reads its request
(``{"device": ..., "preload": [module, ...], "probes": [[name, "module:qualname"], ...]}``) from stdin and writes
``ready``, then ``start``/``result`` per probe, then ``done`` on the original stdout. Anything
probes print goes to stderr, so it cannot corrupt the protocol. Imports neither pytest nor
the plugin.

It leaves no orphan: on Linux it first splits into a guardian and the worker that runs the
probes (:func:`pytest_devcaps._util.guardian.guard`): the guardian kills every process the
probes started, ``setsid`` ones included, when the worker ends, when the runner stops it and
when pytest dies (SIGKILL included). The worker asks the kernel to SIGKILL it when its parent
dies (``PR_SET_PDEATHSIG``; the runner's calling thread waits for the child, so the
thread-scoped signal cannot fire early) and starts a thread that kills its process group once
its parent pid changes (other POSIX systems; Linux when prctl is unavailable).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import threading
import time
from typing import IO, Any, Callable, NoReturn

from pytest_devcaps._util.guardian import guard
from pytest_devcaps.probes.base import brief, call_probe
from pytest_devcaps._util.qualnames import resolve


#: Exit code of a child whose parent was already gone when it started.
ORPHAN_EXIT_CODE = 70
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent_pid: int) -> None:
    """Never outlive ``parent_pid``: PR_SET_PDEATHSIG, then a parent-watch thread."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the watch thread below still applies
    if os.getppid() != parent_pid:  # the parent died before the kernel could be asked
        os._exit(ORPHAN_EXIT_CODE)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        if hasattr(os, "killpg"):
            os.killpg(os.getpgrp(), signal.SIGKILL)  # this child leads its own group
        os._exit(ORPHAN_EXIT_CODE)

    threading.Thread(target=watch, name="devcaps-parent-watch", daemon=True).start()


def _preload(modules: list[str]) -> None:
    """Import what every probe needs before ``ready``, so it does not count against timeouts."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:
            pass  # the probes needing it report the import error themselves


def _select_device(device: str) -> None:
    """Make an indexed accelerator device current, so runtime objects land on it."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    try:
        target = torch.device(device)
        accelerator = torch.accelerator.current_accelerator()
        if accelerator is not None and target.type == accelerator.type and target.index is not None:
            torch.accelerator.set_device_index(target.index)
    except Exception:
        pass  # the probes themselves will report what is wrong


def _emit(channel: IO[str], **event: Any) -> None:
    channel.write(json.dumps(event) + "\n")
    channel.flush()


def main() -> int:
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # stray prints (Python or C) from probes go to stderr
    sys.stdout = sys.stderr
    request = json.loads(sys.stdin.read())
    device = request["device"]
    _preload(request.get("preload", []))
    _select_device(device)
    functions: dict[str, Callable[[str], Any]] = {}
    failures: dict[str, str] = {}
    for name, target in request["probes"]:
        try:
            functions[name] = resolve(target)
        except BaseException as exc:
            failures[name] = f"cannot import probe {target}: {brief(exc)}"
    _emit(channel, event="ready")
    for name, target in request["probes"]:
        if name in failures:
            _emit(channel, event="result", name=name, level="unknown", reason=failures[name])
            continue
        _emit(channel, event="start", name=name)
        outcome = call_probe(functions[name], device)
        _emit(channel, event="result", name=name, level=outcome.level.value,
              reason=outcome.reason)
    _emit(channel, event="done")
    return 0


def serve(parent_pid: int | None = None) -> NoReturn:
    """Run :func:`main` and leave without interpreter teardown (some device runtimes hang in it).

    ``parent_pid``: the runner's pid; the child dies with it (:func:`die_with_parent`).
    """
    if parent_pid is not None:
        guardian = guard(parent_pid)  # returns in the worker; the guardian never returns
        die_with_parent(parent_pid if guardian is None else guardian)
    try:
        code = main()
    finally:
        sys.stderr.flush()
    os._exit(code)
