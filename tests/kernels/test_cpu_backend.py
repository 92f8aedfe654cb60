"""CPU-backend specifics: its worker threads survive a fork (DataLoader-style workers)."""

from __future__ import annotations

import multiprocessing

import pytest
import torch

from devcaps_kernels import Reduce, scaled_mm


def _child(queue) -> None:
    a, b = torch.ones(300, 64), torch.ones(64, 128)
    y, (total,) = scaled_mm(a, b, reductions=[Reduce("sum")], backend="cpu")
    queue.put(float(total.sum()))


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork here")
def test_worker_pool_after_fork():
    scaled_mm(torch.ones(300, 64), torch.ones(64, 128), reductions=[Reduce("sum")], backend="cpu")
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    process = ctx.Process(target=_child, args=(queue,))
    process.start()
    process.join(timeout=60)
    if process.is_alive():
        process.kill()
        pytest.fail("scaled_mm hung in a forked child (stale worker pool)")
    assert process.exitcode == 0
    assert queue.get(timeout=5) == 300 * 128 * 64
