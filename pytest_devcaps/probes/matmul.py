"""Matmul probes: torch._scaled_mm (fp8 formats; tensorwise, rowwise and block scales),
torch._grouped_mm and torch._int_mm.

Every torch._scaled_mm probe runs the op and reads the outcome against the vendor rule for the
device (:mod:`pytest_devcaps.probes.rule_gate`: the rules mirror PyTorch's own gates), so a
refusal names the check that refused.

A scaled GEMM that runs is also watched through oneDNN's verbose log (:func:`onednn_executions`):
where oneDNN executes an fp8 matmul on its *reference* implementation (``ref:any``; AMX-INT8 CPUs
with torch 2.13: 28.4 s against 6 ms in bf16 at 1024^3), the probe answers ``emulated`` and says
so, instead of leaving "it ran" to read as native.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from typing import Any, Callable, Iterable, Iterator, Sequence

from pytest_devcaps.model import Level, ProbeOutcome
from pytest_devcaps.probes import rule_gate
from pytest_devcaps.probes.base import ran, refused, unknown, unsupported

_N = 16  # _scaled_mm wants every dimension divisible by 16
_BLOCK = 128  # block-scaled shapes: M, N, K multiples of 128
#: An fp8 format and the one it pairs with when the GEMM refuses two of the same (e5m2 x e5m2
#: on CUDA) or routes them elsewhere (same-dtype fnuz to oneDNN on AMX CPUs).
PARTNER = {"float8_e4m3fn": "float8_e5m2", "float8_e5m2": "float8_e4m3fn",
           "float8_e4m3fnuz": "float8_e5m2fnuz", "float8_e5m2fnuz": "float8_e4m3fnuz"}
_DEVICE_FORMATS = ("float8_e4m3fn", "float8_e4m3fnuz")  # OCP, or what gfx942 implements
#: The reason's words for an fp8 GEMM that oneDNN runs on its reference implementation (the
#: vendor rule for AMX-INT8 CPUs in capabilities.yaml says the same).
ONEDNN_REFERENCE = "oneDNN reference kernel: orders of magnitude slower than bf16"


# -- oneDNN's verbose log: which implementation ran ------------------------------------------

@contextlib.contextmanager
def _stdout_to(path: str) -> Iterator[None]:
    """File descriptor 1 (where oneDNN prints, through C stdio) goes to ``path`` meanwhile."""
    saved = os.dup(1)
    try:
        with open(path, "wb") as sink:
            os.dup2(sink.fileno(), 1)
            try:
                yield
            finally:
                _flush_c_stdio()
                os.dup2(saved, 1)
    finally:
        os.close(saved)


def _flush_c_stdio() -> None:
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # no C library to ask (Windows): lines may stay
        pass


def onednn_executions(call: Callable[[], Any]) -> tuple[Any, list[str]]:
    """``call()``'s result and the oneDNN primitive executions it logged (``ONEDNN_VERBOSE``
    lines ``onednn_verbose,v1,primitive,exec,...``); no lines where torch has no oneDNN or
    verbose mode cannot be switched on. What ``call`` raises propagates."""
    import torch

    mkldnn = getattr(torch.backends, "mkldnn", None)
    if mkldnn is None or not hasattr(mkldnn, "verbose") or not mkldnn.is_available():
        return call(), []
    with tempfile.TemporaryDirectory(prefix="devcaps-onednn-") as folder:
        log = os.path.join(folder, "verbose.log")
        try:
            with _stdout_to(log), mkldnn.verbose(mkldnn.VERBOSE_ON):
                result = call()
        except AssertionError:  # "Failed to set MKLDNN into verbose mode": run it unwatched
            return call(), []
        with open(log, encoding="utf-8", errors="replace") as text:
            lines = [line.strip() for line in text if ",primitive,exec," in line]
    return result, lines


def fp8_reference_kernels(lines: Iterable[str]) -> list[str]:
    """The oneDNN executions among ``lines`` that ran a matmul or inner product with fp8 data
    on a reference implementation: ``"matmul ref:any (src:f8_e4m3 wei:f8_e4m3 dst:bf16)"``.

    Verbose fields (oneDNN 3.x): ``onednn_verbose,[v1,]primitive,exec,<engine>,<primitive>,
    <implementation>,<prop_kind>,<memory descriptors>,...``.
    """
    found = []
    for line in lines:
        fields = line.split(",")
        try:
            at = fields.index("exec") + 2  # engine, then the primitive kind
            kind, implementation, descriptors = fields[at], fields[at + 1], fields[at + 3]
        except (ValueError, IndexError):
            continue
        if (kind in ("matmul", "inner_product") and implementation.startswith("ref")
                and "f8_" in descriptors):
            data = " ".join(d.split("::")[0] for d in descriptors.split())
            found.append(f"{kind} {implementation} ({data})")
    return found


def _on_reference_kernel(outcome: ProbeOutcome, kernels: list[str]) -> ProbeOutcome:
    """An op that ran, but through oneDNN's reference fp8 kernel, is emulated."""
    if not kernels or not outcome.level.available:
        return outcome
    return ProbeOutcome(Level.EMULATED, f"{outcome.reason}; {ONEDNN_REFERENCE} "
                                        f"(ONEDNN_VERBOSE: {kernels[0]})")


def first_that_runs(what: str, attempts: Iterable[tuple[str, Callable[[], bool]]],
                    device: str) -> ProbeOutcome:
    """Try each ``(label, attempt)`` until one runs; an attempt returns whether its result was
    right. The first error is the one reported when none runs."""
    first_error: BaseException | None = None
    tried = 0
    for label, attempt in attempts:
        tried += 1
        try:
            correct = attempt()
        except Exception as exc:
            first_error = first_error or exc
            continue
        if not correct:
            return unknown(f"{what} ({label}) ran but gave a wrong result")
        return ran(f"{what} ran with {label} on {device}")
    if first_error is None:
        return unsupported(f"{what}: this torch has none of the dtypes it needs ({tried} tried)")
    return refused(what, first_error)


def scaled_mm_pairs(device: str, pairs: Sequence[tuple[str, str]], *,
                    rowwise: bool = False) -> ProbeOutcome:
    """``I @ 2I`` through torch._scaled_mm for the first (mat1, mat2) fp8 pair that runs;
    ``emulated`` when oneDNN ran it on its reference kernel."""
    import torch

    if not hasattr(torch, "_scaled_mm"):
        return unsupported(f"torch {torch.__version__} has no torch._scaled_mm")
    kernels: list[str] = []

    def attempt(a_dtype: Any, b_dtype: Any) -> bool:
        eye = torch.eye(_N, device=device)
        b = (2 * eye).to(b_dtype).t()  # mat2 column-major, as _scaled_mm requires on GPUs
        if rowwise:
            scale_a, scale_b = torch.ones(_N, 1, device=device), torch.ones(1, _N, device=device)
        else:
            scale_a, scale_b = torch.tensor(1.0, device=device), torch.tensor(1.0, device=device)
        a = eye.to(a_dtype)
        out, lines = onednn_executions(lambda: torch._scaled_mm(
            a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16).float().cpu())
        kernels[:] = fp8_reference_kernels(lines)
        return bool(torch.equal(out, 2 * torch.eye(_N)))

    attempts = [(f"{a} x {b}", functools.partial(attempt, getattr(torch, a), getattr(torch, b)))
                for a, b in pairs if hasattr(torch, a) and hasattr(torch, b)]
    outcome = first_that_runs(f"{'rowwise' if rowwise else 'tensorwise'} _scaled_mm", attempts,
                              device)
    return _on_reference_kernel(outcome, kernels)


def tensorwise_then_rowwise(device: str, pairs: Sequence[tuple[str, str]]) -> ProbeOutcome:
    """Tensorwise scales first; where every pair is refused, rowwise ones, which PyTorch may
    route elsewhere (CPU: only single-element scales go to oneDNN, which has no fnuz types)."""
    tensorwise = scaled_mm_pairs(device, pairs)
    if tensorwise.level is not Level.UNSUPPORTED:
        return tensorwise
    rowwise = scaled_mm_pairs(device, pairs, rowwise=True)
    if not rowwise.level.available:
        return tensorwise
    return ProbeOutcome(rowwise.level, f"{rowwise.reason} (tensorwise scales: {tensorwise.reason})")


def fp8_format(device: str, dtype: str) -> ProbeOutcome:
    """Matrix arithmetic in fp8 format ``dtype``: torch._scaled_mm with it as an input (the
    caller reads the outcome against its capability's rule)."""
    partner = PARTNER[dtype]
    return tensorwise_then_rowwise(device, [(dtype, dtype), (dtype, partner), (partner, dtype)])


def probe_scaled_mm(device: str) -> ProbeOutcome:
    outcome = scaled_mm_pairs(device, [(d, d) for d in _DEVICE_FORMATS])
    return rule_gate.judged("mm.scaled", device, outcome)


def probe_scaled_mm_rowwise(device: str) -> ProbeOutcome:
    outcome = scaled_mm_pairs(device, [(d, d) for d in _DEVICE_FORMATS], rowwise=True)
    return rule_gate.judged("mm.scaled_rowwise", device, outcome)


def _block_operands(torch: Any, device: str, fp4: bool) -> tuple[Any, Any]:
    """All-ones mat1 [128, K] and column-major mat2 [K, 128] (fp4 packs two values a byte)."""
    if fp4:  # 0x22 holds two e2m1 ones
        packed = torch.full((_BLOCK, _BLOCK // 2), 0x22, dtype=torch.uint8, device=device)
        return packed.view(torch.float4_e2m1fn_x2), packed.clone().view(torch.float4_e2m1fn_x2).t()
    ones = torch.ones(_BLOCK, _BLOCK, device=device)
    return ones.to(torch.float8_e4m3fn), ones.to(torch.float8_e4m3fn).t()


def _block_scales(torch: Any, device: str, fp4: bool) -> list[tuple[str, Any]]:
    """Scales of 1.0 in the layouts PyTorch accepts: e8m0 per 32 (MX; cuBLASLt's count, then
    ROCm's pre-swizzled one), and for fp4 also e4m3 per 16 (NVFP4)."""
    layouts = []
    for count in (_BLOCK * 4, _BLOCK * 8):  # round_up(M,128) * round_up(K/32, 4) / ROCm EXT
        e8m0 = torch.full((count,), 127, dtype=torch.uint8, device=device)
        layouts.append((f"e8m0 x{count}", e8m0.view(torch.float8_e8m0fnu)))
    if fp4:
        nvfp4 = torch.ones(_BLOCK * 8, device=device).to(torch.float8_e4m3fn)
        layouts.append(("e4m3 x1024 (NVFP4)", nvfp4))
    return layouts


def block_scaled(device: str, *, fp4: bool) -> ProbeOutcome:
    """``ones @ ones`` (128x128x128) through block-scaled torch._scaled_mm: every entry 128."""
    import torch

    what = "block-scaled _scaled_mm with " + ("float4_e2m1fn_x2" if fp4 else "MXFP8")
    if not all(hasattr(torch, n) for n in ("_scaled_mm", "float8_e8m0fnu", "float4_e2m1fn_x2")):
        return unsupported(f"torch {torch.__version__} has no block-scaled _scaled_mm dtypes")

    def attempt(scale: Any) -> bool:
        a, b = _block_operands(torch, device, fp4)
        out = torch._scaled_mm(a, b, scale, scale, out_dtype=torch.bfloat16)
        return bool((out.float().cpu() == _BLOCK).all())

    try:
        layouts = _block_scales(torch, device, fp4)
    except Exception as exc:  # the device cannot even hold the scale dtypes
        return refused(what, exc)
    return first_that_runs(what, [(f"{label} scales", functools.partial(attempt, scale))
                                  for label, scale in layouts], device)


def probe_scaled_mm_mx(device: str) -> ProbeOutcome:
    return rule_gate.judged("mm.scaled_mx", device, block_scaled(device, fp4=False))


def probe_grouped_mm(device: str) -> ProbeOutcome:
    """torch._grouped_mm of a [32, 16] by two [16, 16] groups (offsets 16, 32): every entry 16."""
    import torch

    if not hasattr(torch, "_grouped_mm"):
        return unsupported(f"torch {torch.__version__} has no torch._grouped_mm")

    def attempt(dtype: Any) -> bool:
        a = torch.ones(32, 16, dtype=dtype, device=device)
        b = torch.ones(2, 16, 16, dtype=dtype, device=device).transpose(-2, -1)
        offs = torch.tensor([16, 32], dtype=torch.int32, device=device)
        return bool((torch._grouped_mm(a, b, offs=offs).float().cpu() == 16).all())

    return first_that_runs("_grouped_mm", [(name, functools.partial(attempt, getattr(torch, name)))
                                           for name in ("bfloat16", "float32")], device)


def probe_int_mm(device: str) -> ProbeOutcome:
    import torch

    if not hasattr(torch, "_int_mm"):
        return unsupported(f"torch {torch.__version__} has no torch._int_mm")
    try:
        a = torch.ones(32, 32, dtype=torch.int8, device=device)  # _int_mm wants M > 16, K % 8 == 0
        out = torch._int_mm(a, a.t().contiguous().t())
        value, out_dtype = out[0, 0].item(), out.dtype
    except Exception as exc:
        return refused("_int_mm", exc)
    if value != 32 or out_dtype != torch.int32:
        return unknown(f"_int_mm gave {value} ({out_dtype}), expected 32 (torch.int32)")
    return ran(f"_int_mm (int8 x int8 -> int32) ran on {device}")
