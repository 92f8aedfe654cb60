"""Every emuccl collective against gloo: the same inputs on 2 emu ranks (emuccl) and on 2 CPU
ranks (gloo) give the same outputs, the same refusals and working async Work objects."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.emu._emu import emu_environ

RANK = r'''
import json, sys
from datetime import timedelta
import torch
import torch.distributed as dist
from torch.distributed.tensor.debug import CommDebugMode

backend, kind, rank, store = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
if kind != "cpu":
    torch.emu.set_device(rank)
dist.init_process_group(backend, init_method="file://" + store, rank=rank, world_size=2,
                        timeout=timedelta(seconds=120))
device = torch.device(kind, rank) if kind != "cpu" else torch.device("cpu")
out = {"backend": dist.get_backend(), "devices": []}

def seen(t):
    out["devices"].append(t.device.type)
    return t.cpu().tolist()

def base(n, dtype=torch.float32):
    g = torch.Generator().manual_seed(10 + rank)
    return (torch.randn(n, generator=g) * 4).round().to(dtype).to(device)

for op in ("SUM", "MAX", "MIN", "PRODUCT"):
    t = base(6)
    dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
    out[f"all_reduce_{op}"] = seen(t)
t = base(5, torch.int64)
dist.all_reduce(t)
out["all_reduce_int64"] = seen(t)
try:  # whatever gloo does with AVG, emuccl does (it runs gloo)
    t = base(2)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    out["all_reduce_AVG"] = seen(t)
except Exception as exc:
    out["all_reduce_AVG"] = type(exc).__name__
gathered = [torch.empty(3, device=device) for _ in range(2)]
dist.all_gather(gathered, base(3))
out["all_gather"] = [seen(t) for t in gathered]
flat = torch.empty(8, device=device)
dist.all_gather_into_tensor(flat, base(4))
out["all_gather_into_tensor"] = seen(flat)
chunk = torch.empty(3, device=device)
dist.reduce_scatter(chunk, [base(3) * (i + 1) for i in range(2)])
out["reduce_scatter"] = seen(chunk)
half = torch.empty(4, device=device)
dist.reduce_scatter_tensor(half, base(8))
out["reduce_scatter_tensor"] = seen(half)
b = base(4)
dist.broadcast(b, src=1)
out["broadcast"] = seen(b)
a2a = torch.empty(6, device=device)
dist.all_to_all_single(a2a, base(6))
out["all_to_all_single"] = seen(a2a)
uneven = torch.empty(5 if rank == 0 else 3, device=device)
dist.all_to_all_single(uneven, base(4), output_split_sizes=[2, 3] if rank == 0 else [2, 1],
                       input_split_sizes=[2, 2] if rank == 0 else [3, 1])
out["all_to_all_single_uneven"] = seen(uneven)
if rank == 0:
    dist.send(base(3) + 100, dst=1)
    got = torch.zeros(2, device=device)
    dist.recv(got, src=1)
else:
    got = torch.zeros(3, device=device)
    dist.recv(got, src=0)
    dist.send(base(2) - 100, dst=0)
out["send_recv"] = seen(got)
dist.barrier()
objects = [None, None]
dist.all_gather_object(objects, {"rank": rank})
out["all_gather_object"] = objects

# asynchronous work: wait, completion, futures holding the caller's tensors
t = base(6)
work = dist.all_reduce(t, async_op=True)
waited = work.wait()
future = dist.all_reduce(base(2), async_op=True).get_future()
value = future.wait()
out["async"] = {"waited": waited, "completed": work.is_completed(), "value": seen(t),
                "future_devices": [v.device.type for v in value], "future": seen(value[0])}
t = base(3)
pending = dist.all_reduce(t, async_op=True)
if kind != "cpu":
    torch.emu.synchronize(rank)  # the device's synchronize waits for its collectives
else:
    pending.wait()  # the CPU has no device synchronize
out["synchronized"] = [pending.is_completed(), seen(t)]
# the dispatcher's c10d ops carry them (what CommDebugMode counts)
with CommDebugMode() as comm:
    dist.all_reduce(base(2))
    dist.all_gather_into_tensor(torch.empty(4, device=device), base(2))
out["comm_counts"] = sorted(str(k).split(".")[-1] for k in comm.get_comm_counts())
out["devices"] = sorted(set(out["devices"]))
dist.destroy_process_group()
print(json.dumps(out))
'''


def _world(backend: str, kind: str, env: dict[str, str], tmp: Path) -> list[dict[str, Any]]:
    store = tmp / f"store-{backend}"
    command = [sys.executable, "-c", textwrap.dedent(RANK), backend, kind]
    ranks = [subprocess.Popen([*command, str(r), str(store)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(2)]
    results = []
    for proc in ranks:
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr[-4000:]
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    return results


@pytest.fixture(scope="module")
def worlds(emu_build: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    env = emu_environ(emu_build.parent.parent, devices=2)
    tmp = tmp_path_factory.mktemp("collectives")
    return _world("emuccl", "emu", env, tmp), _world("gloo", "cpu", env, tmp)


COLLECTIVES = ["all_reduce_SUM", "all_reduce_MAX", "all_reduce_MIN", "all_reduce_PRODUCT",
               "all_reduce_int64", "all_reduce_AVG", "all_gather", "all_gather_into_tensor",
               "reduce_scatter", "reduce_scatter_tensor", "broadcast", "all_to_all_single",
               "all_to_all_single_uneven", "send_recv", "all_gather_object"]


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_collective_matches_gloo(worlds: tuple[list[dict[str, Any]], list[dict[str, Any]]],
                                 collective: str) -> None:
    emu, gloo = worlds
    for rank in range(2):
        assert emu[rank][collective] == gloo[rank][collective], (collective, rank)


def test_results_stay_on_emu(worlds: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
    emu, gloo = worlds
    assert [r["devices"] for r in emu] == [["emu"], ["emu"]]
    assert [r["devices"] for r in gloo] == [["cpu"], ["cpu"]]
    assert emu[0]["backend"] == "emuccl" and gloo[0]["backend"] == "gloo"


def test_async_work_and_futures(worlds: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
    emu, gloo = worlds
    for rank in range(2):
        mine, theirs = emu[rank]["async"], gloo[rank]["async"]
        assert mine["waited"] is True and mine["completed"] is True
        assert mine["value"] == theirs["value"] and mine["future"] == theirs["future"]
        assert mine["future_devices"] == ["emu"] and theirs["future_devices"] == ["cpu"]
        assert emu[rank]["synchronized"][0] is True
        assert emu[rank]["synchronized"][1] == gloo[rank]["synchronized"][1]


def test_collectives_go_through_the_dispatcher(
        worlds: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
    emu, gloo = worlds
    assert emu[0]["comm_counts"] == gloo[0]["comm_counts"] != []
