"""Hooks for vendors: add backends, capabilities and probes, or adjust answers.

Implement them in a ``conftest.py``, in a plugin, or in a package registered under the
``pytest11`` entry-point group; the ``devcaps`` CLI, which runs without pytest, loads vendor
packages registered under the ``devcaps`` entry-point group. A vendor plugin that
may load without pytest-devcaps installed marks its implementations
``@pytest.hookimpl(optionalhook=True)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import pluggy

if TYPE_CHECKING:
    from pytest_devcaps.model import CapabilityRecord, DeviceIdentity
    from pytest_devcaps.registry import BackendRegistrar, CapabilityRegistrar

hookspec = pluggy.HookspecMarker("pytest")


@hookspec
def pytest_devcaps_register_backends(registrar: BackendRegistrar) -> None:
    """Add backend adapters (for example an out-of-tree PrivateUse1 device).

    :param registrar: call ``registrar.add(adapter)`` with an object satisfying
        :class:`pytest_devcaps.backends.base.BackendAdapter`. Its ``facts`` declares the facts
        ``discover()`` sets (name -> ``Fact(description, version=False)``): vendor rules,
        override files and profiles may name only declared facts (or the identity fields).

    Example ``conftest.py``::

        import pytest
        from pytest_devcaps import DeviceIdentity, Fact

        class MyNpuBackend:
            type = "npu"
            visible_devices_variable = "NPU_VISIBLE_DEVICES"
            facts = {"generation": Fact("Acme NPU generation: 1, 2")}

            def is_available(self):
                return True

            def discover(self):
                return [DeviceIdentity(type="npu", index=0, vendor="acme", name="Acme N1",
                                       arch="n1", facts={"generation": 1})]

        @pytest.hookimpl(optionalhook=True)
        def pytest_devcaps_register_backends(registrar):
            registrar.add(MyNpuBackend())

    .. versionadded:: 0.1
    """


@hookspec
def pytest_devcaps_register_capabilities(registrar: CapabilityRegistrar) -> None:
    """Add capabilities, their probes, and vendor rules.

    :param registrar: ``registrar.capability(name, description, implies=(), dtypes=())`` adds
        a catalogue entry; ``registrar.probe(capability, function, isolated=True)`` adds the
        probe that measures ``capability`` (a module-level ``function(device: str) ->
        ProbeOutcome``; isolated probes run in a child process, so the function must be
        importable there); ``registrar.rule(vendor, capability, level, reason, when=None)`` adds
        a vendor rule (``when`` is a safe expression over device facts). A probe or rule for a
        capability nobody declared is an error naming the closest declared one.

    Example ``conftest.py``::

        import pytest
        from pytest_devcaps import Level, ProbeOutcome

        def probe_acme_sparse(device: str) -> ProbeOutcome:
            import torch
            torch.ones(4, device=device).to_sparse()
            return ProbeOutcome(Level.NATIVE, "to_sparse ran")

        @pytest.hookimpl(optionalhook=True)
        def pytest_devcaps_register_capabilities(registrar):
            registrar.capability("acme.sparse", "Acme sparse tensors")
            registrar.probe("acme.sparse", probe_acme_sparse, isolated=False)
            registrar.rule("acme", "acme.sparse", "native", "Acme N1 has sparse units",
                           when="generation >= 1")

    .. versionadded:: 0.1
    """


@hookspec
def pytest_devcaps_adjust_results(
    device: DeviceIdentity, records: Sequence[CapabilityRecord]
) -> Sequence[CapabilityRecord] | None:
    """Adjust the final answers for one device; return replacements, or None to keep them.

    Runs after probes, vendor rules, override files and the command line. Records returned
    here replace those with the same capability; give them a ``source`` such as
    ``hook:<plugin>`` so reports say where they came from.

    Example ``conftest.py``::

        import dataclasses
        import pytest
        from pytest_devcaps import Level

        @pytest.hookimpl(optionalhook=True)
        def pytest_devcaps_adjust_results(device, records):
            if device.vendor != "nvidia":
                return None
            return [dataclasses.replace(r, level=Level.UNSUPPORTED,
                                        reason="cuDNN attention is broken on our driver",
                                        source="hook:conftest")
                    for r in records if r.capability == "attention.cudnn"]

    .. versionadded:: 0.1
    """
