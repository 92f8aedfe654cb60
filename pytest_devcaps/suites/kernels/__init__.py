"""Device-generic suite for the bundled fused scaled-GEMM (``devcaps_kernels.scaled_mm``).

Every backend the device can run (``auto``, ``cpu``, ``triton`` where ``compile.triton`` holds,
``reference``) is checked against the reference semantics on fresh random data: ragged shapes,
every epilogue op, every reduction kind and source, fp8 where the device supports it, and every
invalid input's error. Run it with ``pytest --pyargs pytest_devcaps.suites.kernels`` or through
``devcaps check``.
"""
