"""A fake second device type for subprocess runs: PrivateUse1 renamed to ``acme``, two devices,
no kernels. Tests copy this file into a pytester directory as ``fake_acme.py`` and import it
from a conftest (before pytest-devcaps discovers devices and before common_device_type lists
its test bases); never import it in the test process itself (renaming is once per process)."""

import types

import torch

torch.utils.rename_privateuse1_backend("acme")
torch._register_device_module("acme", types.SimpleNamespace(
    is_available=lambda: True, device_count=lambda: 2, current_device=lambda: 0,
    get_device_name=lambda index=0: "Acme N1", manual_seed_all=lambda seed: None,
    _is_in_bad_fork=lambda: False))
