"""Hooks for vendors: add backends, capabilities and probes, or adjust answers.

Implement them in a ``conftest.py``, in a plugin, or in a vendor package registered under the
``devcaps`` entry-point group (:data:`VENDOR_GROUP`). That group is loaded everywhere a registry
is built: in a pytest session, by the ``devcaps`` CLI, by ``library.default_registry()`` and so
by the unittest bridge (:func:`vendor_hooks`, :func:`load_vendor_plugins`), so an out-of-tree
backend is seen everywhere or nowhere. A package that registers its hooks only as a ``pytest11``
plugin is seen by pytest alone: the session warns, naming it (:func:`vendors_seen_only_by_pytest`).
A plugin that fails to import is skipped with a :class:`~pytest_devcaps.errors.DevcapsWarning`
naming the error. A vendor plugin that may load without pytest-devcaps installed marks its
implementations ``@pytest.hookimpl(optionalhook=True)``.
"""

from __future__ import annotations

import sys
import warnings
from typing import TYPE_CHECKING, Any, Sequence

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
    here replace those with the same capability; their ``source`` becomes ``hook:<plugin>``
    (the name the plugin is registered under; a conftest's module name), whatever the
    plugin wrote, so reports say where they came from.

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


VENDOR_GROUP = "devcaps"
"""The entry-point group of vendor plugins implementing the hooks above."""

HOOK_NAMES = ("pytest_devcaps_register_backends", "pytest_devcaps_register_capabilities",
              "pytest_devcaps_adjust_results")


def add_specs(manager: pluggy.PluginManager) -> None:
    """Add these hook specs to ``manager``, once. A pytest session adds them only where they are
    needed (:func:`add_when_implemented`, :func:`load_vendor_plugins`), not at its start: pluggy
    reads every name of the module it is given with ``inspect.getattr_static``, 1.5 M
    instructions in every pytest session (``benchmarks/results/plugin_overhead_issue32_free_*``)."""
    caller = getattr(manager.hook, HOOK_NAMES[0], None)
    if caller is None or not caller.has_spec():
        manager.add_hookspecs(sys.modules[__name__])


def add_when_implemented(manager: pluggy.PluginManager) -> None:
    """Add the specs if a registered plugin implements one of these hooks (called as each plugin
    is registered): pytest checks every implementation against its spec before the first test
    (``check_pending``), and pluggy checks the arguments of those registered already when the
    spec is added, so a misspelt argument is the same ``PluginValidationError`` as ever."""
    hooks = vars(manager.hook)
    for name in HOOK_NAMES:  # three lookups per registered plugin
        caller = hooks.get(name)
        if caller is not None and not caller.has_spec():
            add_specs(manager)
            return


def load_vendor_plugins(manager: pluggy.PluginManager) -> list[str]:
    """Register the :data:`VENDOR_GROUP` plugins on ``manager`` (pytest's, or our own outside
    pytest), each under its entry point's name, after adding these specs (what calls the hooks
    next needs them, implemented or not); one registered already (by name or as the same
    object) or blocked (``-p no:NAME``) is left alone, one whose import raises is a warning.
    Returns the group's modules (one scan of the installed distributions: about 20 ms)."""
    import importlib.metadata

    add_specs(manager)

    entries = list(importlib.metadata.entry_points(group=VENDOR_GROUP))
    for entry in entries:
        if manager.get_plugin(entry.name) is not None or manager.is_blocked(entry.name):
            continue
        try:
            plugin = entry.load()
        except Exception as exc:
            from pytest_devcaps.errors import DevcapsWarning  # not at import: every session imports this

            warnings.warn(f"pytest-devcaps: skipping the vendor plugin {entry.name!r} "
                          f"({entry.value}): {type(exc).__name__}: {exc}", DevcapsWarning,
                          stacklevel=2)
            continue
        if not manager.is_registered(plugin):
            manager.register(plugin, name=entry.name)
    return [entry.value.split(":", 1)[0] for entry in entries]


class _VendorPluginManager(pluggy.PluginManager):
    """pytest's rule outside pytest: a ``pytest_devcaps_*`` function is a hook implementation
    with or without ``@pytest.hookimpl`` (``PytestPluginManager.parse_hookimpl_opts``), so a
    plugin pytest sees is seen here too."""

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> pluggy.HookimplOpts | None:
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is None and name in HOOK_NAMES and callable(getattr(plugin, name, None)):
            return pluggy.HookimplOpts(wrapper=False, hookwrapper=False, optionalhook=False,
                                       tryfirst=False, trylast=False, specname=None)
        return opts


def vendor_hooks() -> Any:
    """Outside pytest: a hook relay with these hookspecs and the :data:`VENDOR_GROUP` plugins
    (what ``config.hook`` carries inside a session)."""
    manager = _VendorPluginManager("pytest")
    load_vendor_plugins(manager)
    return manager.hook


def vendors_seen_only_by_pytest(manager: pluggy.PluginManager, ours: Sequence[str]) -> list[str]:
    """Plugins loaded from an entry point of another group (``pytest11``) that implement our
    hooks: seen in a pytest session, but not by the CLI or library code. ``ours``: the
    :data:`VENDOR_GROUP` modules (what :func:`load_vendor_plugins` returns)."""
    found = []
    for plugin, dist in manager.list_plugin_distinfo():
        module = getattr(plugin, "__name__", type(plugin).__module__)
        implements = any(getattr(plugin, name, None) is not None for name in HOOK_NAMES)
        if implements and module not in ours:
            found.append(f"{module} (from {dist.project_name})")
    return sorted(found)
