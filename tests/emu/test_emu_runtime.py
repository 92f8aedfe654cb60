"""emu's streams, events and allocator statistics, measured in one fresh interpreter with two
emu devices (what torch.Stream / torch.Event / torch.accelerator and torch.emu answer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.emu._emu import emu_environ, run_json

SCRIPT = r'''
import gc, json, time
import torch
import torch.nn as nn

out = {}
emu = torch.emu

# ---- streams
default = emu.current_stream()
a, b = torch.Stream("emu"), emu.Stream(priority=-1)
out["stream_ids"] = [default.stream_id, a.stream_id, b.stream_id]
out["stream_types"] = [type(emu.Stream()).__name__, isinstance(emu.Stream(), torch.Stream),
                       type(emu.Event()).__name__]
a.record_event(emu.Event()); emu.current_stream().wait_event(a.record_event())
on_one = emu.Stream(1)
with emu.stream(on_one):
    inside = [emu.current_device(), emu.current_stream(1).stream_id,
              torch.accelerator.current_stream(1).stream_id]
    with emu.stream(on_one):
        nested = emu.current_stream(1).stream_id
    after_nested = emu.current_stream(1).stream_id
out["context"] = {"inside": inside, "nested": nested, "after_nested": after_nested,
                  "after": [emu.current_device(), emu.current_stream(1).stream_id],
                  "on_one": on_one.stream_id}
emu.set_stream(a)
out["set_stream"] = [emu.current_stream().stream_id, torch.accelerator.current_stream().stream_id]
emu.set_stream(emu.default_stream())
with a:  # torch.Stream's own context manager reaches the same guard
    x = torch.ones(8, device="emu") * 2
b.wait_stream(a)
b.synchronize()
out["ordered"] = [float(x.sum()), a.query(), b.query(), emu.current_stream().stream_id]
pool = {torch.Stream("emu").stream_id for _ in range(4)}
out["new_streams_distinct"] = len(pool) == 4

# ---- events
start, end = emu.Event(enable_timing=True), emu.Event(enable_timing=True)
start.record(); time.sleep(0.05); end.record(); end.synchronize()
out["elapsed_ms"] = start.elapsed_time(end)
plain = emu.Event(); plain.record()
errors = {}
for name, fn in {"untimed": lambda: plain.elapsed_time(end),
                 "unrecorded": lambda: emu.Event(enable_timing=True).elapsed_time(end)}.items():
    try:
        fn(); errors[name] = None
    except (RuntimeError, ValueError) as exc:  # torch checks the flags first (ValueError)
        errors[name] = f"{type(exc).__name__}: {exc}"
out["event_errors"] = errors
out["event_query"] = plain.query()

# ---- allocator statistics
gc.collect()
base0, base1 = emu.memory_allocated(0), emu.memory_allocated(1)
emu.reset_peak_memory_stats(1)
big = torch.empty(3 << 20, dtype=torch.uint8, device="emu:1")     # 3 MiB: the large pool
small = torch.empty(1000, dtype=torch.float32, device="emu:1")    # 4000 B: the small pool
stats = emu.memory_stats(1)
out["allocated"] = [emu.memory_allocated(0) - base0, emu.memory_allocated(1) - base1]
out["pools"] = [stats["allocated_bytes.large_pool.current"],
                stats["allocated_bytes.small_pool.current"]]
out["reserved_equals_allocated"] = emu.memory_reserved(1) == emu.memory_allocated(1)
out["accelerator_agrees"] = (torch.accelerator.memory_allocated(1) == emu.memory_allocated(1)
                             and dict(torch.accelerator.memory_stats(1)) == dict(stats))
del big
gc.collect()
out["after_free"] = [emu.memory_allocated(1) - base1, emu.max_memory_allocated(1) - base1]
emu.reset_peak_memory_stats(1)
out["peak_after_reset"] = emu.max_memory_allocated(1) - base1
storage_owner = torch.ones(1 << 18, device="emu:1")               # 1 MiB
before = emu.memory_allocated(1)
storage_owner.untyped_storage().resize_(0)                        # FSDP frees this way
out["resize_freed"] = before - emu.memory_allocated(1)
free, total = emu.mem_get_info(1)
out["mem_info"] = [0 < free <= total, total]
out["stat_names_sorted"] = list(stats) == sorted(stats)
out["counts"] = [stats["allocation.all.current"], stats["num_device_alloc"] >= 2]

# ---- RNG state: a (seed, offset) pair naming a position of the CPU generator
torch.manual_seed(7)
state = emu.get_rng_state()
first = torch.rand(3, device="emu").tolist()
emu.set_rng_state(state)
out["rng_replays"] = torch.rand(3, device="emu").tolist() == first
out["rng_layout"] = [str(state.dtype), state.numel(), state[:8].view(torch.int64).item() == 7]
with torch.testing._utils.freeze_rng_state():
    frozen = torch.rand(3, device="emu").tolist()
out["rng_frozen_replays"] = torch.rand(3, device="emu").tolist() == frozen
def draws_at(offset):
    moved = state.clone()
    moved[8:] = torch.tensor([offset], dtype=torch.int64).view(torch.uint8)
    emu.set_rng_state(moved)
    return torch.rand(3, device="emu").tolist()
base = state[8:].view(torch.int64).item()
out["rng_offsets"] = [draws_at(base + 4) == draws_at(base + 4), draws_at(base + 4) != draws_at(base + 8),
                      draws_at(base + 4) != first]
try:
    emu.set_rng_state(torch.get_rng_state()); out["rng_cpu_state"] = None
except Exception as exc:
    out["rng_cpu_state"] = f"{type(exc).__name__}: {exc}"

# ---- module conversion keeps parameters and ties (Module._apply's shallow-copy test)
m = nn.Linear(2, 2); w = m.weight
tied = nn.Sequential(nn.Embedding(4, 3), nn.Linear(3, 4, bias=False)); tied[1].weight = tied[0].weight
m.to("emu"); tied.to("emu")
out["to_keeps"] = [m.weight is w, tied[0].weight is tied[1].weight, str(w.device)]

# ---- refusals
refusals = {}
for name, fn in {"stats": lambda: emu.memory_stats(5), "stream": lambda: emu.current_stream(5),
                 "sync": lambda: emu.synchronize(5)}.items():
    try:
        fn(); refusals[name] = None
    except Exception as exc:
        refusals[name] = f"{type(exc).__name__}: {exc}"
out["refusals"] = refusals
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def measured(emu_build: Path) -> dict[str, Any]:
    result: dict[str, Any] = run_json(SCRIPT, emu_environ(emu_build.parent.parent, devices=2))
    return result


def test_streams_are_ids_with_a_current_one_per_device(measured: dict[str, Any]) -> None:
    default, first, second = measured["stream_ids"]
    assert default == 0 and len({default, first, second}) == 3
    assert measured["stream_types"] == ["Stream", True, "Event"]
    context = measured["context"]
    assert context["inside"] == [1, context["on_one"], context["on_one"]]
    assert context["nested"] == context["after_nested"] == context["on_one"]
    assert context["after"] == [0, 0]  # device and stream restored
    assert measured["set_stream"] == [first, first]
    assert measured["ordered"] == [16.0, True, True, 0]
    assert measured["new_streams_distinct"]


def test_events_time_the_host_clock_and_refuse_as_cuda_does(measured: dict[str, Any]) -> None:
    assert measured["elapsed_ms"] >= 45.0  # a 50 ms sleep between the two records
    errors = measured["event_errors"]
    assert "enable_timing=True" in errors["untimed"]
    assert errors["unrecorded"] is not None
    assert measured["event_query"] is True


def test_allocator_counts_what_each_device_holds(measured: dict[str, Any]) -> None:
    assert measured["allocated"] == [0, (3 << 20) + 4000]
    assert measured["pools"] == [3 << 20, 4000]
    assert measured["reserved_equals_allocated"] and measured["accelerator_agrees"]
    assert measured["after_free"] == [4000, (3 << 20) + 4000]  # the peak stays until reset
    assert measured["peak_after_reset"] == 4000
    assert measured["resize_freed"] == 1 << 20
    assert measured["mem_info"][0] and measured["mem_info"][1] > 0
    assert measured["stat_names_sorted"]
    assert measured["counts"][1]


def test_rng_state_is_a_seed_and_offset_pair_that_replays(measured: dict[str, Any]) -> None:
    """The Philox layout DTensor reads (16 uint8: seed, offset); a state handed out replays the
    same draws (also through freeze_rng_state); other offsets are streams: the same offset the
    same draws, another offset others."""
    assert measured["rng_layout"] == ["torch.uint8", 16, True]
    assert measured["rng_replays"] and measured["rng_frozen_replays"]
    assert measured["rng_offsets"] == [True, True, True]
    assert measured["rng_cpu_state"] == ("DevcapsValueError: emu's RNG state is 16 uint8 values "
                                         "(seed, offset), as torch.emu.get_rng_state() returns; "
                                         "got a torch.uint8 tensor of 5056 elements")


def test_to_emu_keeps_parameters_and_ties(measured: dict[str, Any]) -> None:
    assert measured["to_keeps"] == [True, True, "emu:0"]


def test_out_of_range_indices_are_refused_with_the_count(measured: dict[str, Any]) -> None:
    for refusal in measured["refusals"].values():
        assert refusal is not None and "out of range" in refusal and "2 emu device(s)" in refusal


BOUNDED = r'''
import json
import torch
import torch.nn as nn

out = {}
emu = torch.emu
out["info"] = [list(emu.mem_get_info(0)), list(torch.accelerator.get_memory_info(1))]
# a GPU test's way to fill a device: ask what is free, take all but a margin
free = emu.mem_get_info(0)[0]
fill = torch.empty((free - (1 << 20)) // 4, dtype=torch.float32, device="emu:0")
out["after_fill"] = emu.mem_get_info(0)[0] <= (1 << 20)
try:
    torch.empty(2 << 20, dtype=torch.uint8, device="emu:0"); out["oom"] = None
except torch.OutOfMemoryError as exc:
    out["oom"] = str(exc)
out["other_device"] = torch.ones(2 << 20, dtype=torch.uint8, device="emu:1").sum().item()
del fill
out["after_free"] = emu.mem_get_info(0)[0] == emu.mem_get_info(0)[1]

# convolution: at::convolution's overrideable path, forward and backward, against the CPU
torch.manual_seed(0)
results = []
for conv, shape in ((nn.Conv2d(3, 4, 3, padding=1, groups=1), (2, 3, 8, 8)),
                    (nn.Conv1d(4, 4, 3, stride=2, groups=2), (2, 4, 9)),
                    (nn.ConvTranspose2d(3, 2, 3, stride=2, bias=False), (1, 3, 5, 5))):
    x = torch.randn(*shape, requires_grad=True)
    conv(x).square().sum().backward()
    grads = [x.grad] + [p.grad for p in conv.parameters()]
    on_emu = type(conv)(conv.in_channels, conv.out_channels, conv.kernel_size, stride=conv.stride,
                        padding=conv.padding, groups=conv.groups, bias=conv.bias is not None).to("emu")
    on_emu.load_state_dict(conv.state_dict())
    xe = x.detach().to("emu").requires_grad_(True)
    y = on_emu(xe)
    y.square().sum().backward()
    emu_grads = [xe.grad] + [p.grad for p in on_emu.parameters()]
    results.append([str(y.device), bool(torch.allclose(y.cpu(), conv(x).detach(), atol=1e-5)),
                    all(torch.allclose(a.cpu(), b, atol=1e-4) for a, b in zip(emu_grads, grads))])
out["conv"] = results
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def bounded(emu_build: Path) -> dict[str, Any]:
    env = {**emu_environ(emu_build.parent.parent, devices=2), "PYTEST_DEVCAPS_EMU_MEMORY": "64MiB"}
    result: dict[str, Any] = run_json(BOUNDED, env)
    return result


def test_each_device_holds_its_memory_and_refuses_more_as_a_gpu_does(bounded: dict[str, Any]) -> None:
    """``PYTEST_DEVCAPS_EMU_MEMORY=64MiB``: mem_get_info says 64 MiB per device (torch.accelerator
    the same); filled as GPU tests fill a device, the next allocation raises
    torch.OutOfMemoryError naming the device and the setting, and the other device is untouched."""
    assert bounded["info"] == [[64 << 20, 64 << 20], [64 << 20, 64 << 20]]
    assert bounded["after_fill"] is True
    assert bounded["oom"] is not None and "emu: out of memory: tried to allocate 2097152 bytes on emu:0" in bounded["oom"]
    assert "PYTEST_DEVCAPS_EMU_MEMORY" in bounded["oom"]
    assert bounded["other_device"] == 2 << 20
    assert bounded["after_free"] is True


def test_convolution_runs_on_emu_forward_and_backward(bounded: dict[str, Any]) -> None:
    """Conv2d, a grouped strided Conv1d and a ConvTranspose2d without bias: outputs on emu, equal
    to the CPU's, and so are the gradients of the input, weight and bias."""
    assert bounded["conv"] == [["emu:0", True, True]] * 3
