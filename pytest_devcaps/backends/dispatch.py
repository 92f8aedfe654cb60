"""Dispatch keys of a device type, asked of torch at run time (no table keyed by device name).

``torch.library`` registrations name a dispatch key (``"CUDA"``, ``"AutogradCUDA"``); a
device-generic test asks for its device's instead of hardcoding ``"CUDA"``:

* the backend key is ``torch._C._dispatch_key_for_device(device_type)`` (``cuda`` -> ``CUDA``,
  ``xpu`` -> ``XPU``, a renamed PrivateUse1 backend -> ``PrivateUse1``), the function
  ``torch.library`` itself uses for device-type strings (torch/library.py ``_device_type_to_key``);
* the autograd key is the ``torch._C.DispatchKey`` member whose backend key set, as
  ``torch._C._dispatch_get_backend_keyset_from_autograd`` reports it, holds that backend key
  (``AutogradCUDA`` for ``CUDA``), else the member named ``Autograd<key>``; a backend without
  its own autograd key gets ``AutogradOther``, as c10's ``getAutogradKeyFromBackend`` gives it.
"""

from __future__ import annotations

import functools

from pytest_devcaps.errors import DevcapsError

#: What PyTorch's device-generic test bases call a not-yet-renamed PrivateUse1 class
#: (common_device_type.PrivateUse1TestBase.device_type); not a valid torch device string.
PRIVATEUSE1_ALIAS = "privateuse1"


class DispatchKeyError(DevcapsError):
    """torch has no dispatch key for this device type."""


def torch_device_type(device_type: str) -> str:
    """``privateuse1`` -> the name PrivateUse1 has in this process (``torch.utils.
    rename_privateuse1_backend``); other device types unchanged."""
    if device_type != PRIVATEUSE1_ALIAS:
        return device_type
    import torch

    return str(torch._C._get_privateuse1_backend_name())


@functools.lru_cache(maxsize=32)
def dispatch_key(device_type: str) -> str:
    """The backend dispatch key of ``device_type`` (``"cpu"`` -> ``"CPU"``, ``"cuda"`` -> ``"CUDA"``).

    Raises :class:`DispatchKeyError` for a device type torch does not know.
    """
    import torch

    kind = torch_device_type(device_type.partition(":")[0])
    try:
        return str(torch._C._dispatch_key_for_device(kind))
    except RuntimeError as exc:
        raise DispatchKeyError(f"torch has no dispatch key for device type {kind!r}: "
                               f"{str(exc).splitlines()[0]}") from None


@functools.lru_cache(maxsize=32)
def autograd_dispatch_key(device_type: str) -> str:
    """The autograd dispatch key serving ``device_type`` (``"cuda"`` -> ``"AutogradCUDA"``)."""
    import torch

    backend = dispatch_key(device_type)
    members = torch._C.DispatchKey.__members__
    named = members.get(f"Autograd{backend}")
    candidates = ([named] if named is not None else []) + [
        key for name, key in members.items() if name.startswith("Autograd") and key is not named]
    for key in candidates:
        try:
            backends = torch._C._dispatch_get_backend_keyset_from_autograd(key)
        except RuntimeError:  # not an autograd key with a backend set (Autograd, AutogradFunctionality)
            continue
        if backend in _keyset_names(torch._C._dispatch_keyset_to_string(backends)):
            return str(key.name)
    # torch 2.13 reports no backend set for some per-backend autograd keys (AutogradMTIA):
    # the member named after the backend is still the key c10's getAutogradKeyFromBackend gives.
    return "AutogradOther" if named is None else str(named.name)


def _keyset_names(text: str) -> set[str]:
    """``DispatchKeySet(CPU, CUDA)`` -> ``{"CPU", "CUDA"}``."""
    inner = text[text.find("(") + 1:text.rfind(")")]
    return {part.strip() for part in inner.split(",") if part.strip()}
