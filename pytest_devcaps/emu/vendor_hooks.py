"""The hooks a vendor's package implements: its backend adapter, its collective backend's
capability and probe, and its say on the answers.

Registered under the ``devcaps`` entry-point group, which a pytest session loads when it first
builds a registry, as the ``devcaps`` CLI and library code do; not under ``pytest11``, so a
session that never builds a registry does not import emu at all. ``optionalhook``: it loads
harmlessly where pytest-devcaps' hooks are not registered. Importing it imports neither torch,
pytest nor the plugin (``devcaps probe`` runs without pytest): the marker is pluggy's, the one
``pytest.hookimpl`` is. A bad ``PYTEST_DEVCAPS_EMU_DEVICES`` is refused when pytest starts by the
plugin itself (:func:`pytest_devcaps.emu.config.check_requested`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Sequence

import pluggy

if TYPE_CHECKING:
    from pytest_devcaps.model import CapabilityRecord, DeviceIdentity
    from pytest_devcaps.registry.registrars import BackendRegistrar, CapabilityRegistrar

hookimpl = pluggy.HookimplMarker("pytest")


@hookimpl(optionalhook=True)
def pytest_devcaps_register_backends(registrar: BackendRegistrar) -> None:
    from pytest_devcaps.emu.adapter import EmuAdapter

    registrar.add(EmuAdapter())


@hookimpl(optionalhook=True)
def pytest_devcaps_register_capabilities(registrar: CapabilityRegistrar) -> None:
    """emu's collective backend as a capability of its own, measured by its probe (what a
    vendor does for its collective library: hccl, for one, is not in the shipped catalogue's
    probes)."""
    from pytest_devcaps.emu.emuccl import BACKEND, probe_emuccl

    registrar.capability(f"dist.{BACKEND}", f"the {BACKEND} torch.distributed backend (emu's "
                         "own: collectives of emu tensors through gloo over host memory)")
    registrar.probe(f"dist.{BACKEND}", probe_emuccl)


#: Capabilities whose probe runs compute: on emu it runs in the host CPU's kernels.
COMPUTE_PREFIXES = ("dtype.", "mm.", "attention.")
EMULATED_REASON = "emu runs it with the host CPU's kernels (boxed CPU fallback): emulated"
#: Capabilities a probe proves work on emu, done by the host without a device: why each is
#: emulated.
EMULATED_BY_HOST = {
    "runtime.streams": "emu runs each stream's work at once, in order, on the host: streams, "
                       "their order and waits hold, but no two run concurrently: emulated",
    "dist.emuccl": "emuccl moves emu tensors with gloo over host memory (there is no device "
                   "interconnect): emulated",
}


@hookimpl(optionalhook=True)
def pytest_devcaps_adjust_results(device: DeviceIdentity, records: Sequence[CapabilityRecord]
                                  ) -> Sequence[CapabilityRecord] | None:
    """A compute probe that ran on emu proved the op works, not that a device does it natively:
    the answer is emulated. Only probe answers change (an override or ``--devcaps-set`` stands)."""
    from pytest_devcaps.emu import NAME

    if device.type != NAME:
        return None
    from pytest_devcaps.model import PROBE_SOURCE, Level

    def why(capability: str) -> str | None:
        if capability.startswith(COMPUTE_PREFIXES):
            return EMULATED_REASON
        return EMULATED_BY_HOST.get(capability)

    return [dataclasses.replace(record, level=Level.EMULATED, source="hook:devcaps-emu",
                                reason=f"{record.reason}; {reason}")
            for record in records
            if record.level is Level.NATIVE and record.source == PROBE_SOURCE
            and (reason := why(record.capability)) is not None]
