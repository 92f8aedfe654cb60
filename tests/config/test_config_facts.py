"""Fact names and version facts in rules, overrides and profiles.

A name that is not a device fact is a typo, refused with file:line:key and the closest fact;
version facts compare as versions, so 12.10 is later than 12.8 and 2.10 later than 2.9.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, Callable

import pytest

from pytest_devcaps.config import (
    Catalogue,
    VendorRule,
    compile_expression,
    load_catalogue,
    load_overrides,
    load_profile,
)
from pytest_devcaps.errors import ConfigError
from pytest_devcaps.config.facts import builtin_vocabulary, fact_vocabulary
from pytest_devcaps.model import DeviceIdentity, Fact, Level

Write = Callable[..., Path]


def _error(load: Callable[[], object]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load()
    return info.value


# --- unknown fact names ---------------------------------------------------------------------

@pytest.mark.parametrize(("entry", "line", "key", "name", "fact"), [
    ("- match: {device_type: cpu}\n    set: {dtype.bf16: native}", 3,
     "overrides[0].match.device_type", "device_type", "type"),
    ("- match: {vendr: nvidia}\n    set: {dtype.bf16: native}", 3,
     "overrides[0].match.vendr", "vendr", "vendor"),
    ("- when: \"device_typ == 'cpu'\"\n    set: {dtype.bf16: native}", 3,
     "overrides[0].when", "device_typ", "type"),
    ("- set: {dtype.bf16: native}\n    when: \"compute_capabilty >= 9.0\"", 4,
     "overrides[0].when", "compute_capabilty", "compute_capability"),
])
def test_override_fact_names_must_be_device_facts(
        write_yaml: Write, catalogue: Catalogue, entry: str, line: int, key: str, name: str,
        fact: str) -> None:
    path = write_yaml(f"devcaps: 1\noverrides:\n  {entry}\n")
    error = _error(lambda: load_overrides([path], catalogue))
    assert (error.file, error.line, error.key) == (str(path), line, key)
    assert f"unknown device fact {name!r} (did you mean {fact!r}?)" in error.message
    assert str(error).startswith(f"{path}:{line}: {key}: ")


def test_catalogue_rule_fact_names_must_be_device_facts(write_yaml: Write) -> None:
    path = write_yaml("""
        devcaps: 1
        capabilities:
          dtype.bf16: {description: bf16}
        vendors:
          nvidia:
            dtype.bf16:
              - when: "vendr == 'nvidia' and compute_capability >= 8.0"
                level: native
                reason: r
        """)
    error = _error(lambda: load_catalogue(path))
    assert (error.line, error.key) == (7, "vendors.nvidia.dtype.bf16[0].when")
    assert "unknown device fact 'vendr' (did you mean 'vendor'?)" in error.message


def test_profile_facts_must_be_device_facts(write_yaml: Write, catalogue: Catalogue) -> None:
    path = write_yaml("""
        devcaps: 1
        profile:
          name: typo
          devices:
            - type: cuda
              arch: sm_90
              facts: {compute_capabilty: 9.0}
        """)
    error = _error(lambda: load_profile(path, catalogue))
    assert (error.line, error.key) == (7, "profile.devices[0].facts.compute_capabilty")
    assert "did you mean 'compute_capability'?" in error.message


def test_yaml_spellings_of_true_are_not_silently_a_missing_fact() -> None:
    error = _error(lambda: compile_expression("has_fp64 == true", facts=builtin_vocabulary()))
    assert "'true' is not a literal in rule expressions" in error.message
    assert "write True, False or None" in error.message


def test_hook_rules_are_checked_against_the_vocabulary_with_hook_backends(
        catalogue: Catalogue) -> None:
    """A hook's rule is compiled before the backends are known, then checked once they are."""
    rule = VendorRule(Level.NATIVE, "r", compile_expression("acme_gen >= 2"), file="<hook>")
    error = _error(lambda: catalogue.with_capabilities([], [("acme", "dtype.bf16", rule)]))
    assert (error.file, error.key) == ("<hook>", "vendors.acme.dtype.bf16")
    assert "unknown device fact 'acme_gen'" in error.message

    class Acme:
        facts = {"acme_gen": Fact("Acme generation")}

    extended = catalogue.with_capabilities([], [("acme", "dtype.bf16", rule)],
                                           fact_vocabulary([Acme()]))
    acme = DeviceIdentity("acme", 0, "acme", "Acme", "a2", facts={"acme_gen": 2})
    (checked,) = extended.rules_for("acme", "dtype.bf16")[:1]
    assert checked.matches(acme.rule_facts())


def test_every_shipped_rule_and_profile_uses_declared_facts(catalogue: Catalogue) -> None:
    """The shipped files load under the check (this is what guards them)."""
    from pytest_devcaps.config import list_profiles

    names = {name for by_cap in catalogue.rules.values() for rules in by_cap.values()
             for rule in rules if rule.when is not None for name in rule.when.names}
    assert names and names <= set(builtin_vocabulary().names())
    for profile in list_profiles():
        load_profile(profile, catalogue)


# --- versions -------------------------------------------------------------------------------

def _holds(text: str, **facts: Any) -> bool:
    return compile_expression(text, facts=builtin_vocabulary()).evaluate(facts)


@pytest.mark.parametrize("literal", ["12.10", "'12.10'"])
def test_a_version_fact_against_12_10_compares_as_versions(literal: str) -> None:
    """12.10 as a float is 12.1, which 12.8 exceeds: the old, silently wrong answer."""
    assert not _holds(f"runtime_version >= {literal}", runtime_version="12.8")
    assert _holds(f"runtime_version >= {literal}", runtime_version="12.10")
    assert _holds(f"runtime_version < {literal}", runtime_version="12.9")
    assert _holds(f"cuda_version == {literal}", cuda_version="12.10.0")
    assert not _holds(f"cuda_version == {literal}", cuda_version="12.1")


@pytest.mark.parametrize("literal", ["2.10", "'2.10'"])
def test_torch_2_10_is_later_than_2_9(literal: str) -> None:
    assert not _holds(f"torch_version >= {literal}", torch_version="2.9.1+cpu")
    assert _holds(f"torch_version >= {literal}", torch_version="2.10.0+cu128")
    assert _holds(f"{literal} > torch_version", torch_version="2.9")


def test_version_literals_in_lists_chains_and_pickles() -> None:
    assert _holds("12.8 <= runtime_version < 12.10", runtime_version="12.9")
    assert not _holds("12.8 <= runtime_version < 12.10", runtime_version="12.10")
    assert _holds("runtime_version in [12.8, 12.10]", runtime_version="12.10")
    assert not _holds("runtime_version in [12.8, 12.10]", runtime_version="12.1")
    assert _holds("rocm_version >= 6.10", rocm_version="6.10")
    assert not _holds("rocm_version >= 6.10", rocm_version="6.9")
    # A number compared with a number fact stays a number.
    assert _holds("compute_capability >= 8.9", compute_capability=9.0)
    assert _holds("cudnn_version >= 90100", cudnn_version=91000)
    restored = pickle.loads(pickle.dumps(
        compile_expression("runtime_version >= 12.10", facts=builtin_vocabulary())))
    assert not restored.evaluate({"runtime_version": "12.8"})
    assert restored.evaluate({"runtime_version": "12.10"})


def test_a_pre_release_is_before_its_release_as_in_torch() -> None:
    """packaging's order, which torch.torch_version.TorchVersion uses for __version__."""
    assert not _holds("torch_version >= '2.10'", torch_version="2.10.0a0+git1234")
    assert _holds("torch_version >= '2.9'", torch_version="2.10.0a0+git1234")
    assert _holds("rocm_version >= '6.3'", rocm_version="6.3.42131-fa1d09cbd")


def test_an_override_when_compares_versions(write_yaml: Write, catalogue: Catalogue) -> None:
    path = write_yaml("""
        devcaps: 1
        overrides:
          - when: "runtime_version >= 12.10"
            set: {dtype.bf16: unsupported}
          - match: {cuda_version: ["12.10", "13.0"]}
            set: {dtype.fp16: unsupported}
        """)
    by_when, by_match = load_overrides([path], catalogue)
    old = DeviceIdentity("cuda", 0, "nvidia", "H100", "sm_90", runtime_version="12.8",
                         facts={"cuda_version": "12.8"})
    new = DeviceIdentity("cuda", 0, "nvidia", "H100", "sm_90", runtime_version="12.10",
                         facts={"cuda_version": "12.10.0"})
    assert [by_when.matches(old), by_when.matches(new)] == [False, True]
    assert [by_match.matches(old), by_match.matches(new)] == [False, True]


@pytest.mark.parametrize(("document", "line", "key"), [
    ("devcaps: 1\noverrides:\n  - match: {cuda_version: 12.10}\n    set: {dtype.bf16: native}\n",
     3, "overrides[0].match.cuda_version"),
    ("devcaps: 1\noverrides:\n  - match: {runtime_version: [12.8, '13.0']}\n"
     "    set: {dtype.bf16: native}\n", 3, "overrides[0].match.runtime_version"),
])
def test_an_unquoted_decimal_version_in_a_match_is_refused(
        write_yaml: Write, catalogue: Catalogue, document: str, line: int, key: str) -> None:
    path = write_yaml(document)
    error = _error(lambda: load_overrides([path], catalogue))
    assert (error.line, error.key) == (line, key)
    assert "is a version; quote it" in error.message and "12.10 would be 12.1" in error.message


@pytest.mark.parametrize(("device", "key"), [
    ("runtime_version: 12.10", "profile.devices[0].runtime_version"),
    ("torch_version: 2.10", "profile.devices[0].torch_version"),
    ("facts: {cuda_version: 12.8}", "profile.devices[0].facts.cuda_version"),
])
def test_an_unquoted_decimal_version_in_a_profile_is_refused(
        write_yaml: Write, catalogue: Catalogue, device: str, key: str) -> None:
    path = write_yaml(f"""
        devcaps: 1
        profile:
          name: p
          devices:
            - type: cuda
              arch: sm_90
              {device}
        """)
    error = _error(lambda: load_profile(path, catalogue))
    assert (error.line, error.key) == (7, key)
    assert "is a version; quote it" in error.message


def test_quoted_and_whole_number_versions_in_a_profile_load(write_yaml: Write,
                                                            catalogue: Catalogue) -> None:
    path = write_yaml("""
        devcaps: 1
        profile:
          name: p
          devices:
            - {type: cuda, arch: sm_90, runtime_version: "12.10", torch_version: 3,
               facts: {cuda_version: "12.10"}}
        """)
    (device,) = load_profile(path, catalogue).identities
    assert (device.runtime_version, device.torch_version) == ("12.10", "3")
