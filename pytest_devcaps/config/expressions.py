"""The safe rule-expression evaluator used by vendor rules and override ``when:`` clauses.

Grammar: fact names, int/float/string/bool/None literals, list and tuple literals, comparisons
(``== != < <= > >=``, chained), ``in`` / ``not in``, ``and`` / ``or`` / ``not`` and parentheses.
The text is parsed with ``ast.parse(mode="eval")`` and every node is checked against a
whitelist; nothing is ever passed to ``eval``/``exec``.

Semantics chosen for device facts:

* an unknown fact name evaluates to ``None`` (a CPU has no ``compute_capability``);
* an ordering comparison (``< <= > >=``) with ``None`` or between unrelated types is False;
* two dotted-version strings (or a version string and a number) compare as versions, so
  ``rocm_version >= "6.3"`` holds for ``"6.10"`` and ``"12.8" == "12.8.0"``;
* ``x in None`` is False and ``x not in None`` is True.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from pytest_devcaps.errors import ConfigError

MAX_EXPRESSION_LENGTH = 2000

_VERSION = re.compile(r"^\s*v?(\d+(?:\.\d+)*)(?:[-+_.a-zA-Z].*)?\s*$")

# Node types refused with a readable name for the construct.
_REFUSED = {
    ast.Attribute: "attribute access",
    ast.Call: "function call",
    ast.Subscript: "subscript",
    ast.Slice: "slice",
    ast.Lambda: "lambda",
    ast.ListComp: "comprehension",
    ast.SetComp: "comprehension",
    ast.DictComp: "comprehension",
    ast.GeneratorExp: "comprehension",
    ast.JoinedStr: "f-string",
    ast.FormattedValue: "f-string",
    ast.BinOp: "arithmetic",
    ast.IfExp: "conditional expression",
    ast.NamedExpr: "assignment expression",
    ast.Dict: "dict literal",
    ast.Set: "set literal",
    ast.Starred: "starred expression",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
}

_ORDERING: dict[type, Callable[[Any, Any], bool]] = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
}
_ALLOWED_CONSTANTS = (int, float, str, bool, type(None))


def version_tuple(value: Any) -> tuple[int, ...] | None:
    """``"6.10.1-rc"`` -> ``(6, 10, 1)``; numbers via their text; None when not a version."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        value = repr(value)
    if not isinstance(value, str):
        return None
    match = _VERSION.match(value)
    if not match:
        return None
    return tuple(int(part) for part in match.group(1).split("."))


def _padded(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)), b + (0,) * (width - len(b))


def _as_versions(left: Any, right: Any) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Both sides as padded version tuples when at least one is a version string."""
    if not (isinstance(left, str) or isinstance(right, str)):
        return None
    a, b = version_tuple(left), version_tuple(right)
    if a is None or b is None:
        return None
    return _padded(a, b)


def facts_equal(left: Any, right: Any) -> bool:
    """Equality used by ``==``, ``in`` and override ``match:``; version-aware for versions."""
    versions = _as_versions(left, right)
    if versions is not None:
        return versions[0] == versions[1]
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        return len(left) == len(right) and all(map(facts_equal, left, right))
    return bool(left == right)


def _ordered(op: type, left: Any, right: Any) -> bool:
    if left is None or right is None:
        return False
    versions = _as_versions(left, right)
    if versions is not None:
        return _ORDERING[op](*versions)
    try:
        return bool(_ORDERING[op](left, right))
    except TypeError:
        return False


def contains(container: Any, item: Any) -> bool:
    """``item in container`` for facts: lists/tuples by :func:`facts_equal`, strings by substring."""
    if isinstance(container, (list, tuple, set, frozenset)):
        return any(facts_equal(item, element) for element in container)
    if isinstance(container, str) and isinstance(item, str):
        return item in container
    return False


def _compare(op: ast.cmpop, left: Any, right: Any) -> bool:
    if isinstance(op, ast.Eq):
        return facts_equal(left, right)
    if isinstance(op, ast.NotEq):
        return not facts_equal(left, right)
    if isinstance(op, ast.In):
        return contains(right, left)
    if isinstance(op, ast.NotIn):
        return not contains(right, left)
    return _ordered(type(op), left, right)


@dataclass(frozen=True)
class Expression:
    """A validated rule expression; :meth:`evaluate` it against a facts mapping."""

    text: str
    tree: ast.Expression | None = field(repr=False, compare=False)
    names: frozenset[str] = field(default=frozenset(), compare=False)

    def evaluate(self, facts: Mapping[str, Any]) -> bool:
        """True when the expression holds for ``facts``; never raises on odd fact values."""
        tree = self.tree
        if tree is None:  # restored from a pickle: parse on first use
            tree = ast.parse(self.text, mode="eval")
            object.__setattr__(self, "tree", tree)
        return bool(_evaluate(tree.body, facts))

    def __str__(self) -> str:
        return self.text

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickling AST nodes is slow to load back; the text was validated already, so a
        # restored expression only re-parses it.
        return (_restore, (self.text, self.names))


def _restore(text: str, names: frozenset[str]) -> Expression:
    return Expression(text, None, names)


def _evaluate(node: ast.AST, facts: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return facts.get(node.id)
    if isinstance(node, (ast.List, ast.Tuple)):
        return tuple(_evaluate(element, facts) for element in node.elts)
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_evaluate(value, facts) for value in node.values)
        return any(_evaluate(value, facts) for value in node.values)
    if isinstance(node, ast.UnaryOp):
        operand = _evaluate(node.operand, facts)
        if isinstance(node.op, ast.Not):
            return not operand
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left, facts)
        for op, comparator in zip(node.ops, node.comparators):
            right = _evaluate(comparator, facts)
            if not _compare(op, left, right):
                return False
            left = right
        return True
    raise AssertionError(f"unvalidated node {type(node).__name__}")  # _Validator.check refuses it first


class _Validator:
    def __init__(self, text: str, error: Callable[[str], ConfigError]) -> None:
        self.text = text
        self.error = error
        self.names: set[str] = set()

    def refuse(self, node: ast.AST, construct: str) -> ConfigError:
        snippet = ast.get_source_segment(self.text, node) or ""
        shown = f" `{snippet}`" if snippet else ""
        return self.error(f"{construct}{shown} is not allowed in rule expressions "
                          "(only facts, literals, comparisons, in, and/or/not)")

    def check(self, node: ast.AST) -> None:
        if isinstance(node, ast.Constant):
            if not isinstance(node.value, _ALLOWED_CONSTANTS):
                raise self.refuse(node, f"{type(node.value).__name__} literal")
        elif isinstance(node, ast.Name):
            if node.id.startswith("_"):
                raise self.refuse(node, "dunder/private name" if node.id.startswith("__")
                                  else "private name")
            self.names.add(node.id)
        elif isinstance(node, (ast.List, ast.Tuple)):
            for element in node.elts:
                self.check(element)
        elif isinstance(node, ast.BoolOp):
            for value in node.values:
                self.check(value)
        elif isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.Not):
                self.check(node.operand)
            elif isinstance(node.op, (ast.USub, ast.UAdd)) and isinstance(
                    node.operand, ast.Constant) and type(node.operand.value) in (int, float):
                pass  # a signed number literal
            else:
                raise self.refuse(node, "arithmetic")
        elif isinstance(node, ast.Compare):
            self.check(node.left)
            for comparator in node.comparators:
                self.check(comparator)
            for op in node.ops:
                if isinstance(op, (ast.Is, ast.IsNot)):
                    raise self.error("`is` / `is not` are not allowed in rule expressions; "
                                     "use == / != (e.g. `cudnn_version == None`)")
        else:
            construct = next((name for kind, name in _REFUSED.items() if isinstance(node, kind)),
                             f"{type(node).__name__} expression")
            raise self.refuse(node, construct)


def compile_expression(text: str, *, file: str | None = None, line: int | None = None,
                       key: str | None = None) -> Expression:
    """Parse and validate ``text``; any refused construct raises :class:`ConfigError`."""

    def error(message: str) -> ConfigError:
        return ConfigError(f"{message}: {text!r}", file=file, line=line, key=key)

    if not isinstance(text, str) or not text.strip():
        raise ConfigError("a rule expression must be a non-empty string", file=file, line=line,
                          key=key)
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise ConfigError(f"rule expression longer than {MAX_EXPRESSION_LENGTH} characters",
                          file=file, line=line, key=key)
    source = " ".join(text.strip().splitlines())  # YAML folded text: one logical line
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as exc:
        raise error(f"invalid rule expression ({exc.msg})") from None
    except (RecursionError, MemoryError, ValueError):
        raise error("rule expression is too deeply nested or malformed") from None
    validator = _Validator(source, error)
    try:
        validator.check(tree.body)
    except RecursionError:
        raise error("rule expression is too deeply nested") from None
    return Expression(text=text, tree=tree, names=frozenset(validator.names))
