"""pytest-devcaps: one ML test suite on any accelerator backend."""

from __future__ import annotations

from pytest_devcaps.model import CapabilityRecord, DeviceIdentity, Level, ProbeOutcome

__all__ = ["CapabilityRecord", "DeviceIdentity", "Level", "ProbeOutcome", "__version__"]
__version__ = "0.1.0"
