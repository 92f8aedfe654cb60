"""Runtime probes: graph capture, streams, events, allocator statistics, pinned memory, the
device-side spin."""

from __future__ import annotations

from typing import Any, Callable

from pytest_devcaps.model import ProbeOutcome
from pytest_devcaps.probes.base import device_type, ran, refused, unknown, unsupported
from pytest_devcaps.runtime import (
    MemoryStatsUnavailableError,
    accelerator_text,
    device_module,
    is_accelerator,
    memory_stats,
)

_GRAPH_METHODS = ("capture_begin", "capture_end", "replay")


def _graph_class(device: str) -> tuple[type | None, str]:
    """The graph-capture class for the device and how it was found."""
    import torch

    graph = getattr(torch.accelerator, "Graph", None)
    if graph is not None and is_accelerator(device_type(device)):
        return graph, "torch.accelerator.Graph"
    module = device_module(device_type(device))
    for name in sorted(dir(module)) if module is not None else ():
        candidate = getattr(module, name, None)
        if (isinstance(candidate, type) and name.endswith("Graph")
                and all(hasattr(candidate, m) for m in _GRAPH_METHODS)):
            return candidate, f"torch.{device_type(device)}.{name}"
    return None, ""


def probe_graphs(device: str) -> ProbeOutcome:
    """Capture ``x += 1`` on a side stream, replay it once, check it ran exactly once more."""
    import torch

    graph_class, found = _graph_class(device)
    kind = device_type(device)
    if graph_class is None:
        return unsupported(
            f"no graph capture for {kind}: torch.accelerator.Graph serves the accelerator "
            f"({accelerator_text()}) and torch.{kind} has no Graph class"
        )
    try:
        stream = torch.Stream(device=device)
        with stream:  # capture is not allowed on the default stream; x is made on it too
            x = torch.zeros(8, device=device)
            x.add_(1)  # warm-up before capture
            graph = graph_class()
            graph.capture_begin()
            x.add_(1)
            graph.capture_end()
        stream.synchronize()
        before = x[0].item()
        graph.replay()
        after = x[0].item()  # .item() synchronizes the current stream
    except Exception as exc:
        return refused(f"graph capture with {found}", exc)
    if after - before != 1:
        return unknown(f"{found} replay changed x by {after - before}, expected 1")
    return ran(f"{found} captured and replayed on {device}")


def probe_streams(device: str) -> ProbeOutcome:
    """Work on one stream, a second stream waits for it: needs real, ordered streams."""
    import torch

    try:
        producer = torch.Stream(device=device)
        consumer = torch.Stream(device=device)
        with producer:  # everything is made on the streams: no race with the default stream
            x = torch.ones(64, device=device)
            y = x * 2
        consumer.wait_stream(producer)
        with consumer:
            z = y + 1
        consumer.synchronize()
        value = z[0].item()
    except Exception as exc:
        return refused("torch.Stream work + wait_stream", exc)
    if value != 3:
        return unknown(f"work ordered across two streams gave {value}, expected 3")
    return ran(f"torch.Stream: two ordered streams on {device}")


def probe_events(device: str) -> ProbeOutcome:
    """Record two timing events around a matmul on the current stream and read the elapsed time.

    No side stream: a device with events but a single queue (MPS) has them too. torch.Event
    first, then the device module's own Event class (torch.mps.Event).
    """
    import torch

    first_error: BaseException | None = None
    for name, make in _event_classes(torch, device):
        try:
            start, end = make(), make()
            x = torch.ones(64, 64, device=device)
            start.record()
            x = x @ x
            end.record()
            end.synchronize()
            elapsed = start.elapsed_time(end)
        except Exception as exc:
            first_error = first_error or exc
            continue
        return ran(f"{name} timed work on {device} ({elapsed:.3f} ms)")
    assert first_error is not None
    return refused("torch.Event record/synchronize/elapsed_time", first_error)


def _event_classes(torch: Any, device: str) -> list[tuple[str, Callable[[], Any]]]:
    kind = device_type(device)
    found: list[tuple[str, Callable[[], Any]]] = [
        ("torch.Event", lambda: torch.Event(device=device, enable_timing=True))]
    module = device_module(kind) if is_accelerator(kind) else None
    event = getattr(module, "Event", None)
    if event is not None and event is not torch.Event:
        found.append((f"torch.{kind}.Event", lambda: event(enable_timing=True)))
    return found


def probe_memory_stats(device: str) -> ProbeOutcome:
    """Does :func:`pytest_devcaps.runtime.memory_stats`, the helper tests call, work here?"""
    import torch

    kind = device_type(device)
    try:
        keep = torch.empty(1024, device=device)
        stats = memory_stats(device)
        del keep
    except MemoryStatsUnavailableError:
        return unsupported(
            f"{kind} keeps no allocator statistics: torch.{kind} has no memory_stats and "
            f"torch.accelerator.memory serves {accelerator_text()}"
        )
    except Exception as exc:
        return refused("memory_stats", exc)
    if not stats:
        return unsupported(f"memory_stats returned no statistics for {device}")
    return ran(f"memory_stats reports {len(stats)} statistics for {device}")


def probe_pinned_memory(device: str) -> ProbeOutcome:
    import torch

    if not is_accelerator(device_type(device)):
        return unsupported(
            f"pinned host memory speeds copies to the accelerator; {device_type(device)} is not "
            f"the accelerator ({accelerator_text()})"
        )
    try:
        host = torch.ones(1024, pin_memory=True)  # devcaps: allow[DC012]
        pinned = host.is_pinned()
        copied = host.to(device, non_blocking=True)
        value = copied.sum().item()
    except Exception as exc:
        return refused("torch.ones(pin_memory=True) + non_blocking copy", exc)
    if not pinned:
        return unsupported("torch.ones(pin_memory=True) returned an unpinned tensor")
    if value != 1024:
        return unknown(f"non_blocking copy from pinned memory gave sum {value}, expected 1024")
    return ran(f"pinned host memory and non_blocking copy to {device}")


def probe_sleep(device: str) -> ProbeOutcome:
    """``torch.<type>._sleep(cycles)`` queues a spin on the current stream: the host returns
    before it ends (what tests that stand it in for kernel time need), and timing events on
    the device see it take longer than the host did to queue it."""
    import time

    import torch

    kind = device_type(device)
    spin = getattr(device_module(kind), "_sleep", None)
    if spin is None:
        return unsupported(f"torch.{kind} has no _sleep: no device-side spin on {kind}")
    try:
        start = torch.Event(device=device, enable_timing=True)
        end = torch.Event(device=device, enable_timing=True)
        start.record()
        began = time.perf_counter()
        spin(50_000_000)
        queued_ms = (time.perf_counter() - began) * 1000
        end.record()
        end.synchronize()
        spun_ms = start.elapsed_time(end)
    except Exception as exc:
        return refused(f"torch.{kind}._sleep timed with torch.Event", exc)
    if spun_ms <= queued_ms:
        return unsupported(f"torch.{kind}._sleep blocked the host ({queued_ms:.2f} ms to queue, "
                           f"{spun_ms:.2f} ms on the device): not a spin queued on a stream")
    return ran(f"torch.{kind}._sleep spun {spun_ms:.2f} ms on {device}, queued in {queued_ms:.2f} ms")
