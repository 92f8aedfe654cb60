"""Checking a document against the reports' JSON Schema with the standard library alone.

``devcaps report html`` renders a fleet document only once it matches ``$defs/fleet`` of
``schemas/devcaps-report.schema.json``: a page is never made from a document whose shape the
schema does not allow. The ``devcaps`` command must not need ``jsonschema``, so this is the
subset of JSON Schema draft 2020-12 the schema file uses (``type``, ``const``, ``enum``,
``required``, ``properties``, ``additionalProperties``, ``items``, ``minItems``, ``minimum``,
``$ref`` within the file, ``allOf``, ``oneOf``), with the draft's rules: an ``integer`` is not a
boolean, a ``number`` is an integer or a float. ``tests/report/test_validate.py`` checks it gives
the same verdicts as ``jsonschema`` on the documents the tests build.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from pytest_devcaps.errors import DevcapsValueError

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


def validate(document: Any, schema: Mapping[str, Any], definition: str) -> None:
    """Raise :class:`SchemaMismatch` unless ``document`` matches ``$defs/<definition>``."""
    _Checker(schema).check(document, {"$ref": f"#/$defs/{definition}"}, "")


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``1`` is not ``true``."""
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


class _Checker:
    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.defs: Mapping[str, Any] = schema.get("$defs", {})

    def check(self, value: Any, schema: Mapping[str, Any], where: str) -> None:
        unknown = set(schema) - _KNOWN
        if unknown:
            raise SchemaMismatch(where, f"the schema uses {sorted(unknown)}, which this "
                                 "checker does not know")
        if "$ref" in schema:
            self.check(value, self._resolve(schema["$ref"]), where)
        for part in schema.get("allOf", ()):
            self.check(value, part, where)
        if "oneOf" in schema:
            self._one_of(value, schema["oneOf"], where)
        self._simple(value, schema, where)
        if isinstance(value, dict):
            self._object(value, schema, where)
        elif isinstance(value, list):
            self._array(value, schema, where)

    def _resolve(self, ref: str) -> Mapping[str, Any]:
        prefix = "#/$defs/"
        if not ref.startswith(prefix) or ref[len(prefix):] not in self.defs:
            raise SchemaMismatch("", f"the schema refers to {ref!r}, which it does not define")
        found: Mapping[str, Any] = self.defs[ref[len(prefix):]]
        return found

    def _one_of(self, value: Any, options: list[Mapping[str, Any]], where: str) -> None:
        matches = 0
        for option in options:
            try:
                self.check(value, option, where)
            except SchemaMismatch:
                continue
            matches += 1
        if matches != 1:
            raise SchemaMismatch(where, f"matches {matches} of the {len(options)} allowed "
                                 "shapes (exactly one must match)")

    def _simple(self, value: Any, schema: Mapping[str, Any], where: str) -> None:
        if "type" in schema:
            types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            if not any(_TYPES[t](value) for t in types):
                raise SchemaMismatch(where, f"expected {' or '.join(types)}, got "
                                     f"{type(value).__name__}")
        if "const" in schema and not _same(value, schema["const"]):
            raise SchemaMismatch(where, f"expected {schema['const']!r}, got {value!r:.80}")
        if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
            raise SchemaMismatch(where, f"expected one of {schema['enum']!r}, got {value!r:.80}")
        if "minimum" in schema and _TYPES["number"](value) and value < schema["minimum"]:
            raise SchemaMismatch(where, f"expected at least {schema['minimum']}, got {value}")

    def _object(self, value: dict[str, Any], schema: Mapping[str, Any], where: str) -> None:
        for key in schema.get("required", ()):
            if key not in value:
                raise SchemaMismatch(where, f"missing required key {key!r}")
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            inner = f"{where}.{key}" if where else str(key)
            if key in properties:
                self.check(item, properties[key], inner)
            elif extra is False:
                raise SchemaMismatch(inner, "is not allowed here")
            elif isinstance(extra, dict):
                self.check(item, extra, inner)

    def _array(self, value: list[Any], schema: Mapping[str, Any], where: str) -> None:
        if len(value) < schema.get("minItems", 0):
            raise SchemaMismatch(where, f"expected at least {schema['minItems']} item(s)")
        if "items" in schema:
            for i, item in enumerate(value):
                self.check(item, schema["items"], f"{where}[{i}]")
