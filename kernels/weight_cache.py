"""Converted weights, made once per weight tensor and reused while it lives unchanged.

A GEMM backend that needs ``b`` in another dtype (fp8 -> bf16 or fp32, bf16 -> fp32) would
otherwise convert the whole weight on every call (at M = 7, N = K = 4096 that is most of the
call). :func:`converted_weight` keeps the converted ``[N, K]`` copy keyed on the tensor that
owns the memory (``b._base`` for a view, so ``w.t()`` made anew on every call still hits) and
the view's offset, shape and strides, and checks on every hit that the owner is the same live
tensor (a weak reference: ``id`` values are reused) with the same version counter
(``t._version``, shared with its views and bumped by every in-place write) and data pointer.
An entry dies with its tensor; at most :data:`CAPACITY` entries are kept (least recently used
first out), so a model with many weights trades repeated conversions for bounded memory.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

import torch

#: Converted weights kept at most (each is one extra copy of a weight in the compute dtype).
CAPACITY = 8


@dataclass(frozen=True, eq=False)
class _Entry:
    ref: weakref.ref[torch.Tensor]
    stamp: tuple[object, ...]
    converted: torch.Tensor | None  # None: a layout-only copy, asked for once so far


_Key = tuple[object, ...]
_lock = threading.Lock()
_entries: OrderedDict[_Key, _Entry] = OrderedDict()


def _owner(t: torch.Tensor) -> torch.Tensor:
    base = t._base
    return t if base is None else base


def _key(b: torch.Tensor, dtype: torch.dtype) -> _Key:
    return (id(_owner(b)), b.storage_offset(), tuple(b.shape), b.stride(), b.dtype, dtype)


def _stamp(b: torch.Tensor) -> tuple[object, ...]:
    return (b._version, b.data_ptr(), b.device)


def _forget(key: _Key) -> None:
    with _lock:
        _entries.pop(key, None)


def _forgetter(key: _Key) -> Callable[[object], None]:
    return lambda _: _forget(key)


def converted_weight(b: torch.Tensor, dtype: torch.dtype, *, dense: bool = False) -> torch.Tensor:
    """``b`` ([K, N]) as an ``[N, K]`` tensor of ``dtype``: a view when no conversion is needed
    (dense when ``b`` is column-major, as ``torch._scaled_mm`` wants it), else a dense copy
    made once and reused while ``b`` is alive and unmodified. ``dense=True`` asks for the
    dense ``[N, K]`` copy also when only the layout differs (a GEMM with few rows reads the
    whole weight per call, and reads it fastest dense); that copy is made on the second call
    with the same weight, so a one-off call does not pay for a transpose it will not reuse."""
    layout_only = b.dtype == dtype
    if layout_only and (not dense or b.t().is_contiguous()):
        return b.t()
    if b.is_inference():  # no version counter to tell an in-place write: convert every time
        return b.t() if layout_only else b.t().to(dtype, memory_format=torch.contiguous_format)
    owner, key, stamp = _owner(b), _key(b, dtype), _stamp(b)
    with _lock:
        entry = _entries.get(key)
        hit = entry is not None and entry.ref() is owner and entry.stamp == stamp
        if hit:
            _entries.move_to_end(key)
        if hit and entry is not None and entry.converted is not None:
            return entry.converted
    converted = None
    if hit or not layout_only:
        converted = torch.empty(b.shape[1], b.shape[0], dtype=dtype, device=b.device)
        converted.copy_(b.t())
    with _lock:
        _entries[key] = _Entry(weakref.ref(owner, _forgetter(key)), stamp, converted)
        _entries.move_to_end(key)
        while len(_entries) > CAPACITY:
            _entries.popitem(last=False)
    return b.t() if converted is None else converted


def cached_weights() -> int:
    """How many converted weights are held now (for tests and benchmarks)."""
    with _lock:
        return sum(entry.converted is not None for entry in _entries.values())


def clear() -> None:
    """Drop every converted weight."""
    with _lock:
        _entries.clear()
