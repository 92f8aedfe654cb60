"""Finding the gates of a file as constructs: skip decorators and gate decorators of functions
and classes, ``if <gate>: pytest.skip(...)`` at the top of a test or a module, and
``pytestmark = pytest.mark.skipif(<gate>, ...)``. Each construct owns the findings of its
atoms; :func:`pytest_devcaps.lint.items.decide` gives them their fix later.
"""

from __future__ import annotations

import ast
from typing import Any, Callable, Literal

from pytest_devcaps.lint import rules
from pytest_devcaps.lint.gating import (
    Atom, LocalGate, Uses, atoms_in, classify, dotted, generic_atom, is_cuda_literal, last_name, local_atom,
    need_for, resolve, unknown_device_word,
)
from pytest_devcaps.lint.items import Construct, Item
from pytest_devcaps.lint.records import Need, RemoveUnusedImport, ReplaceDecorator
from pytest_devcaps.lint.scopes import ModuleFacts, Scope, device_parametrize, removable_device_parametrize
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


class GateReader:
    """Builds the constructs of one file; ``owned`` collects the nodes they account for."""

    def __init__(self, source: SourceFile, facts: ModuleFacts, owned: set[int]) -> None:
        self.source = source
        self.facts = facts
        self.owned = owned
        self.constructs: list[Construct] = []

    def where(self, scope: Scope) -> dict[str, Any]:
        """The target the construct is written for, and the code it guards: the decorated
        function or class (a module gate guards the whole file)."""
        region = None if scope.kind == "module" else self.source.span(scope.node)
        return {"target": self.source.target, "region": region}

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
                              has_pytestmark=self.facts.has_pytestmark, **self.where(scope))
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
        need = _decorator_need(call, rule, scope)
        if need is None:
            return
        if rule.gate is rules.ONLY_CUDA and device_type_class and call is None:
            self._only_accelerator(decorator, scope)
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
            self.constructs.append(construct)
        if rule.device_type_only:
            construct.keep = KEEP_DEVICE_TYPE if device_type_class else (
                "acts only in PyTorch's device-type tests; replace it by hand")
        self.owned.add(id(decorator))

    def _only_accelerator(self, decorator: ast.expr, scope: Scope) -> None:
        """``@onlyCUDA`` in a device-type class -> ``@onlyAccelerator`` (common_device_type:
        skips on cpu and meta), the campaign's rewrite; it widens the test to every accelerator."""
        span = self.source.span(decorator)
        construct = Construct("decorator", span, Need(), scope.key, False, "unittest", **self.where(scope))
        item = construct.own(Item(span, "DC011", "`@onlyCUDA`: CUDA-only test decorator",
                                  "@onlyAccelerator", "accelerator"))
        unused = [RemoveUnusedImport(self.facts.imports["onlyCUDA"], "onlyCUDA")] if "onlyCUDA" in self.facts.imports else []
        item.fixed("replaced by @onlyAccelerator (widens the test from CUDA to every accelerator)",
                   ReplaceDecorator(span, ("onlyAccelerator",)), *unused)
        construct.keep = "fixed"  # decided here, not by items.decide
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
        if scope.kind != "test" or not removable_device_parametrize(call):
            return []
        self.owned.add(id(call))
        item = Item(self.source.span(call), "DC003", "parametrizes `device` over hardcoded devices",
                    "the device fixture (parametrized over every device present)", "accelerator")
        return [item.fixed("removed: the device fixture parametrizes the test",
                           ReplaceDecorator(self.source.span(call), ()))]

    def body_skips(self, node: ast.FunctionDef | ast.AsyncFunctionDef, scope: Scope) -> None:
        """``if <gate>: pytest.skip(...)`` (or ``return``) among a test's statements."""
        if scope.kind not in ("test", "testcase"):
            return
        for statement in node.body:
            if not (isinstance(statement, ast.If) and not statement.orelse and len(statement.body) == 1
                    and _is_skip(statement.body[0], allow_return=True)):
                continue
            construct = self.condition("statement", statement, statement.test, False, scope, "pytest")
            if construct is None:
                continue
            construct.empty_body = all(s is statement or _is_docstring(s) for s in node.body)
            if scope.kind != "test":
                construct.keep = ("a skip inside a unittest.TestCase method; move it to a decorator "
                                  "(pytest gives TestCase methods no fixtures)")

    def module_gates(self, tree: ast.Module, scope: Scope) -> None:
        for statement in tree.body:
            if isinstance(statement, ast.If) and not statement.orelse and len(statement.body) == 1 \
                    and _is_skip(statement.body[0], allow_return=False):
                construct = self.condition("module_statement", statement, statement.test, False, scope, "pytest")
                if construct is not None:
                    construct.skip_source = self.source.segment(statement.body[0])
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


def device_parametrize_of(node: ast.AST) -> ast.Call | None:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return device_parametrize(node)
    return None


def _decorator_need(call: ast.Call | None, rule: rules.DecoratorRule, used: Uses) -> Need | None:
    need = resolve(rule.gate, used)
    if rule.count_arg:
        count = call.args[0] if call is not None and call.args else None
        if not (isinstance(count, ast.Constant) and isinstance(count.value, int)):
            return Need(blockers=("the GPU count is not a number here",))
        return Need(accelerator=True, devices=count.value if count.value > 1 else 0)
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


def _is_docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) \
        and isinstance(statement.value.value, str)
