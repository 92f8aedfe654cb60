"""YAML loading that remembers the line of every key, plus the shared schema checks.

Every mapping the loader builds is a :class:`LineDict` (``.lines[key]`` is the 1-based line
of that key, ``.line`` the line the mapping starts on) and every sequence a
:class:`LineList` (``.lines[i]`` is the line of item ``i``), so each validation error can
name the line a user has to fix.

Parsing is bounded, since a few hundred hostile bytes must not cost gigabytes: only regular
files of at most 16 MiB are read (never a FIFO or ``/dev/zero``), aliases may add at most
:data:`MAX_ALIAS_NODES` nodes to a document (an alias bomb is refused before it is built),
integers have at most :data:`MAX_INT_DIGITS` digits, ``.inf`` and ``.nan`` are refused, and
error messages quote values through :func:`~pytest_devcaps.errors.short_repr`, which cuts
them short.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Collection, Iterator, Mapping, Sequence, TypeVar, cast


from pytest_devcaps.errors import (
    ConfigError,
    DevcapsTypeError,
    DevcapsValueError,
    UnsafeFileError,
    did_you_mean,
    short_repr,
)
from pytest_devcaps._util.files import MAX_READ_BYTES, read_regular_file

if TYPE_CHECKING:
    from pytest_devcaps.config.facts import FactVocabulary

SCHEMA_VERSION = 1
#: Nodes that aliases (``*name``) may add to a document beyond those written out.
MAX_ALIAS_NODES = 10_000
#: The most digits an integer in a devcaps YAML file may have.
MAX_INT_DIGITS = 40
#: The most characters of a key or name an error message quotes.
MAX_SHOWN = 100
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


def short(name: Any) -> str:
    """A key or name as text short enough to suggest spellings for and to print."""
    scalar = isinstance(name, (str, int, float, bool)) or name is None
    text = str(name) if scalar else short_repr(name)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "..."


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
    """The loader class, built on first use: a warm start reads the catalogue's JSON copy
    (``catalogue``'s warm start) and never needs PyYAML, whose import costs ~10 ms."""
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
                        file=self.source_name, line=line, key=short(key))
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
    _LineLoader.add_constructor("tag:yaml.org,2002:int", _construct_bounded_int)
    _LineLoader.add_constructor("tag:yaml.org,2002:float", _construct_finite_float)
    return _LineLoader


def _construct_bounded_int(loader: Any, node: Any) -> int:
    """An integer of at most :data:`MAX_INT_DIGITS` digits (Python refuses to even print one
    of 4300 digits, so a 5,000-digit fact would end in a traceback)."""
    digits = sum(ch.isdigit() for ch in str(node.value))
    if digits > MAX_INT_DIGITS:
        raise ConfigError(f"integer with {digits} digits; at most {MAX_INT_DIGITS} are accepted",
                          file=loader.source_name, line=node.start_mark.line + 1)
    return int(loader.construct_yaml_int(node))


def _construct_finite_float(loader: Any, node: Any) -> float:
    """A finite float: ``.inf`` and ``.nan`` mean nothing in a devcaps file."""
    value = float(loader.construct_yaml_float(node))
    if not math.isfinite(value):
        raise ConfigError(f"{short(node.value)} is not a finite number",
                          file=loader.source_name, line=node.start_mark.line + 1)
    return value


def _check_aliases(root: Any, source: str) -> None:
    """Refuse a document whose aliases would add more than :data:`MAX_ALIAS_NODES` nodes
    (an alias bomb: a few hundred bytes, billions of nodes once expanded) or that contains
    itself. Iterative and memoized: linear in the nodes actually written."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        children = _children(node)
        if finished:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in children)
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise ConfigError("an alias refers to a node that contains it (a recursive "
                              "document)", file=source, line=node.start_mark.line + 1)
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in children if id(child) not in sizes)
    added = sizes[id(root)] - len(sizes)
    if added > MAX_ALIAS_NODES:
        raise ConfigError(f"aliases expand this document by {added} nodes; at most "
                          f"{MAX_ALIAS_NODES} are accepted (an alias bomb?)", file=source)


def _children(node: Any) -> list[Any]:
    value = getattr(node, "value", None)
    if not isinstance(value, list):
        return []  # a scalar
    if value and isinstance(value[0], tuple):  # a mapping: (key node, value node) pairs
        return [part for pair in value for part in pair]
    return value


@contextlib.contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """The cyclic garbage collector paused while a document is built: composing and
    constructing allocate millions of tracked objects (nodes, marks, dicts) and none of them
    is garbage until the end, so every collection on the way walked them all for nothing
    (a 100,000-device profile spent more than half its time there). Validation that builds
    one record per node (a profile's devices) runs under it too."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def parse_yaml(text: str, source: str = "<string>") -> Any:
    """Parse one YAML document; syntax errors become ConfigError with the line."""
    loader_class = _line_loader()
    loader = loader_class(text)
    loader.source_name = source
    try:
        with no_cyclic_gc():
            node = loader.get_single_node()
            if node is None:
                return None
            if "*" in text:  # no alias without '*': nothing can expand or contain itself
                _check_aliases(node, source)
            return loader.construct_document(node)
    except loader_class.marked_error as exc:
        mark = exc.problem_mark or exc.context_mark
        line = None if mark is None else mark.line + 1
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(f"YAML syntax error: {short(problem)}", file=source,
                          line=line) from None
    except loader_class.yaml_error as exc:
        raise ConfigError(f"YAML error: {short(exc)}", file=source) from None
    except RecursionError:
        raise ConfigError("the document is nested too deeply", file=source) from None
    finally:
        loader.dispose()


def read_source(path: str | Path) -> bytes:
    """The bytes of a devcaps YAML file: a regular file of at most 16 MiB (ConfigError else)."""
    source = str(path)
    try:
        return read_regular_file(path, limit=MAX_READ_BYTES)
    except UnsafeFileError as exc:
        raise ConfigError(f"cannot read it: {exc.reason}", file=source) from None
    except FileNotFoundError:
        raise ConfigError("file not found", file=source) from None
    except OSError as exc:
        raise ConfigError(f"cannot read file: {exc.strerror or exc}", file=source) from None


def parse_yaml_bytes(raw: bytes, source: str) -> Any:
    """:func:`parse_yaml` of UTF-8 bytes (ConfigError when they are not UTF-8)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text ({exc.reason} at byte {exc.start})",
                          file=source) from None
    return parse_yaml(text, source)


def read_yaml_file(path: str | Path) -> tuple[Any, str, bytes]:
    """Read and parse a YAML file: ``(document, source name, raw bytes)``."""
    raw = read_source(path)
    return parse_yaml_bytes(raw, str(path)), str(path), raw


def document_to_plain(node: Any) -> Any:
    """A parsed document as JSON data that keeps every line number (see
    :func:`document_from_plain`); raises TypeError for values JSON cannot hold."""
    if isinstance(node, LineDict):
        return {"m": node.line, "k": [[key, node.lines.get(key), document_to_plain(value)]
                                      for key, value in node.items()]}
    if isinstance(node, LineList):
        return {"l": node.line, "i": [[line, document_to_plain(value)]
                                      for line, value in zip(node.lines, node)]}
    if node is None or isinstance(node, (str, int, float, bool)):
        return node
    raise DevcapsTypeError(f"{type(node).__name__} is not JSON data")


def document_from_plain(data: Any) -> Any:
    """The LineDict/LineList document :func:`document_to_plain` described; ValueError when
    ``data`` has any other shape."""
    if data is None or isinstance(data, (str, int, float, bool)):
        return data
    if isinstance(data, dict) and data.keys() == {"m", "k"}:
        mapping = LineDict()
        mapping.line = _plain_line(data["m"])
        for key, line, value in _triples(data["k"]):
            if key in mapping or isinstance(key, (dict, list)):
                raise DevcapsValueError("a repeated or unhashable key")
            mapping[key] = document_from_plain(value)
            mapping.lines[key] = _plain_line(line)
        return mapping
    if isinstance(data, dict) and data.keys() == {"l", "i"} and isinstance(data["i"], list):
        sequence = LineList()
        sequence.line = _plain_line(data["l"])
        for pair in data["i"]:
            if not (isinstance(pair, list) and len(pair) == 2):
                raise DevcapsValueError("a malformed list item")
            sequence.lines.append(_plain_line(pair[0]))
            sequence.append(document_from_plain(pair[1]))
        return sequence
    raise DevcapsValueError("not a document")


def _plain_line(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DevcapsValueError("a malformed line number")
    return value


def _triples(entries: Any) -> list[list[Any]]:
    if not (isinstance(entries, list)
            and all(isinstance(entry, list) and len(entry) == 3 for entry in entries)):
        raise DevcapsValueError("malformed mapping entries")
    return entries


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
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{parent}[{key}]"
    return f"{parent}.{short(key)}" if parent else short(key)


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
                f"unknown key {short_repr(key)}{did_you_mean(short(key), allowed)}; "
                f"valid keys: {valid}")
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
            f"unsupported schema version {short_repr(version)}; this pytest-devcaps reads version "
            f"{SCHEMA_VERSION}")
    check_keys(document, top, allowed={"devcaps", *body_keys}, required=required)
    return cast(Mapping[str, Any], document)


def check_capability_name(name: Any, where: Where) -> str:
    """Validate the ``<category>.<name>`` snake_case form of a capability name."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise where.error(
            f"invalid capability name {short_repr(name)}; expected '<category>.<name>' in lower "
            "snake_case, e.g. 'dtype.bf16'")
    return name


def check_identifier(name: Any, where: Where, what: str = "fact name") -> str:
    """A fact name: a plain identifier (what rule expressions can refer to)."""
    if not isinstance(name, str) or not IDENTIFIER_PATTERN.match(name):
        raise where.error(f"invalid {what} {short_repr(name)}; expected an identifier like "
                          "'compute_capability'")
    return name


def check_fact_name(name: Any, where: Where, facts: FactVocabulary) -> str:
    """A fact name used as a key: an identifier the vocabulary knows."""
    check_identifier(name, where)
    if name not in facts:
        raise where.error(facts.unknown(name))
    return str(name)


def check_version_values(name: str, values: Sequence[Any], where: Where,
                         facts: FactVocabulary) -> None:
    """A version fact's YAML value must not be a decimal: YAML reads 12.10 as 12.1."""
    if name not in facts.versions:
        return
    for value in values:
        if isinstance(value, float):
            raise where.error(f"{name} is a version; quote it ({name}: \"...\"): YAML reads "
                              f"an unquoted {short_repr(value)} as a number, so 12.10 would be 12.1")
