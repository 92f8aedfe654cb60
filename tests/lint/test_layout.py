"""Issue 27 item 4: ``--target torch`` with a torch that has ``HardwareClassification`` lays every
touched test class out as PyTorch's TEST_LINTER accepts (GENERIC / ACCELERATOR / CUDA, the
campaign's split), and says once, with an older torch, that it could not.

The rules are checked by :func:`linter_errors`, written here from the linter's documented
rules (/work/shared/reference/round4.md section 1; PyTorch's tools/linter/adapters/test_linter.py
docstring): the form, not the linter's code."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("libcst", reason="--fix needs the lint extra (pytest-devcaps[lint])")
from pytest_devcaps.commands.main import main  # noqa: E402
from pytest_devcaps.lint import layout  # noqa: E402
from pytest_devcaps.lint.fix import fix_text  # noqa: E402

MEMBERS = ("GENERIC", "ACCELERATOR", "CPU", "CUDA", "MPS", "XPU")


def linter_errors(source: str) -> list[str]:
    """TEST_LINTER's rules, as documented: every top-level class with test_* methods declares
    ``hw_classification = HardwareClassification.<MEMBER>``; GENERIC: not instantiated, no test
    takes device(s); ACCELERATOR: instantiated without only_for, every test takes device(s), no
    @only* but @onlyAccelerator; CPU/CUDA/MPS/XPU: instantiated with exactly only_for="<dev>",
    no except_for, every test takes device(s)."""
    tree = ast.parse(source)
    calls = {}
    for statement in tree.body:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call) and isinstance(
                statement.value.func, ast.Name) and statement.value.func.id == "instantiate_device_type_tests":
            first = statement.value.args[0]
            assert isinstance(first, ast.Name)
            calls[first.id] = {k.arg: ast.literal_eval(k.value) for k in statement.value.keywords if k.arg}
    errors = []
    for cls in (s for s in tree.body if isinstance(s, ast.ClassDef)):
        tests = [m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name.startswith("test_")]
        if not tests:
            continue
        member = next((s.value.attr for s in cls.body if isinstance(s, ast.Assign)
                       and [getattr(t, "id", None) for t in s.targets] == ["hw_classification"]
                       and isinstance(s.value, ast.Attribute) and getattr(s.value.value, "id", "") == "HardwareClassification"
                       and s.value.attr in MEMBERS), None)
        if member is None:
            errors.append(f"{cls.name}: no hw_classification")
            continue
        takes = [bool({a.arg for a in t.args.args} & {"device", "devices"}) for t in tests]
        call = calls.get(cls.name)
        if member == "GENERIC":
            errors += [f"{cls.name}: GENERIC instantiated"] if call is not None else []
            errors += [f"{cls.name}: GENERIC test takes device"] if any(takes) else []
            continue
        if call is None or not all(takes):
            errors.append(f"{cls.name}: {member} must be instantiated and its tests take device")
            continue
        only = call.get("only_for")
        only = [only] if isinstance(only, str) else list(only) if only is not None else None
        if member == "ACCELERATOR":
            if only is not None:
                errors.append(f"{cls.name}: ACCELERATOR with only_for")
            for test in tests:
                for d in test.decorator_list:
                    name = getattr(d.func if isinstance(d, ast.Call) else d, "id", "")
                    if name.startswith("only") and name != "onlyAccelerator":
                        errors.append(f"{cls.name}.{test.name}: @{name}")
        elif only != [member.lower()] or "except_for" in call:
            errors.append(f"{cls.name}: {member} needs only_for={member.lower()!r} and no except_for")
    return errors


MIXED = """\
    import unittest

    import torch
    from torch.testing._internal.common_utils import TEST_CUDA, TestCase, run_tests


    class TestMixed(TestCase):
        \"\"\"Mixed.\"\"\"

        def setUp(self):
            super().setUp()
            self.n = 2

        def test_plain(self):
            self.assertEqual(torch.ones(self.n).sum().item(), 2)

        @unittest.skipIf(not TEST_CUDA, "CUDA not available")
        def test_generic_gpu(self):
            x = torch.ones(self.n).cuda()
            self.assertEqual(x.sum().item(), 2)

        @unittest.skipIf(not TEST_CUDA, "CUDA not available")
        def test_cuda_props(self):
            self.assertTrue(torch.cuda.get_device_properties(0).name)


    class TestPlain(TestCase):
        def test_a(self):
            self.assertTrue(True)


    if __name__ == "__main__":
        run_tests()
    """


@pytest.fixture
def with_classification(monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch with HardwareClassification (2.14+), whichever is installed: the layout is read
    from the source alone."""
    monkeypatch.setattr(layout, "available", lambda: True)


def torch_fix(source: str) -> str:
    return fix_text(textwrap.dedent(source), "test_t.py", "torch").after


def test_a_mixed_class_is_split_by_kind_and_passes_the_test_linter(with_classification: None) -> None:
    out = torch_fix(MIXED)
    assert linter_errors(out) == []
    assert "class _TestMixedBase:\n    def setUp(self):" in out
    assert "class TestMixed(_TestMixedBase, TestCase):" in out and "def test_plain(self):" in out
    assert "class TestMixedDevice(_TestMixedBase, TestCase):" in out and "def test_generic_gpu(self, device):" in out
    assert 'instantiate_device_type_tests(TestMixedDevice, globals(), except_for="cpu")' in out
    assert 'instantiate_device_type_tests(TestMixedCudaSpecific, globals(), only_for="cuda")' in out
    assert "def test_cuda_props(self, device):" in out and "torch.cuda.get_device_properties(0)" in out
    assert "hw_classification = HardwareClassification.GENERIC\n\n    def test_a" in out
    # every test is in exactly one class; the output is idempotent, ruff-clean and formatted
    assert sorted(n for n in ("test_plain", "test_generic_gpu", "test_cuda_props", "test_a")
                  if out.count(f"def {n}(") == 1) == ["test_a", "test_cuda_props", "test_generic_gpu", "test_plain"]
    assert not fix_text(out, "test_t.py", "torch").changed
    for command in (["check", "--select", "F,E4,E7,E9"], ["format", "--diff"]):
        done = subprocess.run([sys.executable, "-m", "ruff", *command, "--stdin-filename", "t.py", "-"], input=out,
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(not layout.available(), reason="the split classes import HardwareClassification, which this "
                    "torch lacks (torch 2.14+; CI runs this on its torch 2.14.1 leg)")
def test_the_split_classes_run_and_nothing_runs_twice(with_classification: None, tmp_path: Path) -> None:
    path = tmp_path / "test_split.py"
    path.write_text(torch_fix(MIXED))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                           "-p", "no:devcaps", str(path)], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:]
    # on a CPU-only machine: the GENERIC tests only (the accelerator classes exclude the CPU)
    import torch

    if not torch.accelerator.is_available():
        assert "2 passed" in done.stdout, done.stdout[-2000:]


def test_a_class_of_one_kind_is_classified_as_it_is(with_classification: None) -> None:
    out = torch_fix("""\
        import unittest
        import torch
        from torch.testing._internal.common_utils import TEST_CUDA, TestCase


        class TestGpu(TestCase):
            @unittest.skipIf(not TEST_CUDA, "CUDA not available")
            def test_a(self):
                self.assertEqual(torch.ones(2).cuda().sum().item(), 2)
        """)
    assert linter_errors(out) == []
    assert "class TestGpu(TestCase):\n    hw_classification = HardwareClassification.ACCELERATOR" in out
    assert 'instantiate_device_type_tests(TestGpu, globals(), except_for="cpu")' in out


def test_multi_process_classes_that_run_on_the_module_device_type_are_generic(with_classification: None) -> None:
    out = torch_fix("""\
        import torch
        from torch.testing._internal.common_fsdp import FSDPTest


        class TestRanks(FSDPTest):
            @property
            def world_size(self):
                return 2

            def test_a(self):
                t = torch.ones(1).cuda()
        """)
    assert linter_errors(out) == []
    assert "hw_classification = HardwareClassification.GENERIC" in out and "instantiate" not in out


def test_an_instantiated_class_keeps_its_cuda_only_for_and_is_cuda(with_classification: None) -> None:
    out = torch_fix("""\
        import torch
        from torch.testing._internal.common_device_type import instantiate_device_type_tests
        from torch.testing._internal.common_utils import TestCase


        class TestJit(TestCase):
            def test_f(self, device):
                torch.cuda.jiterator._create_jit_fn("template <typename T> T f(T x) { return x; }")

            def test_g(self):
                x = torch.ones(2, device="cuda")


        instantiate_device_type_tests(TestJit, globals(), only_for="cuda")
        """)
    assert linter_errors(out) == []
    assert "hw_classification = HardwareClassification.CUDA" in out and "def test_g(self, device):" in out


def test_an_instantiated_class_the_rewrite_widens_is_an_accelerator_class(with_classification: None) -> None:
    # only_for=("cuda",) becomes except_for="cpu" (nothing CUDA-only is left): the class is then
    # ACCELERATOR, not CUDA (a CUDA class needs exactly only_for="cuda")
    out = torch_fix("""\
        import torch
        from torch.testing._internal.common_device_type import instantiate_device_type_tests, onlyCUDA
        from torch.testing._internal.common_utils import TestCase


        class TestOps(TestCase):
            @onlyCUDA
            def test_add(self, device):
                self.assertEqual((torch.ones(2, device=device) * 2).sum().item(), 4)


        instantiate_device_type_tests(TestOps, globals(), only_for=("cuda",))
        """)
    assert linter_errors(out) == []
    assert "hw_classification = HardwareClassification.ACCELERATOR" in out
    assert 'instantiate_device_type_tests(TestOps, globals(), except_for="cpu")' in out


def test_only_cuda_and_privateuse1_on_generic_code_becomes_only_accelerator(with_classification: None) -> None:
    # test/nn/test_multihead_attention.py's pattern: a class instantiated for every device type
    # (the CPU included) whose dtype tests carry @onlyCUDAAndPRIVATEUSE1 on device-generic code. The
    # lint reads the decorator (it was "a device check the lint cannot read", and the class stayed
    # unclassified: one TEST_LINTER error); it becomes @onlyAccelerator, which keeps the run on
    # the PrivateUse1 backend (emu) and the skip on the CPU, and the class is ACCELERATOR with its
    # instantiation unchanged (no only_for, so the CPU still runs the other tests).
    source = """\
        import torch
        from torch.testing._internal.common_device_type import (
            dtypes,
            instantiate_device_type_tests,
            onlyCUDAAndPRIVATEUSE1,
        )
        from torch.testing._internal.common_utils import TestCase


        class TestAttentionDeviceType(TestCase):
            def test_everywhere(self, device):
                self.assertEqual(torch.ones(2, device=device).sum().item(), 2)

            @onlyCUDAAndPRIVATEUSE1
            @dtypes(torch.half, torch.float)
            def test_dtype(self, device, dtype):
                self.assertEqual(torch.ones(2, device=device, dtype=dtype).dtype, dtype)


        instantiate_device_type_tests(TestAttentionDeviceType, globals())
        """
    result = fix_text(textwrap.dedent(source), "test_t.py", "torch")
    out = result.after
    assert linter_errors(out) == []
    assert "hw_classification = HardwareClassification.ACCELERATOR" in out
    assert "    @onlyAccelerator\n    @dtypes(torch.half, torch.float)\n    def test_dtype" in out
    assert "onlyCUDAAndPRIVATEUSE1" not in out  # the orphaned import goes too
    assert "instantiate_device_type_tests(TestAttentionDeviceType, globals())\n" in out
    assert not result.left.findings


def test_only_cuda_and_privateuse1_stays_where_cuda_only_code_stays(with_classification: None) -> None:
    source = """\
        import torch
        from torch.testing._internal.common_device_type import instantiate_device_type_tests, onlyCUDAAndPRIVATEUSE1
        from torch.testing._internal.common_utils import TestCase


        class TestJitDeviceType(TestCase):
            @onlyCUDAAndPRIVATEUSE1
            def test_jit(self, device):
                torch.cuda.jiterator._create_jit_fn("template <typename T> T f(T x) { return x; }")


        instantiate_device_type_tests(TestJitDeviceType, globals())
        """
    result = fix_text(textwrap.dedent(source), "test_t.py", "torch")
    assert "@onlyCUDAAndPRIVATEUSE1\n    def test_jit" in result.after
    (kept,) = [f for f in result.left.findings if f.code == "DC011"]
    assert kept.message.startswith("`@onlyCUDAAndPRIVATEUSE1`: CUDA-only test decorator; not fixed: line 9 is CUDA-only")
    # the class cannot be ACCELERATOR (an @only* other than onlyAccelerator) nor CUDA (only_for="cuda"
    # would drop the PrivateUse1 run): a person decides
    (layout_left,) = [f for f in result.left.findings if f.code == "DC013"]
    assert "move the test to a class of its device type" in layout_left.message


def test_what_cannot_be_laid_out_says_what_a_person_decides(with_classification: None) -> None:
    source = """\
        import unittest
        import torch
        from torch.testing._internal.common_utils import TEST_CUDA, TestCase


        class TestBase(TestCase):
            def test_plain(self):
                pass

            @unittest.skipIf(not TEST_CUDA, "CUDA not available")
            def test_gpu(self):
                torch.ones(1).cuda()


        class TestMore(TestBase):
            def test_more(self):
                pass
        """
    result = fix_text(textwrap.dedent(source), "t.py", "torch")
    (left,) = [f for f in result.left.findings if f.code == "DC013" and "TestBase" in f.message]
    assert "cannot be split: TestMore (line" in left.message and "subclasses it" in left.message


def test_an_older_torch_says_once_that_classes_were_not_classified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(layout, "available", lambda: False)
    for name in ("test_a.py", "test_b.py"):
        (tmp_path / name).write_text(textwrap.dedent(MIXED))
    main(["lint", "--fix", "--target", "torch", str(tmp_path)])
    err = capsys.readouterr().err
    assert err.count("test classes were not classified") == 1 and "HardwareClassification" in err
    assert "hw_classification" not in (tmp_path / "test_a.py").read_text()


def test_the_devcaps_target_never_lays_classes_out(with_classification: None) -> None:
    assert "hw_classification" not in fix_text(textwrap.dedent(MIXED), "t.py", "devcaps").after
