"""Device-generic FSDP2 (``fully_shard``) suite: ``pytest --pyargs pytest_devcaps.suites.fsdp``.

Runs on any device that has a distributed backend (cpu/gloo, cuda/nccl, xpu/xccl, hpu/hccl).
Every area checks parity with a replicated reference (same init, same data, grads averaged
across ranks), loss by loss and parameter by parameter. Rank bodies are module-level
functions run through the ``distributed`` fixture; related cases share one spawned world.
"""
