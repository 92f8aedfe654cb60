"""What Triton can do in this process, asked of torch and Triton themselves.

The kernel library decides on its own: it never asks the test plugin's capability registry
(which would start probe processes on a library call).

* :func:`triton_drives` -- Triton is installed and its active driver launches kernels on the
  device's type. Triton's drivers drive the current accelerator (the NVIDIA and AMD drivers are
  active when ``torch.cuda.is_available()``, see ``triton/backends/*/driver.py``), so for any
  other device type (CPU included) triton is not even imported.
* :func:`fp8_dot_types` -- the fp8 types ``tl.dot`` takes as fp8 on the target Triton compiles
  for now, read from the Triton backend's own options as ``torch.utils._triton.triton_backend``
  does (``make_backend(driver.active.get_current_target()).parse_options({})``).
* :func:`fp8_dot_imprecise` -- whether that target's ``tl.dot`` accumulates fp8 products in
  reduced precision unless told otherwise (``max_num_imprecise_acc_default``: ``2**30`` on
  NVIDIA sm_90, 0 elsewhere; ``triton/backends/nvidia/compiler.py``).
* :func:`target_vendor` -- the target's backend name (``cuda``, ``hip``, ``xpu``) for picking
  autotune configs.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

import torch

# GPUTarget.backend -> torch device type, for Triton drivers without get_active_torch_device
# (Triton 3.2 and older). ROCm tensors are "cuda" tensors in torch (triton/backends/amd/
# driver.py: "when using hip devices, the device string in pytorch is 'cuda'").
TARGET_DEVICE_TYPES = {"cuda": "cuda", "hip": "cuda", "xpu": "xpu"}


def active_driver() -> Any | None:
    """Triton's active driver; None when triton is not installed or no driver is active."""
    if importlib.util.find_spec("triton") is None:
        return None
    try:
        from triton.runtime.driver import driver

        return driver.active
    except Exception:  # noqa: BLE001 - "0 active drivers" (RuntimeError), a broken install...
        return None


def driver_device_type(driver: Any) -> str | None:
    """The torch device type a Triton driver launches kernels on (None: unknown to us)."""
    active_torch_device = getattr(driver, "get_active_torch_device", None)
    if active_torch_device is not None:
        return str(active_torch_device().type)
    return TARGET_DEVICE_TYPES.get(str(driver.get_current_target().backend))


def triton_drives(device: torch.device) -> bool:
    """True when Triton is installed and its active driver runs kernels on ``device.type``."""
    accelerator = torch.accelerator.current_accelerator()
    if accelerator is None or accelerator.type != device.type:
        return False
    driver = active_driver()
    try:
        return driver is not None and driver_device_type(driver) == device.type
    except Exception:  # noqa: BLE001 - a driver that cannot name its device drives nothing we know
        return False


def options_fp8_dot_types(options: Any) -> frozenset[str]:
    """Triton fp8 type names (``fp8e4nv``...) a backend's options let ``tl.dot`` take as fp8:
    ``supported_fp8_dtypes`` less ``deprecated_fp8_dot_operand_dtypes`` (which ``tl.dot``
    upcasts to fp16, triton/language/semantic.py)."""
    supported = frozenset(getattr(options, "supported_fp8_dtypes", ()))
    return supported - frozenset(getattr(options, "deprecated_fp8_dot_operand_dtypes", ()))


def options_fp8_dot_imprecise(options: Any) -> bool:
    """Whether a backend's ``tl.dot`` keeps fp8 products in a reduced-precision accumulator
    unless ``max_num_imprecise_acc`` says otherwise: ``max_num_imprecise_acc_default > 0``
    (``triton/language/semantic.py`` uses it for fp8 x fp8 dots when the argument is None).
    Options that do not say (another Triton) count as imprecise, so the kernel asks for fp32
    accumulation explicitly."""
    default = getattr(options, "max_num_imprecise_acc_default", None)
    return default is None or int(default) > 0


@functools.lru_cache(maxsize=None)
def _target_options(target: Any) -> Any:
    """A target's default compile options, read for its fp8 dot types and accumulation. FP
    fusion is given (it changes neither): left unset, Triton 3.9 spends its once-per-process
    notice that the FP-fusion default changes in 3.10 on this read, outside any compile, so the
    notice came out of whichever test first asked, and a compile later would not give it."""
    from triton.compiler.compiler import make_backend

    return make_backend(target).parse_options({"enable_fp_fusion": True})


def _current_options() -> Any | None:
    """The parsed options of the target Triton compiles for now; None when Triton cannot say."""
    driver = active_driver()
    if driver is None:
        return None
    try:
        return _target_options(driver.get_current_target())
    except Exception:  # noqa: BLE001 - another Triton version, a broken driver...
        return None


def fp8_dot_types() -> frozenset[str]:
    """:func:`options_fp8_dot_types` of the target Triton compiles for now (the active driver's
    current device, as in ``triton.runtime.jit``); empty when Triton cannot say (fp8 is then
    decoded with integer ops)."""
    options = _current_options()
    return frozenset() if options is None else options_fp8_dot_types(options)


def fp8_dot_imprecise() -> bool:
    """:func:`options_fp8_dot_imprecise` of the current target; True when Triton cannot say."""
    options = _current_options()
    return True if options is None else options_fp8_dot_imprecise(options)


def target_vendor() -> str:
    """The current target's backend (``cuda``, ``hip``, ``xpu``...); "" when Triton cannot say."""
    driver = active_driver()
    try:
        return "" if driver is None else str(driver.get_current_target().backend)
    except Exception:  # noqa: BLE001 - no device, another Triton
        return ""
