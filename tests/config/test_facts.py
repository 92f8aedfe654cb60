"""The fact vocabulary: identity fields plus what each backend adapter declares."""

from __future__ import annotations

from typing import Any, Mapping

import pytest

from pytest_devcaps.backends import builtin_backends
from pytest_devcaps.errors import ConfigError
from pytest_devcaps.config.facts import builtin_vocabulary, declared_facts, fact_vocabulary
from pytest_devcaps.model import IDENTITY_FACTS, DeviceIdentity, Fact


def test_identity_facts_are_exactly_what_rule_facts_sets() -> None:
    device = DeviceIdentity("cuda", 0, "nvidia", "H100", "sm_90")
    assert set(device.rule_facts()) == set(IDENTITY_FACTS)


def test_the_builtin_vocabulary_is_identity_plus_every_builtin_adapter() -> None:
    vocabulary = builtin_vocabulary()
    expected = set(IDENTITY_FACTS).union(*(declared_facts(a) for a in builtin_backends()))
    assert set(vocabulary.names()) == expected
    assert {"compute_capability", "rocm_version", "isa", "gaudi_generation", "xe_generation",
            "chip_generation", "platform"} <= expected
    assert vocabulary.versions == {"torch_version", "runtime_version", "driver_version",
                                   "cuda_version", "rocm_version", "macos_version"}
    assert "cudnn_version" not in vocabulary.versions  # an integer (90100), compared as one


@pytest.mark.parametrize(("typo", "fact"), [
    ("vendr", "vendor"), ("device_type", "type"), ("device_typ", "type"),
    ("compute_capabilty", "compute_capability"), ("cuda_ver", "cuda_version"),
])
def test_unknown_names_suggest_the_closest_fact(typo: str, fact: str) -> None:
    vocabulary = builtin_vocabulary()
    assert typo not in vocabulary
    assert vocabulary.suggestion(typo) == fact
    message = vocabulary.unknown(typo)
    assert message.startswith(f"unknown device fact {typo!r} (did you mean {fact!r}?); "
                              "device facts are: ")
    assert "compute_capability, cores, count, cpu_capability" in message  # every name, sorted


class _AcmeAdapter:
    """A hook-registered backend declaring its own facts."""

    type = "acme"
    visible_devices_variable = None
    facts: Mapping[str, Fact] = {"acme_gen": Fact("Acme generation"),
                                 "acme_sdk_version": Fact("Acme SDK", version=True),
                                 "platform": Fact("the host OS")}

    def is_available(self) -> bool:
        return False

    def discover(self) -> list[DeviceIdentity]:
        return []


def test_a_hook_backend_adds_its_facts() -> None:
    vocabulary = fact_vocabulary([*builtin_backends(), _AcmeAdapter()])
    assert {"acme_gen", "acme_sdk_version"} <= set(vocabulary.names())
    assert "acme_sdk_version" in vocabulary.versions
    assert "acme_gen" not in builtin_vocabulary()


class _Undeclared:
    type = "bare"


class _BadDeclaration:
    type = "bad"
    facts: Any = {"gen": "a plain string, not a Fact"}


class _Conflict:
    type = "conflict"
    facts = {"cuda_version": Fact("not a version here")}


def test_adapter_declarations_are_checked() -> None:
    assert declared_facts(_Undeclared()) == {}
    with pytest.raises(ConfigError, match="backend adapter _BadDeclaration: facts: 'facts' must "
                                          "map fact names to pytest_devcaps.model.Fact"):
        fact_vocabulary([_BadDeclaration()])
    with pytest.raises(ConfigError, match="fact 'cuda_version' is declared a version by one of "
                                          "backend adapter CudaAdapter and this adapter"):
        fact_vocabulary([*builtin_backends(), _Conflict()])


def test_identity_fields_are_written_once() -> None:
    """rule_facts, to_dict and from_dict read one list (the dataclass's fields); the fact
    vocabulary names exactly those, with memory_gib made from memory_bytes."""
    from pytest_devcaps.model import IDENTITY_FACTS, IDENTITY_FIELDS, DeviceIdentity

    identity = DeviceIdentity("acme", 1, "acme", "Acme One", "a1", memory_bytes=2**31, count=2,
                              torch_version="2.13.0", runtime_version="1.0", driver_version="2.0",
                              facts={"isa": "x"})
    assert set(identity.rule_facts()) - {"isa"} == set(IDENTITY_FACTS) == {*IDENTITY_FIELDS, "memory_gib"}
    assert identity.rule_facts()["memory_gib"] == 2.0
    assert DeviceIdentity.from_dict(identity.to_dict()) == identity
    assert set(identity.to_dict()) == {*IDENTITY_FIELDS, "facts"}
    sparse = DeviceIdentity.from_dict({"type": "acme"})
    assert (sparse.vendor, sparse.name, sparse.index, sparse.arch, sparse.count) == ("acme", "acme", None, "", 1)
