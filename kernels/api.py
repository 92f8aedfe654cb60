"""``scaled_mm``: validation, backend choice and the record of which backend ran."""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from .epilogue import EpiOp
from .problem import build_problem
from .reductions import Reduce
from .triton_support import triton_drives

#: Answers "can the ``triton`` backend run on this device?" for ``backend="auto"``.
TritonAvailable = Callable[[torch.device], bool]

BACKENDS = ("auto", "triton", "cpu", "reference")
_last_backend: str | None = None


def last_backend() -> str | None:
    """Name of the backend the last ``scaled_mm`` call in this process used (None before)."""
    return _last_backend


def choose_backend(device: torch.device, *,
                   triton_available: TritonAvailable | None = None) -> str:
    """What ``backend="auto"`` runs on ``device``: ``triton`` where ``triton_available(device)``
    (default :func:`~devcaps_kernels.triton_support.triton_drives`: Triton's active driver runs
    on ``device.type``), else ``cpu`` on CPU, else ``reference``."""
    if (triton_available or triton_drives)(device):
        return "triton"
    if device.type == "cpu":
        return "cpu"
    return "reference"


def scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor | float | None = None,
    scale_b: torch.Tensor | float | None = None,
    *,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
    epilogue: Sequence[EpiOp] = (),
    reductions: Sequence[Reduce] = (),
    store_output: bool = True,
    backend: str = "auto",
    triton_available: TritonAvailable | None = None,
) -> tuple[torch.Tensor | None, tuple[torch.Tensor, ...]]:
    """Scaled GEMM with a fused fp32 epilogue and fp32 row/group reductions.

    Returns ``(y, reductions)``. The semantics are those of the ``reference`` backend::

        acc = a.float() @ b.float()                  # [M, K] @ [K, N], fp32
        acc = acc * scale_a * scale_b                # scalar, [M, 1] / [1, N]; None = 1
        acc = acc + bias.float()                     # [N]
        for op in epilogue: acc = op(acc)            # in order, fp32
        y = acc.to(out_dtype)                        # None when store_output=False
        src = y.float() if r.source == "output" else acc
        r(src) over rows or groups of r.group columns -> fp32 [M] or [M, N // group]

    ``a``/``b``: fp8 (e4m3fn, e5m2, fnuz), bf16, fp16 or fp32, any strides, one device.
    ``backend``: ``auto`` (``triton`` where Triton can run on the device, ``cpu`` on CPU, else
    ``reference``; see ``choose_backend``), ``triton``, ``cpu`` or ``reference``; the backend that
    ran is ``last_backend()``. ``auto`` asks torch and Triton only (no probe process, no
    pytest plugin): Triton is installed and its active driver launches on ``a.device.type``.
    ``triton_available``: a predicate ``(device) -> bool`` that replaces that check for
    ``auto`` (e.g. ``lambda d: devcaps.has("compile.triton")`` in a test, or ``lambda d: False``
    to keep Triton out); ignored for an explicit backend.
    Invalid input raises ``TypeError``/``ValueError`` naming what was expected and given.
    """
    global _last_backend
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    p = build_problem(a, b, scale_a, scale_b, bias, out_dtype, epilogue, reductions, store_output)
    name = (choose_backend(p.device, triton_available=triton_available) if backend == "auto"
            else backend)
    if name == "triton":
        from .triton_backend import run_triton

        result = run_triton(p)
    elif name == "cpu":
        if p.device.type != "cpu":
            raise ValueError(f"backend='cpu' needs CPU tensors, got tensors on {p.device}")
        from .cpu import run_cpu

        result = run_cpu(p)
    else:
        from .reference import run_reference

        result = run_reference(p)
    _last_backend = name
    y, reduced = result
    return y, tuple(reduced)
