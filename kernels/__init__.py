"""Fused scaled-GEMM kernels: ``scaled_mm`` with a fp32 epilogue and fused reductions.

``from devcaps_kernels import scaled_mm, Reduce, epilogue as ep``. Triton is optional: it is
imported only when the ``triton`` backend runs.
"""

from __future__ import annotations

from . import epilogue
from .api import BACKENDS, choose_backend, last_backend, scaled_mm
from .epilogue import EpiOp
from .reductions import Reduce

__all__ = ["BACKENDS", "EpiOp", "Reduce", "choose_backend", "epilogue", "last_backend",
           "scaled_mm"]
