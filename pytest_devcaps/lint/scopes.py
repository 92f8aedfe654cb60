"""Where code sits decides what ``--fix`` may do there: a pytest test or function-scoped fixture
can take the ``device`` fixture; a ``unittest.TestCase`` method cannot (pytest gives its
methods no fixtures); a helper can use a ``device`` parameter it already has; a function
defined inside a test sees the test's ``device``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, replace
from typing import Literal, Mapping

from pytest_devcaps.lint import rules
from pytest_devcaps.lint.gating import LocalGate, is_cuda_literal, last_name, local_gates
from pytest_devcaps.lint.records import ScopeKey

Kind = Literal["module", "class", "test", "fixture", "function", "testcase", "method", "nested", "head"]


@dataclass(frozen=True)
class DeviceContext:
    """How code in a scope names its device: ``param_owner`` is the function that gets a
    ``device`` parameter (None: it has one); ``typed`` says ``device`` is the plugin's
    ``torch.device`` fixture (else a parameter of unknown type: a string or a device);
    ``fixture_owner`` may ask for more fixtures (``device_runtime``, ``dist_backend``) and
    ``mark_owner`` (a test, not a fixture) may take marks."""

    param_owner: ScopeKey | None
    typed: bool
    fixture_owner: ScopeKey | None = None
    mark_owner: ScopeKey | None = None
    keyword_only: bool = False  # a helper given ``*, device`` (its callers pass device=...)
    # where the device comes from when no fixture or parameter gives one: "" (a fixture or
    # parameter), "global" (the module's ``device_type``), "self" (``self.device_type`` in a
    # class instantiate_device_type_tests generates), "self_device" (that, with a ``device`` arg)
    source: str = ""
    # the parameter's name: ``devcaps_device`` (the same fixture) where the function binds a
    # ``device`` of its own that the fixture would shadow
    name: str = "device"

    def expr(self, role: str) -> str:
        if self.source:
            return rules.DEVICE_SOURCES[self.source][role]
        code = (rules.TYPED if self.typed else rules.UNTYPED)[role]
        return re.sub(r"\bdevice\b", self.name, code) if self.name != "device" else code

    @property
    def fixtures(self) -> bool:
        """Can ask for the plugin's fixtures (device_runtime, dist_backend): a pytest test."""
        return self.typed and self.fixture_owner is not None and not self.source


GLOBAL = DeviceContext(None, False, source="global")


class Scope:
    """A module, class or function; ``used`` (what its code names, for gates that pick a
    capability by use) and ``bound`` (names it binds) are read when first asked for."""

    def __init__(self, kind: Kind, key: ScopeKey | None, node: ast.AST, context: DeviceContext | None, *,
                 parent: Scope | None = None, testcase: bool = False, device_fixture: bool = False,
                 declared: frozenset[str] = frozenset()) -> None:
        self.kind = kind
        self.key = key
        self.node = node
        self.context = context
        self.parent = parent
        self.testcase = testcase
        self.device_fixture = device_fixture
        self.declared = declared
        self._used: frozenset[str] | None = None
        self._bound: frozenset[str] | None = None
        self.local_gates: Mapping[str, LocalGate] = parent.local_gates if parent is not None else {}
        self.threaded: frozenset[str] = parent.threaded if parent is not None else frozenset()
        # helpers use the module's device_type (no pytest test can lend them its device)
        self.global_helpers: bool = parent.global_helpers if parent is not None else False
        # ``--target torch``: no plugin fixtures; tests and fixtures use the module's device_type too
        self.fixtureless: bool = parent.fixtureless if parent is not None else False
        # tests and fixtures that reach code using the module's device_type: they use it too (given
        # the fixture, their [cpu] copy would mix the CPU with the accelerator that code picked)
        self.global_tests: frozenset[ScopeKey] = parent.global_tests if parent is not None else frozenset()
        self.instantiated = False  # a class instantiate_device_type_tests generates

    @property
    def used(self) -> frozenset[str]:
        if self._used is None:
            self._used = used_names(self.node)
            if self.kind == "nested" and self.parent is not None:
                self._used |= self.parent.used
        return self._used

    @property
    def bound(self) -> frozenset[str]:
        if self._bound is None:
            node = self.node
            self._bound = _bound_names(node) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                else frozenset()
        return self._bound


def scope_key(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> ScopeKey:
    return node.name, node.lineno


def used_names(node: ast.AST) -> frozenset[str]:
    """Identifiers, attribute names and short strings in ``node`` (what a gate's test uses)."""
    names: set[str] = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            names.add(child.id)
        elif isinstance(child, ast.Attribute):
            names.add(child.attr)
        elif isinstance(child, ast.Constant) and isinstance(child.value, str) and len(child.value) <= 40:
            names.add(child.value)
    return frozenset(names)


def declared_capabilities(marks: list[ast.expr]) -> frozenset[str]:
    """Capabilities named by ``requires_capability`` marks among ``marks`` (decorators or a
    ``pytestmark`` value)."""
    names: set[str] = set()
    for mark in marks:
        for call in ast.walk(mark):
            if isinstance(call, ast.Call) and last_name(call.func) == "requires_capability":
                for value in ast.walk(call):
                    if isinstance(value, ast.Constant) and isinstance(value.value, str):
                        names.add(value.value)
    return frozenset(names)


def _module_marks(tree: ast.Module) -> list[ast.expr]:
    return [s.value for s in tree.body if isinstance(s, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "pytestmark" for t in s.targets)]


def _bound_names(node: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    names = {a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)}
    names |= {a.arg for a in (node.args.vararg, node.args.kwarg) if a is not None}
    for child in ast.walk(node):
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
            names.add(child.id)
    return frozenset(names)


def _rebinds_device(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """The function binds a ``device`` of its own (a loop variable, ``device = get_device()``):
    a ``device`` fixture parameter would be shadowed by it. ``device = "cuda"`` (or
    ``torch.device("cuda")``, or the is_available() choice) is not: --fix removes it. Every other
    binding counts (``except ... as device``, an import, a nested ``def device``, a nested
    function's or lambda's ``device`` parameter, ``global device``), and so does a read of a
    ``device`` the function never binds (a module's global: the parameter would replace it)."""
    if any(_binds_device(child) for child in ast.walk(node) if child is not node):
        return True
    names = [c for c in ast.walk(node) if isinstance(c, ast.Name) and c.id == "device"]
    if names and not any(isinstance(c.ctx, ast.Store) for c in names):
        return True  # reads someone else's ``device``
    for child in names:
        if not isinstance(child.ctx, ast.Store):
            continue
        assigned = next((a for a in ast.walk(node) if isinstance(a, ast.Assign) and child in a.targets), None)
        value = assigned.value if assigned is not None else None
        if value is None:
            return True
        device = value.args[0] if isinstance(value, ast.Call) and last_name(value.func) == "device" \
            and value.args else value
        if not (is_cuda_literal(device) or isinstance(value, ast.IfExp)):
            return True
    return False


def _binds_device(node: ast.AST) -> bool:
    """``node`` binds the name ``device`` other than by a plain assignment."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name == "device"
    if isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)):
        return node.name == "device"
    if isinstance(node, ast.arg):
        return node.arg == "device"
    if isinstance(node, ast.alias):
        return (node.asname or node.name.split(".")[0]) == "device"
    return isinstance(node, (ast.Global, ast.Nonlocal)) and "device" in node.names


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    return [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]


def fixture_scope(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """"function" for a function-scoped pytest fixture, its scope for others, None if none."""
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if last_name(target) != "fixture":
            continue
        if isinstance(decorator, ast.Call):
            for keyword in decorator.keywords:
                if keyword.arg == "scope":
                    value = keyword.value
                    return value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else "?"
        return "function"
    return None


def device_literal_values(values: ast.expr) -> bool:
    """True for ``["cpu", "cuda", pytest.param("cuda", marks=...)]``: devices the fixture covers."""
    if not isinstance(values, (ast.List, ast.Tuple)) or not values.elts:
        return False
    for element in values.elts:
        if isinstance(element, ast.Call) and last_name(element.func) == "param" and element.args:
            element = element.args[0]
        if not (isinstance(element, ast.Constant) and isinstance(element.value, str)):
            return False
        if not (is_cuda_literal(element) or rules.CPU_LITERAL.match(element.value)):
            return False
    return True


def device_parametrize(node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.Call | None:
    """The ``@pytest.mark.parametrize("device", [...])`` (or PyTorch's ``@parametrize``) of ``node``."""
    for decorator in node.decorator_list:
        if not (isinstance(decorator, ast.Call) and last_name(decorator.func) == "parametrize" and decorator.args):
            continue
        names = decorator.args[0]
        if isinstance(names, ast.Constant) and isinstance(names.value, str):
            listed = [n.strip() for n in names.value.split(",")]
        elif isinstance(names, (ast.List, ast.Tuple)):
            listed = [e.value for e in names.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        else:
            continue
        if "device" in listed:
            return decorator
    return None


STRING_METHODS = frozenset({"startswith", "endswith", "split", "replace", "lower", "upper", "strip", "format",
                            "partition", "find", "index"})


def _names_cuda_device(node: ast.expr) -> bool:
    """``"cuda" in device``, ``device == "cuda"``, ``device.startswith("cuda")``."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right, op = node.left, node.comparators[0], node.ops[0]
        if isinstance(op, ast.In):
            return is_cuda_literal(left) and isinstance(right, ast.Name) and right.id == "device"
        if isinstance(op, ast.Eq):
            return {type(left), type(right)} == {ast.Name, ast.Constant} and any(
                isinstance(v, ast.Name) and v.id == "device" for v in (left, right)) and any(
                is_cuda_literal(v) for v in (left, right))
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "startswith" \
        and isinstance(node.func.value, ast.Name) and node.func.value.id == "device" and len(node.args) == 1 \
        and is_cuda_literal(node.args[0]) and not node.keywords


def _cuda_unavailable(node: ast.expr) -> bool:
    """``not torch.cuda.is_available()``."""
    return isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) and isinstance(node.operand, ast.Call) \
        and not node.operand.args and dotted_name(node.operand.func) == "torch.cuda.is_available"


def dotted_name(node: ast.AST) -> str:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def dead_cuda_skip(statement: ast.stmt) -> bool:
    """``if "cuda" in device and not torch.cuda.is_available(): pytest.skip(...)`` in a test that
    parametrizes ``device`` over ``["cpu", "cuda"]`` (fairscale's tests): it skips the CUDA copy
    where CUDA is absent. The device fixture that replaces the parametrization gives only the
    devices present, so the statement can never hold there and goes with the parametrization;
    the string use it makes of ``device`` does not keep the parametrization."""
    if not (isinstance(statement, ast.If) and not statement.orelse and len(statement.body) == 1):
        return False
    test, body = statement.test, statement.body[0]
    skips = isinstance(body, ast.Expr) and isinstance(body.value, ast.Call) \
        and dotted_name(body.value.func) in ("pytest.skip", "skip")
    return skips and isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and len(test.values) == 2 \
        and _names_cuda_device(test.values[0]) and _cuda_unavailable(test.values[1])


def uses_device_as_string(node: ast.AST) -> bool:
    """The test treats its ``device`` as a string (``"cuda" in device``, ``device.startswith(...)``,
    ``device + ":0"``): the device fixture, a torch.device, would not do. A :func:`dead_cuda_skip`
    among its statements does not count: it goes with the parametrization."""
    dead = [s for s in getattr(node, "body", []) if dead_cuda_skip(s)]
    skipped = {id(n) for s in dead for n in ast.walk(s)}
    for child in ast.walk(node):
        if id(child) in skipped:
            continue
        if isinstance(child, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in child.ops) and any(
                isinstance(c, ast.Name) and c.id == "device" for c in child.comparators):
            return True
        if isinstance(child, ast.Attribute) and child.attr in STRING_METHODS and isinstance(child.value, ast.Name) \
                and child.value.id == "device":
            return True
        if isinstance(child, ast.BinOp) and isinstance(child.op, ast.Add) and any(
                isinstance(v, ast.Name) and v.id == "device" for v in (child.left, child.right)):
            return True
        # ``device == "cpu"`` (a torch.device never equals a string in torch 2.13), ``device[-1]``,
        # ``ATOL[device]`` / ``ATOL.get(device)`` (a torch.device is not the string key)
        if isinstance(child, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq)) for op in child.ops) and any(
                _is_device_name(a) for a in (child.left, *child.comparators)) and any(
                isinstance(a, ast.Constant) and isinstance(a.value, str) for a in (child.left, *child.comparators)):
            return True
        if isinstance(child, ast.Subscript) and (_is_device_name(child.value) or _is_device_name(child.slice)):
            return True
        if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and child.func.attr in DICT_LOOKUPS \
                and any(_is_device_name(a) for a in child.args[:1]):
            return True
    return False


DICT_LOOKUPS = frozenset({"get", "setdefault", "pop"})


def _is_device_name(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "device"


def removable_device_parametrize(call: ast.Call | None, node: ast.AST | None = None) -> bool:
    """``parametrize("device", ["cpu", "cuda"])`` the device fixture can replace: not where the
    test reads its device as a string."""
    if call is None or len(call.args) < 2:
        return False
    names = call.args[0]
    only_device = (isinstance(names, ast.Constant) and isinstance(names.value, str)
                   and names.value.strip() == "device")
    return only_device and device_literal_values(call.args[1]) and not call.keywords and not (
        node is not None and uses_device_as_string(node))


class ModuleFacts:
    """What the whole module says about its tests."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.instantiated: set[str] = set()
        self.testcase_classes: set[str] = set()
        self.imports = {alias.asname or alias.name: node.module or "" for node in ast.walk(tree)
                        if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}
        self.has_pytestmark = any(
            isinstance(s, (ast.Assign, ast.AnnAssign)) and any(
                isinstance(t, ast.Name) and t.id == "pytestmark"
                for t in (s.targets if isinstance(s, ast.Assign) else [s.target]))
            for s in tree.body)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and last_name(node.func) == "instantiate_device_type_tests" \
                    and node.args and isinstance(node.args[0], ast.Name):
                self.instantiated.add(node.args[0].id)
            if isinstance(node, ast.ClassDef) and _has_bases(node):
                self.testcase_classes.add(node.name)
        self.local_gates = local_gates(tree)
        # module-level integer constants (``_WORLD_SIZE = 2``): a count a gate names by name
        counts: dict[str, int] = {}
        self.constants: dict[str, int] = {}
        for statement in tree.body:
            if isinstance(statement, (ast.Assign, ast.AnnAssign)):
                targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        counts[target.id] = counts.get(target.id, 0) + 1
                        value = statement.value
                        if isinstance(value, ast.Constant) and type(value.value) is int:
                            self.constants[target.id] = value.value
        self.constants = {k: v for k, v in self.constants.items() if counts[k] == 1}
        # module-level functions: their parameter names say which arguments are devices
        functions = [s for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
        self.signatures = {f.name: [a.arg for a in (*f.args.posonlyargs, *f.args.args)] for f in functions}
        # helpers that must be called with device= (given ``*, device`` by an earlier --fix round)
        self.takes_device = {f.name for f in functions if any(
            a.arg == "device" and d is None for a, d in zip(f.args.kwonlyargs, f.args.kw_defaults))}

    @property
    def pytest_only(self) -> bool:
        """No unittest-style classes: every test can take fixtures."""
        return not self.testcase_classes


def _has_bases(node: ast.ClassDef) -> bool:
    return any(not (isinstance(b, ast.Name) and b.id == "object") for b in node.bases)


def function_scope(node: ast.FunctionDef | ast.AsyncFunctionDef, parent: Scope) -> Scope:
    kind = _function_kind(node, parent)
    params = parameters(node)
    key = scope_key(node)
    context = _function_context(node, kind, params, key, parent)
    fixture = kind == "test" and context is not None and context.typed and not context.source
    return Scope(kind, key, node, context, parent=parent, testcase=parent.testcase,
                 device_fixture=fixture and not parent.fixtureless,
                 declared=parent.declared | declared_capabilities(list(node.decorator_list)))


def _function_context(node: ast.FunctionDef | ast.AsyncFunctionDef, kind: Kind, params: list[str],
                      key: ScopeKey, parent: Scope) -> DeviceContext | None:
    """How code in the function names its device (None: not decided yet, see ``global_helpers``)."""
    if kind in ("test", "fixture") and (parent.fixtureless or key in parent.global_tests):
        if "device" in params:  # a parametrized device (or a fixture of the file's own): use it
            return DeviceContext(None, False, mark_owner=key if kind == "test" else None)
        return replace(GLOBAL, mark_owner=key if kind == "test" else None)
    if kind in ("test", "fixture"):
        parametrize = device_parametrize(node)
        typed = parametrize is None or removable_device_parametrize(parametrize, node)
        name = rules.FREE_DEVICE_FIXTURE if "device" not in params and _rebinds_device(node) \
            and rules.FREE_DEVICE_FIXTURE not in _bound_names(node) else "device"
        owner = None if name in params else key
        return DeviceContext(owner, typed, key, key if kind == "test" else None, name=name)
    owner = key if kind == "testcase" else None
    if kind in ("testcase", "method") and parent.instantiated and params[:1] == ["self"]:
        return DeviceContext(None, False, mark_owner=owner, source="self_device" if "device" in params else "self")
    if "device" in params:
        return DeviceContext(None, False, mark_owner=owner)
    if kind in ("testcase", "method"):
        return replace(GLOBAL, mark_owner=owner)
    if kind == "function" and node.name in parent.threaded:
        return DeviceContext(key, False, keyword_only=True)
    if kind == "nested":
        return parent.context or GLOBAL
    return GLOBAL if parent.global_helpers else None


def _function_kind(node: ast.FunctionDef | ast.AsyncFunctionDef, parent: Scope) -> Kind:
    test = node.name.startswith("test")
    fixture = fixture_scope(node)
    if parent.kind == "module":
        if fixture is not None:
            return "fixture" if fixture == "function" else "function"
        return "test" if test else "function"
    if parent.kind == "class":
        if parent.testcase:
            return "testcase" if test else "method"
        if fixture is not None:
            return "fixture" if fixture == "function" else "method"
        return "test" if test and _pytest_class(parent.node) else "method"
    return "nested"


def _pytest_class(node: ast.AST) -> bool:
    return isinstance(node, ast.ClassDef) and node.name.startswith("Test") and not _has_bases(node)


def class_scope(node: ast.ClassDef, parent: Scope, instantiated: bool = False) -> Scope:
    testcase = parent.testcase or _has_bases(node)
    marks = list(node.decorator_list) + [s.value for s in node.body if isinstance(s, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "pytestmark" for t in s.targets)]
    scope = Scope("class", scope_key(node), node, GLOBAL, parent=parent, testcase=testcase,
                  device_fixture=not testcase and parent.device_fixture,
                  declared=parent.declared | declared_capabilities(marks))
    scope.instantiated = instantiated
    return scope


def module_scope(tree: ast.Module, facts: ModuleFacts, threaded: frozenset[str] = frozenset(),
                 global_helpers: bool = False, fixtureless: bool = False,
                 global_tests: frozenset[ScopeKey] = frozenset()) -> Scope:
    """The module's scope; ``threaded`` helpers get a ``device`` parameter from their callers,
    the others (with ``global_helpers``, or in a file with TestCase classes) use the module's
    ``device_type``. ``fixtureless`` (``--target torch``, whose output runs without this
    plugin): pytest tests and fixtures use the module's ``device_type`` as well, never the
    ``device`` fixture."""
    scope = Scope("module", None, tree, GLOBAL, device_fixture=facts.pytest_only and not fixtureless,
                  declared=declared_capabilities(_module_marks(tree)))
    scope.local_gates = facts.local_gates
    scope.threaded = threaded
    scope.global_helpers = global_helpers or fixtureless or not facts.pytest_only
    scope.fixtureless = fixtureless
    scope.global_tests = global_tests
    return scope
