"""Attention probes: which SDPA kernel PyTorch selects and runs, and whether FlexAttention is
supported.

An SDPA backend counts only when PyTorch's own selection picks it: under
``sdpa_kernel(SDPBackend.X)`` the probe asks ``torch._fused_sdp_choice`` (the function
``scaled_dot_product_attention`` dispatches through, which runs every ``can_use_*`` check of
sdp_utils.cpp) and runs the call only when X was chosen; a "falling back to math" warning during
the call is "not supported" too. On MPS there is no selection (``_fused_sdp_choice`` has no MPS
kernel: attention always runs ``_scaled_dot_product_attention_math_for_mps``), and on XPU the
memory-efficient backend has no kernel and falls back to math: neither is a success of the
backend that was asked for.
"""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any

from pytest_devcaps.model import Level, ProbeOutcome
from pytest_devcaps.probes import compile as compile_probes
from pytest_devcaps.probes import rule_gate
from pytest_devcaps.probes.base import MAX_MESSAGE, device_type, ran, refused, unknown, unsupported

# Fused kernels differ in the dtypes they take (GPU flash wants half precision, CPU takes all).
_DTYPES = ("float16", "bfloat16", "float32")
#: SDPBackend values (torch/nn/attention/__init__.py SDPBackend, c10 sdp::SDPBackend).
BACKENDS = {-1: "ERROR", 0: "MATH", 1: "FLASH_ATTENTION", 2: "EFFICIENT_ATTENTION",
            3: "CUDNN_ATTENTION", 4: "OVERRIDEABLE"}
_FALLBACK_WORDS = ("fall back", "falling back", "fallback", "not used because")


def is_fallback_warning(message: str) -> bool:
    """A warning saying the requested kernel was not used (so another path ran)."""
    lowered = message.lower()
    return any(words in lowered for words in _FALLBACK_WORDS)


def judge_choice(backend: str, chosen: int | BaseException, where: str) -> ProbeOutcome | None:
    """What PyTorch's selection said (pure: tests feed it directly); None when it chose
    ``backend``, so the call itself decides."""
    kind = where.split(":", 1)[0].split(" ", 1)[0]
    if isinstance(chosen, NotImplementedError):
        return unsupported(f"PyTorch selects no fused SDPA backend on {kind} (_fused_sdp_choice "
                           f"has no {kind} kernel), so scaled_dot_product_attention runs its math "
                           f"path there, not SDPBackend.{backend}")
    if isinstance(chosen, BaseException):
        return refused(f"PyTorch's SDPA selection (_fused_sdp_choice) under SDPBackend.{backend} "
                       f"on {where}", chosen)
    if BACKENDS.get(chosen) != backend:
        return unsupported(f"PyTorch's SDPA selection (_fused_sdp_choice) picked "
                           f"{BACKENDS.get(chosen, chosen)} instead of SDPBackend.{backend} on {where}")
    return None


def judge_run(backend: str, messages: list[str], where: str) -> ProbeOutcome:
    """The chosen backend's call ran: a fallback warning means its kernel did not."""
    fallback = next((m for m in messages if is_fallback_warning(m)), None)
    if fallback is not None:
        return unsupported(f"SDPBackend.{backend} fell back on {where}: {fallback[:MAX_MESSAGE]}")
    return ran(f"SDPBackend.{backend} chosen by _fused_sdp_choice and ran on {where}")


def _sdpa(device: str, backend_name: str) -> ProbeOutcome:
    import torch

    backend = getattr(torch.nn.attention.SDPBackend, backend_name, None)
    if backend is None:
        return unsupported(f"torch {torch.__version__} has no SDPBackend.{backend_name}")
    first: ProbeOutcome | None = None
    for dtype_name in _DTYPES:
        outcome = _one_dtype(torch, backend, backend_name, device, dtype_name)
        if outcome.level is Level.NATIVE:
            return outcome
        first = first or outcome
    assert first is not None
    return first


def _one_dtype(torch: Any, backend: Any, backend_name: str, device: str,
               dtype_name: str) -> ProbeOutcome:
    """Select, then (if ``backend`` was selected) run, one SDPA call in ``dtype_name``."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    where = f"{device} ({dtype_name})"
    caught: list[warnings.WarningMessage] = []
    try:
        q = torch.randn(1, 2, 16, 64, device=device, dtype=getattr(torch, dtype_name))
        with warnings.catch_warnings(record=True) as caught, sdpa_kernel(backend):
            warnings.simplefilter("always")
            try:
                chosen: int | BaseException = int(torch._fused_sdp_choice(q, q, q))
            except Exception as exc:
                chosen = exc
            verdict = judge_choice(backend_name, chosen, where)
            if verdict is not None:
                return _with_hint(verdict, caught)
            out = F.scaled_dot_product_attention(q, q, q)
        finite = bool(torch.isfinite(out).all().item())
    except Exception as exc:
        return _with_hint(refused(f"scaled_dot_product_attention under SDPBackend.{backend_name} "
                                  f"on {where}", exc), caught)
    if not finite:
        return unknown(f"SDPBackend.{backend_name} on {where} returned non-finite values")
    return judge_run(backend_name, [str(w.message) for w in caught], where)


def _with_hint(outcome: ProbeOutcome, caught: list[warnings.WarningMessage]) -> ProbeOutcome:
    """torch explains why a fused kernel was rejected in warnings: keep the first one."""
    hint = next((str(w.message).strip().splitlines()[0] for w in caught
                 if str(w.message).strip()), "")
    if not hint or outcome.level is not Level.UNSUPPORTED:
        return outcome
    return unsupported(f"{outcome.reason} (torch warned: {hint[:MAX_MESSAGE]})")


def probe_flash(device: str) -> ProbeOutcome:
    return _sdpa(device, "FLASH_ATTENTION")


def probe_mem_efficient(device: str) -> ProbeOutcome:
    return _sdpa(device, "EFFICIENT_ATTENTION")


def probe_cudnn(device: str) -> ProbeOutcome:
    return _sdpa(device, "CUDNN_ATTENTION")


def probe_flex(device: str) -> ProbeOutcome:
    """PyTorch's FlexAttention platform check, answered statically: compiling a FlexAttention
    kernel costs far more than a probe may take. The check is
    common_device_type.IS_FLEX_ATTENTION_*_PLATFORM_SUPPORTED, which the ``attention.flex``
    vendor rules mirror (:func:`rule_gate.rule_gate`); the compiler it needs is asked of the
    compile probes (Triton on GPUs, a C++ compiler on CPU)."""
    if importlib.util.find_spec("torch.nn.attention.flex_attention") is None:
        return unsupported("this torch has no torch.nn.attention.flex_attention")
    gate = rule_gate.rule_gate("attention.flex", device)
    if gate.allowed is False:
        return unsupported(gate.cited())
    kind = device_type(device)
    needs = compile_probes.probe_triton if kind in ("cuda", "xpu") else compile_probes.probe_inductor
    compiler = needs(device)
    if compiler.level is not Level.NATIVE:
        return ProbeOutcome(compiler.level, f"FlexAttention compiles its kernels, but: "
                                            f"{compiler.reason}")
    if gate.allowed is None:
        return unknown(f"{gate.reason}; the compiler is there ({compiler.reason})")
    return ran(f"{gate.reason}; {compiler.reason}")
