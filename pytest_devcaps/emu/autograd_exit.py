"""At interpreter exit, wait until autograd's device threads have let go of the last backward.

Why: a backward whose graph is on an accelerator runs on autograd's device thread for that
device index (``torch/csrc/autograd/engine.cpp``, ``Engine::thread_main``), while the caller
waits for the graph task's future. The device thread wakes the caller and only then drops its
own reference to the graph task. That task holds a copy of the caller's thread-local state,
and since torch 2.13 that copy holds a Python object: ``_engine_run_backward``
(``torch/autograd/graph.py``) stashes ``contextvars.copy_context()`` in it for every backward,
and removes the caller's own entry when the backward returns. So the device thread can be the
last owner of a Python object. If the caller has meanwhile reached interpreter finalization,
releasing it takes the GIL, CPython ends the thread (``pthread_exit`` in
``PyEval_AcquireThread``), the unwind meets a ``noexcept`` frame, and the process aborts
("terminate called without an active exception", exit status 134) after the script has done
all its work. Seen on emu in about 1 run in 8 of a script ending in a backward, with the CPU
busy (backtrace: ``Engine::thread_main`` -> ``GraphTask`` dispose -> ``~ThreadLocalState`` ->
``SafePyObject`` -> ``decref`` -> ``gil_scoped_acquire``); the same race exists on any device
whose backward runs on a device thread (pytorch/pytorch#38228 describes the general form).

The fix, run from ``atexit`` (before finalization, with the interpreter whole): one tiny
backward per emu device, called on the engine directly so that it stashes nothing. Each device
thread takes tasks in order and drops a graph task before it takes the next, so when a
device's drain graph has finished, every earlier graph task on that device index has been
released, with the GIL available to it. The drain graphs themselves hold no Python object in
their thread-local state, and their tensors are never freed: a graph's last owner may again be
the device thread, and a tensor whose Python object died first is freed through that object,
with the GIL. A module global would not do (finalization clears module globals), so the drain
holds them with a reference nothing releases: three 0-d tensors per device, once per process.
"""

from __future__ import annotations

import atexit
import ctypes
import faulthandler
import sys
from typing import Any

#: How long the drain may wait for a device thread still busy with another thread's backward:
#: torch's own exit waits as long for the same threads (engine.cpp, ``Engine::stop``,
#: ``TORCH_AUTOGRAD_SHUTDOWN_WAIT_LIMIT``, default 10 s). Past it the process ends with exit
#: status 1 and every thread's Python stack on stderr (``faulthandler``), never a hang.
WAIT_LIMIT_S = 10.0


def register(device_type: str, device_count: int) -> None:
    """Drain ``device_count`` devices of ``device_type`` when the interpreter exits."""
    atexit.register(_drain_at_exit, device_type, device_count)


def _drain_at_exit(device_type: str, device_count: int) -> None:
    try:
        drain_device_threads(device_type, device_count)
    except Exception as exc:  # noqa: BLE001 (at exit: any failure is one line, not a traceback)
        print(f"pytest-devcaps {device_type}: could not wait for autograd's device threads at exit "
              f"({type(exc).__name__}: {exc}); the process may abort as it ends", file=sys.stderr)


def drain_device_threads(device_type: str, device_count: int) -> int:
    """Run one backward on each of ``device_count`` devices of ``device_type``; return how many
    ran. A process forked after its parent started the device threads has none of them, and
    nothing to wait for: torch refuses the backward there, and this returns 0."""
    import torch

    engine: Any = torch.autograd.Variable._execution_engine
    faulthandler.dump_traceback_later(WAIT_LIMIT_S, exit=True, file=sys.stderr)
    ran = 0
    try:
        with torch.enable_grad():
            for index in range(device_count):
                leaf = torch.ones((), device=torch.device(device_type, index), requires_grad=True)
                root = leaf.sum()
                seed = torch.ones_like(root)
                ctypes.pythonapi.Py_IncRef(ctypes.py_object((leaf, root, seed)))  # never freed
                try:
                    # (tensors, grad_tensors, retain_graph, create_graph, inputs,
                    #  allow_unreachable, accumulate_grad): what torch.autograd.backward passes,
                    # without _engine_run_backward's stash of the caller's context.
                    engine.run_backward((root,), (seed,), False, False, (), True, True)
                except RuntimeError as exc:
                    # engine.cpp: "Unable to handle autograd's threading in combination with
                    # fork-based multiprocessing" (a child of a parent that started the threads)
                    if "fork-based multiprocessing" in str(exc):
                        return ran
                    raise
                ran += 1
    finally:
        faulthandler.cancel_dump_traceback_later()
    return ran
