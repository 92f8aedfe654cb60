"""YAML loading that remembers the line of every key, plus the shared schema checks.

Every mapping the loader builds is a :class:`LineDict` (``.lines[key]`` is the 1-based line
of that key, ``.line`` the line the mapping starts on) and every sequence a
:class:`LineList` (``.lines[i]`` is the line of item ``i``), so each validation error can
name the line a user has to fix.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Iterator, Mapping, TypeVar, cast


from pytest_devcaps.errors import ConfigError, did_you_mean

SCHEMA_VERSION = 1
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*\.[a-z0-9][a-z0-9_]*$")
IDENTIFIER_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


K = TypeVar("K")
V = TypeVar("V")


class FrozenMap(Mapping[K, V]):
    """A read-only mapping that, unlike MappingProxyType, pickles (for worker processes)."""

    __slots__ = ("_data",)
    _data: dict[K, V]

    def __init__(self, data: Mapping[K, V] | None = None) -> None:
        object.__setattr__(self, "_data", dict(data or {}))

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenMap, (self._data,))


class LineDict(dict[Any, Any]):
    """A dict that knows the source line of each of its keys."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lines: dict[Any, int] = {}
        self.line: int | None = None


class LineList(list[Any]):
    """A list that knows the source line of each of its items."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lines: list[int] = []
        self.line: int | None = None


@functools.lru_cache(maxsize=1)
def _line_loader() -> type[Any]:
    """The loader class, built on first use: a warm start reads a pickled catalogue and never
    needs PyYAML, whose import costs ~10 ms."""
    import yaml

    # libyaml's parser is ~10x faster than the pure-Python one.
    base: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class _LineLoader(base):  # type: ignore[misc]
        """SafeLoader whose mappings and sequences record source lines and refuse duplicate keys."""

        source_name = "<string>"
        # The errors of the PyYAML module this class was built from (a test harness that
        # re-imports yaml must not make ``except yaml.YAMLError`` miss them).
        marked_error = yaml.MarkedYAMLError
        yaml_error = yaml.YAMLError

        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> LineDict:
            if not isinstance(node, yaml.MappingNode):
                raise yaml.constructor.ConstructorError(
                    None, None, f"expected a mapping, found {node.id}", node.start_mark)
            self.flatten_mapping(node)
            mapping = LineDict()
            mapping.line = node.start_mark.line + 1
            for key_node, value_node in node.value:
                key = self.construct_object(key_node, deep=deep)
                line = key_node.start_mark.line + 1
                try:
                    hash(key)
                except TypeError:
                    raise ConfigError("mapping keys must be plain scalars", file=self.source_name,
                                      line=line) from None
                if key in mapping:
                    raise ConfigError(
                        f"duplicate key (first defined on line {mapping.lines[key]})",
                        file=self.source_name, line=line, key=str(key))
                mapping[key] = self.construct_object(value_node, deep=deep)
                mapping.lines[key] = line
            return mapping

        def construct_line_sequence(self, node: yaml.SequenceNode) -> LineList:
            sequence = LineList(self.construct_object(child, deep=True) for child in node.value)
            sequence.lines = [child.start_mark.line + 1 for child in node.value]
            sequence.line = node.start_mark.line + 1
            return sequence

    _LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                _LineLoader.construct_mapping)
    _LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG,
                                _LineLoader.construct_line_sequence)
    return _LineLoader


def parse_yaml(text: str, source: str = "<string>") -> Any:
    """Parse one YAML document; syntax errors become ConfigError with the line."""
    loader_class = _line_loader()
    loader = loader_class(text)
    loader.source_name = source
    try:
        return loader.get_single_data()
    except loader_class.marked_error as exc:
        mark = exc.problem_mark or exc.context_mark
        line = None if mark is None else mark.line + 1
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(f"YAML syntax error: {problem}", file=source, line=line) from None
    except loader_class.yaml_error as exc:
        raise ConfigError(f"YAML error: {exc}", file=source) from None
    finally:
        loader.dispose()


def read_yaml_file(path: str | Path) -> tuple[Any, str, bytes]:
    """Read and parse a YAML file: ``(document, source name, raw bytes)``."""
    source = str(path)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError("file not found", file=source) from None
    except OSError as exc:
        raise ConfigError(f"cannot read file: {exc.strerror or exc}", file=source) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text ({exc.reason} at byte {exc.start})",
                          file=source) from None
    return parse_yaml(text, source), source, raw


def line_of(container: Any, key: Any = None) -> int | None:
    """The line of ``key`` in a LineDict/LineList, or of the container itself."""
    lines = getattr(container, "lines", None)
    if key is not None and lines is not None:
        if isinstance(lines, dict) and key in lines:
            return int(lines[key])
        if isinstance(lines, list) and isinstance(key, int) and 0 <= key < len(lines):
            return int(lines[key])
    line = getattr(container, "line", None)
    return None if line is None else int(line)


def join_path(parent: str, key: Any) -> str:
    """``vendors.nvidia`` + ``dtype.bf16`` -> ``vendors.nvidia.dtype.bf16``; ints become ``[i]``."""
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else str(key)


_TYPE_NAMES = {dict: "a mapping", list: "a list", str: "a string", bool: "true/false",
               int: "an integer", float: "a number"}


def type_name(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    for kind, name in _TYPE_NAMES.items():
        if isinstance(value, kind):
            return name
    return type(value).__name__


@dataclass(frozen=True)
class Where:
    """A position in a YAML document: file, line and the dotted key path."""

    file: str
    line: int | None
    key: str

    def error(self, message: str) -> ConfigError:
        return ConfigError(message, file=self.file, line=self.line, key=self.key or None)

    def child(self, container: Any, key: Any) -> Where:
        line = line_of(container, key)
        return Where(self.file, self.line if line is None else line, join_path(self.key, key))


def expect_mapping(value: Any, where: Where) -> Mapping[Any, Any]:
    if not isinstance(value, dict):
        raise where.error(f"expected a mapping, found {type_name(value)}")
    return value


def expect_list(value: Any, where: Where) -> list[Any]:
    if not isinstance(value, list):
        raise where.error(f"expected a list, found {type_name(value)}")
    return value


def expect_str(value: Any, where: Where, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise where.error(f"expected a string, found {type_name(value)}")
    if not allow_empty and not value.strip():
        raise where.error("must not be empty")
    return value


def expect_int(value: Any, where: Where, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise where.error(f"expected an integer, found {type_name(value)}")
    if minimum is not None and value < minimum:
        raise where.error(f"must be at least {minimum}, found {value}")
    return value


SCALAR_TYPES = (str, int, float, bool, type(None))


def expect_scalars(value: Any, where: Where) -> list[Any]:
    """A scalar or a list of scalars (a fact's value, ``match:`` alternatives), as a list."""
    values = list(value) if isinstance(value, list) else [value]
    for item in values:
        if not isinstance(item, SCALAR_TYPES):
            raise where.error(f"expected a scalar or a list of scalars, found {type_name(item)}")
    return values


def expect_number(value: Any, where: Where) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise where.error(f"expected a number, found {type_name(value)}")
    return value


def check_keys(mapping: Mapping[Any, Any], where: Where, *, allowed: Collection[str],
               required: Collection[str] = ()) -> None:
    """Refuse unknown keys (naming the closest valid one) and report missing required keys."""
    for key in mapping:
        if not isinstance(key, str) or key not in allowed:
            valid = ", ".join(sorted(allowed))
            raise where.child(mapping, key).error(
                f"unknown key {key!r}{did_you_mean(str(key), allowed)}; valid keys: {valid}")
    for key in required:
        if key not in mapping:
            raise where.error(f"missing required key {key!r}")


def items(mapping: Mapping[Any, Any], where: Where) -> Iterator[tuple[Any, Any, Where]]:
    """``(key, value, where-of-key)`` for each entry of a LineDict."""
    for key, value in mapping.items():
        yield key, value, where.child(mapping, key)


def check_document(document: Any, source: str, *, body_keys: Collection[str],
                   required: Collection[str] = ()) -> Mapping[str, Any]:
    """Check the top level of a devcaps YAML file: a mapping with ``devcaps: 1``."""
    top = Where(source, line_of(document), "")
    if document is None:
        raise top.error("the file is empty; expected a mapping starting with 'devcaps: 1'")
    expect_mapping(document, top)
    if "devcaps" not in document:
        raise Where(source, 1, "devcaps").error(
            f"missing schema version; add 'devcaps: {SCHEMA_VERSION}' at the top")
    version = document["devcaps"]
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise top.child(document, "devcaps").error(
            f"unsupported schema version {version!r}; this pytest-devcaps reads version "
            f"{SCHEMA_VERSION}")
    check_keys(document, top, allowed={"devcaps", *body_keys}, required=required)
    return cast(Mapping[str, Any], document)


def check_capability_name(name: Any, where: Where) -> str:
    """Validate the ``<category>.<name>`` snake_case form of a capability name."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise where.error(
            f"invalid capability name {name!r}; expected '<category>.<name>' in lower "
            "snake_case, e.g. 'dtype.bf16'")
    return name


def check_identifier(name: Any, where: Where, what: str = "fact name") -> str:
    """A fact name: a plain identifier (what rule expressions can refer to)."""
    if not isinstance(name, str) or not IDENTIFIER_PATTERN.match(name):
        raise where.error(f"invalid {what} {name!r}; expected an identifier like 'compute_capability'")
    return name
