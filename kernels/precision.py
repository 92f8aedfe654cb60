"""The kernels' fp32 GEMMs at a pinned precision, whatever the process-wide setting says.

``torch.set_float32_matmul_precision("high"/"medium")`` lets cuBLAS run fp32 matmuls in TF32 and
oneDNN in bf16 ("medium" on CPU: ``torch.backends.mkldnn.matmul.fp32_precision == "bf16"``); a
reference computed under it is off by ~0.25 at K=1024 instead of ~5e-5, and would still agree
with a cpu backend that drifted the same way. :func:`fp32_matmul_precision` pins the per-backend
settings torch 2.13 reads (``torch.backends.{cuda,mkldnn}.matmul.fp32_precision``: cuBLAS and
hipBLAS; oneDNN on CPU and XPU) for the duration of a block and restores them after, also when
the block raises.

Thread safety: the settings are process-wide, so the block holds a re-entrant lock: pinned blocks
of different threads run one after the other, a nested block (same thread) may pin another
value and restores the outer one. Threads that do not use this context see the pinned value
while a block runs (worker threads of the cpu backend rely on that).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

import torch

#: torch.backends.<name>.matmul.fp32_precision of every backend that has a fp32 GEMM setting,
#: with the values torch accepts for it (torch/backends/__init__.py: cuda has no bf16).
_BACKENDS = {"cuda": ("ieee", "tf32"), "mkldnn": ("ieee", "tf32", "bf16")}
PRECISIONS = ("ieee", "tf32", "bf16")
_lock = threading.RLock()


def _settings(precision: str) -> list[tuple[Any, str]]:
    """``(matmul settings, value to pin)`` of every backend with ``fp32_precision`` in this torch;
    a backend that cannot take ``precision`` (cuBLAS has no bf16 mode) is pinned to "ieee"."""
    found = []
    for name, accepted in _BACKENDS.items():
        matmul = getattr(getattr(torch.backends, name, None), "matmul", None)
        if matmul is not None and hasattr(matmul, "fp32_precision"):
            found.append((matmul, precision if precision in accepted else "ieee"))
    return found


@contextlib.contextmanager
def fp32_matmul_precision(precision: str = "ieee") -> Iterator[None]:
    """fp32 matmuls inside the block run at ``precision`` ("ieee": true fp32; "bf16": oneDNN may
    round fp32 inputs to bf16 and accumulate in fp32, exact for inputs that are bf16 values)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if torch.compiler.is_compiling():
        # Dynamo traces neither the lock nor writes to torch.backends flags (a graph break, an
        # error under fullgraph=True): a compiled graph's matmuls run at the precision in force
        # when it runs, so a caller that compiles pins it around the compiled call.
        yield
        return
    with _lock:
        settings = _settings(precision)
        if not settings:  # a torch older than the per-backend API: the legacy global switch
            yield from _legacy(precision)
            return
        saved = [(s, s.fp32_precision) for s, _ in settings]
        try:
            for s, value in settings:
                s.fp32_precision = value
            yield
        finally:
            for s, value in reversed(saved):
                s.fp32_precision = value


def _legacy(precision: str) -> Iterator[None]:
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision({"ieee": "highest", "tf32": "high", "bf16": "medium"}[precision])
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved)


def current() -> dict[str, str]:
    """``{backend: fp32_precision}`` as torch reads it now (for tests and diagnostics)."""
    return {name: getattr(torch.backends, name).matmul.fp32_precision for name in _BACKENDS
            if hasattr(getattr(torch.backends, name, None), "matmul")
            and hasattr(getattr(torch.backends, name).matmul, "fp32_precision")}
