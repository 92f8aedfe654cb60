"""Issue 27: a gate stays in front of a test that runs CUDA-only code it imports from the
project's own modules (``from gpu_utils import gpu_name``): widened, the test would run that code
on emu and fail there. Each case is a small project of our own in ``tmp_path``; the module's
text is judged as it is, the test file rewritten by ``devcaps lint --fix``."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

pytest.importorskip("libcst", reason="--fix needs the lint extra (pytest-devcaps[lint])")
from pytest_devcaps.commands.main import main  # noqa: E402  (after the importorskip)
from pytest_devcaps.lint import analyze_path  # noqa: E402
from pytest_devcaps.lint.project_imports import (  # noqa: E402
    cuda_only_imports,
    module_file,
    project_root,
)

GATE = '@unittest.skipIf(not torch.cuda.is_available(), "no cuda")'

HELPERS = """\
    import torch


    def gpu_name():
        return torch.cuda.get_device_name()


    def via_other():
        return gpu_name()


    def plain():
        return 1


    class CudaSetUp:
        def setUp(self):
            torch.cuda.set_device(0)


    class Mixin:
        def capability(self):
            return torch.cuda.get_device_capability()

        def ok(self):
            return 2


    DEV = torch.device("cuda")
    """


def project(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "pyproject.toml").write_text("")
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def gated_test(body: str, imports: str = "from gpu_utils import gpu_name, plain, via_other, DEV",
               bases: str = "unittest.TestCase") -> str:
    return textwrap.dedent(f"""\
        import unittest

        import torch

        {imports}


        class T({bases}):
            {GATE}
            def test_a(self):
                {body}
        """)


def fixed(path: Path) -> str:
    main(["lint", "--fix", str(path)])
    return path.read_text()


@pytest.mark.parametrize(("imports", "body", "why"), [
    ("from gpu_utils import gpu_name", "assert gpu_name()", "the imported 'gpu_name': gpu_utils.py:5 DC004"),
    ("import gpu_utils", "assert gpu_utils.gpu_name()", "the imported 'gpu_utils.gpu_name'"),
    ("import gpu_utils as g", "assert g.gpu_name()", "the imported 'g.gpu_name'"),
    ("from gpu_utils import gpu_name as name", "assert name()", "the imported 'name'"),
    # a helper of the module reaches the CUDA-only one: what it runs is judged
    ("from gpu_utils import via_other", "assert via_other()", "the imported 'via_other': gpu_utils.py:5"),
    # a module value made by CUDA-only code
    ("from gpu_utils import DEV", "assert torch.ones(1, device=DEV).sum() == 1", "the imported 'DEV'"),
    # an imported helper class whose method is CUDA-only: naming the class runs it
    ("from gpu_utils import Mixin", "assert Mixin().capability()", "the imported 'Mixin'"),
])
def test_a_gate_in_front_of_an_imported_cuda_only_name_stays(tmp_path: Path, imports: str, body: str,
                                                             why: str) -> None:
    root = project(tmp_path, {"gpu_utils.py": HELPERS})
    test = root / "test_a.py"
    test.write_text(gated_test(body, imports))
    before = test.read_text()
    assert main(["lint", "--fix", str(test)]) == 1
    assert test.read_text() == before
    left = [f.message for f in analyze_path(test).findings if f.code == "DC001"]
    assert len(left) == 1 and why in left[0], left


def test_a_plain_imported_helper_does_not_keep_the_gate(tmp_path: Path) -> None:
    root = project(tmp_path, {"gpu_utils.py": HELPERS})
    test = root / "test_a.py"
    test.write_text(gated_test("x = torch.ones(2).cuda()\n        assert plain() + x.sum() == 3",
                               "from gpu_utils import plain"))
    out = fixed(test)
    assert "torch.cuda" not in out and ".cuda()" not in out
    assert 'torch.accelerator.is_available(), "needs an accelerator"' in out


def test_a_base_class_whose_set_up_is_cuda_only_keeps_every_test_of_the_class(tmp_path: Path) -> None:
    root = project(tmp_path, {"gpu_utils.py": HELPERS})
    test = root / "test_a.py"
    test.write_text(gated_test("assert torch.ones(2).sum() == 2", "from gpu_utils import CudaSetUp",
                               "CudaSetUp, unittest.TestCase"))
    out = fixed(test)
    assert GATE in out
    left = [f.message for f in analyze_path(test).findings]
    assert any("the base class 'CudaSetUp': gpu_utils.py:18 DC004" in m for m in left), left


def test_an_inherited_method_keeps_only_the_tests_that_call_it(tmp_path: Path) -> None:
    root = project(tmp_path, {"gpu_utils.py": HELPERS})
    test = root / "test_a.py"
    test.write_text(textwrap.dedent(f"""\
        import unittest

        import torch

        from gpu_utils import Mixin


        class T(Mixin, unittest.TestCase):
            {GATE}
            def test_capability(self):
                assert self.capability()

            {GATE}
            def test_ok(self):
                assert self.ok() == 2 and torch.ones(1).cuda().sum() == 1
        """))
    out = fixed(test)
    assert out.count(GATE) == 1 and out.index(GATE) < out.index("def test_capability")
    assert "def test_ok" in out and 'torch.accelerator.is_available(), "needs an accelerator"' in out
    left = [f.message for f in analyze_path(test).findings]
    assert any("Mixin.capability (inherited): gpu_utils.py:23 DC004" in m for m in left), left


def test_a_relative_import_from_the_package_is_followed(tmp_path: Path) -> None:
    root = project(tmp_path, {"tests/__init__.py": "", "tests/common/__init__.py": "",
                              "tests/common/gpu_utils.py": HELPERS})
    test = root / "tests" / "test_a.py"
    test.write_text(gated_test("assert gpu_name()", "from .common.gpu_utils import gpu_name"))
    before = test.read_text()
    fixed(test)
    assert test.read_text() == before
    assert module_file(test, "common.gpu_utils", 1, root) == (root / "tests/common/gpu_utils.py").resolve()
    # ``from .common import gpu_utils``: the module itself, used through its name
    test.write_text(gated_test("assert gpu_utils.gpu_name()", "from .common import gpu_utils"))
    assert set(cuda_only_imports(test).names) >= {"gpu_utils.gpu_name", "gpu_utils.DEV"}


def test_an_absolute_import_is_found_in_a_folder_above_up_to_the_project_root(tmp_path: Path) -> None:
    root = project(tmp_path, {"tests/helpers/gpu.py": HELPERS, "tests/unit/placeholder.txt": ""})
    test = root / "tests" / "unit" / "test_a.py"
    test.write_text(gated_test("assert gpu_name()", "from helpers.gpu import gpu_name"))
    assert project_root(test) == root.resolve()
    assert "gpu_name" in cuda_only_imports(test).names
    # a module outside the project root is not the project's: not read
    outside = tmp_path.parent / f"{tmp_path.name}_outside.py"
    assert module_file(test, outside.stem, 0, root) is None


def test_the_package_under_test_is_not_read(tmp_path: Path) -> None:
    """``mylib/`` beside ``tests/`` is what the tests test (its CUDA branches follow the device
    they are given), as an installed package is: not judged; a file at the root is."""
    root = project(tmp_path, {"mylib/ops.py": HELPERS, "gpu_utils.py": HELPERS, "tests/x.txt": ""})
    test = root / "tests" / "test_a.py"
    test.write_text(gated_test("assert gpu_name() and name()",
                               "from mylib.ops import gpu_name; from gpu_utils import gpu_name as name"))
    assert set(cuda_only_imports(test).names) == {"name"}


def test_torch_and_star_imports_are_not_followed(tmp_path: Path) -> None:
    """``torch`` is never the project's (its test helpers are the gate table's), even in a
    checkout of PyTorch; ``from m import *`` binds names the file does not write."""
    root = project(tmp_path, {"torch/__init__.py": HELPERS, "gpu_utils.py": HELPERS})
    test = root / "test_a.py"
    test.write_text(gated_test("assert gpu_name()", "from torch import gpu_name\nfrom gpu_utils import *"))
    assert not cuda_only_imports(test)


def test_a_cycle_of_imports_ends(tmp_path: Path) -> None:
    root = project(tmp_path, {
        "a.py": "import torch\nfrom b import g\n\n\ndef f():\n    return g()\n",
        "b.py": "import torch\nfrom a import f\n\n\ndef g():\n    return torch.cuda.get_device_name()\n",
    })
    test = root / "test_a.py"
    test.write_text(gated_test("assert f()", "from a import f"))
    assert "b.py:6 DC004" in cuda_only_imports(test).names["f"]


def test_an_unreadable_module_is_no_verdict(tmp_path: Path) -> None:
    root = project(tmp_path, {"gpu_utils.py": "def broken(:\n"})
    test = root / "test_a.py"
    test.write_text(gated_test("assert broken()", "from gpu_utils import broken"))
    assert not cuda_only_imports(test)


def test_a_method_inherited_through_two_project_modules_is_found(tmp_path: Path) -> None:
    """``T(Middle)``, ``Middle(Mixin)`` in another module, ``Mixin.capability`` CUDA-only: the
    method Python's lookup finds is judged; an override that does not call ``super()`` is its own."""
    root = project(tmp_path, {
        "gpu_utils.py": HELPERS,
        "middle.py": ("from gpu_utils import Mixin\n\n\nclass Middle(Mixin):\n"
                      "    def ok(self):\n        return 3\n\n"
                      "    def other(self):\n        return super().capability()\n"),
    })
    test = root / "test_a.py"
    test.write_text(gated_test("assert self.capability()", "from middle import Middle"))
    methods = cuda_only_imports(test).methods["Middle"]
    assert set(methods) == {"capability", "other"}
    assert "gpu_utils.py:23 DC004" in methods["capability"]
