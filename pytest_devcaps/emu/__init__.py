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
registers it. Importing this module imports nothing (torch's import runs the autoload in every
process): ``DEVICES_ENV``, the variable's name, is served from the environment-variable table on
first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_devcaps._util.lazy import lazy_names

if TYPE_CHECKING:
    #: How many emu devices each process has (unset or empty: the backend is not loaded at all).
    from pytest_devcaps._util.environ import ENV_EMU_DEVICES as DEVICES_ENV  # noqa: F401

#: The device type PrivateUse1 is renamed to.
NAME = "emu"
#: Which emu devices this process sees, renumbered from 0 (CUDA_VISIBLE_DEVICES' rules, indices only).
VISIBLE_ENV = "EMU_VISIBLE_DEVICES"
#: At most this many (torch's DeviceIndex is an int8).
MAX_DEVICES = 64

__getattr__, __dir__ = lazy_names(__name__, {"DEVICES_ENV": "pytest_devcaps._util.environ:ENV_EMU_DEVICES"})
