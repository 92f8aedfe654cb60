"""Finding the gates of a file as constructs: skip decorators and gate decorators of functions
and classes, ``if <gate>: pytest.skip(...)`` at the top of a test or a module, and
``pytestmark = pytest.mark.skipif(<gate>, ...)``. Each construct owns the findings of its
atoms; :func:`pytest_devcaps.lint.items.decide` gives them their fix later.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from typing import Any, Callable, Literal

from pytest_devcaps.lint import rules
from pytest_devcaps.lint.gating import (
    Atom, LocalGate, Uses, atoms_in, classify, dotted, fact_condition, generic_atom, is_cuda_literal, last_name,
    local_atom, need_for, only_excludes, resolve, unknown_device_word,
)
from pytest_devcaps.lint.items import Construct, Item
from pytest_devcaps.lint.records import Need, ReplaceDecorator, ScopeKey
from pytest_devcaps.lint.scopes import (
    ModuleFacts, Scope, dead_cuda_skip, device_parametrize, removable_device_parametrize,
)
from pytest_devcaps.lint.source import SourceFile

Style = Literal["pytest", "unittest"]
KEEP_DEVICE_TYPE = ("a decorator of PyTorch's device-type tests (instantiate_device_type_tests) "
                    "that only acts per device type; keep it")


def atom_message(source: SourceFile, atom: Atom) -> tuple[str, str]:
    """(message, use) for one gate."""
    text = " ".join(source.segment(atom.node).split())
    text = text if len(text) <= 60 else text[:57] + "..."
    title = rules.RULES[atom.code].title
    label = "" if atom.label in (text, text + "()") else f" ({atom.label})"
    marks = atom.when_true.render()
    use = "@" + ", @".join(marks) if marks and not atom.when_true.blockers else atom.use
    return f"`{text}`: {title}{label}", use


def atom_item(source: SourceFile, atom: Atom) -> Item:
    message, use = atom_message(source, atom)
    return Item(source.span(atom.node), atom.code, message, use, atom.hardware)


TORCH_KEEPS_PARAMETRIZATION = ("--target torch has no device fixture: the test's own device parametrization "
                               "stays, and so does what it decides (convert with --target devcaps)")


class GateReader:
    """Builds the constructs of one file; ``owned`` collects the nodes they account for."""

    def __init__(self, source: SourceFile, facts: ModuleFacts, owned: set[int]) -> None:
        self.source = source
        self.facts = facts
        self.owned = owned
        self.constructs: list[Construct] = []
        # a test's removable ``parametrize("device", ...)``, by test: it goes with the test's
        # dead_cuda_skip, or stays with it
        self.device_parametrizes: dict[ScopeKey, Item] = {}

    def where(self, scope: Scope) -> dict[str, Any]:
        """The target the construct is written for, and the node it guards: the decorated
        function or class (a module gate guards the whole file; ``analyze`` reads the region)."""
        return {"target": self.source.target, "anchor": None if scope.kind == "module" else scope.node}

    def _atom_of(self, used: Uses) -> Callable[[ast.expr], Atom | None]:
        return lambda e: classify(e, used, in_condition=True) or generic_atom(e)

    def condition(self, kind: Literal["decorator", "statement", "module_statement", "mark_value"],
                  node: ast.AST, cond: ast.expr, holds: bool, scope: Scope, style: Style) -> Construct | None:
        """A construct for "run when ``cond`` is ``holds``", if ``cond`` has any CUDA gate."""
        atoms = [a for a in atoms_in(cond, scope, in_condition=True) if a.code]
        if not atoms:
            return None
        need = need_for(cond, holds, self._atom_of(scope))
        construct = Construct(kind, self.source.span(node), need, scope.key, scope.device_fixture, style,
                              has_pytestmark=self.facts.has_pytestmark, reason=reason_of(node),
                              **self.where(scope))
        skip = fact_condition(cond, not holds, self._atom_of(scope))
        if skip is not None and only_excludes(skip):
            construct.skip_when = skip
        for atom in atoms:
            construct.own(atom_item(self.source, atom))
            self.owned.add(id(atom.node))
            construct.note_imports(atom.node, self.facts.imports)
        self.constructs.append(construct)
        return construct

    def decorators(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, scope: Scope,
                   device_type_class: bool) -> list[Item]:
        """Constructs for the gate decorators of ``node``; items for a removable device parametrize."""
        items: list[Item] = []
        for decorator in node.decorator_list:
            call = decorator if isinstance(decorator, ast.Call) else None
            target = call.func if call is not None else decorator
            name, last = dotted(target), last_name(target)
            skip = rules.SKIP_DECORATORS.get(name, rules.SKIP_DECORATORS.get(last))
            if skip is not None and call is not None and call.args and not isinstance(call.args[0], ast.Constant):
                style: Style = "pytest" if "mark" in name else "unittest"
                self.condition("decorator", decorator, call.args[0], not skip, scope, style)
            elif skip is not None and call is not None and call.args and name.startswith("pytest.mark"):
                gate = _string_condition_gate(call.args[0], scope)
                if gate is not None:
                    self._gate_decorator(decorator, call, rules.DecoratorRule(gate), scope, device_type_class)
            elif last in rules.DECORATORS:
                self._gate_decorator(decorator, call, rules.DECORATORS[last], scope, device_type_class)
            elif isinstance(target, ast.Name) and target.id in scope.local_gates:
                self._local_mark(decorator, scope.local_gates[target.id], scope)
            elif not name.startswith("pytest.mark") and unknown_device_word(last) is not None:
                gate = unknown_device_word(last)
                assert gate is not None
                self._gate_decorator(decorator, call, rules.DecoratorRule(gate), scope, device_type_class)
            elif last == "parametrize" and call is not None and call is device_parametrize_of(node):
                items.extend(self._device_parametrize(call, scope))
        return items

    def _gate_decorator(self, decorator: ast.expr, call: ast.Call | None, rule: rules.DecoratorRule,
                        scope: Scope, device_type_class: bool) -> None:
        need = _decorator_need(call, rule, scope, self.facts.constants)
        if need is not None and rule.count_arg and need.accelerator and not need.blockers and _multiprocess(scope):
            # a multi-process test: its world needs n ranks and a process-group backend for the
            # device (on the CPU, ranks share it), which a device count does not say
            need = replace(need, devices=0, accelerator=False, ranks=max(need.devices, 1))
        if need is None:
            return
        if rule.gate in rules.ONLY_CUDA_GATES and device_type_class and call is None:
            self._only_accelerator(decorator, rule.gate.label, scope)
            return
        style: Style = "unittest" if scope.testcase else "pytest"
        construct = None
        if rule.condition_arg and call is not None and call.args:
            construct = self.condition("decorator", decorator, call.args[0], False, scope, style)
        if construct is None:
            construct = Construct("decorator", self.source.span(decorator), need, scope.key,
                                  scope.device_fixture, style, **self.where(scope))
            text = " ".join(self.source.segment(decorator).split())
            marks = need.render()
            use = "@" + ", @".join(marks) if marks and not need.blockers else rule.gate.use
            construct.own(Item(self.source.span(decorator), rule.gate.code,
                               f"`@{text}`: {rules.RULES[rule.gate.code].title}", use,
                               need.hardware or rule.gate.hardware))
            construct.note_imports(call.func if call is not None else decorator, self.facts.imports)
            if rule.skip_when is not None:
                construct.skip_when = rule.skip_when
                construct.reason = _message_of(call)
            name = last_name(call.func if call is not None else decorator)
            if rule.count_arg and name == "skip_if_lt_x_gpu" and self.source.target == "torch":
                # common_distributed's own gate (CUDA, HPU and XPU counts): torch has no
                # decorator for "n ranks and a backend", so it stays as written, not "fixed"
                construct.keep = ("PyTorch's own gate (common_distributed.skip_if_lt_x_gpu counts CUDA, "
                                  "HPU and XPU devices); torch has no decorator for n ranks and a "
                                  "process-group backend: keep it, or convert with --target devcaps")
                construct.generic = True  # every accelerator it counts runs the test's code
                construct.holds_world_size = True  # but only those: FSDPTest's world on emu fails
            self.constructs.append(construct)
        if rule.device_type_only:
            construct.keep = KEEP_DEVICE_TYPE if device_type_class else (
                "acts only in PyTorch's device-type tests; replace it by hand")
            construct.generic = True  # it acts per device type: it keeps nothing on CUDA
        self.owned.add(id(decorator))

    def _only_accelerator(self, decorator: ast.expr, name: str, scope: Scope) -> None:
        """``@onlyCUDA`` (or ``@onlyCUDAAndPRIVATEUSE1``) in a device-type class ->
        ``@onlyAccelerator`` (common_device_type: skips on cpu and meta), the campaign's rewrite;
        it widens the test to every accelerator, so it is decided as any "needs CUDA" gate: only
        where nothing CUDA-only stays."""
        span = self.source.span(decorator)
        construct = Construct("decorator", span, Need(accelerator=True, vendors=("cuda",)), scope.key, False,
                              "unittest", replacement=("onlyAccelerator",), **self.where(scope))
        construct.own(Item(span, "DC011", f"`@{name}`: CUDA-only test decorator", "@onlyAccelerator", "accelerator"))
        if name in self.facts.imports:
            construct.imported.append((self.facts.imports[name], name))
        self.constructs.append(construct)
        self.owned.add(id(decorator))

    def _local_mark(self, decorator: ast.expr, gate: LocalGate, scope: Scope) -> None:
        """``@requires_fp8`` where the file says ``requires_fp8 = pytest.mark.skipif(...)``."""
        if gate.kind != "mark":
            return
        atom = local_atom(decorator, gate, scope)
        if atom is None:
            return
        style: Style = "unittest" if scope.testcase else "pytest"
        construct = Construct("decorator", self.source.span(decorator), atom.when_true, scope.key,
                              scope.device_fixture, style, **self.where(scope))
        text = " ".join(self.source.segment(decorator).split())
        message, use = atom_message(self.source, atom)
        construct.own(Item(self.source.span(decorator), atom.code, f"`@{text}`: {message.split(': ', 1)[1]}",
                           use, atom.when_true.hardware or atom.hardware))
        self.constructs.append(construct)
        self.owned.add(id(decorator))

    def _device_parametrize(self, call: ast.Call, scope: Scope) -> list[Item]:
        """``parametrize("device", ["cpu", "cuda"])`` goes where the device fixture takes its
        place (``--target devcaps``; ``--target torch`` has no fixture: it stays, and its "cuda"
        is the accelerator's type)."""
        if scope.kind != "test" or not removable_device_parametrize(call, scope.node):
            return []
        self.owned.add(id(call))
        item = Item(self.source.span(call), "DC003", "parametrizes `device` over hardcoded devices",
                    "the device fixture (parametrized over every device present)", "accelerator")
        if scope.fixtureless:  # found under either target; torch's output has no fixture to take its place
            item.why = TORCH_KEEPS_PARAMETRIZATION
            return [item]
        if scope.key is not None:
            self.device_parametrizes[scope.key] = item
        return [item.fixed("removed: the device fixture parametrizes the test",
                           ReplaceDecorator(self.source.span(call), ()))]

    def body_skips(self, node: ast.FunctionDef | ast.AsyncFunctionDef, scope: Scope) -> None:
        """``if <gate>: pytest.skip(...)`` / ``self.skipTest(...)`` (or ``return``) among a test's
        statements. In a TestCase method (``if not TEST_CUDA: self.skipTest(...)``) a plain
        "needs CUDA" is rewritten in place; marks go on the method (our decorators work under
        unittest) only when the skip comes first, so no code that ran before it stops running."""
        class_hook = scope.kind == "method" and scope.testcase and node.name in ("setUp", "setUpClass") \
            and scope.parent is not None and isinstance(scope.parent.node, ast.ClassDef)
        if scope.kind not in ("test", "testcase") and not class_hook:
            return
        leading = True
        for statement in node.body:
            if not (isinstance(statement, ast.If) and not statement.orelse and len(statement.body) == 1
                    and _is_skip(statement.body[0], allow_return=True)):
                leading = leading and _is_docstring(statement)
                continue
            style: Style = "unittest" if scope.kind == "testcase" else "pytest"
            construct = self.condition("statement", statement, statement.test, False, scope, style)
            if construct is None:
                continue
            construct.empty_body = all(s is statement or _is_docstring(s) for s in node.body)
            parametrize = self.device_parametrizes.get(scope.key) if scope.key is not None else None
            if parametrize is not None and dead_cuda_skip(statement):  # one goes, or both stay
                construct.own(parametrize)
            elif scope.kind == "test" and not scope.device_fixture and device_parametrize(node) is not None:
                construct.keep = (TORCH_KEEPS_PARAMETRIZATION if scope.fixtureless else
                                  "the test parametrizes `device` itself and reads it as a string: the "
                                  "device fixture (a torch.device) cannot take its place; keep it")
            if scope.kind == "testcase" or class_hook:
                construct.condition = (self.source.span(statement.test), type(statement.test).__name__)
                construct.leading = leading and not class_hook  # marks never move off setUpClass
            if class_hook:  # ``if not TEST_CUDA: raise SkipTest`` in setUpClass guards the whole class
                assert scope.parent is not None
                construct.anchor = scope.parent.node

    def module_gates(self, tree: ast.Module, scope: Scope) -> None:
        """``if <gate>: pytest.skip(..., allow_module_level=True)`` and PyTorch's module gates:
        ``if not TEST_CUDA: print(...); TestCase = NoTest`` or ``...; sys.exit(0)`` (the
        condition alone is rewritten there; a kept one holds the whole file)."""
        for statement in tree.body:
            if isinstance(statement, ast.If) and not statement.orelse and len(statement.body) == 1 \
                    and _is_skip(statement.body[0], allow_return=False):
                construct = self.condition("module_statement", statement, statement.test, False, scope, "pytest")
                if construct is not None:
                    construct.skip_source = self.source.segment(statement.body[0])
            elif isinstance(statement, ast.If) and not statement.orelse and _disables_module(statement.body):
                construct = self.condition("module_statement", statement, statement.test, False, scope, "unittest")
                if construct is not None:
                    construct.condition = (self.source.span(statement.test), type(statement.test).__name__)
                    construct.leading = True
            else:
                self.pytestmark(statement, scope)

    def pytestmark(self, statement: ast.stmt, scope: Scope) -> None:
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name) and statement.targets[0].id == "pytestmark"):
            return
        value = statement.value
        elements = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
        for element in elements:
            if isinstance(element, ast.Call) and last_name(element.func) == "skipif" and element.args \
                    and not isinstance(element.args[0], ast.Constant):
                construct = self.condition("mark_value", element, element.args[0], False, scope, "pytest")
                if construct is not None and element is value:
                    construct.statement = self.source.span(statement)


def reason_of(node: ast.AST) -> str | None:
    """The reason text of a skip: ``skipIf(c, "why")``, ``skipif(c, reason="why")``, or the
    message of the skip call an ``if <gate>:`` makes (``self.skipTest("why")``, ``raise
    SkipTest("why")``, ``pytest.skip("why")``)."""
    call: ast.AST | None = node
    if isinstance(node, ast.If) and node.body:
        first = node.body[-1]
        call = first.exc if isinstance(first, ast.Raise) else first.value if isinstance(first, ast.Expr) else None
    if not isinstance(call, ast.Call):
        return None
    values = [k.value for k in call.keywords if k.arg in ("reason", "msg")]
    values += call.args[:1] if isinstance(node, ast.If) else call.args[1:2]  # skipTest(why) / skipIf(c, why)
    for value in values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return value.value
        if isinstance(value, ast.JoinedStr):
            return "".join(v.value for v in value.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return None


def _message_of(call: ast.Call | None) -> str | None:
    """The message a gate decorator takes first or by keyword (``skip_if_rocm("why")``,
    ``skipIfRocm(msg="why")``)."""
    if call is None:
        return None
    values = [*call.args[:1], *(k.value for k in call.keywords if k.arg in ("message", "msg", "reason"))]
    for value in values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value.strip():
            return value.value
    return None


def device_parametrize_of(node: ast.AST) -> ast.Call | None:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return device_parametrize(node)
    return None


COUNT_KEYWORDS = ("gpu_count", "num_gpus", "n_gpus", "world_size", "x", "n", "count")
MULTIPROCESS_BASE = re.compile(r"MultiProcess|MultiThread|FSDPTest|DTensor|Distributed|ProcessGroup|C10d|"
                               r"Continuous|DistTest|DDP")


def _multiprocess(scope: Scope) -> bool:
    """The test is a method of a multi-process test class (a ``world_size`` of its own, or a
    base class named like PyTorch's: MultiProcessTestCase, FSDPTest, DTensorTestBase...)."""
    owner = scope.parent.node if scope.parent is not None else None
    if not isinstance(owner, ast.ClassDef):
        return False
    bases = {last_name(b) for b in owner.bases}
    return any(MULTIPROCESS_BASE.search(b) for b in bases) or any(_binds_world_size(s) for s in owner.body)


def _binds_world_size(statement: ast.stmt) -> bool:
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return statement.name == "world_size"
    targets = statement.targets if isinstance(statement, ast.Assign) else \
        [statement.target] if isinstance(statement, ast.AnnAssign) else []
    return any(isinstance(t, ast.Name) and t.id == "world_size" for t in targets)


def _count(call: ast.Call | None, default: int | None, constants: dict[str, int]) -> int | None:
    """The GPU count a decorator names: its first argument or count keyword (a literal or a
    module constant such as ``_WORLD_SIZE = 2``), else ``default``."""
    if call is None:
        return default
    value = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg in COUNT_KEYWORDS), None)
    if value is None:
        return default
    if isinstance(value, ast.Constant) and type(value.value) is int:
        return int(value.value)
    if isinstance(value, ast.Name) and value.id in constants:
        return constants[value.id]
    return None


STRING_CONDITION = "a condition in a string, which pytest evaluates: the lint does not rewrite it"


def _string_condition_gate(argument: ast.expr, used: Uses) -> rules.Gate | None:
    """``@pytest.mark.skipif("not torch.cuda.is_available()")``: pytest evaluates the string
    (``_pytest/skipping.py``, ``evaluate_condition``). A device check in it is a finding and a
    gate kept as written: its test stays as it was (given the device fixture under it, the
    test's [cpu] copy would run on a CUDA machine)."""
    if not (isinstance(argument, ast.Constant) and isinstance(argument.value, str)):
        return None
    try:
        parsed = ast.parse(argument.value.strip(), mode="eval").body
    except SyntaxError:
        return None
    atom = next((a for a in atoms_in(parsed, used, in_condition=True) if a.code), None)
    if atom is None:
        return None
    return rules.Gate(atom.code, f"skipif({argument.value!r})", Need(blockers=(STRING_CONDITION,),
                      hardware=atom.hardware or "accelerator"),
                      "the condition as code: pytest.mark.skipif(<expression>, reason=...), then --fix again",
                      hardware=atom.hardware or "accelerator")


def _decorator_need(call: ast.Call | None, rule: rules.DecoratorRule, used: Uses,
                    constants: dict[str, int] | None = None) -> Need | None:
    need = resolve(rule.gate, used)
    if rule.count_arg:
        count = _count(call, rule.default_count, constants or {})
        if count is None:
            return Need(blockers=("the GPU count is not a number here",))
        return Need(accelerator=True, devices=count if count > 1 else 0, capabilities=need.capabilities)
    if rule.memory_arg:
        if call is None or not call.args:
            return None
        where = call.args[1] if len(call.args) > 1 else next(
            (k.value for k in call.keywords if k.arg == "device"), None)
        size = call.args[0]
        if where is None or not is_cuda_literal(where):
            return None
        if isinstance(size, ast.Constant) and isinstance(size.value, (str, int)):
            return Need(accelerator=True, memory=str(size.value))
        return Need(blockers=("the size is not a literal",))
    return need


def _is_skip(statement: ast.stmt, *, allow_return: bool) -> bool:
    if allow_return and isinstance(statement, ast.Return) and statement.value is None:
        return True
    if isinstance(statement, ast.Raise) and statement.exc is not None:
        exc = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
        return last_name(exc) == "SkipTest"
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        name = dotted(statement.value.func)
        return name in rules.SKIP_CALLS or name.endswith(".skipTest")
    return False


def _disables_module(body: list[ast.stmt]) -> bool:
    """A module gate's body: messages, then what switches the module's tests off (``TestCase =
    NoTest``, ``sys.exit(...)``, ``raise SkipTest``)."""
    disabling = False
    for statement in body:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
            name = dotted(statement.value.func)
            if name in ("sys.exit", "exit", "os._exit") or _is_skip(statement, allow_return=False):
                disabling = True
            elif last_name(statement.value.func) not in ("print", "warn", "info", "warning", "debug"):
                return False
        elif isinstance(statement, ast.Assign) and all(isinstance(t, ast.Name) for t in statement.targets) \
                and isinstance(statement.value, (ast.Name, ast.Attribute)):
            disabling = disabling or last_name(statement.value) in ("NoTest", "object")
        elif isinstance(statement, ast.Raise) and _is_skip(statement, allow_return=False):
            disabling = True
        else:
            return False
    return disabling


def _is_docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) \
        and isinstance(statement.value.value, str)
