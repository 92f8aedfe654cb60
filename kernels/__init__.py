"""Fused scaled-GEMM kernels: ``scaled_mm`` with a fp32 epilogue and fused reductions.

``from devcaps_kernels import scaled_mm, Reduce, epilogue as ep``. Triton is optional: it is
imported only when the ``triton`` backend runs or ``backend="auto"`` asks it about the
current accelerator's tensors (see ``triton_drives``). The library never imports the
pytest plugin.
"""

from __future__ import annotations

from . import epilogue
from .api import BACKENDS, BackendUsed, TritonAvailable, choose_backend, last_backend, scaled_mm
from .epilogue import EpiOp
from .reductions import Reduce
from .triton_support import triton_drives

__all__ = ["BACKENDS", "BackendUsed", "EpiOp", "Reduce", "TritonAvailable", "choose_backend", "epilogue",
           "last_backend", "scaled_mm", "triton_drives"]
