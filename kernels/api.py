"""``scaled_mm``: validation, backend choice and the record of which backend ran."""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from .epilogue import EpiOp
from .problem import Problem, build_problem
from .reductions import Reduce
from .triton_support import triton_drives

#: Answers "can the ``triton`` backend run on this device?" for ``backend="auto"``.
TritonAvailable = Callable[[torch.device], bool]

BACKENDS = ("auto", "triton", "cpu", "reference")


class BackendUsed(str):
    """The name of the backend a call ran (it compares equal to the name: ``last_backend() ==
    "cpu"``), plus ``reason``: why it ran a slower or different path than usual, "" when it
    did not (e.g. ``"oneDNN post-ops unavailable: ...; ran torch.mm and eager epilogues"``)."""

    reason: str

    def __new__(cls, name: str, reason: str = "") -> BackendUsed:
        self = super().__new__(cls, name)
        self.reason = reason
        return self

    def __repr__(self) -> str:
        return f"{str.__repr__(self)} ({self.reason})" if self.reason else str.__repr__(self)


# (name, reason) of the last call: plain strings, so that a call traced by torch.compile
# (fullgraph) records it as a constant instead of constructing a str subclass in the graph.
_last_backend: tuple[str, str] | None = None


def last_backend() -> BackendUsed | None:
    """The backend the last ``scaled_mm`` call in this process used (None before any call):
    its name, with ``.reason`` saying why it fell back to a slower path ("" if it did not)."""
    return None if _last_backend is None else BackendUsed(*_last_backend)


def choose_backend(device: torch.device, *,
                   triton_available: TritonAvailable | None = None) -> str:
    """What ``backend="auto"`` runs on ``device``: ``triton`` where Triton can run there
    (:func:`~devcaps_kernels.triton_support.triton_drives`: Triton's active driver runs on
    ``device.type``) and ``triton_available(device)`` agrees, else ``cpu`` on CPU, else
    ``reference``.

    The predicate only narrows: it can keep Triton out, never bring it in where Triton cannot
    run (a predicate that says yes for CPU tensors still gets ``cpu``, not a Triton error), and
    it is asked only where Triton could run."""
    if triton_drives(device) and (triton_available is None or triton_available(device)):
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
    fast_accum: bool = False,
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
        r(src) over rows or groups of r.group columns -> fp32 [M] or [M, ceil(N / group)]

    ``a``/``b``: fp8 (e4m3fn, e5m2, fnuz), bf16, fp16 or fp32, any strides, one device.
    ``bias`` and epilogue operands: bf16, fp16, fp32 or fp64 (fp8 is refused: it needs a scale).
    ``fast_accum``: ``False`` (default) keeps the fp32 accumulator above on every backend.
    ``True`` lets a backend trade accumulator precision for speed, as
    ``torch._scaled_mm(use_fast_accum=True)`` does: the Triton kernel leaves native fp8 products
    in the tensor cores' reduced-precision accumulator where that is Triton's default (NVIDIA
    sm_90), and the ``cpu`` backend may round the GEMM result to bf16 before scales, bias and
    epilogue when the inputs are exact in bf16 (one more rounding, ~1 bf16 ulp). ``reference``
    ignores it.
    ``backend``: ``auto`` (``triton`` where Triton can run on the device, ``cpu`` on CPU, else
    ``reference``; see ``choose_backend``), ``triton``, ``cpu`` or ``reference``; the backend that
    ran is ``last_backend()``. ``auto`` asks torch and Triton only (no probe process, no
    pytest plugin): Triton is installed and its active driver launches on ``a.device.type``.
    ``triton_available``: a predicate ``(device) -> bool`` that ``auto`` asks on top of that
    check, where Triton could run (e.g. ``lambda d: devcaps.has("compile.triton")`` in a test,
    or ``lambda d: False`` to keep Triton out): it narrows the choice, never widens it; ignored
    for an explicit backend.
    Invalid input raises ``TypeError``/``ValueError`` naming what was expected and given.
    """
    global _last_backend
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if not isinstance(fast_accum, bool):
        raise TypeError(f"fast_accum must be a bool, got {type(fast_accum).__name__}")
    p = build_problem(a, b, scale_a, scale_b, bias, out_dtype, epilogue, reductions, store_output,
                      fast_accum)
    name = (choose_backend(p.device, triton_available=triton_available) if backend == "auto"
            else backend)
    y, reduced, reason = _run(name, p, auto=backend == "auto")
    _last_backend = (name, reason)
    return y, tuple(reduced)


def _run(name: str, p: Problem, *, auto: bool) -> tuple[torch.Tensor | None, tuple[torch.Tensor, ...], str]:
    """Run backend ``name`` on ``p``; returns ``(y, reductions, reason)``."""
    if name == "triton":
        from .triton_backend import run_triton

        y, reduced = run_triton(p)
        return y, reduced, ""
    if name == "cpu":
        if p.device.type != "cpu":
            raise ValueError(f"backend='cpu' needs CPU tensors, got tensors on {p.device}")
        from .cpu_backend import run_cpu

        return run_cpu(p)
    from .reference import run_reference

    y, reduced = run_reference(p)
    reason = (f"Triton does not drive {p.device.type} tensors here, and only CPU has another "
              f"fused backend" if auto and p.device.type != "cpu" else "")
    return y, reduced, reason
