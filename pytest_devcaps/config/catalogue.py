"""The capability catalogue (``capabilities.yaml``): capability declarations and vendor rules.

Schema::

    devcaps: 1
    capabilities:
      dtype.bf16:                       # '<category>.<name>', lower snake_case
        description: bfloat16 arithmetic
        dtypes: [bfloat16]              # optional: torch dtypes this capability gates
        implies: [dtype.fp16]           # optional: capabilities this one needs (enforced)
        aliases: [dtype.bfloat16]       # optional: other names (PyTorch's) that resolve to this one
    vendors:
      nvidia:                           # DeviceIdentity.vendor, or "*" for every vendor
        dtype.bf16:
          - when: "compute_capability >= 8.0"     # optional; a rule expression over facts
            level: native
            reason: "bf16 tensor cores need sm_80+; found {arch}"
            source: "torch/testing/_internal/common_cuda.py evaluate_platform_supports_bf16"
          - level: emulated
            reason: "..."
            source: "..."                 # where the rule comes from (required in the shipped file)

A ``when:`` names device facts only (:mod:`pytest_devcaps.config.facts`: the identity fields plus
what the backend adapters declare); any other name is an error with the closest fact. Version
facts (``torch_version``, ``runtime_version``, ``cuda_version``, ``rocm_version``...) compare
as versions, with a number literal read as written: ``runtime_version >= 12.10`` holds for
12.10 and not for 12.8, the same as ``runtime_version >= "12.10"``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence, Union

from pytest_devcaps.config.expressions import Expression, compile_expression
from pytest_devcaps.config.yamlsource import (
    FrozenMap,
    Where,
    check_capability_name,
    check_document,
    check_identifier,
    check_keys,
    document_from_plain,
    document_to_plain,
    expect_list,
    expect_mapping,
    expect_str,
    items,
    line_of,
    no_cyclic_gc,
    parse_yaml_bytes,
    read_source,
    short,
)
from pytest_devcaps.errors import (
    ConfigError,
    DevcapsError,
    UnknownCapabilityError,
    did_you_mean,
    short_repr,
)
from pytest_devcaps.model import DeviceIdentity, Level

if TYPE_CHECKING:
    from pytest_devcaps.config.facts import FactVocabulary

ANY_VENDOR = "*"
# Vendors of the builtin backends; others (PrivateUse1) are fine unless they look like a typo.
KNOWN_VENDORS = ("nvidia", "amd", "intel", "apple", "habana", "cpu")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_VENDOR_PATTERN = re.compile(r"^[a-z][a-z0-9_\-]*$")


@dataclass(frozen=True)
class CapabilitySpec:
    """One declared capability.

    ``dtypes`` are the torch dtype names (``bfloat16``) this capability gates; ``implies`` the
    capabilities it needs, which the registry enforces; ``aliases`` other names (PyTorch's
    capability names) that markers and lookups resolve to this one. Whether a probe measures it
    is not said here: a capability is probed when a probe is registered under its name.
    """

    name: str
    description: str
    implies: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class RuleVerdict:
    """What a vendor rule, override or profile says about one capability."""

    level: Level
    reason: str


@dataclass(frozen=True)
class VendorRule:
    """One vendor rule: when ``when`` holds (or always, without it), the answer is ``level``.

    ``reason`` is a template: ``{fact}`` is replaced by that fact's value; ``source`` says
    where the rule comes from (the PyTorch file and function it mirrors, or a vendor document).
    """

    level: Level
    reason: str
    when: Expression | None = None
    file: str | None = None
    line: int | None = None
    source: str | None = None

    def matches(self, facts: Mapping[str, Any]) -> bool:
        return self.when is None or self.when.evaluate(facts)

    def verdict(self, facts: Mapping[str, Any]) -> RuleVerdict:
        return RuleVerdict(self.level, render_reason(self.reason, facts))


RulesInput = Union[Mapping[str, Mapping[str, Sequence[VendorRule]]],
                   Iterable[tuple[str, str, VendorRule]]]


def render_reason(template: str, facts: Mapping[str, Any]) -> str:
    """Substitute ``{identifier}`` with the fact's value (``unknown`` when missing).

    A plain regex substitution on purpose: no attribute or index access as in str.format.
    """

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in facts:
            return "unknown"
        return format_fact(facts[name])

    return _PLACEHOLDER.sub(substitute, template)


def format_fact(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, set, frozenset)):
        return "[" + ", ".join(format_fact(item) for item in value) + "]"
    return str(value)


def _freeze_rules(rules: Mapping[str, Mapping[str, Sequence[VendorRule]]]
                  ) -> Mapping[str, Mapping[str, tuple[VendorRule, ...]]]:
    return FrozenMap({vendor: FrozenMap({cap: tuple(rule_list) for cap, rule_list in by_cap.items()})
                      for vendor, by_cap in rules.items()})


@dataclass(frozen=True)
class Catalogue:
    """Declared capabilities plus per-vendor rules; immutable."""

    capabilities: Mapping[str, CapabilitySpec] = field(compare=False)
    rules: Mapping[str, Mapping[str, tuple[VendorRule, ...]]] = field(compare=False, repr=False)
    source: str
    digest: str  # equal digests mean equal content, so equality and hashing use it

    def names(self) -> list[str]:
        """All capability names, sorted."""
        return sorted(self.capabilities)

    def __contains__(self, name: object) -> bool:
        return name in self.capabilities

    def check_name(self, name: str) -> CapabilitySpec:
        """The spec of ``name`` or of the capability it is an alias of (a name that *asks*, see
        :data:`ALIAS_POLICY`); raises UnknownCapabilityError with the closest valid name
        (aliases included)."""
        spec = self.capabilities.get(name) if isinstance(name, str) else None
        if spec is not None:  # a declared name (never an alias: _check_aliases): no alias table
            return spec       # to build, which every marker and record lookup would pay for
        try:
            return self.capabilities[self.aliases().get(name, name)]
        except (KeyError, TypeError):
            raise UnknownCapabilityError(str(name), [*self.capabilities, *self.aliases()]) from None

    def resolve(self, name: str) -> str | None:
        """The capability ``name`` asks for (an alias resolved), None for an unknown name."""
        if not isinstance(name, str):
            return None
        if name in self.capabilities:
            return name
        return self.aliases().get(name)

    def check_key(self, name: str, *, file: str | None = None, key: str | None = None) -> str:
        """``name`` as a name that *sets* an answer (see :data:`ALIAS_POLICY`): a declared
        capability; an alias or unknown name is a ConfigError saying which capability to use."""
        if isinstance(name, str) and name in self.capabilities:
            return name
        raise ConfigError(alias_or_unknown(str(name), self.capabilities), file=file, key=key)

    def aliases(self) -> Mapping[str, str]:
        """Every alias and the capability it resolves to (``dtype.fp8`` -> ``mm.scaled``)."""
        return self._alias_table

    @functools.cached_property
    def _alias_table(self) -> Mapping[str, str]:
        # built once per catalogue (its capabilities are a FrozenMap): asked per test by markers
        # and classification
        return FrozenMap({alias: spec.name for spec in self.capabilities.values()
                          for alias in spec.aliases})

    def capability_for_dtype(self, dtype_name: str) -> str | None:
        """The capability gating torch dtype ``dtype_name`` (``bfloat16``), None when none does."""
        return self._dtype_index.get(dtype_name)

    @functools.cached_property
    def _dtype_index(self) -> Mapping[str, str]:
        return FrozenMap({dtype: spec.name for spec in self.capabilities.values()
                          for dtype in spec.dtypes})

    def implication_order(self) -> list[str]:
        """Capability names, every capability after the ones it implies (they are acyclic)."""
        ordered: list[str] = []
        placed: set[str] = set()

        def place(name: str) -> None:
            if name in placed:
                return
            placed.add(name)
            for target in self.capabilities[name].implies:
                place(target)
            ordered.append(name)

        for name in self.names():
            place(name)
        return ordered

    def rules_for(self, vendor: str, capability: str) -> tuple[VendorRule, ...]:
        """The vendor's rules for ``capability`` followed by the ``"*"`` rules."""
        own = self.rules.get(vendor, {}).get(capability, ())
        if vendor == ANY_VENDOR:
            return own
        return own + self.rules.get(ANY_VENDOR, {}).get(capability, ())

    def with_capabilities(self, specs: Iterable[CapabilitySpec], rules: RulesInput = (),
                          facts: FactVocabulary | None = None) -> Catalogue:
        """A new catalogue with hook-contributed capabilities and rules added.

        Added rules are tried before the existing rules of the same vendor and capability.
        Re-declaring an existing capability identically is allowed; differently, an error.
        Each added rule's ``when`` is checked against ``facts`` (default: the builtin
        backends' vocabulary; the registry passes the one with hook backends).
        """
        capabilities = dict(self.capabilities)
        added_specs: list[CapabilitySpec] = []
        for spec in specs:
            where = Where("<hook>", None, spec.name)
            check_capability_name(spec.name, where)
            existing = capabilities.get(spec.name)
            if existing is not None and existing != spec:
                raise where.error(f"capability already declared differently in {self.source}")
            if existing is None:
                capabilities[spec.name] = spec
                added_specs.append(spec)
        for spec in added_specs:
            _check_implies(spec.name, spec.implies, capabilities, Where("<hook>", None, spec.name))
        _check_implication_cycles(capabilities, lambda name: Where("<hook>", None, name))
        _check_dtypes(capabilities, lambda name: Where("<hook>", None, name))
        _check_aliases(capabilities, lambda name: Where("<hook>", None, name))

        triples = _checked_rule_facts(_rule_triples(rules), _vocabulary(facts))
        merged = {vendor: dict(by_cap) for vendor, by_cap in self.rules.items()}
        added: dict[tuple[str, str], list[VendorRule]] = {}
        for vendor, capability, rule in triples:
            where = Where("<hook>", None, f"vendors.{vendor}.{capability}")
            if capability not in capabilities:
                raise where.error(f"rule for {alias_or_unknown(capability, capabilities)}")
            added.setdefault((vendor, capability), []).append(rule)
        for (vendor, capability), new_rules in added.items():
            by_cap = merged.setdefault(vendor, {})
            by_cap[capability] = tuple(new_rules) + tuple(by_cap.get(capability, ()))

        digest = self.digest
        if added_specs or triples:
            additions = _describe_additions(added_specs, triples)
            digest = hashlib.sha256(f"{self.digest}\n{additions}".encode("utf-8")).hexdigest()
        return replace(self, capabilities=FrozenMap(capabilities),
                       rules=_freeze_rules(merged), digest=digest)


def _rule_triples(rules: RulesInput) -> list[tuple[str, str, VendorRule]]:
    """Hook rules as ``(vendor, capability, rule)``, vendor names lower-cased like identities."""
    if isinstance(rules, Mapping):
        triples = [(vendor, capability, rule) for vendor, by_cap in rules.items()
                   for capability, rule_list in by_cap.items() for rule in rule_list]
    else:
        triples = [(vendor, capability, rule) for vendor, capability, rule in rules]
    return [(vendor if vendor == ANY_VENDOR else vendor.lower(), capability, rule)
            for vendor, capability, rule in triples]


def _checked_rule_facts(triples: list[tuple[str, str, VendorRule]],
                        facts: FactVocabulary) -> list[tuple[str, str, VendorRule]]:
    """Hook rules compiled again against the fact vocabulary (unknown facts are errors)."""
    checked = []
    for vendor, capability, rule in triples:
        if rule.when is not None:
            when = compile_expression(rule.when.text, file=rule.file or "<hook>", line=rule.line,
                                      key=f"vendors.{vendor}.{capability}", facts=facts)
            rule = replace(rule, when=when)
        checked.append((vendor, capability, rule))
    return checked


def _vocabulary(facts: FactVocabulary | None) -> FactVocabulary:
    if facts is not None:
        return facts
    from pytest_devcaps.config.facts import builtin_vocabulary

    return builtin_vocabulary()


def _describe_additions(specs: Sequence[CapabilitySpec],
                        triples: Sequence[tuple[str, str, VendorRule]]) -> str:
    payload = {
        "capabilities": [[s.name, s.description, list(s.implies), list(s.dtypes), list(s.aliases)]
                         for s in specs],
        "rules": [[vendor, cap, rule.level.value, rule.reason,
                   None if rule.when is None else rule.when.text, rule.source]
                  for vendor, cap, rule in triples],
    }
    return json.dumps(payload, sort_keys=True)


def classify(catalogue: Catalogue, identity: DeviceIdentity) -> dict[str, RuleVerdict]:
    """Per capability, the verdict of the first vendor rule matching the device's facts.

    The device vendor's own rules come first, then the ``"*"`` rules. Capabilities with no
    matching rule are absent from the result (the caller decides what "no rule" means).
    """
    facts = identity.rule_facts()
    vendor = str(identity.vendor).lower()
    verdicts: dict[str, RuleVerdict] = {}
    for capability in catalogue.capabilities:
        rule = first_matching_rule(catalogue, vendor, capability, facts)
        if rule is not None:
            verdicts[capability] = rule.verdict(facts)
    return verdicts


def first_matching_rule(catalogue: Catalogue, vendor: str, capability: str,
                        facts: Mapping[str, Any]) -> VendorRule | None:
    """The rule :func:`classify` uses for one capability: the first whose ``when`` holds."""
    return next((rule for rule in catalogue.rules_for(vendor, capability) if rule.matches(facts)),
                None)


# --- parsing -----------------------------------------------------------------------------

def parse_level(value: Any, where: Where) -> Level:
    """A level name from YAML; the error lists the valid levels."""
    if not isinstance(value, str):
        valid = ", ".join(level.value for level in Level)
        raise where.error(f"expected a level ({valid}), found {short_repr(value)}")
    try:
        return Level.parse(value)
    except ValueError as exc:
        raise where.error(str(exc)) from None


def parse_verdict(value: Any, where: Where, default_reason: str) -> RuleVerdict:
    """``native`` or ``{level: native, reason: "..."}`` (overrides and profile ``fixed:``)."""
    if isinstance(value, dict):
        check_keys(value, where, allowed={"level", "reason"}, required={"level"})
        level = parse_level(value["level"], where.child(value, "level"))
        reason = default_reason
        if "reason" in value:
            reason = expect_str(value["reason"], where.child(value, "reason"))
        return RuleVerdict(level, reason)
    return RuleVerdict(parse_level(value, where), default_reason)


def capability_key(name: Any, where: Where, known: Mapping[str, Any]) -> str:
    """A capability name used as a key: valid form and declared in the catalogue (an alias is
    refused naming the capability it stands for: keys take the capability's own name)."""
    if name not in known:
        check_capability_name(name, where)
        raise where.error(alias_or_unknown(short(name), known))
    return str(name)


ALIAS_POLICY = """\
A name that asks about a capability accepts an alias (PyTorch's name for it): markers, \
--devcaps-require, registry queries, devcaps probe --explain. A name that sets or defines an \
answer takes the capability's own name, and an alias there is refused naming it: \
--devcaps-set, override and profile keys, vendor rules, implies, hook records and probes."""
"""The one alias rule; :meth:`Catalogue.check_name` / :meth:`Catalogue.resolve` ask,
:meth:`Catalogue.check_key` / :func:`capability_key` / :func:`alias_or_unknown` set."""


def alias_or_unknown(name: str, known: Mapping[str, Any]) -> str:
    """Why ``name`` cannot set an answer: an alias of a capability (``use the capability name
    X``), or unknown (the message of :class:`UnknownCapabilityError`, closest name)."""
    owner = next((spec.name for spec in known.values()
                  if name in getattr(spec, "aliases", ())), None)
    if owner is not None:
        return f"{name!r} is an alias of {owner!r}; use the capability name {owner!r}"
    return str(UnknownCapabilityError(name, known))


def _parse_capability(name: Any, body: Any, where: Where) -> CapabilitySpec:
    check_capability_name(name, where)
    expect_mapping(body, where)
    check_keys(body, where, allowed={"description", "implies", "dtypes", "aliases"},
               required={"description"})
    description = expect_str(body["description"], where.child(body, "description"))
    implies = _name_list(body, "implies", where)
    dtypes = _name_list(body, "dtypes", where)
    for dtype in dtypes:
        check_identifier(dtype, where.child(body, "dtypes"), "torch dtype name")
    aliases = _name_list(body, "aliases", where)
    for alias in aliases:
        check_capability_name(alias, where.child(body, "aliases"))
    return CapabilitySpec(name=name, description=description.strip(), implies=implies,
                          dtypes=dtypes, aliases=aliases)


def _name_list(body: Mapping[str, Any], key: str, where: Where) -> tuple[str, ...]:
    """An optional ``key: name`` or ``key: [name, ...]`` entry as a tuple of strings."""
    if key not in body:
        return ()
    list_where = where.child(body, key)
    raw = body[key]
    raw_list = [raw] if isinstance(raw, str) else expect_list(raw, list_where)
    return tuple(expect_str(item, list_where.child(raw_list, i)) for i, item in enumerate(raw_list))


def _check_dtypes(capabilities: Mapping[str, CapabilitySpec],
                  where_of: Callable[[str], Where]) -> None:
    """A torch dtype is gated by one capability at most (the ``dtype`` fixture asks which)."""
    owner: dict[str, str] = {}
    for spec in capabilities.values():
        for dtype in spec.dtypes:
            if dtype in owner and owner[dtype] != spec.name:
                raise where_of(spec.name).error(
                    f"dtype {dtype!r} is already gated by {owner[dtype]!r}; a dtype belongs to "
                    "one capability at most")
            owner[dtype] = spec.name


def _check_aliases(capabilities: Mapping[str, CapabilitySpec],
                   where_of: Callable[[str], Where]) -> None:
    """An alias names one capability and is not itself a capability name."""
    owner: dict[str, str] = {}
    for spec in capabilities.values():
        for alias in spec.aliases:
            if alias in capabilities:
                raise where_of(spec.name).error(
                    f"alias {alias!r} is the name of a declared capability; an alias must be "
                    "another name")
            if owner.setdefault(alias, spec.name) != spec.name:
                raise where_of(spec.name).error(
                    f"alias {alias!r} already resolves to {owner[alias]!r}; an alias names one "
                    "capability")


def _check_implication_cycles(capabilities: Mapping[str, CapabilitySpec],
                              where_of: Callable[[str], Where]) -> None:
    """``implies`` must be acyclic: the registry enforces implications in dependency order."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = path[path.index(name):] + [name]
            raise where_of(cycle[0]).error("implies forms a cycle: " + " -> ".join(cycle))
        state[name] = 1
        for target in capabilities[name].implies:
            visit(target, [*path, name])
        state[name] = 2

    for name in capabilities:
        visit(name, [])


def _check_implies(name: str, implies: Sequence[str], known: Mapping[str, Any],
                   where: Where) -> None:
    for target in implies:
        if target == name:
            raise where.error(f"{name!r} cannot imply itself")
        if target not in known:
            raise where.error(f"implies {alias_or_unknown(target, known)}")


def _parse_rules(rules_body: Any, where: Where, facts: FactVocabulary, *,
                 require_source: bool = False) -> tuple[VendorRule, ...]:
    expect_list(rules_body, where)
    if not rules_body:
        raise where.error("expected at least one rule")
    parsed: list[VendorRule] = []
    unconditional_line: int | None = None
    for index, rule in enumerate(rules_body):
        rule_where = where.child(rules_body, index)
        expect_mapping(rule, rule_where)
        check_keys(rule, rule_where, allowed={"when", "level", "reason", "source"},
                   required={"level", "reason", "source"} if require_source else {"level", "reason"})
        if unconditional_line is not None:
            raise rule_where.error(f"rule can never apply: the rule on line {unconditional_line} "
                                   "has no 'when' and always matches first")
        when = None
        if "when" in rule:
            when_where = rule_where.child(rule, "when")
            text = rule["when"]
            if isinstance(text, bool):
                text = "True" if text else "False"
            expect_str(text, when_where)
            when = compile_expression(text, file=when_where.file, line=when_where.line,
                                      key=when_where.key, facts=facts)
        else:
            unconditional_line = rule_where.line
        level = parse_level(rule["level"], rule_where.child(rule, "level"))
        reason = expect_str(rule["reason"], rule_where.child(rule, "reason")).strip()
        source = None
        if "source" in rule:
            source = " ".join(expect_str(rule["source"], rule_where.child(rule, "source")).split())
        parsed.append(VendorRule(level=level, reason=reason, when=when, file=where.file,
                                 line=rule_where.line, source=source))
    return tuple(parsed)


def parse_catalogue(document: Any, source: str, raw: bytes,
                    facts: FactVocabulary | None = None, *,
                    require_sources: bool = False) -> Catalogue:
    """Validate a parsed catalogue document and build the Catalogue; rules may name the facts
    of ``facts`` (default: the builtin backends' vocabulary).

    ``require_sources``: every vendor rule must say where it comes from (``source:``), as the
    shipped catalogue's rules do.
    """
    vocabulary = _vocabulary(facts)
    check_document(document, source, body_keys={"capabilities", "vendors"},
                   required={"capabilities"})
    top = Where(source, line_of(document), "")
    caps_where = top.child(document, "capabilities")
    caps_body = expect_mapping(document["capabilities"], caps_where)
    capabilities: dict[str, CapabilitySpec] = {}
    for name, body, where in items(caps_body, caps_where):
        capabilities[name] = _parse_capability(name, body, where)
    wheres: dict[str, Where] = {}
    for name, body, where in items(caps_body, caps_where):
        _check_implies(name, capabilities[name].implies, capabilities,
                       where.child(body, "implies"))
        wheres[name] = where
    _check_implication_cycles(capabilities, wheres.__getitem__)
    _check_dtypes(capabilities, wheres.__getitem__)
    _check_aliases(capabilities, wheres.__getitem__)

    rules: dict[str, dict[str, tuple[VendorRule, ...]]] = {}
    if document.get("vendors") is not None:
        vendors_where = top.child(document, "vendors")
        vendors_body = expect_mapping(document["vendors"], vendors_where)
        for vendor, by_cap, vendor_where in items(vendors_body, vendors_where):
            if vendor != ANY_VENDOR and not (isinstance(vendor, str)
                                             and _VENDOR_PATTERN.match(vendor)):
                raise vendor_where.error(
                    f"invalid vendor name {short_repr(vendor)}; expected a lower-case name such as "
                    "'nvidia' or '*' for every vendor")
            hint = did_you_mean(vendor, KNOWN_VENDORS, cutoff=0.75)
            if vendor not in KNOWN_VENDORS and vendor != ANY_VENDOR and hint:
                raise vendor_where.error(f"unknown vendor {vendor!r}{hint}; "
                                         f"builtin vendors: {', '.join(KNOWN_VENDORS)}")
            expect_mapping(by_cap, vendor_where)
            vendor_rules = rules.setdefault(vendor, {})
            for capability, rules_body, cap_where in items(by_cap, vendor_where):
                capability_key(capability, cap_where, capabilities)
                vendor_rules[capability] = _parse_rules(rules_body, cap_where, vocabulary,
                                                        require_source=require_sources)

    return Catalogue(capabilities=FrozenMap(capabilities), rules=_freeze_rules(rules),
                     source=source, digest=hashlib.sha256(raw).hexdigest())


def shipped_catalogue_path() -> Path:
    """The ``capabilities.yaml`` shipped with the package (the repository root in a checkout)."""
    resource = importlib.resources.files("pytest_devcaps").joinpath("capabilities.yaml")
    path = Path(str(resource))
    if path.is_file():
        return path
    return Path(__file__).resolve().parents[2] / "capabilities.yaml"


@functools.lru_cache(maxsize=1)
def _shipped_catalogue(path: Path, mtime_ns: int) -> Catalogue:
    # Loading builds thousands of small objects; with torch imported, each collection they
    # trigger walks millions of torch objects (80 ms for the YAML parse, 400 ms for rebuilding
    # the cached document, measured). Nothing here forms cycles worth collecting.
    with no_cyclic_gc():
        return _parsed_with_disk_cache(path)


_CACHE_FORMAT = 1  # bump when document_to_plain changes shape


def _cached_document(cached: Path) -> Any:
    """The document stored at ``cached``, or None: absent, refused (another user's file, or
    writable by others), torn or of any other shape all mean parsing the YAML again."""
    from pytest_devcaps._util.files import read_regular_file

    try:
        data = json.loads(read_regular_file(cached, trusted=True))
        if not (isinstance(data, dict) and data.get("format") == _CACHE_FORMAT):
            return None
        return document_from_plain(data.get("document"))
    except (OSError, DevcapsError, ValueError, RecursionError):
        return None


def _parsed_with_disk_cache(path: Path) -> Catalogue:
    """Parse ``path``, reusing a JSON copy of its parsed YAML document keyed by its content.

    With torch imported, parsing 500 lines of YAML costs ~80 ms; reading the JSON copy a few.
    The copy is plain data (it cannot run code, unlike the pickle it replaces): it is
    validated again on every load exactly as the YAML would be, and read only when this user
    owns it and nobody else may write it. Only a document that validated is stored.
    """
    from pytest_devcaps._util.files import default_cache_dir
    from pytest_devcaps._util.files import write_atomic
    from pytest_devcaps.version import __version__

    raw = read_source(path)
    key = hashlib.sha256(raw + f"{__version__}/{_CACHE_FORMAT}".encode()).hexdigest()[:32]
    cached = default_cache_dir() / f"catalogue-{key}.json"
    document = _cached_document(cached)
    if document is not None:
        try:
            return parse_catalogue(document, str(path), raw, require_sources=True)
        except ConfigError:
            pass  # a copy that no longer validates: parse the YAML itself
    document = parse_yaml_bytes(raw, str(path))
    catalogue = parse_catalogue(document, str(path), raw, require_sources=True)
    try:
        write_atomic(cached, json.dumps({"format": _CACHE_FORMAT,
                                         "document": document_to_plain(document)}),
                     private=True)
    except (OSError, DevcapsError, TypeError, ValueError):
        pass  # a read-only cache directory only costs the next session a parse
    return catalogue


def load_catalogue(path: str | Path | None = None,
                   facts: FactVocabulary | None = None) -> Catalogue:
    """Load and validate a catalogue; None means the shipped ``capabilities.yaml``.

    Rules may name the facts of ``facts`` (default: the builtin backends' vocabulary, which
    is what the shipped catalogue is checked against).
    """
    if path is None:
        shipped = shipped_catalogue_path()
        try:
            mtime = shipped.stat().st_mtime_ns
        except OSError:
            raise ConfigError("the shipped capabilities.yaml is missing from the installation",
                              file=str(shipped)) from None
        return _shipped_catalogue(shipped, mtime)
    raw = read_source(path)
    return parse_catalogue(parse_yaml_bytes(raw, str(path)), str(path), raw, facts)
