"""What the vendor rules say about the device a probe runs on: PyTorch's gates, read from their
one source.

The vendor rules in ``capabilities.yaml`` mirror PyTorch's own checks, each citing the function it
restates (``scaled_mm_arch_allowed``, ``_scaled_mm_is_fnuz``, ``evaluate_platform_supports_mx_gemm``,
``IS_FLEX_ATTENTION_*_PLATFORM_SUPPORTED``...). A probe that runs an op does not restate them: it
asks :func:`rule_gate` for the rule that matches the live device's facts (the facts come from
the backends, the one source of facts; the rule from the shipped catalogue, the one source of
PyTorch's gate logic) and reads its outcome against it with :func:`judge`. So a probe on real
hardware and the rule for the same device cannot silently tell different stories: a refusal names
the rule that predicted it, and an op that ran where the rule says PyTorch refuses it says so
(the evidence still wins). A rule answering ``unknown``, or no rule, means only running the op
can tell.

The rules are the shipped catalogue's, not a session's ``--devcaps-catalogue`` file: they are
what PyTorch does; a user's own rules are layered over the probe's answer by the registry.
Never imports torch itself (only the backends :func:`live_identity` asks do).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from pytest_devcaps.config.catalogue import first_matching_rule, load_catalogue
from pytest_devcaps.model import DeviceIdentity, Level, ProbeOutcome


@dataclass(frozen=True)
class RuleGate:
    """The matching vendor rule's answer for one capability on the live device.

    ``allowed``: does PyTorch let the op through here (True: the rule says native or emulated;
    False: unsupported; None: the rule says unknown, or no rule matches). ``source`` is the
    rule's citation (None without a rule)."""

    allowed: bool | None
    reason: str
    source: str | None = None

    def cited(self) -> str:
        return self.reason if self.source is None else f"{self.reason} [{self.source}]"


@functools.lru_cache(maxsize=None)
def _discovered(kind: str) -> tuple[DeviceIdentity, ...]:
    from pytest_devcaps.backends import builtin_backends, discover_devices

    return tuple(discover_devices([a for a in builtin_backends() if a.type == kind]))


def live_identity(device: str) -> DeviceIdentity | None:
    """The identity of the device this process runs a probe on (None: no builtin backend sees
    it, e.g. an out-of-tree type)."""
    kind, _, index = device.partition(":")
    for identity in _discovered(kind):
        if identity.key == device or (identity.type == kind and not index):
            return identity
    return None


def gate_for(capability: str, identity: DeviceIdentity | None) -> RuleGate:
    """The shipped rule's verdict for ``capability`` on ``identity`` (the device's vendor rules,
    then the ``"*"`` ones, first match: :func:`~pytest_devcaps.config.catalogue.classify`'s
    order)."""
    if identity is None:
        return RuleGate(None, "no builtin backend describes this device, so no vendor rule "
                                 "applies: only running it can tell")
    facts = identity.rule_facts()
    vendor = str(identity.vendor).lower()
    rule = first_matching_rule(load_catalogue(), vendor, capability, facts)
    if rule is None:
        return RuleGate(None, f"no {vendor} rule for {capability} matches {identity.key}: "
                                 "only running it can tell")
    verdict = rule.verdict(facts)
    allowed = {Level.UNSUPPORTED: False, Level.UNKNOWN: None}.get(verdict.level, True)
    return RuleGate(allowed, verdict.reason, rule.source)


def rule_gate(capability: str, device: str) -> RuleGate:
    """:func:`gate_for` the live ``device``."""
    return gate_for(capability, live_identity(device))


def judge(gate: RuleGate, outcome: ProbeOutcome) -> ProbeOutcome:
    """A probe's outcome read against the rule: a refusal the rule predicts says which of
    PyTorch's checks refused, and an op that ran where the rule says PyTorch refuses it says so
    (the evidence still wins)."""
    if outcome.level is Level.UNSUPPORTED and gate.allowed is False:
        return ProbeOutcome(Level.UNSUPPORTED, f"{gate.cited()} ({outcome.reason})")
    if outcome.level.available and gate.allowed is False:
        return ProbeOutcome(outcome.level, f"{outcome.reason}, although the vendor rule says "
                                           f"PyTorch refuses it here: {gate.cited()}")
    return outcome


def judged(capability: str, device: str, outcome: ProbeOutcome) -> ProbeOutcome:
    """``outcome`` of the probe for ``capability`` on ``device``, read against its rule."""
    return judge(rule_gate(capability, device), outcome)
