"""The probe child process: runs probe functions for one device, one JSON line per event.

Started by :mod:`pytest_devcaps.probes.runner` as ``python -c``; reads its request
(``{"device": ..., "preload": [module, ...], "probes": [[name, "module:qualname"], ...]}``) from stdin and writes
``ready``, then ``start``/``result`` per probe, then ``done`` on the original stdout. Anything
probes print goes to stderr, so it cannot corrupt the protocol. Imports neither pytest nor
the plugin.

It leaves no orphan (:func:`pytest_devcaps._util.process_lifetime.enter`): on Linux a guardian
kills every process the probes started, ``setsid`` ones included, when the worker ends, when the
runner stops it and when pytest dies (SIGKILL included); elsewhere a parent watch ends it.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import IO, Any, Callable, NoReturn

from pytest_devcaps._util.process_lifetime import enter
from pytest_devcaps.probes.base import brief, call_probe
from pytest_devcaps._util.qualnames import resolve


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

    ``parent_pid``: the runner's pid; the child and what it starts die with it
    (:func:`pytest_devcaps._util.process_lifetime.enter`).
    """
    if parent_pid is not None:
        enter(parent_pid)
    try:
        code = main()
    finally:
        sys.stderr.flush()
    os._exit(code)
