"""pytest-devcaps: one ML test suite on any accelerator backend.

The pytest plugin itself is :mod:`pytest_devcaps.plugin` (entry point ``devcaps``). ``-p
pytest_devcaps`` names this package; the hook below then registers the plugin module once, under
the same name the entry point uses, so autoload on or off never registers it twice.
"""

from __future__ import annotations

import sys as _sys
from typing import TYPE_CHECKING, Any

#: What of this package pytest rewrites the asserts of: the bundled suites' helper modules, whose
#: asserts are test checks. Every other module asserts only its own invariants.
_REWRITTEN = f"{__name__}.suites"


def _rewrite_only_the_suites() -> None:
    """pytest marks every module of a wheel-installed ``pytest11`` distribution for assertion
    rewriting (``_pytest/config`` ``_mark_plugins_for_rewrite``, from its RECORD), so each of ours
    would load through pytest's import hook in every session: ~27 M instructions for the modules a
    plain session imports (measured, 300 torch-free tests), and where site-packages is read-only
    pytest cannot cache the rewritten bytecode and rewrites them again in every session. The mark
    moves to :data:`_REWRITTEN`, here, before the plugin's own modules are imported. pytest has no
    supported way to say so: this edits the hook's mark set where it has one
    (``AssertionRewritingHook._must_rewrite``) and changes nothing where it has not (outside
    pytest, ``--assert=plain``, an editable install, another pytest)."""
    for finder in _sys.meta_path:
        marked = getattr(finder, "_must_rewrite", None)
        if isinstance(marked, set) and __name__ in marked:
            marked.discard(__name__)
            marked.add(_REWRITTEN)
            cache = getattr(finder, "_marked_for_rewrite_cache", None)
            if isinstance(cache, dict):
                cache.clear()  # names already asked about are asked again


_rewrite_only_the_suites()

from pytest_devcaps._util.lazy import lazy_names  # noqa: E402 (after the mark moved)

if TYPE_CHECKING:
    from pytest_devcaps.version import __version__
    from pytest_devcaps.model import CapabilityRecord, DeviceIdentity, Fact, Level, ProbeOutcome
    from pytest_devcaps.decorators import (
        hardware,
        requires_capabilities,
        requires_capability,
        requires_devices,
        requires_memory,
        requires_ranks,
        skip_on,
        tolerance,
        xfail_on,
    )
    from pytest_devcaps.pytorch_compat import DevcapsCapabilities, capabilities_mapping
    from pytest_devcaps.registry import CapabilityRegistry, DeviceCapabilities
    from pytest_devcaps.testcase import DevcapsMixin, DevcapsTestCase
    from pytest_devcaps.marks.tolerances import Tolerance, Tolerances

#: Names served lazily (importing this package must stay light: the probe child imports it),
#: by the module that defines them.
_LAZY = {
    "__version__": ".version",
    "CapabilityRecord": ".model",
    "DeviceIdentity": ".model",
    "Fact": ".model",
    "Level": ".model",
    "ProbeOutcome": ".model",
    "CapabilityRegistry": ".registry",
    "DeviceCapabilities": ".registry",
    "hardware": ".decorators",
    "requires_capabilities": ".decorators",
    "requires_capability": ".decorators",
    "requires_devices": ".decorators",
    "requires_memory": ".decorators",
    "requires_ranks": ".decorators",
    "skip_on": ".decorators",
    "tolerance": ".decorators",
    "xfail_on": ".decorators",
    "DevcapsMixin": ".testcase",
    "DevcapsTestCase": ".testcase",
    "DevcapsCapabilities": ".pytorch_compat",
    "capabilities_mapping": ".pytorch_compat",
    "Tolerance": ".marks.tolerances",
    "Tolerances": ".marks.tolerances",
}

__all__ = [*_LAZY]

__getattr__, __dir__ = lazy_names(__name__, _LAZY)

PLUGIN_NAME = "devcaps"


def pytest_addhooks(pluginmanager: Any) -> None:
    """Runs only when this package is loaded with ``-p pytest_devcaps``."""
    if pluginmanager.is_blocked(PLUGIN_NAME) or pluginmanager.get_plugin(PLUGIN_NAME) is not None:
        return
    from pytest_devcaps import plugin

    if not pluginmanager.is_registered(plugin):
        pluginmanager.register(plugin, PLUGIN_NAME)
