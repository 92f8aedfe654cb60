"""Checking a document against the reports' JSON Schema with the standard library alone.

``devcaps report html`` renders a fleet document only once it matches ``$defs/fleet`` of
``schemas/devcaps-report.schema.json``: a page is never made from a document whose shape the
schema does not allow; ``sources.py`` checks every report of a current format against its
kind's definition before the merge believes it. The ``devcaps`` command must not need ``jsonschema``, so this is the
subset of JSON Schema draft 2020-12 the schema file uses (``type``, ``const``, ``enum``,
``required``, ``properties``, ``additionalProperties``, ``items``, ``minItems``, ``minimum``,
``$ref`` within the file, ``allOf``, ``oneOf``), with the draft's rules: an ``integer`` is not a
boolean, a ``number`` is an integer or a float. ``tests/report/test_validate.py`` checks it gives
the same verdicts as ``jsonschema`` on the documents the tests build.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Tuple, Union

from pytest_devcaps.errors import DevcapsValueError, did_you_mean, short_repr

SCHEMA_FILE = "devcaps-report.schema.json"

_TYPES: Mapping[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
_IGNORED = frozenset({"$schema", "$defs", "title", "description"})
_KNOWN = frozenset({"type", "const", "enum", "required", "properties", "additionalProperties",
                    "items", "minItems", "minimum", "$ref", "allOf", "oneOf"}) | _IGNORED


class SchemaMismatch(DevcapsValueError):
    """The document does not match: ``where`` is the key path (``suites[2].counts``)."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where or '(document)'}: {message}")
        self.where = where
        self.detail = message


def schema_text() -> str:
    """The JSON Schema of every kind of report (package data ``schemas/devcaps-report.schema.json``)."""
    return (resources.files("pytest_devcaps.report") / "schemas" / SCHEMA_FILE).read_text("utf-8")


@lru_cache(maxsize=1)
def _schema() -> Mapping[str, Any]:
    loaded: Mapping[str, Any] = json.loads(schema_text())
    return loaded


def validate_kind(document: Any, definition: str) -> None:
    """:func:`validate` against the shipped schema's ``$defs/<definition>``."""
    validate(document, _schema(), definition)


def validate(document: Any, schema: Mapping[str, Any], definition: str) -> None:
    """Raise :class:`SchemaMismatch` unless ``document`` matches ``$defs/<definition>``."""
    _Checker(schema).check(document, {"$ref": f"#/$defs/{definition}"}, None)


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``1`` is not ``true``."""
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


Where = Optional[Tuple[Any, Union[str, int]]]
"""Where a value sits, built only when a message needs it: (the parent's Where, key or index)."""


def _path(where: Where) -> str:
    parts: list[str] = []
    while where is not None:
        where, key = where
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    return "".join(reversed(parts)).lstrip(".")


@dataclass(frozen=True)
class _Node:
    """One schema object, its keywords read once (a document of a million tests visits each
    node a million times)."""

    schema: Mapping[str, Any]
    parts: tuple[Mapping[str, Any], ...]
    """``$ref`` target and ``allOf`` parts, checked first, in that order."""
    one_of: tuple[Mapping[str, Any], ...] | None
    types: tuple[Callable[[Any], bool], ...] | None
    values: bool
    """Has ``const``, ``enum`` or ``minimum``."""
    properties: Mapping[str, Any]
    extra: Any
    items: Mapping[str, Any] | None


class _Checker:
    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.defs: Mapping[str, Any] = schema.get("$defs", {})
        self.nodes: dict[int, _Node] = {}

    def _node(self, schema: Mapping[str, Any]) -> _Node:
        node = self.nodes.get(id(schema))
        if node is not None and node.schema is schema:
            return node
        unknown = set(schema) - _KNOWN
        if unknown:
            raise SchemaMismatch("", f"the schema uses {sorted(unknown)}, which this checker "
                                 "does not know")
        types = schema.get("type")
        node = _Node(
            schema=schema,
            parts=((self._resolve(schema["$ref"]),) if "$ref" in schema else ())
            + tuple(schema.get("allOf", ())),
            one_of=tuple(schema["oneOf"]) if "oneOf" in schema else None,
            types=None if types is None else tuple(
                _TYPES[t] for t in (types if isinstance(types, list) else [types])),
            values=any(key in schema for key in ("const", "enum", "minimum")),
            properties=schema.get("properties", {}), extra=schema.get("additionalProperties"),
            items=schema.get("items"))
        self.nodes[id(schema)] = node
        return node

    def check(self, value: Any, schema: Mapping[str, Any], where: Where) -> None:
        node = self._node(schema)
        for part in node.parts:
            self.check(value, part, where)
        if node.one_of is not None:
            self._one_of(value, node.one_of, where)
        if node.types is not None and not any(test(value) for test in node.types):
            types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            raise SchemaMismatch(_path(where), f"expected {' or '.join(types)}, got "
                                 f"{type(value).__name__}")
        if node.values:
            self._values(value, schema, where)
        if isinstance(value, dict):
            self._object(value, node, where)
        elif isinstance(value, list):
            self._array(value, node, where)

    def _resolve(self, ref: str) -> Mapping[str, Any]:
        prefix = "#/$defs/"
        if not ref.startswith(prefix) or ref[len(prefix):] not in self.defs:
            raise SchemaMismatch("", f"the schema refers to {ref!r}, which it does not define")
        found: Mapping[str, Any] = self.defs[ref[len(prefix):]]
        return found

    def _one_of(self, value: Any, options: tuple[Mapping[str, Any], ...], where: Where) -> None:
        matches = 0
        for option in options:
            try:
                self.check(value, option, where)
            except SchemaMismatch:
                continue
            matches += 1
        if matches != 1:
            raise SchemaMismatch(_path(where), f"matches {matches} of the {len(options)} "
                                 "allowed shapes (exactly one must match)")

    def _values(self, value: Any, schema: Mapping[str, Any], where: Where) -> None:
        """``const``, ``enum`` and ``minimum``."""
        if "const" in schema and not _same(value, schema["const"]):
            raise SchemaMismatch(_path(where), f"expected {schema['const']!r}, got "
                                 f"{short_repr(value)}")
        if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
            close = did_you_mean(value.lower(), [o for o in schema["enum"] if isinstance(o, str)]) \
                if isinstance(value, str) else ""
            raise SchemaMismatch(_path(where), f"expected one of {schema['enum']!r}, got "
                                 f"{short_repr(value)}{close}")
        if "minimum" in schema and _TYPES["number"](value) and value < schema["minimum"]:
            raise SchemaMismatch(_path(where), f"expected at least {schema['minimum']}, got "
                                 f"{value}")

    def _object(self, value: dict[str, Any], node: _Node, where: Where) -> None:
        for key in node.schema.get("required", ()):
            if key not in value:
                raise SchemaMismatch(_path(where), f"missing required key {key!r}")
        properties, extra = node.properties, node.extra
        for key, item in value.items():
            inner = (where, key)
            if key in properties:
                self.check(item, properties[key], inner)
            elif extra is False:
                raise SchemaMismatch(_path(inner), "is not allowed here")
            elif isinstance(extra, dict):
                self.check(item, extra, inner)

    def _array(self, value: list[Any], node: _Node, where: Where) -> None:
        least = node.schema.get("minItems", 0)
        if len(value) < least:
            raise SchemaMismatch(_path(where), f"expected at least {least} item(s)")
        if node.items is not None:
            for i, item in enumerate(value):
                self.check(item, node.items, (where, i))
