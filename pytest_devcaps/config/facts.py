"""The fact vocabulary: every name a vendor rule, an override or a profile may use for a device.

It is the identity fields (:data:`pytest_devcaps.model.IDENTITY_FACTS`) plus the facts each
backend adapter declares in its ``facts`` mapping (name -> :class:`~pytest_devcaps.model.Fact`).
The builtin adapters' declarations are static class data, so :func:`builtin_vocabulary` needs
no device and no torch; a backend added by ``pytest_devcaps_register_backends`` brings its own,
and ``registry/build.py`` builds the full vocabulary from the adapters it discovers with.

A name outside the vocabulary is a typo (``vendr``, ``device_type``): loading refuses it with
the closest valid name instead of evaluating it as a fact no device has.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Iterable, Mapping

from pytest_devcaps.errors import ConfigError, closest, suggestion
from pytest_devcaps.model import IDENTITY_FACTS, Fact


@dataclass(frozen=True)
class FactVocabulary:
    """The known fact names, each with its :class:`Fact` (description, whether a version)."""

    facts: Mapping[str, Fact]

    def __contains__(self, name: object) -> bool:
        return name in self.facts

    def names(self) -> list[str]:
        return sorted(self.facts)

    @functools.cached_property
    def versions(self) -> frozenset[str]:
        """The facts whose values compare as versions (``cuda_version``, ``torch_version``...);
        worked out once (a profile asks for every fact of every device)."""
        return frozenset(name for name, fact in self.facts.items() if fact.version)

    def suggestion(self, name: str) -> str | None:
        """The closest known fact: by spelling, else by one ``_``-part (``device_type`` ->
        ``type``, ``device_typ`` -> ``type``)."""
        match = closest(name, self.facts)
        if match is not None:
            return match
        for part in (p for p in name.split("_") if len(p) >= 3):
            match = closest(part, self.facts, cutoff=0.75)
            if match is not None:
                return match
        return None

    def unknown(self, name: str) -> str:
        """The message for an unknown fact name: the suggestion, then every valid name."""
        return (f"unknown device fact {name!r}{suggestion(self.suggestion(name))}; device facts are: "
                f"{', '.join(self.names())}")

    def digest(self) -> str:
        """Names and version flags, hashed: the key compiled ``when=`` conditions are kept by."""
        return self._digest

    @functools.cached_property
    def _digest(self) -> str:  # computed once: markers ask it for every condition of every test
        text = "\n".join(f"{name}:{int(self.facts[name].version)}" for name in self.names())
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def declared_facts(adapter: object) -> Mapping[str, Fact]:
    """What ``adapter.facts`` declares (an adapter without ``facts`` declares none)."""
    facts = getattr(adapter, "facts", None)
    if facts is None:
        return {}
    where = f"backend adapter {type(adapter).__name__}"
    if not isinstance(facts, Mapping) or not all(
            isinstance(name, str) and isinstance(fact, Fact) for name, fact in facts.items()):
        raise ConfigError("'facts' must map fact names to pytest_devcaps.model.Fact "
                          "(description, version=False)", file=where, key="facts")
    return facts


def fact_vocabulary(adapters: Iterable[object] = ()) -> FactVocabulary:
    """The identity facts plus every adapter's declared facts.

    Two adapters may declare one name (``platform``) if they agree on whether it is a version.
    """
    facts: dict[str, Fact] = dict(IDENTITY_FACTS)
    owners = {name: "the device identity" for name in facts}
    for adapter in adapters:
        owner = f"backend adapter {type(adapter).__name__}"
        for name, fact in declared_facts(adapter).items():
            known = facts.get(name)
            if known is not None and known.version != fact.version:
                raise ConfigError(f"fact {name!r} is declared a version by one of "
                                  f"{owners[name]} and this adapter and not by the other",
                                  file=owner, key="facts")
            facts.setdefault(name, fact)
            owners.setdefault(name, owner)
    return FactVocabulary(facts)


@functools.lru_cache(maxsize=1)
def builtin_vocabulary() -> FactVocabulary:
    """The vocabulary of the builtin backends (cpu, cuda, xpu, mps, hpu, PrivateUse1)."""
    from pytest_devcaps.backends import builtin_backends

    return fact_vocabulary(builtin_backends())
