"""What the ``pytest_devcaps_register_*`` hooks receive: collectors of backends, capabilities,
probes and vendor rules."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

from pytest_devcaps.model import Level, ProbeOutcome

if TYPE_CHECKING:
    from pytest_devcaps.backends.base import BackendAdapter
    from pytest_devcaps.config.catalogue import CapabilitySpec, VendorRule
    from pytest_devcaps.probes.base import ProbeSpec


@dataclass
class BackendRegistrar:
    """Collects backend adapters from ``pytest_devcaps_register_backends``."""

    adapters: list[BackendAdapter] = field(default_factory=list)

    def add(self, adapter: BackendAdapter) -> None:
        self.adapters.append(adapter)


@dataclass
class CapabilityRegistrar:
    """Collects capabilities, probes and vendor rules from ``pytest_devcaps_register_capabilities``.

    A probe is registered under the name of the capability it measures.
    """

    specs: list[CapabilitySpec] = field(default_factory=list)
    probes: dict[str, ProbeSpec] = field(default_factory=dict)
    rules: list[tuple[str, str, VendorRule]] = field(default_factory=list)

    def capability(self, name: str, description: str, *, implies: Sequence[str] = (),
                   dtypes: Sequence[str] = ()) -> None:
        from pytest_devcaps.config.catalogue import CapabilitySpec

        self.specs.append(CapabilitySpec(name, description, tuple(implies), tuple(dtypes)))

    def probe(self, capability: str, function: Callable[[str], ProbeOutcome],
              isolated: bool = True) -> None:
        from pytest_devcaps.probes.base import ProbeSpec

        self.probes[capability] = ProbeSpec(capability, function, isolated)

    def rule(self, vendor: str, capability: str, level: Level | str, reason: str,
             when: str | None = None) -> None:
        from pytest_devcaps.config import VendorRule, compile_expression

        expression = None if when is None else compile_expression(when, file="<hook>", key=capability)
        level = level if isinstance(level, Level) else Level.parse(level)
        self.rules.append((vendor, capability, VendorRule(level, reason, expression, file="<hook>")))
