"""The safe rule-expression evaluator used by vendor rules and override ``when:`` clauses.

Grammar: fact names, int/float/string/bool/None literals, list and tuple literals, comparisons
(``== != < <= > >=``, chained), ``in`` / ``not in``, ``and`` / ``or`` / ``not`` and parentheses.
The text is parsed with ``ast.parse(mode="eval")`` and every node is checked against a
whitelist; nothing is ever passed to ``eval``/``exec``.

Semantics chosen for device facts:

* fact names come from the fact vocabulary (:mod:`pytest_devcaps.config.facts`): compiled with one,
  a name outside it is refused with the closest valid name (``vendr`` -> ``vendor``); a known
  fact a device does not have evaluates to ``None`` (a CPU has no ``compute_capability``);
* an ordering comparison (``< <= > >=``) with ``None`` or between unrelated types is False;
* versions compare as versions (``packaging.version``, as ``torch.torch_version.TorchVersion``
  compares ``torch.__version__``): two dotted-version strings, or a version string and a
  number, so ``rocm_version >= "6.3"`` holds for ``"6.10"`` and ``"12.8" == "12.8.0"``;
* a number literal compared with a *version fact* is read as written, not as a float:
  ``runtime_version >= 12.10`` means version 12.10 (later than 12.8), exactly like
  ``runtime_version >= "12.10"``; Python would read ``12.10`` as the float 12.1;
* ``x in None`` is False and ``x not in None`` is True.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from pytest_devcaps.errors import ConfigError

if TYPE_CHECKING:
    from packaging.version import Version

    from pytest_devcaps.config.facts import FactVocabulary

MAX_EXPRESSION_LENGTH = 2000
#: How much of an expression an error message quotes.
MAX_QUOTED = 200

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
# YAML and JSON spellings of True/False/None, which Python would read as (missing) fact names.
_YAML_LITERALS = frozenset({"true", "false", "null", "none", "yes", "no"})


def as_version(value: Any) -> Version | None:
    """``"12.8"``, ``"2.13.0+cpu"`` as a :class:`packaging.version.Version`; a vendor string
    packaging refuses (``"6.3.42131-fa1d09cbd"``) by its leading numbers; None when not a
    version. Numbers go by their text (``12`` -> ``12``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and math.isfinite(value):
        value = repr(value)
    elif isinstance(value, int):
        value = str(value)
    if not isinstance(value, str) or len(value) > 100:
        return None
    match = _VERSION.match(value)
    if not match:
        return None
    from packaging.version import InvalidVersion, Version  # imported only when versions meet

    try:
        return Version(value.strip())
    except InvalidVersion:
        return Version(match.group(1))


def _as_versions(left: Any, right: Any) -> tuple[Version, Version] | None:
    """Both sides as versions when at least one is a version string."""
    if not (isinstance(left, str) or isinstance(right, str)):
        return None
    a, b = as_version(left), as_version(right)
    if a is None or b is None:
        return None
    return a, b


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
    """A validated rule expression; :meth:`evaluate` it against a facts mapping.

    ``names``: the fact names it uses; ``versions``: the version facts it was compiled
    against (a number literal compared with one of them stands for its text).
    """

    text: str
    tree: ast.Expression | None = field(repr=False, compare=False)
    names: frozenset[str] = field(default=frozenset(), compare=False)
    versions: frozenset[str] = field(default=frozenset(), compare=False)

    def evaluate(self, facts: Mapping[str, Any]) -> bool:
        """True when the expression holds for ``facts``; never raises on odd fact values."""
        tree = self.tree
        if tree is None:  # restored from a pickle: parse on first use
            tree = _versions_as_written(ast.parse(_one_line(self.text), mode="eval"),
                                        _one_line(self.text), self.versions)
            object.__setattr__(self, "tree", tree)
        return bool(_evaluate(tree.body, facts))

    def __str__(self) -> str:
        return self.text

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickling AST nodes is slow to load back; the text was validated already, so a
        # restored expression only re-parses it.
        return (_restore, (self.text, self.names, self.versions))


def _restore(text: str, names: frozenset[str], versions: frozenset[str] = frozenset()
             ) -> Expression:
    return Expression(text, None, names, versions)


def _one_line(text: str) -> str:
    """YAML folded text as one logical line (what ``ast.parse`` in eval mode accepts)."""
    return " ".join(text.strip().splitlines())


def quoted(text: str, limit: int = MAX_QUOTED) -> str:
    """``repr(text)``, cut to about ``limit`` characters: error messages stay short."""
    if len(text) <= limit:
        return repr(text)
    return repr(text[:limit]) + f"... ({len(text)} characters)"


class _VersionLiterals(ast.NodeTransformer):
    """In a comparison involving a version fact, number literals become their source text:
    ``runtime_version >= 12.10`` compares with ``"12.10"``, not with the float 12.1."""

    def __init__(self, source: str, versions: frozenset[str]) -> None:
        self.source = source
        self.versions = versions

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        operands = [node.left, *node.comparators]
        if any(isinstance(o, ast.Name) and o.id in self.versions for o in operands):
            node.left, *rest = [self._as_text(o) for o in operands]
            node.comparators = rest
        return self.generic_visit(node)

    def _as_text(self, node: ast.expr) -> ast.expr:
        if isinstance(node, (ast.List, ast.Tuple)):
            node.elts = [self._as_text(element) for element in node.elts]
            return node
        number = node.operand if isinstance(node, ast.UnaryOp) else node
        if isinstance(number, ast.Constant) and type(number.value) in (int, float):
            text = ast.get_source_segment(self.source, node) or repr(number.value)
            return ast.copy_location(ast.Constant(text.replace(" ", "")), node)
        return node


def _versions_as_written(tree: ast.Expression, source: str,
                         versions: frozenset[str]) -> ast.Expression:
    if not versions:
        return tree
    rewritten = _VersionLiterals(source, versions).visit(tree)
    assert isinstance(rewritten, ast.Expression)
    return ast.fix_missing_locations(rewritten)


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
        self.names: dict[str, None] = {}  # in order of appearance

    def refuse(self, node: ast.AST, construct: str) -> ConfigError:
        snippet = ast.get_source_segment(self.text, node) or ""
        shown = f" `{snippet}`" if snippet else ""
        return self.error(f"{construct}{shown} is not allowed in rule expressions "
                          "(only facts, literals, comparisons, in, and/or/not)")

    def check(self, node: ast.AST) -> None:
        if isinstance(node, ast.Constant):
            if not isinstance(node.value, _ALLOWED_CONSTANTS):
                raise self.refuse(node, f"{type(node.value).__name__} literal")
            if isinstance(node.value, float) and not math.isfinite(node.value):
                raise self.refuse(node, "a number too large for a float")
        elif isinstance(node, ast.Name):
            if node.id.startswith("_"):
                raise self.refuse(node, "dunder/private name" if node.id.startswith("__")
                                  else "private name")
            if node.id.lower() in _YAML_LITERALS:
                raise self.error(f"{node.id!r} is not a literal in rule expressions (it would "
                                 "be read as a fact no device has); write True, False or None")
            self.names[node.id] = None
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
                       key: str | None = None,
                       facts: FactVocabulary | None = None) -> Expression:
    """Parse and validate ``text``; any refused construct raises :class:`ConfigError`.

    With ``facts`` (the fact vocabulary), a name that is not a device fact is refused with
    the closest valid name, and number literals compared with a version fact are read as
    written (see the module docstring). Without it, only the syntax is checked (a hook's
    rule, checked again once the vocabulary is known).
    """

    def error(message: str) -> ConfigError:
        return ConfigError(f"{message}: {quoted(text)}", file=file, line=line, key=key)

    if not isinstance(text, str) or not text.strip():
        raise ConfigError("a rule expression must be a non-empty string", file=file, line=line,
                          key=key)
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise ConfigError(f"rule expression longer than {MAX_EXPRESSION_LENGTH} characters",
                          file=file, line=line, key=key)
    source = _one_line(text)
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
    versions: frozenset[str] = frozenset()
    if facts is not None:
        for name in validator.names:
            if name not in facts:
                raise error(facts.unknown(name))
        versions = facts.versions & frozenset(validator.names)
        tree = _versions_as_written(tree, source, versions)
    return Expression(text=text, tree=tree, names=frozenset(validator.names), versions=versions)

