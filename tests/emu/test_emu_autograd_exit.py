"""emu's exit drain (:mod:`pytest_devcaps.emu.autograd_exit`): after it, autograd's device
threads hold nothing of an earlier backward, so a process that ends right after a backward on emu
never aborts on its way out; each script runs in a fresh interpreter with two emu devices."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.emu._emu import emu_environ, run_json

# A probe object rides in the thread-local state that every graph task copies (the way torch's
# own stashed context does); the caller drops its references, so the graph task a device thread
# still holds is the probe's last owner, and the device thread runs its __del__ when it lets go.
# That __del__ takes 0.2 s before it says so: without the drain the caller always looks before
# then; the drain must wait for it.
RELEASED = r'''
import json, time
import torch
from pytest_devcaps.emu.autograd_exit import drain_device_threads

released = []

class Probe:
    def __init__(self, n):
        self.n = n
    def __del__(self):
        time.sleep(0.2)
        released.append(self.n)

seen, drained = [], set()
for n, device in enumerate(["emu:0", "emu:1"] * 2):
    torch._C._stash_obj_in_tls("devcaps_test_probe", Probe(n))
    x = torch.randn(8, device=device, requires_grad=True)
    (x * x).sum().backward()
    torch._C._remove_obj_from_tls("devcaps_test_probe")
    drained.add(drain_device_threads("emu", 2))
    seen.append(list(released))
print(json.dumps({"released_after_each_drain": seen, "drained": sorted(drained)}))
'''


def test_after_the_drain_no_device_thread_holds_an_earlier_backward(emu_build: Path) -> None:
    result = run_json(RELEASED, emu_environ(emu_build.parent.parent, devices=2))
    assert result == {"released_after_each_drain": [[0], [0, 1], [0, 1, 2], [0, 1, 2, 3]], "drained": [2]}


FORKED = r'''
import json, os
import torch
from pytest_devcaps.emu.autograd_exit import drain_device_threads

x = torch.ones(4, device="emu:0", requires_grad=True)
x.sum().backward()  # starts autograd's device threads in this process
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        os.write(write, json.dumps({"ran": drain_device_threads("emu", 2)}).encode())
    except BaseException as exc:
        os.write(write, json.dumps({"error": repr(exc)}).encode())
    os._exit(0)
os.close(write)
child = json.loads(os.read(read, 4096))
os.waitpid(pid, 0)
print(json.dumps({"child": child, "parent": drain_device_threads("emu", 2)}))
'''


def test_a_forked_child_has_no_device_threads_to_wait_for(emu_build: Path) -> None:
    """torch refuses a backward in a child forked after its parent started the device threads
    (engine.cpp, ``in_bad_autograd_fork``); the child has none, so the drain has nothing to do."""
    result = run_json(FORKED, emu_environ(emu_build.parent.parent, devices=2))
    assert result == {"child": {"ran": 0}, "parent": 2}


FULL_AT_EXIT = r'''
import json
import torch

x = torch.ones(4, device="emu:0", requires_grad=True)
x.sum().backward()
free = torch.emu.mem_get_info(0)[0]
keep = torch.empty(free // 4, dtype=torch.float32, device="emu:0")  # emu:0 full as the process ends
print(json.dumps({"free_left": torch.emu.mem_get_info(0)[0]}))
'''


def test_the_drain_runs_at_exit_and_says_in_one_line_when_it_cannot(emu_build: Path) -> None:
    """Registered when emu loads: at exit it runs; with the device full it cannot, and says so in
    one line (not a traceback), and the process still ends with status 0."""
    env = {**emu_environ(emu_build.parent.parent, devices=2), "PYTEST_DEVCAPS_EMU_MEMORY": "16MiB"}
    done = subprocess.run([sys.executable, "-c", FULL_AT_EXIT], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip() == '{"free_left": 0}'
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("pytest-devcaps emu: could not wait for autograd's device threads at exit "
                               "(OutOfMemoryError: emu: out of memory"), lines[0]
    assert lines[0].endswith("the process may abort as it ends")
