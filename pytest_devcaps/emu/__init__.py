"""``emu``: an emulated out-of-tree accelerator, so CI has a device type next to the CPU.

A small C++ extension (``csrc/emu.cpp``, package data) registers a PrivateUse1 backend whose
memory is host memory and whose ops run on the CPU (PyTorch's OpenReg reference backend, made
small). It is built on first need with ``torch.utils.cpp_extension`` into the devcaps cache
(:mod:`pytest_devcaps.emu.extension`), and loaded into every process that sets
``PYTEST_DEVCAPS_EMU_DEVICES`` by torch's own device-backend autoload
(:func:`pytest_devcaps.emu.autoload.autoload`, entry-point group ``torch.backends``). Unset, it
does nothing: installing pytest-devcaps never changes torch for anyone else.

This package is also the worked example of "bring up your backend" (README): the autoload
function is what a vendor's package registers for torch, :mod:`pytest_devcaps.emu.adapter` is
the backend adapter it gives pytest-devcaps, :mod:`pytest_devcaps.emu.vendor_hooks` the hook that
registers it. Importing this module imports only the environment-variable table (standard
library; torch's import runs the autoload).
"""

from __future__ import annotations

from pytest_devcaps._util.environ import ENV_EMU_DEVICES

#: The device type PrivateUse1 is renamed to.
NAME = "emu"
#: How many emu devices each process has (unset or empty: the backend is not loaded at all).
DEVICES_ENV = ENV_EMU_DEVICES
#: Which of them this process sees, renumbered from 0 (CUDA_VISIBLE_DEVICES' rules, indices only).
VISIBLE_ENV = "EMU_VISIBLE_DEVICES"
#: At most this many (torch's DeviceIndex is an int8).
MAX_DEVICES = 64
