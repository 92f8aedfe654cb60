"""Device-generic FSDP2 (``fully_shard``) suite: ``pytest --pyargs pytest_devcaps.suites.fsdp``.

Runs on any device that has a distributed backend (cpu/gloo, cuda/nccl, xpu/xccl, hpu/hccl).
Every area checks parity with a replicated reference (same init, same data, grads averaged
across ranks), loss by loss and parameter by parameter. Rank bodies are module-level
functions run through the ``distributed`` fixture; related cases share one spawned world.

Multi-node (or pre-launched) worlds: ``torchrun --nproc-per-node N -m pytest --pyargs
pytest_devcaps.suites.fsdp`` runs every body in-process on each rank; cases written for another
world size skip with the reason. Accelerator-only parts (peak memory, overlap) are gated by the
capabilities ``runtime.memory_stats``, ``runtime.streams`` and ``runtime.events``; mixed
precision by ``dtype.bf16``.
"""
