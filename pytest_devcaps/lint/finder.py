"""The syntax-tree walk: every hardcoded device check in a file, each with what ``--fix`` does
about it where the code gives it a device (see ``scopes``). Gates are read by ``constructs``,
module-level device constants by ``aliases``; this module finds the rest (calls, literals,
attributes, names) and turns each into an :class:`~pytest_devcaps.lint.items.Item`.
"""

from __future__ import annotations

import ast

from pytest_devcaps.lint import calls, rules
from pytest_devcaps.lint.aliases import Aliases
from pytest_devcaps.lint.constructs import GateReader, atom_item
from pytest_devcaps.lint.gating import Atom, classify, deviceish, dotted, is_cuda_literal, last_name
from pytest_devcaps.lint.items import Construct, Item
from pytest_devcaps.lint.records import (
    VALUE, AddParameter, DropDefault, Edit, EditCall, EnsureDeviceType, Hardware, RemoveUnusedImport, ReplaceExpr,
    ScopeKey, Span,
)
from pytest_devcaps.lint.scopes import DeviceContext, ModuleFacts, Scope, class_scope, function_scope, module_scope
from pytest_devcaps.lint.source import SourceFile

NO_DEVICE = {
    "testcase": "unittest.TestCase methods cannot take the device fixture: make the class a plain pytest "
                "class, or use torch.accelerator.current_accelerator(check_available=True)",
    "module": "module-level code runs before a device is chosen: move it into a test or a fixture",
    "class": "class-level code runs before a device is chosen: move it into a test or a fixture",
    "head": "a decorator or a default value runs where the function is defined, before any device is "
            "chosen: move it into the function body, which can take the device",
}
NO_DEVICE_HELPER = "a helper without a device: give it a `device` parameter and pass the test's device"


class Finder(ast.NodeVisitor):
    def __init__(self, source: SourceFile, threaded: frozenset[str] = frozenset(),
                 global_helpers: bool = False, global_tests: frozenset[ScopeKey] = frozenset()) -> None:
        self.source = source
        self.facts = ModuleFacts(source.tree)
        self.items: list[Item] = []
        self.owned: set[int] = set()
        self.handled: set[int] = set()
        self.roles: dict[int, str] = {}
        self.gates = GateReader(source, self.facts, self.owned)
        self.aliases = Aliases(source, self.owned)
        self.expressions: list[Construct] = []
        self.statements: list[ast.stmt] = []
        self.scopes = [module_scope(source.tree, self.facts, threaded, global_helpers,
                                    fixtureless=source.target == "torch", global_tests=global_tests)]
        self.threaded = threaded
        self.plumbing: list[Edit] = []  # callers passing device= to threaded helpers
        # only_for="cuda" rewritten to except_for="cpu": (its finding, the class it instantiates)
        self.instantiations: list[tuple[Item, str]] = []
        self.own_cuda = {c.name: m.lineno for c in ast.walk(source.tree) if isinstance(c, ast.ClassDef)
                         for m in c.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name == "cuda"}
        self._call_parent: dict[int, ast.Call] = {}
        self.imports = self.facts.imports
        self.signatures = self.facts.signatures

    @property
    def scope(self) -> Scope:
        return self.scopes[-1]

    @property
    def constructs(self) -> list[Construct]:
        return self.gates.constructs + self.expressions

    # -- bookkeeping ---------------------------------------------------------------------

    def add(self, node: ast.AST, code: str, message: str, use: str, hardware: Hardware | None = None,
            blocks: bool | None = None, span: Span | None = None) -> Item:
        """A finding at ``node`` (or at ``span``, where the line a reader looks for differs)."""
        span = span or self.source.span(node)
        if self.scope.kind == "head":  # a CUDA autocast or scaler wrapping a helper: what it does stays CUDA's
            blocks = True
        item = Item(span, code, message, use, hardware,
                    blocks_cpu=rules.RULES[code].blocks_cpu if blocks is None else blocks,
                    suppressed=self.source.allowed(span.line, code), helper=self.helper())
        self.items.append(item)
        self.handled.add(id(node))
        return item

    def own(self, node: ast.AST) -> None:
        self.owned.add(id(node))

    def owned_nodes(self) -> set[int]:
        return self.owned

    def visit(self, node: ast.AST) -> None:
        if id(node) in self.owned:
            self.aliases.blocked_use(node)
            return
        if isinstance(node, ast.stmt):
            self.statements.append(node)
            super().visit(node)
            self.statements.pop()
            return
        super().visit(node)

    def guards_cuda_code(self, atom: ast.AST) -> bool:
        """The statement around ``atom`` also calls CUDA-only code that the check protects."""
        if not self.statements:
            return False
        inside = {id(n) for n in ast.walk(atom)}
        for node in ast.walk(self.statements[-1]):
            if id(node) in inside or not isinstance(node, (ast.Attribute, ast.Call)):
                continue
            name = dotted(node.func if isinstance(node, ast.Call) else node)
            if name.startswith(("torch.cuda.", "torch.version.", "torch.backends.cud")) or (
                    isinstance(node, ast.Call) and classify(node, self.scope) is not None):
                return True
        return False

    def _reads_setting(self, node: ast.Attribute) -> bool:
        """``assert torch.backends.cudnn.deterministic`` (or ``self.assertTrue(...)``, or
        ``saved = torch.backends.cuda.matmul.allow_tf32``): a test that reads a backend flag to
        check what the code under test set, or to compare later. The flags are plain Python
        settings that every build holds (torch/backends/cudnn/__init__.py, cuda/__init__.py), so
        reading one runs, and means the same, on every device: not a setting, not a gate. Setting
        one, calling one (``flags(...)``) and branching on one stay findings."""
        if not isinstance(node.ctx, ast.Load) or node.attr.startswith("_") or not self.statements:
            return False
        statement = self.statements[-1]
        if any(isinstance(n, ast.Call) and n.func is node for n in ast.walk(statement)):
            return False
        if isinstance(statement, ast.Assert):
            return True
        if isinstance(statement, (ast.Assign, ast.AnnAssign)):
            return statement.value is node
        return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call) \
            and last_name(statement.value.func).startswith("assert")

    def vendor_keyed(self, atom: ast.AST) -> str | None:
        """Why the check must stay: it picks per-vendor behaviour (``TEST_CUDA or TEST_XPU``
        choosing memory_stats keys, an ``if``/``else`` on CUDA next to ``torch.version.hip``):
        "any accelerator" would send Gaudi or MPS down CUDA's branch."""
        statement = self.statements[-1] if self.statements else None
        if statement is None:
            return None
        inside = {id(n) for n in ast.walk(atom)}
        head = statement.test if isinstance(statement, (ast.If, ast.While)) else statement
        words = {n.id for n in ast.walk(head) if isinstance(n, ast.Name) and id(n) not in inside}
        words |= {n.attr for n in ast.walk(head) if isinstance(n, ast.Attribute) and id(n) not in inside}
        other = sorted(w for w in words if rules.OTHER_VENDOR.search(w))
        if other:
            return (f"a vendor-keyed branch ({other[0]} next to the CUDA check): decide what each other "
                    "accelerator does here; 'any accelerator' would take CUDA's branch")
        if isinstance(statement, ast.If) and statement.orelse and any(id(n) in inside for n in ast.walk(statement.test)):
            return ("an if/else on CUDA: the else branch is what non-CUDA devices did; decide whether "
                    "every accelerator should take the CUDA branch")
        return None

    def cuda_object(self, node: ast.Call) -> bool:
        """The CUDA stream/event ``node`` makes is used through a CUDA-only attribute
        (``s = torch.cuda.Stream(); s.cuda_stream``): then it must stay CUDA's."""
        statement = self.statements[-1] if self.statements else None
        names = {""}
        if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is node:
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            names = {dotted(t) for t in targets} - {""}
        region = next((s.node for s in reversed(self.scopes) if s.kind == "class"), self.source.tree) \
            if any(n.startswith("self.") for n in names) else self.scope.node
        for child in ast.walk(region):
            if isinstance(child, ast.Attribute) and child.attr in rules.CUDA_OBJECT_ATTRIBUTES and (
                    child.value is node or dotted(child.value) in names):
                return True
        return False

    def why_no_device(self) -> str:
        return NO_DEVICE.get(self.scope.kind, NO_DEVICE_HELPER) if not self.scope.testcase or \
            self.scope.kind != "method" else NO_DEVICE["testcase"]

    def context(self) -> DeviceContext | None:
        return self.scope.context

    def helper(self) -> str | None:
        """The module-level helper function the code being read is in (None: elsewhere)."""
        top = self.scopes[1] if len(self.scopes) > 1 else None
        return top.key[0] if top is not None and top.kind == "function" and top.key else None

    def call_of(self, argument: ast.AST) -> ast.Call | None:
        """The call ``argument`` is passed to (visited already: calls come before their arguments)."""
        return self._call_parent.get(id(argument))

    def param_edits(self, context: DeviceContext, *fixtures: str) -> list[Edit]:
        edits: list[Edit] = [EnsureDeviceType()] if context.source == "global" else []
        if context.param_owner is not None:
            edits.append(AddParameter(context.param_owner, context.name, keyword_only=context.keyword_only))
        for name in fixtures:
            assert context.fixture_owner is not None
            edits.append(AddParameter(context.fixture_owner, name))
        return edits

    # -- scopes ----------------------------------------------------------------------------

    def visit_Module(self, node: ast.Module) -> None:
        self.gates.module_gates(node, self.scope)
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        scope = class_scope(node, self.scope, node.name in self.facts.instantiated)
        self.items.extend(self.gates.decorators(node, scope, node.name in self.facts.instantiated))
        for statement in node.body:
            self.gates.pytestmark(statement, scope)
        self.scopes.append(scope)
        self.generic_visit(node)
        self.scopes.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        scope = function_scope(node, self.scope)
        parent = self.scope.node
        device_type_class = isinstance(parent, ast.ClassDef) and parent.name in self.facts.instantiated
        self.items.extend(self.gates.decorators(node, scope, device_type_class))
        self.gates.body_skips(node, scope)
        self.scopes.append(Scope("head", None, node, None, parent=scope))
        for head in self._head(node):  # evaluated where the function is defined: no device there
            self.visit(head)
        self.scopes[-1] = scope
        self._defaults(node, scope)
        for statement in node.body:
            self.visit(statement)
        self.scopes.pop()

    @staticmethod
    def _head(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.AST]:
        """The decorators, default values and annotations of ``node``."""
        args = node.args
        annotations = [a.annotation for a in [*args.posonlyargs, *args.args, *args.kwonlyargs,
                                              *(x for x in (args.vararg, args.kwarg) if x is not None)]
                       if a.annotation is not None]
        return [*node.decorator_list, *args.defaults, *(d for d in args.kw_defaults if d is not None),
                *annotations, *([node.returns] if node.returns is not None else [])]

    visit_AsyncFunctionDef = visit_FunctionDef

    def _defaults(self, node: ast.FunctionDef | ast.AsyncFunctionDef, scope: Scope) -> None:
        positional = [*node.args.posonlyargs, *node.args.args]
        defaults = [None] * (len(positional) - len(node.args.defaults)) + list(node.args.defaults)
        pairs = [*zip(positional, defaults), *zip(node.args.kwonlyargs, node.args.kw_defaults)]
        for index, (arg, default) in enumerate(pairs):
            if default is None or not is_cuda_literal(default) or not rules.DEVICE_NAME.search(arg.arg):
                continue
            item = self.add(default, "DC003", f"parameter `{arg.arg}` defaults to {default.value!r}",  # type: ignore[attr-defined]
                            "the device fixture", "accelerator")
            earlier = [d for _, d in pairs[:index] if d is not None]
            if arg.arg == "device" and scope.kind in ("test", "fixture") and not earlier and scope.key:
                item.fixed("default dropped: the parameter is the device fixture", DropDefault(scope.key, "device"))
            else:
                item.why = NO_DEVICE_HELPER

    def _asserted(self, node: ast.AST) -> bool:
        """``node`` is part of what an ``assert`` / ``self.assert*(...)`` statement checks."""
        for statement in self.statements:
            checked = statement.test if isinstance(statement, ast.Assert) else statement.value if (
                isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
                and isinstance(statement.value.func, ast.Attribute)
                and statement.value.func.attr.startswith("assert")) else None
            if checked is not None and any(n is node for n in ast.walk(checked)):
                return True
        return False

    # -- gates -----------------------------------------------------------------------------

    def _atom(self, atom: Atom) -> None:
        item = atom_item(self.source, atom)
        item.suppressed = self.source.allowed(item.span.line, atom.code)
        item.blocks_cpu = calls_cuda(atom.node)  # get_device_capability() raises off CUDA
        self.items.append(item)
        self.own(atom.node)
        self.aliases.blocked_use(atom.node)
        need = atom.when_true
        if need.accelerator and not (need.capabilities or need.any_of or need.devices or need.blockers):
            statement = self.statements[-1] if self.statements else None
            guard = statement if isinstance(statement, ast.If) and any(
                n is atom.node for n in ast.walk(statement.test)) else None
            construct = Construct("expr", item.span, need, None, False, "pytest",
                                  node_class=type(atom.node).__name__, target=self.source.target,
                                  anchor=None if self.scope.kind == "module" else self.scope.node, guard=guard)
            vendor = self.vendor_keyed(atom.node)
            if vendor:
                construct.keep = vendor
            if self.guards_cuda_code(atom.node):
                construct.keep = "it guards CUDA-only code in the same statement"
            construct.own(item)
            construct.note_imports(atom.node, self.imports)
            self.expressions.append(construct)  # decided with the gates: torch.accelerator.is_available()
        elif isinstance(atom.node, ast.Compare) and atom.code == "DC005":
            count = next(n for n in ast.walk(atom.node) if isinstance(n, ast.Call))
            item.fixed("replaced by torch.accelerator.device_count()",
                       EditCall(self.source.span(count), func="torch.accelerator.device_count"))
        else:
            item.why = "a gate outside a skip decorator or skip statement; ask devcaps.has(...) at run time"
            # left as it is: a device check an assertion makes (``assert all(t.device.type ==
            # "cuda" for t in ts)``) fails off CUDA once the test around it is widened
            item.blocks_cpu = item.blocks_cpu or self._asserted(atom.node)

    def visit_Compare(self, node: ast.Compare) -> None:
        operands = (node.left, *node.comparators)
        indexed = next((o for o in operands if _indexed_cuda_device(o)), None)
        if indexed is None or not any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops) or not any(
                isinstance(n, ast.Attribute) and n.attr == "device" for o in operands if o is not indexed
                for n in ast.walk(o)):
            atom = None if id(node) in self.handled else classify(node, self.scope)
            if atom is not None:
                self._atom(atom)
                return
        elif id(node) not in self.handled:
            text = " ".join(self.source.segment(indexed).split())
            item = self.add(indexed, "DC003", f"compares with `{text}`, a CUDA device by its index",
                            "the test's device and its own index (x.device == device)", "cuda", blocks=True)
            item.why = ("a device's index means another thing elsewhere (a CPU tensor has none): the "
                        "comparison stays CUDA's")
            for child in ast.walk(indexed):
                self.own(child)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if id(node) in self.handled or not isinstance(node.ctx, ast.Load):
            return
        shadowed = any(node.id in s.bound for s in self.scopes[1:])
        if node.id in self.aliases.by_name and not shadowed:
            self.items.append(self.aliases.use(node, self.roles.get(id(node)), self.context()))
        elif node.id in rules.EXTERNAL_DEVICE_NAMES and not shadowed:
            self._external_device(node)
        else:
            atom = classify(node, self.scope)
            if atom is not None:
                self._atom(atom)

    def _external_device(self, node: ast.Name) -> None:
        item = self.add(node, "DC003", f"`{node.id}` names the GPU device type", "the device fixture",
                        "accelerator")
        context = self.context()
        if context is None:
            item.why = self.why_no_device()
            return
        role = self.roles.get(id(node))
        kind = rules.EXTERNAL_DEVICE_NAMES[node.id]
        code = context.expr("device" if role in ("device", "move") or kind == "device" else "type")
        edits: list[Edit] = [ReplaceExpr(item.span, "Name", code), *self.param_edits(context)]
        if node.id in self.imports:
            edits.append(RemoveUnusedImport(self.imports[node.id], node.id))
        item.fixed(f"replaced by {code}", *edits)

    # -- calls, attributes, literals ---------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> None:
        atom = classify(node, self.scope)
        if atom is not None:
            self._atom(atom)
            return
        name = dotted(node.func)
        if last_name(node.func) == "assertTrue" and node.args:
            self._asserts_on_cuda(node.args[0])
        elif last_name(node.func) == "assertEqual" and len(node.args) >= 2:
            self._asserts_on_cuda(ast.Compare(left=node.args[0], ops=[ast.Eq()], comparators=[node.args[1]]),
                                  self.source.span(node))
        if last_name(node.func) == "instantiate_device_type_tests":
            calls.only_for(self, node)
        calls.assign_roles(self, node)
        calls.integer_devices(self, node)
        if isinstance(node.func, ast.Name) and (node.func.id in self.threaded or node.func.id in self.facts.takes_device) \
                and not any(k.arg in ("device", None) for k in node.keywords) and self.context() is not None:
            context = self.context()
            assert context is not None
            self.plumbing += [EditCall(self.source.span(node), keywords=(("device", context.expr("device")),)),
                              *self.param_edits(context)]
        self._call_parent[id(node)] = node
        for child in (*node.args, *(k.value for k in node.keywords)):
            self._call_parent[id(child)] = node
        # torch.cuda.current_stream().wait_stream(...): the inner call is the finding
        if name.startswith("torch.cuda.amp.") and "()" not in name:
            calls.cuda_amp(self, node, name)
        elif name.startswith("torch.cuda.") and "()" not in name:
            calls.cuda_call(self, node, name)
        elif name == rules.CYCLES_PER_MS:
            calls.cycles_per_ms(self, node, name)
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "cuda" and name != "torch.cuda":
            calls.move(self, node)
        elif last_name(node.func) == "device" and calls.device_call(self, node):
            return
        if _pins_memory(node, name):
            calls.pin_memory(self, node, name)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if id(node) in self.handled:
            self.generic_visit(node)
            return
        atom = classify(node, self.scope)
        if atom is not None:
            self._atom(atom)
            return
        name = dotted(node)
        if name.startswith(rules.CUDA_PRIVATE_PREFIXES):
            item = self.add(node, "DC004", f"`{name}` is a private CUDA binding", rules.CUDA_PRIVATE_USE, "cuda",
                            blocks=True)
            item.why = "the test is about CUDA itself"
            self.own(node)
        elif node.attr in rules.CUDA_OBJECT_ATTRIBUTES and not name.startswith("torch."):
            item = self.add(node, "DC004", f"`.{node.attr}` is an attribute of CUDA's own stream/event objects",
                            "torch.Stream / torch.Event without their CUDA handles", "cuda", blocks=True)
            item.why = "a CUDA handle has no other device's counterpart"
            self.generic_visit(node)
        elif name.startswith(("torch.backends.cuda.", "torch.backends.cudnn.")) or name in (
                "torch.backends.cuda", "torch.backends.cudnn"):
            if not self._reads_setting(node):
                statement = self.statements[-1] if self.statements else None
                calls.settings(self, node, name, called=statement is not None and any(
                    isinstance(n, ast.Call) and n.func is node for n in ast.walk(statement)))
        elif name == "torch.cuda" and calls.module_fallback(self, node, self._call_parent.get(id(node))):
            pass
        elif name == "torch.cuda" or name.startswith("torch.cuda.") and "()" not in name:
            calls.torch_cuda_name(self, node, name)
        elif name.endswith("DeviceType.CUDA"):
            item = self.add(node, "DC003", f"`{name}` singles out CUDA (profiler events)",
                            "the test's device type: torch.autograd.DeviceType[device.type.upper()]", "cuda")
            item.why = "compare with the test's device type instead"
        elif name.endswith("Backend.NCCL"):
            item = self.add(node, "DC008", f"`{name}` is the CUDA-only distributed backend", rules.DIST_USE,
                            "accelerator")
            item.why = "use the dist_backend fixture"
        else:
            self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if id(node) in self.handled or not isinstance(node.value, str):
            return
        role = self.roles.get(id(node))
        if is_cuda_literal(node):
            calls.literal(self, node, role)
        elif node.value == "nccl":
            calls.nccl(self, node, role, self._call_parent.get(id(node)))

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        if not calls.fstring(self, node):
            self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        if not calls.choice(self, node):
            self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        if self.scope.kind != "module" and len(node.targets) == 1:
            calls.local_alias(self, node)
        if any(deviceish(t) for t in node.targets):
            calls.mark_named(self, node.value, "named")
        elif any(isinstance(t, ast.Name) and "backend" in t.id.lower() for t in node.targets):
            calls.mark_named(self, node.value, "backend")
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        self._asserts_on_cuda(node.test)
        self.generic_visit(node)

    def _asserts_on_cuda(self, test: ast.expr, span: Span | None = None) -> bool:
        """``assert x.is_cuda`` / ``self.assertTrue(x.is_cuda)`` / ``assert x.device.type ==
        "cuda"``: "on the test's device" (device.type, device_type, self.device_type)."""
        context = self.context()
        if isinstance(test, ast.Compare) and any(_indexed_cuda_device(o) for o in (test.left, *test.comparators)):
            return False  # CUDA device 0 by its index: visit_Compare keeps it CUDA's
        found = _assert_rewrite(test, context) if context is not None else None
        if found is None or context is None:
            return False
        target, kind, code = found
        item = self.add(test, "DC003", "asserts the result is on CUDA", "the test's device (device.type)",
                        "accelerator", span=span)
        item.fixed(f"now asserts the test's device ({code})",
                   ReplaceExpr(self.source.span(target), kind, code), *self.param_edits(context))
        self.own(target)
        self.handled.add(id(test))  # read, not reported again; what is inside still is
        return True

    def visit_Return(self, node: ast.Return) -> None:
        function = self.scope.node
        if node.value is not None and isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                and rules.DEVICE_NAME.search(function.name):
            calls.mark_named(self, node.value, "named")
        self.generic_visit(node)


def _indexed_cuda_device(node: ast.expr) -> bool:
    """``"cuda:0"``, ``torch.device("cuda:1")``, ``torch.device("cuda", 0)``."""
    if isinstance(node, ast.Call) and dotted(node.func) in ("torch.device", "device") and node.args:
        return (len(node.args) == 2 and is_cuda_literal(node.args[0])) or _indexed_cuda_device(node.args[0])
    return is_cuda_literal(node) and ":" in node.value  # type: ignore[attr-defined]


# torch.cuda functions that answer on any machine (False, 0) rather than raise without CUDA.
HARMLESS_CUDA_CALLS = frozenset({"torch.cuda.is_available", "torch.cuda.device_count", "torch.cuda.is_initialized",
                                 "torch.cuda.is_bf16_supported", "torch.cuda.is_tf32_supported"})


def calls_cuda(node: ast.AST) -> bool:
    """``node`` calls into CUDA's runtime (``torch.cuda.get_device_capability()``), which raises
    or answers for CUDA alone where there is none."""
    for child in ast.walk(node):
        if isinstance(child, ast.Call):
            name = dotted(child.func)
            if (name.startswith("torch.cuda.") and name not in HARMLESS_CUDA_CALLS) or \
                    name.startswith(rules.CUDA_PRIVATE_PREFIXES):
                return True
    return False


def _pins_memory(node: ast.Call, name: str) -> bool:
    if isinstance(node.func, ast.Attribute) and node.func.attr == "pin_memory" and not node.args:
        return True
    return name.startswith("torch.") and "DataLoader" not in name and any(
        k.arg == "pin_memory" and isinstance(k.value, ast.Constant) and k.value.value is True for k in node.keywords)


def _assert_rewrite(node: ast.expr, context: DeviceContext) -> tuple[ast.expr, str, str] | None:
    """``assert y.device.type == "cuda"`` / ``assert y.is_cuda`` in a test: the check means "on the
    test's device" -> (node to replace, its ast class, the new code)."""
    if isinstance(node, ast.Attribute) and node.attr == "is_cuda":
        return node, "Attribute", f"({VALUE}.device.type == {context.expr('type')})"
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq):
        for literal, other in ((node.comparators[0], node.left), (node.left, node.comparators[0])):
            if is_cuda_literal(literal) and deviceish(other):
                text = str(literal.value)  # type: ignore[attr-defined]
                return literal, "Constant", context.expr("device" if ":" in text else "type")
    return None
