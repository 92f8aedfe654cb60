"""What a gate guards: the code that runs once the gate lets a test through.

A gate may be rewritten only if nothing CUDA-only is left in its region (``analyze``), so the
region is everything the gated test executes that this file defines:

- the test itself, the fixtures it requests (by parameter, ``usefixtures`` or ``autouse``; their
  own fixtures too) and, in a ``unittest`` class, the class's ``setUp`` / ``tearDown`` /
  ``setUpClass`` / ``tearDownClass`` / ``__init__`` and its class attributes (its in-file base
  classes' too);
- the helpers it calls or hands on to run (``mp.spawn(worker)``): module-level functions by
  name, the class's methods through ``self.`` / ``cls.``, every method of a helper class of the
  file it names (a model it builds), transitively;
- for a class gate (a decorator, a ``setUpClass`` skip), every method of the class;
- for a module gate (``if not TEST_CUDA: sys.exit()``, ``TestCase = NoTest``), the whole file;
- for a guard in code, what it guards: the rest of the block after ``if not <gate>: return``,
  or the body of ``if <gate>:``.

Fixtures defined in a ``conftest.py`` are judged by :func:`cuda_only_fixtures` (their text as it
is: ``--fix`` of one file never rewrites its conftest).
"""

from __future__ import annotations

import ast
from typing import Iterable, Iterator, Sequence

from pytest_devcaps.lint.records import Span
from pytest_devcaps.lint.scopes import fixture_scope, parameters
from pytest_devcaps.lint.source import SourceFile

Function = (ast.FunctionDef, ast.AsyncFunctionDef)
CLASS_HOOKS = frozenset({"setUp", "tearDown", "setUpClass", "tearDownClass", "setup_method",
                         "teardown_method", "setup_class", "teardown_class", "asyncSetUp",
                         "asyncTearDown", "_setUp",
                         # MultiProcessTestCase reads it to spawn the ranks every test runs in
                         # (common_distributed.py: ``self.world_size``)
                         "world_size",
                         # unittest makes one instance per test (TestLoader.loadTestsFromTestCase):
                         # its __init__ runs for every test, as setUp does
                         "__init__"})
EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def within(inner: Span, outer: Span) -> bool:
    return (outer.line, outer.col) <= (inner.line, inner.col) and (inner.end_line, inner.end_col) <= (
        outer.end_line, outer.end_col)


def within_any(inner: Span, regions: Iterable[Span] | None) -> bool:
    """``inner`` lies in one of ``regions`` (None: the whole file)."""
    return regions is None or any(within(inner, r) for r in regions)


def _fixture_name(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    for decorator in node.decorator_list:
        if isinstance(decorator, ast.Call):
            for keyword in decorator.keywords:
                if keyword.arg == "name" and isinstance(keyword.value, ast.Constant) \
                        and isinstance(keyword.value.value, str):
                    return keyword.value.value
    return node.name


def _autouse(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(d, ast.Call) and any(k.arg == "autouse" and isinstance(k.value, ast.Constant)
                                               and k.value.value is True for k in d.keywords)
               for d in node.decorator_list)


def _usefixtures(node: ast.AST) -> list[str]:
    names: list[str] = []
    for decorator in getattr(node, "decorator_list", []):
        if isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute) \
                and decorator.func.attr == "usefixtures":
            names += [a.value for a in decorator.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return names


class RegionIndex:
    """The definitions of one file that a region can reach, and the regions themselves."""

    def __init__(self, source: SourceFile) -> None:
        self.source = source
        tree = source.tree
        self.functions = {s.name: s for s in tree.body if isinstance(s, Function) and fixture_scope(s) is None}
        self.classes = {s.name: s for s in tree.body if isinstance(s, ast.ClassDef)}
        self.fixtures: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.autouse: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
        self.class_of: dict[int, ast.ClassDef] = {}
        self._blocks: dict[int, list[ast.stmt]] | None = None
        self._functions: dict[tuple[str, int], ast.FunctionDef | ast.AsyncFunctionDef] | None = None
        # module-level values a test reads (``jitted = _create_jit_fn(...)``): run where it runs
        self.values: dict[str, ast.stmt] = {}
        for statement in tree.body:
            if isinstance(statement, (ast.Assign, ast.AnnAssign)):
                targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                for target in targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            self.values.setdefault(name.id, statement)
        for statement in tree.body:
            if isinstance(statement, Function) and fixture_scope(statement) is not None:
                self.fixtures.setdefault(_fixture_name(statement), statement)
                if _autouse(statement):
                    self.autouse.append(statement)
        for cls in self.classes.values():
            for member in cls.body:
                if isinstance(member, Function):
                    self.class_of[id(member)] = cls

    def function(self, key: tuple[str, int]) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The function of a scope key (its name, the line of its ``def``)."""
        if self._functions is None:
            self._functions = {(n.name, n.lineno): n for n in ast.walk(self.source.tree) if isinstance(n, Function)}
        return self._functions.get(key)

    # -- the classes a method sees -------------------------------------------------------------

    def lineage(self, cls: ast.ClassDef) -> Iterator[ast.ClassDef]:
        """``cls`` and its base classes defined in this file (nearest first)."""
        seen: set[str] = set()
        stack = [cls]
        while stack:
            current = stack.pop(0)
            if current.name in seen:
                continue
            seen.add(current.name)
            yield current
            stack += [self.classes[b.id] for b in current.bases
                      if isinstance(b, ast.Name) and b.id in self.classes]

    def method(self, cls: ast.ClassDef, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        for klass in self.lineage(cls):
            for member in klass.body:
                if isinstance(member, Function) and member.name == name:
                    return member
        return None

    # -- regions ---------------------------------------------------------------------------------

    def of_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[Span, ...]:
        """What runs when the test (or helper) ``node`` runs, as spans of this file."""
        found: dict[int, ast.AST] = {}
        self._reach(node, self.class_of.get(id(node)), found, entry=True)
        return self._spans(found.values())

    def of_call(self, node: ast.FunctionDef | ast.AsyncFunctionDef, cls: ast.ClassDef | None = None) -> tuple[Span, ...]:
        """What runs when ``node`` is called (a helper, a method of ``cls``): not a test's entry,
        so not its class's hooks."""
        found: dict[int, ast.AST] = {}
        self._reach(node, cls if cls is not None else self.class_of.get(id(node)), found)
        return self._spans(found.values())

    def of_class(self, cls: ast.ClassDef) -> tuple[Span, ...]:
        found: dict[int, ast.AST] = {id(cls): cls}
        for member in cls.body:
            if isinstance(member, Function):
                self._reach(member, cls, found, entry=True)
        for klass in self.lineage(cls):
            for member in klass.body:
                if isinstance(member, Function) and member.name in CLASS_HOOKS:
                    self._reach(member, cls, found)
        return self._spans(found.values())

    def fixtures_of(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
        """The fixture names ``node`` requests (parameters, usefixtures) that this file does not define."""
        cls = self.class_of.get(id(node))
        wanted = [p for p in parameters(node) if p not in ("self", "cls", "request")] + _usefixtures(node)
        if cls is not None:
            wanted += _usefixtures(cls)
        return [w for w in wanted if w not in self.fixtures]

    def _reach(self, node: ast.FunctionDef | ast.AsyncFunctionDef, cls: ast.ClassDef | None,
               found: dict[int, ast.AST], entry: bool = False) -> None:
        if id(node) in found:
            return
        found[id(node)] = node
        requested = [p for p in parameters(node) if p not in ("self", "cls")] + _usefixtures(node)
        if entry:
            requested += _usefixtures(cls) if cls is not None else []
            for fixture in self.autouse:
                self._reach(fixture, None, found)
            if cls is not None:
                for klass in self.lineage(cls):
                    for member in klass.body:
                        if isinstance(member, Function) and (member.name in CLASS_HOOKS or (
                                fixture_scope(member) is not None and _autouse(member))):
                            self._reach(member, cls, found)
                        elif isinstance(member, (ast.Assign, ast.AnnAssign)):  # class attributes
                            found.setdefault(id(member), member)  # tests read them through self
        for name in requested:
            defined = self._fixture(name, cls)
            if defined is not None:
                self._reach(defined, self.class_of.get(id(defined)), found)
        for callee in self._callees(node, cls):
            self._reach(callee, self.class_of.get(id(callee), cls), found)
        for decorator in node.decorator_list:
            call = decorator if isinstance(decorator, ast.Call) else None
            target = call.func if call is not None else decorator
            name = target.attr if isinstance(target, ast.Attribute) else target.id if isinstance(target, ast.Name) else ""
            if call is not None and name in ("parametrize", "fixture"):
                found.setdefault(id(call), call)  # the values the test (or fixture) runs with
            elif isinstance(target, ast.Name) and target.id in self.functions:
                self._reach(self.functions[target.id], None, found)  # a wrapper the file defines runs it
            if not entry:  # a helper's decorator wraps what the test calls (``@torch.cuda.amp.autocast()``)
                found.setdefault(id(decorator), decorator)
        for child in (n for statement in node.body for n in ast.walk(statement)):  # not its decorators
            if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load) and child.id in self.values:
                value = self.values[child.id]
                found.setdefault(id(value), value)

    def _fixture(self, name: str, cls: ast.ClassDef | None) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        if cls is not None:
            for klass in self.lineage(cls):
                for member in klass.body:
                    if isinstance(member, Function) and fixture_scope(member) is not None \
                            and _fixture_name(member) == name:
                        return member
        return self.fixtures.get(name)

    def _callees(self, node: ast.FunctionDef | ast.AsyncFunctionDef,
                 cls: ast.ClassDef | None) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
        """What ``node`` runs of this file: the functions it calls or hands on to run
        (``mp.spawn(worker, ...)``, ``Process(target=worker)``, ``partial(worker)``), the methods
        of its class it calls or hands on (``self._run``), and every method of a helper class it
        names (``FSDP(Model())``: the model's ``__init__`` and ``forward`` run)."""
        for child in (n for statement in node.body for n in ast.walk(statement)):
            if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load):
                if child.id in self.functions:
                    yield self.functions[child.id]
                elif child.id in self.classes and not _is_test_class(self.classes[child.id]):
                    for klass in self.lineage(self.classes[child.id]):
                        yield from (m for m in klass.body if isinstance(m, Function))
            elif isinstance(child, ast.Attribute) and isinstance(child.ctx, ast.Load) \
                    and isinstance(child.value, ast.Name) and cls is not None and child.value.id in ("self", "cls"):
                method = self.method(cls, child.attr)
                if method is not None:
                    yield method

    def _spans(self, nodes: Iterable[ast.AST]) -> tuple[Span, ...]:
        return tuple(sorted(self.source.span(n) for n in nodes))

    def fixture_spans(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[Span, ...]:
        """The fixtures of this file that ``node`` requests, theirs too (held with a kept test:
        a fixture given the ``device`` fixture would parametrize the test it serves)."""
        found: dict[int, ast.AST] = {}
        cls = self.class_of.get(id(node))
        stack = [p for p in parameters(node) if p not in ("self", "cls")] + _usefixtures(node)
        while stack:
            fixture = self._fixture(stack.pop(), cls)
            if fixture is not None and id(fixture) not in found:
                found[id(fixture)] = fixture
                stack += [p for p in parameters(fixture) if p != "request"]
        return self._spans(found.values())

    def guarded(self, statement: ast.If) -> tuple[Span, ...]:
        """What ``if <gate>: ...`` guards: after an early exit (``if not TEST_CUDA: return``), the
        rest of its block; otherwise its own body."""
        last = statement.body[-1]
        if isinstance(last, EXITS) or _is_skip_call(last):
            block = self.block_of(statement)
            index = next(i for i, s in enumerate(block) if s is statement)
            rest = self._spans(block[index + 1:])
            if isinstance(last, ast.Raise) or _is_skip_call(last):
                return rest + self._callers(statement)
            return rest
        return self._spans(statement.body)

    def _callers(self, statement: ast.stmt) -> tuple[Span, ...]:
        """A skip (or raise) in a helper ends the tests that call it, in a fixture the tests that
        request it: what runs in each caller (and in the callers of a calling helper or fixture)
        is what the skip guards
        (``_skip_if_no_cuda()`` first, then ``torch.cuda.get_device_name()`` in the test)."""
        functions = [n for n in ast.walk(self.source.tree) if isinstance(n, Function)]
        helper = next((f for f in functions if f.name and not f.name.startswith("test")
                       and any(n is statement for n in ast.walk(f))), None)
        found: dict[int, ast.AST] = {}
        pending, seen = [helper] if helper is not None else [], set()
        while pending:
            current = pending.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            for caller in functions:
                if caller is not current and (any(isinstance(n, ast.Call) and _calls(n.func, current.name)
                                                  for n in ast.walk(caller)) or self._requests(caller, current)):
                    self._reach(caller, self.class_of.get(id(caller)), found, entry=True)
                    if not caller.name.startswith("test"):
                        pending.append(caller)
        return self._spans(found.values())

    def _requests(self, caller: ast.FunctionDef | ast.AsyncFunctionDef,
                  fixture: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        """``caller`` (a test or fixture) gets ``fixture``: a skip in the fixture skips it too."""
        if fixture_scope(fixture) is None:
            return False
        if _autouse(fixture):
            return caller.name.startswith("test")
        cls = self.class_of.get(id(caller))
        wanted = parameters(caller) + _usefixtures(caller) + (_usefixtures(cls) if cls is not None else [])
        return _fixture_name(fixture) in wanted

    def block_of(self, statement: ast.stmt) -> Sequence[ast.stmt]:
        """The statement list ``statement`` belongs to."""
        if self._blocks is None:
            self._blocks = {}
            for node in ast.walk(self.source.tree):
                for name in ("body", "orelse", "finalbody"):
                    block = getattr(node, name, None)
                    if isinstance(block, list):
                        for child in block:
                            self._blocks[id(child)] = block
                for handler in getattr(node, "handlers", []):
                    for child in handler.body:
                        self._blocks[id(child)] = handler.body
        return self._blocks.get(id(statement), [statement])


def _is_test_class(cls: ast.ClassDef) -> bool:
    """A class that holds tests (its other tests are not what one of them runs)."""
    return any(isinstance(m, Function) and m.name.startswith("test") for m in cls.body)


def _calls(func: ast.expr, name: str) -> bool:
    """``func`` names ``name``: ``helper(...)``, ``self.helper(...)``, ``cls.helper(...)``."""
    if isinstance(func, ast.Name):
        return func.id == name
    return isinstance(func, ast.Attribute) and func.attr == name and isinstance(func.value, ast.Name) \
        and func.value.id in ("self", "cls")


def _is_skip_call(statement: ast.stmt) -> bool:
    if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)):
        return False
    func = statement.value.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in ("skip", "skipTest", "exit", "fail")
