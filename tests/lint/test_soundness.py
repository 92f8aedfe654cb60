"""Issue 27: ``devcaps lint --fix`` never makes a suite worse. Every pattern of the issue's "Why"
(and of the upstream files behind it: test_cuda_primary_ctx, test_jiterator, torchao's
low-bit optimizers, FSDP / DTensor tests, torchtune's distributed tests) as a minimal input of our
own, with the output a sound conversion gives: a gate is rewritten only where nothing CUDA-only
is left in what it guards, a kept gate keeps its test as it was, the report adds up."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("libcst", reason="--fix needs the lint extra (pytest-devcaps[lint])")
from pytest_devcaps.lint import analyze, layout  # noqa: E402  (after the importorskip)
from pytest_devcaps.lint.fix import fix_text  # noqa: E402
from tests.lint._fixing import fix, left, unchanged  # noqa: E402


# -- it widens only code that becomes device-generic ---------------------------------------------

def test_a_helper_guard_stays_while_the_rest_of_the_helper_calls_cuda() -> None:
    """``if not torch.cuda.is_available(): return False`` stays: the next line still calls
    ``torch.cuda.get_device_capability()`` (a collection error on emu once widened)."""
    source = """\
        import torch


        def capability_ok():
            if not torch.cuda.is_available():
                return False
            x = torch.cuda.get_device_capability()
            return x[0] >= 9
        """
    out = fix(source)
    assert "if not torch.cuda.is_available():" in out and "torch.accelerator" not in out
    assert any("DC001" in f and "line 7 is CUDA-only" in f for f in left(source))


def test_a_helper_gate_of_that_shape_is_read_as_its_capability() -> None:
    """``def has_fp8(): if not cuda: return False; return capability >= (8, 9)`` is a gate the
    test names: the test gets the fp8 requirement and the spent helper goes."""
    out = fix("""\
        import unittest
        import torch


        def has_fp8():
            if not torch.cuda.is_available():
                return False
            return torch.cuda.get_device_capability() >= (8, 9)


        class T(unittest.TestCase):
            @unittest.skipIf(not has_fp8(), "needs fp8")
            def test_a(self):
                x = torch.ones(2).cuda()
        """)
    assert '@requires_capability("dtype.fp8_e4m3fn", native=True)\n    def test_a' in out
    assert "def has_fp8" not in out and "torch.cuda" not in out


PRIMARY_CONTEXT = """\
    import sys
    import torch
    from torch.testing._internal.common_utils import NoTest, TestCase, run_tests

    TEST_CUDA = torch.cuda.is_available()
    if not TEST_CUDA:
        print("CUDA not available, skipping tests", file=sys.stderr)
        TestCase = NoTest  # noqa: F811


    class TestCtx(TestCase):
        def test_ctx(self):
            x = torch.randn(1, device="cuda")
            self.assertTrue(torch._C._cuda_hasPrimaryContext(0))
    """


def test_private_cuda_bindings_are_findings_and_keep_the_module_gate() -> None:
    """test_cuda_primary_ctx: ``torch._C._cuda_hasPrimaryContext`` is CUDA itself; the module
    gate (``TestCase = NoTest``) stays, the file is classed cuda."""
    out = fix(PRIMARY_CONTEXT)
    assert "if not TEST_CUDA:" in out and "TEST_CUDA = torch.cuda.is_available()" in out
    found = analyze(textwrap.dedent(PRIMARY_CONTEXT), "t.py").findings
    assert any(f.code == "DC004" and "_cuda_hasPrimaryContext" in f.message and not f.fixable for f in found)
    assert any(f.code == "DC001" and "line 14 is CUDA-only" in f.message for f in found)
    from pytest_devcaps.lint import classify_file

    assert classify_file(tuple(found)).hardware == "cuda"


def test_a_module_gate_with_nothing_cuda_only_left_is_widened_in_place() -> None:
    source = PRIMARY_CONTEXT.replace("self.assertTrue(torch._C._cuda_hasPrimaryContext(0))",
                                     "self.assertEqual(x.numel(), 1)")
    out = fix(source)
    assert "if not torch.accelerator.is_available():\n    print(" in out and "TestCase = NoTest" in out
    assert "TEST_CUDA" not in out


HELD_FLAG = """\
    import unittest

    import torch
    from torch.testing._internal.common_cuda import TEST_CUDA

    TEST_MULTIGPU = TEST_CUDA and torch.cuda.device_count() >= 2


    class TestPrimaryContext(unittest.TestCase):
        @unittest.skipIf(not TEST_MULTIGPU, "only one GPU detected")
        def test_set_device(self):
            self.assertFalse(torch._C._cuda_hasPrimaryContext(1))
            torch.cuda.set_device(1)
            self.assertTrue(torch._C._cuda_hasPrimaryContext(1))
"""


def test_the_flag_a_kept_gate_reads_stays_as_the_file_defines_it() -> None:
    """test_cuda_primary_ctx: ``TEST_MULTIGPU = TEST_CUDA and torch.cuda.device_count() >= 2``
    gates a test that stays CUDA's. Widened, the flag would be true on two emu devices and run the
    CUDA binding there; it stays, its findings left saying which gate holds it, and fixed + left
    is found."""
    source = textwrap.dedent(HELD_FLAG)
    result = fix_text(source, "test_t.py")
    assert "TEST_MULTIGPU = TEST_CUDA and torch.cuda.device_count() >= 2" in result.after
    assert "from torch.testing._internal.common_cuda import TEST_CUDA" in result.after
    held = [f for f in result.left.findings if "TEST_MULTIGPU is the gate of line" in f.message]
    assert sorted(f.code for f in held) == ["DC001", "DC005"]
    assert len({f.line for f in held}) == 1
    counts = result.counts()
    assert sum(counts.fixed.values()) + sum(counts.left.values()) == sum(counts.found.values())


CLASS_FLAG = """\
    import pytest
    import torch


    class TestPrecision:
        cuda_available: bool = torch.cuda.is_available()

        @pytest.mark.skipif(not cuda_available, reason="The test requires GPUs to run.")
        def test_a(self):
            {body}
"""


def test_a_class_body_flag_a_kept_gate_reads_stays_as_the_class_defines_it() -> None:
    """torchtune's form: ``cuda_available = torch.cuda.is_available()`` in the class body, read
    by ``@skipif(not cuda_available, ...)``. Read as an unknown word, the gate stayed while the
    flag's own call was widened to torch.accelerator: the CUDA binding then ran on emu. The
    flag is now a gate of the class: while the test keeps CUDA-only code, both stay as written."""
    source = CLASS_FLAG.format(body="assert torch._C._cuda_hasPrimaryContext(0)")
    assert unchanged(source)
    found = left(source)
    assert any(f.startswith("DC001 `torch.cuda.is_available()`") and "cuda_available is the gate of line 8" in f
               for f in found)
    assert any(f.startswith("DC001 `cuda_available`") and "line 10 is CUDA-only" in f for f in found)


def test_a_class_body_flag_whose_tests_are_generic_goes_with_its_gate() -> None:
    """The same flag over a test with nothing device-specific: the gate and the spent flag go,
    as a module-level TEST_CUDA would (the test gains every device)."""
    out = fix(CLASS_FLAG.format(body="assert torch.ones(2).sum() == 2"))
    assert "cuda_available" not in out and "skipif" not in out and "torch.cuda" not in out


def test_a_class_body_flag_read_through_self_is_not_removed() -> None:
    """``self.cuda_available`` in another test reads the flag by attribute: the definition
    stays (made the accelerator check), so the rewritten class still runs."""
    source = CLASS_FLAG.format(body="assert torch.ones(2).sum() == 2") + textwrap.indent(textwrap.dedent("""
        def test_b(self):
            assert self.cuda_available in (True, False)
        """), "        ")
    out = fix(source)
    assert "cuda_available: bool = torch.accelerator.is_available()" in out
    assert "self.cuda_available" in out
    namespace: dict[str, object] = {}
    exec(compile(out, "test_t.py", "exec"), namespace)  # the class body runs: its names resolve
    assert isinstance(namespace["TestPrecision"].cuda_available, bool)  # type: ignore[attr-defined]


@pytest.mark.parametrize("setter", [
    "def setUp(self):\n" + " " * 16 + "self.use_cuda = torch.cuda.is_available()",
    "@classmethod\n" + " " * 12 + "def setUpClass(cls):\n" + " " * 16 + "cls.use_cuda = torch.cuda.is_available()",
], ids=["setUp", "setUpClass"])
def test_an_attribute_flag_a_kept_gate_reads_stays_as_set(setter: str) -> None:
    """``self.use_cuda = torch.cuda.is_available()`` in ``setUp`` read by ``if not
    self.use_cuda: self.skipTest(...)``, which the lint cannot read and keeps: the flag's call
    was widened all the same, so the CUDA binding below ran wherever an accelerator is."""
    source = f"""\
        import unittest

        import torch


        class TestZ(unittest.TestCase):
            {setter}

            def test_a(self):
                if not self.use_cuda:
                    self.skipTest("needs CUDA")
                assert torch._C._cuda_hasPrimaryContext(0)
        """
    assert unchanged(source)
    assert any(f.startswith("DC001 `torch.cuda.is_available()`") and "use_cuda is read by the gate of line"
               in f for f in left(source))


HELPER_READ_BY_A_KEPT_GATE = {
    "a module helper": """\
        import os

        import pytest
        import torch


        def cuda_ok():
            if os.environ.get("FORCE_CPU"):
                return False
            return _probe()


        def _probe():
            return torch.cuda.is_available()


        @pytest.mark.skipif(not cuda_ok(), reason="needs CUDA")
        def test_a():
            assert torch._C._cuda_hasPrimaryContext(0)
        """,
    "a global set in setUpModule": """\
        import unittest

        import torch

        USE_GPU = False


        def setUpModule():
            global USE_GPU
            USE_GPU = torch.cuda.is_available()


        class T(unittest.TestCase):
            def test_a(self):
                if not USE_GPU:
                    self.skipTest("needs a GPU")
                assert torch._C._cuda_hasPrimaryContext(0)
        """,
    "a method": """\
        import unittest

        import torch


        class TestZ(unittest.TestCase):
            def _has_cuda(self):
                return torch.cuda.is_available()

            def test_a(self):
                if not self._has_cuda():
                    self.skipTest("needs CUDA")
                assert torch._C._cuda_hasPrimaryContext(0)
        """,
}


@pytest.mark.parametrize("form", sorted(HELPER_READ_BY_A_KEPT_GATE))
def test_a_helper_a_kept_gate_calls_stays_as_written(form: str) -> None:
    """A gate the lint cannot read (``cuda_ok()``, ``self._has_cuda()``) stays; the helpers it
    calls, and those they call, stay with it: widened, they let the CUDA binding run on emu."""
    source = HELPER_READ_BY_A_KEPT_GATE[form]
    assert unchanged(source)
    assert any(f.startswith("DC001 `torch.cuda.is_available()`") and "is read by the gate of line" in f
               for f in left(source))


def test_a_device_a_kept_gate_compares_with_cuda_still_becomes_the_accelerator() -> None:
    """``DEVICE != "cuda"`` answers the same once DEVICE is the accelerator's type ("cuda"
    exactly where it was, another name elsewhere): the kept gate does not hold DEVICE, and the
    generic test reading it gains the accelerator."""
    source = """\
        import pytest
        import torch

        DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


        @pytest.mark.skipif(DEVICE != "cuda", reason="CUDA only")
        def test_a():
            assert torch._C._cuda_hasPrimaryContext(0)


        def test_b():
            assert torch.ones(2, device=DEVICE).sum() == 2
        """
    out = fix(source)
    assert '@pytest.mark.skipif(DEVICE != "cuda", reason="CUDA only")' in out
    assert 'DEVICE = "cuda" if' not in out and "torch.accelerator.current_accelerator" in out


def test_a_string_condition_is_a_kept_gate_and_its_test_stays() -> None:
    """``@pytest.mark.skipif("not torch.cuda.is_available()")``: pytest evaluates the string.
    Read as no gate, the test was given the device fixture under it, and its [cpu] copy ran on
    CUDA machines; it is a finding now, kept as written, and the test stays as it was."""
    source = """\
        import pytest
        import torch


        @pytest.mark.skipif("not torch.cuda.is_available()", reason="needs CUDA")
        def test_b():
            x = torch.ones(2, device="cuda")
            assert x.sum() == 2
        """
    assert unchanged(source)
    found = left(source)
    assert found[0].startswith('DC001 `@pytest.mark.skipif("not torch.cuda.is_available()", reason="needs CUDA")`')
    assert "a condition in a string, which pytest evaluates" in found[0]
    assert any(f.startswith("DC003") and "its gate (line 5) stays" in f for f in found)


MODULE_DEVICE = {
    "pytest": """\
        import torch

        DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


        def test_sum():
            assert torch.ones(2, device=DEVICE).sum().item() == 2
        """,
    "unittest": """\
        import unittest

        import torch

        DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


        class T(unittest.TestCase):
            def test_sum(self):
                assert torch.ones(2, device=DEVICE).sum().item() == 2
        """,
}


@pytest.mark.parametrize("target", ["devcaps", "torch"])
@pytest.mark.parametrize("style", sorted(MODULE_DEVICE))
def test_a_module_device_whose_uses_take_the_modules_device_type_defines_it(style: str, target: str) -> None:
    """``DEVICE = "cuda" if ... else "cpu"`` read where only the module's device_type is at hand
    (a TestCase method, --target torch): the constant went and its uses read a device_type the
    rewrite never defined (NameError on every machine)."""
    out = fix(MODULE_DEVICE[style], target)
    namespace: dict[str, object] = {}
    exec(compile(out, "test_t.py", "exec"), namespace)
    if style == "unittest" and "T" in namespace:
        namespace["T"]("test_sum").test_sum()  # type: ignore[operator]
    elif style == "unittest":  # torch 2.14+: laid out as an instantiated accelerator class
        assert "hw_classification = HardwareClassification.ACCELERATOR" in out
    elif "def test_sum(device)" in out:  # --target devcaps: the device fixture's [cpu] copy
        namespace["test_sum"](namespace["torch"].device("cpu"))  # type: ignore[operator,attr-defined]
    else:
        namespace["test_sum"]()  # type: ignore[operator]
    assert "device_type" not in out or "device_type = (" in out


# Found by a hostile sweep (2026-12-07): each rewrite let code that runs on CUDA only (a device
# string, a CUDA-only wrapper, a name bound only where CUDA is) run elsewhere, or gave a test that
# reads its device as a string a torch.device; each file now stays as it was.
KEPT_AS_WRITTEN = {
    'a tolerance table keyed by the device string (test_tol)': """\
        import pytest
        import torch

        ATOL = {"cpu": 1e-6, "cuda": 1e-3}


        @pytest.mark.parametrize("device", ["cpu", "cuda"])
        def test_matmul(device):
            if device == "cuda" and not torch.cuda.is_available():
                pytest.skip("CUDA not available")
            a = torch.randn(8, 8, device=device)
            torch.testing.assert_close(a @ torch.eye(8, device=device), a, atol=ATOL[device], rtol=0)
        """,
    "device == 'cpu' read from the device parametrization": """\
        import pytest
        import torch


        @pytest.mark.parametrize("device", ["cpu", "cuda"])
        def test_index(device):
            if device == "cuda" and not torch.cuda.is_available():
                pytest.skip("no cuda")
            if device == "cpu":
                pytest.skip("a CPU tensor has no device index")
            x = torch.ones(3, device=device)
            assert x.get_device() == 0
        """,
    "a branch on device == 'cuda' that the fixture would make dead": """\
        import pytest
        import torch


        @pytest.mark.parametrize("device", ["cpu", "cuda"])
        def test_alloc(device):
            if device == "cuda" and not torch.cuda.is_available():
                pytest.skip("no cuda")
            x = torch.ones(1024, device=device)
            if device == "cuda":
                assert torch.cuda.memory_allocated() > 0
            assert x.sum().item() == 1024
        """,
    'cuda:0 / cuda:1 read by subscript under a count gate': """\
        import pytest
        import torch


        @pytest.mark.skipif(torch.cuda.device_count() < 2, reason="2 GPUs")
        @pytest.mark.parametrize("device", ["cuda:0", "cuda:1"])
        def test_two(device):
            x = torch.ones(2, device=device)
            assert x.device.index == int(device[-1])


        @pytest.mark.parametrize("device,dtype", [("cpu", torch.float32), ("cuda", torch.float16)])
        def test_pairs(device, dtype):
            if device == "cuda" and not torch.cuda.is_available():
                pytest.skip("no cuda")
            x = torch.ones(2, device=device, dtype=dtype)
            assert x.sum().item() == 2
        """,
    'a wrapper the file defines calls CUDA-only code': """\
        import pytest
        import torch

        requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA")


        def with_nvtx(fn):
            def wrapper(*args, **kwargs):
                torch.cuda.nvtx.range_push(fn.__name__)
                try:
                    return fn(*args, **kwargs)
                finally:
                    torch.cuda.nvtx.range_pop()
            return wrapper


        @requires_cuda
        @with_nvtx
        def test_deco():
            x = torch.ones(2, device="cuda")
            assert x.sum().item() == 2
        """,
    "pytest.param('cuda', marks=skipif(...)) in fixture params": """\
        import pytest
        import torch


        @pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no cuda"))])
        def dev(request):
            return request.param


        def test_ones(dev):
            x = torch.ones(2, device=dev)
            assert x.sum().item() == 2
        """,
    "DEVICES.append('cuda') under a module check": """\
        import pytest
        import torch

        DEVICES = ["cpu"]
        if torch.cuda.is_available():
            DEVICES.append("cuda")


        @pytest.mark.parametrize("dev", DEVICES)
        def test_ones(dev):
            x = torch.ones(2, device=dev)
            assert x.sum().item() == 2
        """,
    'a test reads a name imported under a module check': """\
        import pytest
        import torch

        if torch.cuda.is_available():
            import triton
            import triton.language as tl


        @pytest.mark.skipif(not torch.cuda.is_available(), reason="requires CUDA")
        def test_cdiv():
            x = torch.ones(2, device="cuda")
            assert triton.cdiv(x.numel(), 2) == 1
        """,
    "DEVICE == 'cpu' skips a test that keeps CUDA-only code": """\
        import pytest
        import torch

        DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


        def test_name():
            if DEVICE == "cpu":
                pytest.skip("needs a GPU")
            x = torch.ones(2, device=DEVICE)
            assert torch.cuda.get_device_name(x.device)


        def test_sum():
            x = torch.ones(2, device=DEVICE)
            assert x.sum().item() == 2
        """,
    "DEVICE.type == 'cpu' on torch.device('cuda' if ... else 'cpu')": """\
        import pytest
        import torch

        DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


        @pytest.mark.skipif(DEVICE.type == "cpu", reason="needs a GPU")
        def test_name():
            x = torch.ones(2, device=DEVICE)
            assert torch.cuda.get_device_name(x.device)
        """,
    'onlyCUDA over a test asserting what cuDNN answers': """\
        import torch
        from torch.testing._internal.common_device_type import (
            instantiate_device_type_tests, onlyCUDA, skipCUDAIfNoCudnn,
        )
        from torch.testing._internal.common_utils import TestCase, run_tests


        class TestConv(TestCase):
            @onlyCUDA
            @skipCUDAIfNoCudnn
            def test_cudnn_acceptable(self, device):
                x = torch.randn(1, 1, 4, 4, device=device)
                self.assertTrue(torch.backends.cudnn.is_acceptable(x))


        instantiate_device_type_tests(TestConv, globals())

        if __name__ == "__main__":
            run_tests()
        """,
    'dtypesIfCUDA with no dtypes (other devices fail to collect)': """\
        import torch
        from torch.testing._internal.common_device_type import (
            dtypesIfCUDA, instantiate_device_type_tests, onlyCUDA,
        )
        from torch.testing._internal.common_utils import TestCase, run_tests


        class TestOps(TestCase):
            @onlyCUDA
            @dtypesIfCUDA(torch.half, torch.bfloat16)
            def test_half(self, device, dtype):
                x = torch.ones(4, device=device, dtype=dtype)
                self.assertEqual(x.sum().item(), 4)


        instantiate_device_type_tests(TestOps, globals(), only_for="cuda")

        if __name__ == "__main__":
            run_tests()
        """,
    'a device compared with CUDA device 0 by its index': """\
        import pytest
        import torch


        @pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA")
        def test_str():
            x = torch.ones(2, device="cuda")
            assert str(x.device) == "cuda:0"


        @pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA")
        def test_devobj():
            x = torch.ones(2).cuda()
            assert x.device == torch.device("cuda:0")
        """,
    "a legacy CUDA tensor type's name": """\
        import pytest
        import torch


        @pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA")
        def test_legacy_type():
            x = torch.ones(2).type(torch.cuda.FloatTensor)
            assert x.sum().item() == 2


        @pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA")
        def test_isinstance():
            x = torch.ones(2, device="cuda")
            assert isinstance(x, torch.cuda.FloatTensor)


        @pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA")
        def test_type_str():
            x = torch.ones(2, device="cuda")
            assert x.type() == "torch.cuda.FloatTensor"
        """,
    'onlyCUDA over dtypesIfCUDA: its @dtypes never ran': """\
        import torch
        from torch.testing._internal.common_device_type import (
            dtypes, dtypesIfCUDA, instantiate_device_type_tests, largeTensorTest, onlyCUDA,
        )
        from torch.testing._internal.common_utils import TestCase, run_tests


        class TestOps(TestCase):
            @onlyCUDA
            @dtypes(torch.float32)
            @dtypesIfCUDA(torch.float16)
            def test_half(self, device, dtype):
                x = torch.ones(4, device=device, dtype=dtype)
                self.assertEqual(x.dtype, torch.float16)

            @onlyCUDA
            @largeTensorTest("1GB", device="cuda")
            def test_big(self, device):
                x = torch.empty(16, device=device)
                self.assertEqual(x.numel(), 16)


        instantiate_device_type_tests(TestOps, globals(), only_for="cuda")

        if __name__ == "__main__":
            run_tests()
        """,
}


@pytest.mark.parametrize("case", sorted(KEPT_AS_WRITTEN))
def test_code_that_stays_cudas_keeps_its_gate_and_its_test(case: str) -> None:
    source = KEPT_AS_WRITTEN[case]
    if "largeTensorTest" in source:  # its other test widens; the dtypesIfCUDA one stays
        out = fix(source)
        assert "@onlyCUDA\n    @dtypes(torch.float32)\n    @dtypesIfCUDA(torch.float16)" in out
        return
    assert unchanged(source), fix(source)


def test_an_import_under_a_module_check_keeps_the_check_and_the_tests_it_does_not_serve_gain() -> None:
    """``if torch.cuda.is_available(): from flash_attn import ...``: widened, an accelerator
    without flash_attn fails to collect the file. The check stays; a test that does not read the
    name still converts."""
    source = """\
        import pytest
        import torch

        if torch.cuda.is_available():
            from flash_attn import flash_attn_func


        @pytest.mark.skipif(not torch.cuda.is_available(), reason="requires CUDA")
        def test_add():
            x = torch.ones(2, device="cuda")
            assert x.sum().item() == 2
        """
    out = fix(source)
    assert "if torch.cuda.is_available():\n    from flash_attn import flash_attn_func" in out
    assert "def test_add(device):" in out
    assert any("an import under the check of line" in f for f in left(source))


SKIPPING_HELPER = {
    'a pytest helper': """\
        import pytest
        import torch


        def _skip_if_no_cuda():
            if not torch.cuda.is_available():
                pytest.skip("CUDA is not available")


        def test_name():
            _skip_if_no_cuda()
            x = torch.ones(2, device="cuda")
            assert "NVIDIA" in torch.cuda.get_device_name(x.device)
        """,
    'a method': """\
        import unittest
        import torch


        class TestMem(unittest.TestCase):
            def _require_cuda(self):
                if not torch.cuda.is_available():
                    self.skipTest("needs CUDA")

            def test_name(self):
                self._require_cuda()
                x = torch.ones(2, device="cuda")
                self.assertTrue(torch.cuda.get_device_name(x.device))
        """,
    'a module helper given the test case': """\
        import unittest
        import torch


        def require_gpu(tc):
            if not torch.cuda.is_available():
                tc.skipTest("needs a GPU")


        class TestMem(unittest.TestCase):
            def test_mem(self):
                require_gpu(self)
                x = torch.empty(1024, device="cuda")
                torch.cuda.synchronize()
                self.assertGreater(torch.cuda.memory_allocated(), 0)
                self.assertTrue(torch.cuda.get_device_name(0))

            def test_add(self):
                require_gpu(self)
                x = torch.ones(2, device="cuda")
                self.assertEqual(x.sum().item(), 2)
        """,
}


@pytest.mark.parametrize("form", sorted(SKIPPING_HELPER))
def test_a_skip_in_a_helper_guards_what_its_callers_run(form: str) -> None:
    """``_skip_if_no_cuda()`` (or ``self._require_cuda()``, ``require_gpu(self)``) first, then
    ``torch.cuda.get_device_name()`` in the test: the helper's check guards the callers' code, so
    it stays (widened, emu ran the CUDA call and failed where the test had skipped)."""
    source = SKIPPING_HELPER[form]
    out = fix(source)
    assert "if not torch.cuda.is_available():" in out and "torch.accelerator.is_available()" not in out
    assert any(f.startswith("DC001 `torch.cuda.is_available()`") and "get_device_name" in f for f in left(source))


@pytest.mark.parametrize("target", ["devcaps", "torch"])
@pytest.mark.parametrize("autocast", ['torch.autocast("cuda")', "torch.cuda.amp.autocast()"])
def test_a_cuda_autocast_keeps_cudas_float16_on_every_device(autocast: str, target: str) -> None:
    """CUDA autocasts to float16 by default, the CPU to bfloat16: given the test's device type,
    the autocast says float16, or the test's float16 assertion fails on its [cpu] copy."""
    source = f"""\
        import pytest
        import torch


        @pytest.mark.skipif(not torch.cuda.is_available(), reason="requires CUDA")
        def test_autocast_linear():
            model = torch.nn.Linear(8, 8).cuda()
            with {autocast}:
                out = model(torch.randn(4, 8, device="cuda"))
            assert out.dtype == torch.float16
        """
    out = fix(source, target)
    assert "with torch.autocast(device" in out and "dtype=torch.float16)" in out
    namespace: dict[str, object] = {}
    exec(compile(out, "test_t.py", "exec"), namespace)
    torch_module = namespace["torch"]
    if target == "devcaps":
        namespace["test_autocast_linear"](torch_module.device("cpu"))  # type: ignore[operator,attr-defined]


FSDP1_CHECKPOINT = """\
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.testing._internal.common_distributed import skip_if_lt_x_gpu
    from torch.testing._internal.distributed._tensor.common_dtensor import DTensorTestBase, with_comms


    class FsdpModelStateCheckpoint(DTensorTestBase):
        def _check(self):
            model = FSDP(torch.nn.Linear(8, 8, device="meta"){device_id})
            model(torch.rand(8, 8)).sum().backward()

        @with_comms
        @skip_if_lt_x_gpu(2)
        def test_fsdp_model_state(self):
            self._check()
"""


def test_fsdp1_with_no_device_id_keeps_its_gpu_gate() -> None:
    """test_fsdp_model_state: FullyShardedDataParallel with no device_id raises "FSDP needs a
    non-CPU accelerator device" on CPU ranks, where requires_ranks(2) would run it: the gate
    stays, saying why. Given a device_id, FSDP1 runs where it says and the gate converts."""
    kept = left(FSDP1_CHECKPOINT.format(device_id=""))
    assert len(kept) == 1 and kept[0].startswith("DC005 `@skip_if_lt_x_gpu(2)`")
    assert "is accelerator-only (FullyShardedDataParallel with no device_id" in kept[0]
    assert unchanged(FSDP1_CHECKPOINT.format(device_id=""))
    converted = fix(FSDP1_CHECKPOINT.format(device_id=", device_id=self.rank"))
    assert "@requires_ranks(2)" in converted and "skip_if_lt_x_gpu" not in converted


@pytest.mark.parametrize("holder", [
    # apex tests/L0/run_optimizers/test_fused_optimizer.py (TestFusedAdagrad): set in __init__,
    # which unittest runs once per test, as it runs setUp
    "def __init__(self, *args, **kwargs):\n"
    "                super().__init__(*args, **kwargs)\n"
    "                self.fused = apex.optimizers.FusedAdagrad",
    "fused = apex.optimizers.FusedAdagrad",  # a class attribute the test reads through self
])
def test_what_init_or_a_class_attribute_holds_is_part_of_every_tests_region(holder: str) -> None:
    """The gate of a test using a CUDA-only library through ``self.fused`` stays, naming the line."""
    source = f"""\
        import unittest

        import torch

        import apex


        class TestFused(unittest.TestCase):
            {holder}

            @unittest.skipIf(torch.cuda.device_count() < 2, "more than 1 GPU required")
            def test_two_devices(self):
                self.fused([torch.zeros(2, device="cuda:1")])
        """
    out = fix(source)
    assert '@unittest.skipIf(torch.cuda.device_count() < 2, "more than 1 GPU required")' in out
    assert "requires_devices" not in out
    assert any(f.startswith("DC005") and "(apex (NVIDIA Apex, a CUDA-only library))" in f for f in left(source))


def test_a_module_value_a_test_reads_is_part_of_its_region() -> None:
    """test_jiterator: a module-level ``_create_jit_fn(...)`` the tests call keeps
    ``only_for="cuda"`` (no except_for, no hardware("accelerator") on the class)."""
    source = """\
        import torch
        from torch.cuda.jiterator import _create_jit_fn
        from torch.testing._internal.common_device_type import instantiate_device_type_tests
        from torch.testing._internal.common_utils import TestCase

        identity = _create_jit_fn("template <typename T> T f(T x) { return x; }")


        class TestJit(TestCase):
            def test_f(self, device):
                x = torch.rand(3, device=device)
                self.assertEqual(identity(x), x)


        instantiate_device_type_tests(TestJit, globals(), only_for="cuda")
        """
    out = fix(source)
    assert 'only_for="cuda"' in out and "except_for" not in out and "hardware" not in out
    assert any("only_for" in f and "the class is CUDA's" in f for f in left(source))


def test_only_cuda_stays_on_a_class_that_builds_fsdp1_with_no_device_id() -> None:
    """FSDP1 with no device_id runs on an accelerator, not the CPU: only_for stays, and the
    finding says the class needs an accelerator (not that it is CUDA's)."""
    source = """\
        import torch
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.testing._internal.common_device_type import instantiate_device_type_tests
        from torch.testing._internal.common_utils import TestCase


        class TestWrap(TestCase):
            def test_wrap(self, device):
                model = FullyShardedDataParallel(torch.nn.Linear(2, 2))
                self.assertIsNotNone(model)


        instantiate_device_type_tests(TestWrap, globals(), only_for="cuda")
        """
    assert 'only_for="cuda"' in fix(source)
    kept = [f for f in left(source) if "only_for" in f]
    assert kept and all("the class needs an accelerator: line" in f and "accelerator-only" in f for f in kept)


def test_only_cuda_stays_on_a_test_that_keeps_cuda_only_code() -> None:
    out = fix("""\
        import torch
        from torch.testing._internal.common_device_type import instantiate_device_type_tests, onlyCUDA
        from torch.testing._internal.common_utils import TestCase


        class TestX(TestCase):
            @onlyCUDA
            def test_generic(self, device):
                self.assertEqual(torch.ones(3, device=device).sum().item(), 3)

            @onlyCUDA
            def test_jit(self, device):
                torch.cuda.jiterator._create_jit_fn("template <typename T> T f(T x) { return x; }")


        instantiate_device_type_tests(TestX, globals())
        """)
    assert "@onlyAccelerator\n    def test_generic" in out and "@onlyCUDA\n    def test_jit" in out


def test_a_kept_gate_keeps_its_pytest_test_off_the_device_fixture() -> None:
    """A test whose skip_if_no_cuda stays (its fixture's stream is read through .cuda_stream) is
    not given the device fixture: its [cpu] copy would fail on the CUDA machine it passed on."""
    source = """\
        import pytest
        import torch

        skip_if_no_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no cuda")


        @pytest.fixture
        def stream():
            return torch.cuda.Stream()


        @skip_if_no_cuda
        def test_stream(stream):
            x = torch.ones(2).cuda()
            assert stream.cuda_stream != 0


        @skip_if_no_cuda
        def test_other():
            assert torch.ones(2).cuda().sum() == 2
        """
    out = fix(source)
    assert "@skip_if_no_cuda\ndef test_stream(stream):" in out and "torch.cuda.Stream()" in out
    assert "def stream():" in out  # the fixture it requests is held too
    assert "def test_other(device):" in out and "@skip_if_no_cuda\ndef test_other" not in out


def test_a_fixture_that_still_needs_cuda_keeps_the_gate_of_the_test_using_it() -> None:
    source = """\
        import pytest
        import torch


        @pytest.fixture
        def handle():
            s = torch.cuda.Stream()
            return s.cuda_stream


        @pytest.mark.skipif(not torch.cuda.is_available(), reason="no cuda")
        def test_h(handle):
            assert handle
        """
    assert unchanged(source)


def test_a_conftest_fixture_that_needs_cuda_keeps_the_gate(tmp_path: Path) -> None:
    from pytest_devcaps.commands.main import main

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "conftest.py").write_text(
        "import pytest\nimport torch\n\n\n@pytest.fixture\ndef stream():\n    return torch.cuda.Stream()\n")
    test = tmp_path / "test_c.py"
    source = ("import pytest\nimport torch\n\n\n@pytest.mark.skipif(not torch.cuda.is_available(), reason=\"x\")\n"
              "def test_s(stream):\n    assert stream is not None\n")
    test.write_text(source)
    assert main(["lint", "--fix", str(test)]) == 1
    assert test.read_text() == source


@pytest.mark.parametrize("reason", [
    "bitsandbytes 8-bit Adam only works for CUDA",
    "Memory expectations are CUDA-specific",
    "requires CUDA or XPU",
])
def test_a_reason_that_names_the_vendor_keeps_the_gate_and_its_text(reason: str) -> None:
    source = f"""\
        import pytest
        import torch


        @pytest.mark.skipif(not torch.cuda.is_available(), reason="{reason}")
        def test_a():
            x = torch.ones(2, device="cuda")
            assert x.sum() == 2
        """
    assert unchanged(source)
    assert any("vendor-specific" in f and reason in f for f in left(source))


def test_a_reason_that_restates_the_gate_is_widened_with_it() -> None:
    out = fix("""\
        import pytest
        import torch


        @pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available")
        def test_a():
            assert torch.ones(2, device="cuda").sum() == 2
        """)
    assert "def test_a(device):" in out and "skipif" not in out


VENDOR_SET_GATE = """\
    import pytest
    import torch


    @pytest.mark.skipif(not torch.cuda.is_available() and not torch.xpu.is_available(), reason="offload")
    def test_offload():
        assert torch.ones(2, device="cuda").sum() == 2
    """


def test_a_vendor_set_becomes_those_device_types_not_every_accelerator() -> None:
    """``not cuda and not xpu`` (torchao's "optim CPU offload requires CUDA or XPU") is the set
    the author chose: it becomes a skip_on over the test device's type, the reason kept, so the
    test runs on CUDA and XPU devices (where it ran) and nowhere more; its body takes the device."""
    assert fix(VENDOR_SET_GATE) == textwrap.dedent("""\
        import pytest
        import torch


        @pytest.mark.skip_on("type not in ('cuda', 'xpu')", reason="offload")
        def test_offload(device):
            assert torch.ones(2, device=device).sum() == 2
        """)
    assert left(VENDOR_SET_GATE) == []
    found = analyze(textwrap.dedent(VENDOR_SET_GATE), "test_t.py")
    assert any("the author's device types cuda, xpu, kept" in (f.fix or "") for f in found.findings)


def test_a_vendor_set_stays_under_target_torch() -> None:
    """torch has no mark for "these device types only": the gate stays, and says why (the body
    takes the current accelerator's type, which on the CUDA and XPU machines it runs on is theirs)."""
    assert "@pytest.mark.skipif(not torch.cuda.is_available() and not torch.xpu.is_available()" in \
        fix(VENDOR_SET_GATE, "torch")
    assert any("names the device types cuda, xpu" in f for f in left(VENDOR_SET_GATE, "torch"))


def test_the_multi_vendor_decorator_of_accelerate_becomes_its_set() -> None:
    """accelerate's ``require_cuda_or_xpu`` on a TestCase method: our decorator of the same
    mark (it works under plain unittest), the orphaned import removed."""
    out = fix("""\
        import unittest

        import torch
        from accelerate.test_utils import require_cuda_or_xpu


        class T(unittest.TestCase):
            @require_cuda_or_xpu
            def test_a(self):
                self.assertEqual(torch.ones(2).sum().item(), 2)
        """)
    assert out == textwrap.dedent("""\
        import unittest

        import torch
        from pytest_devcaps import skip_on


        class T(unittest.TestCase):
            @skip_on("type not in ('cuda', 'xpu')", reason="runs on cuda or xpu devices only")
            def test_a(self):
                self.assertEqual(torch.ones(2).sum().item(), 2)
        """)


@pytest.mark.parametrize(("profile", "outcome"), [
    ("nvidia-h100", "passed"), ("amd-mi300x", "passed"), ("intel-max-1550", "passed"),
    ("apple-m3", "skipped"), ("habana-gaudi2", "skipped"), (None, "skipped")])
def test_the_rewritten_set_runs_where_the_gate_let_it_run(profile: str | None, outcome: str,
                                                          pytester: pytest.Pytester) -> None:
    """The mark the rewrite writes, on simulated vendors (the test body touches no device):
    CUDA (NVIDIA and ROCm: torch's cuda device type) and XPU run it, MPS, HPU and the CPU skip
    it, as ``not torch.cuda.is_available() and not torch.xpu.is_available()`` did."""
    header = fix(VENDOR_SET_GATE).split("def test_offload")[0]
    pytester.makepyfile(test_set=header + "def test_offload():\n    pass\n")
    if profile is None:  # this machine: run it
        result = pytester.runpytest("-p", "no:randomly", "-rs")
        result.assert_outcomes(skipped=1)
        result.stdout.fnmatch_lines(["*skip_on(type not in ('cuda', 'xpu')) holds on cpu (type=cpu): offload"])
        return
    result = pytester.runpytest("-p", "no:randomly", f"--devcaps-profile={profile}")  # the plan
    if outcome == "passed":
        result.stdout.fnmatch_lines([f"1 would run, 0 would be skipped on {profile}*"])
    else:
        result.stdout.fnmatch_lines(["SKIP test_set.py::test_offload: skip_on(type not in ('cuda', 'xpu')) "
                                     "holds on *: offload", f"0 would run, 1 would be skipped on {profile}*"])


OWN_DEVICE_LIST = """\
    import pytest
    import torch


    @pytest.mark.parametrize("device", ["cpu", "cuda"])
    @pytest.mark.parametrize("n", [1, 2])
    def test_sum(device, n):
        if "cuda" in device and not torch.cuda.is_available():
            pytest.skip("test requires a GPU")
        x = torch.ones(n, device=device)
        assert x.sum().item() == n
    """


def test_an_own_cpu_cuda_list_and_its_skip_where_cuda_is_absent_go_together() -> None:
    """fairscale's ``parametrize("device", ["cpu", "cuda"])`` with ``if "cuda" in device and not
    torch.cuda.is_available(): pytest.skip(...)``: the device fixture gives only devices present,
    so the skip can never hold; both go (the string test on ``device`` would raise on the
    fixture's torch.device, so one never goes without the other)."""
    assert fix(OWN_DEVICE_LIST) == textwrap.dedent("""\
        import pytest
        import torch


        @pytest.mark.parametrize("n", [1, 2])
        def test_sum(device, n):
            x = torch.ones(n, device=device)
            assert x.sum().item() == n
        """)
    assert left(OWN_DEVICE_LIST) == []


@pytest.mark.parametrize("condition", ['device == "cuda"', 'device.startswith("cuda")'])
def test_the_list_and_its_skip_both_stay_while_the_test_keeps_cuda_only_code(condition: str) -> None:
    """With CUDA's SM count read in the test its gate stays, and so does the parametrization:
    removed alone, it would hand the kept string test a torch.device."""
    source = OWN_DEVICE_LIST.replace('"cuda" in device', condition).replace(
        "        assert x.sum()", "        assert torch.cuda.get_device_properties(0).multi_processor_count\n"
        "        assert x.sum()")
    assert unchanged(source)
    found = left(source)
    assert any(f.startswith("DC003 parametrizes `device` over hardcoded devices; not fixed: ")
               for f in found), found


def test_the_list_stays_where_the_test_reads_its_device_as_a_string_elsewhere() -> None:
    """fairscale's test_basic also says ``if "cpu" in device: return`` before CUDA memory numbers:
    that string use keeps the parametrization, and with it the skip."""
    source = OWN_DEVICE_LIST.replace("        assert x.sum()", '        if "cpu" in device:\n            return\n'
                                     "        assert x.sum()")
    assert unchanged(source)
    assert all("the test parametrizes `device` itself and reads it as a string" in f for f in left(source))


@pytest.mark.parametrize("gate", ["is_sm_at_least_90()", "SM90OrLater", "torch.cuda.get_device_capability() >= (9, 0)"])
def test_an_sm_90_gate_on_fp8_code_is_not_the_fp8_capability(gate: str) -> None:
    """fp8's rule is sm_89: an L4 (sm_89) has fp8 and fails an sm_90 gate; the gate stays."""
    source = f"""\
        import pytest
        import torch
        from torch.testing._internal.common_cuda import SM90OrLater
        from torchao.utils import is_sm_at_least_90


        @pytest.mark.skipif(not {gate}, reason="needs sm90")
        def test_fp8():
            x = torch.ones(2, device="cuda").to(torch.float8_e4m3fn)
        """
    out = fix(source)
    assert "requires_capability" not in out and f"not {gate}" in out


def test_an_sm_89_gate_on_fp8_code_is_the_fp8_capability() -> None:
    out = fix("""\
        import pytest
        import torch
        from torchao.utils import is_sm_at_least_89


        @pytest.mark.skipif(not is_sm_at_least_89(), reason="needs sm89")
        def test_fp8(device):
            x = torch.ones(2, device=device).to(torch.float8_e4m3fn)
        """)
    assert '@pytest.mark.requires_capability("dtype.fp8_e4m3fn", native=True)' in out


MULTIPROCESS = """\
    import torch
    from torch.testing._internal.common_distributed import skip_if_lt_x_gpu
    from torch.testing._internal.common_fsdp import FSDPTest
    from torch.testing._internal.common_utils import run_tests

    _WORLD_SIZE = 2


    class TestTwoRanks(FSDPTest):
        @property
        def world_size(self):
            return _WORLD_SIZE

        @skip_if_lt_x_gpu(_WORLD_SIZE)
        def test_all_reduce(self):
            torch.cuda.set_device(f"cuda:{self.rank}")
            t = torch.ones(1, device="cuda")
            torch.distributed.all_reduce(t)
            self.assertEqual(t.item(), 2)
    """


def test_skip_if_lt_x_gpu_on_a_multi_process_class_becomes_ranks_not_devices() -> None:
    """n ranks and a process-group backend for the device (requires_ranks), read from a module
    constant; set_device gets the index (not a device string) through the device's module, which
    torch.cpu has too: on the CPU the ranks share the device, with gloo."""
    out = fix(MULTIPROCESS)
    assert "@requires_ranks(2)\n    def test_all_reduce" in out and "requires_devices" not in out
    assert "torch.get_device_module(device_type).set_device(self.rank)" in out
    assert 't = torch.ones(1, device=device_type)' in out and "skip_if_lt_x_gpu" not in out


def test_torch_target_keeps_skip_if_lt_x_gpu_and_does_not_call_it_fixed() -> None:
    result = fix_text(textwrap.dedent(MULTIPROCESS), "t.py", "torch")
    assert "@skip_if_lt_x_gpu(_WORLD_SIZE)" in result.after
    counts = result.counts()
    assert "DC005" not in counts.fixed and counts.left.get("DC005") == 1


CUDA_GRAPH_TEST = """\
    import unittest

    import torch
    from torch.testing._internal.common_utils import TEST_CUDA_GRAPH, TestCase


    class TestGraphs(TestCase):
        @unittest.skipIf(not TEST_CUDA_GRAPH, "cuda graph test is skipped")
        def test_replay(self):
            x = torch.randn(4, device="cuda")
            compiled = torch.compile(lambda t: t.sin(), backend="cudagraphs")
            self.assertEqual(compiled(x), x.sin())
    """


def test_pinned_memory_under_target_torch_says_torch_has_no_mark_for_it() -> None:
    """A test that pins memory keeps it under --target torch, saying why: torch has no mark for
    the capability (it used to say the file had no test to carry it); a helper has no test."""
    source = """\
        import torch


        def test_pin():
            assert torch.zeros(4).pin_memory().is_pinned()


        def helper():
            return torch.zeros(4).pin_memory()
        """
    assert unchanged(source, "torch")
    test, helper = left(source, "torch")
    assert "torch has no mark for requires_capability('runtime.pinned_memory')" in test
    assert "no test here to carry requires_capability('runtime.pinned_memory')" in helper
    assert "@pytest.mark.requires_capability" in fix(source)  # --target devcaps marks the test


def test_a_graphs_gate_is_a_capability_and_torch_has_no_decorator_for_it() -> None:
    """test/dynamo/test_cudagraphs.py: TEST_CUDA_GRAPH is the graphs capability, which not every
    accelerator has (emu has none, nor MPS): --target torch kept "needs an accelerator", and the
    test failed on emu where it had skipped. It stays under --target torch; devcaps says it."""
    torch_out = fix(CUDA_GRAPH_TEST, "torch")
    assert '@unittest.skipIf(not TEST_CUDA_GRAPH, "cuda graph test is skipped")' in torch_out
    assert "needs an accelerator" not in torch_out
    assert any("has no decorator for requires_capability(\"runtime.graphs\")" in f
               for f in left(CUDA_GRAPH_TEST, "torch"))
    assert '@requires_capability("runtime.graphs")' in fix(CUDA_GRAPH_TEST)


def test_a_torchtune_gpu_test_count_is_read() -> None:
    out = fix("""\
        import torch
        from tests.test_utils import gpu_test


        @gpu_test(gpu_count=2)
        def test_two():
            assert torch.ones(2).cuda().sum() == 2
        """)
    assert "@pytest.mark.requires_devices(2)" in out and "gpu_test" not in out


# -- it finishes what it starts ----------------------------------------------------------------------

def test_device_strings_passed_to_distributed_apis_move_with_the_tensors() -> None:
    out = fix("""\
        import torch
        import torch.distributed as dist
        from torch.distributed.device_mesh import DeviceMesh, init_device_mesh


        def helper(rank):
            mesh = init_device_mesh("cuda", (2,))
            other = DeviceMesh("cuda", [0, 1])
            backend = dist.get_default_backend_for_device("cuda")
            module = torch.get_device_module("cuda")
            scaler = torch.amp.GradScaler("cuda")
            return torch.ones(2).cuda()
        """)
    assert '"cuda"' not in out and "cuda()" not in out
    for call in ("init_device_mesh(device_type, (2,))", "DeviceMesh(device_type, [0, 1])",
                 "get_default_backend_for_device(device_type)", "torch.get_device_module(device_type)",
                 "torch.amp.GradScaler(device_type)"):
        assert call in out


def test_is_cuda_assertions_become_device_type_assertions() -> None:
    out = fix("""\
        import unittest
        import torch


        class T(unittest.TestCase):
            def test_a(self):
                x = torch.ones(2).cuda()
                assert x.is_cuda
                self.assertTrue(x.is_cuda)
                self.assertFalse(torch.ones(1).is_cuda)
        """)
    assert out.count("(x.device.type == device_type)") == 2
    assert "self.assertFalse(torch.ones(1).is_cuda)" in out  # true on every device: left as it is


def test_an_integer_device_is_a_cuda_index() -> None:
    out = fix("""\
        import torch
        import torch.distributed as dist


        def helper(rank):
            t = torch.rand(8, 8, device=dist.get_rank())
            return torch.nn.Linear(2, 2).to(rank)
        """)
    assert "device=torch.device(device_type, dist.get_rank())" in out
    assert ".to(torch.device(device_type, rank))" in out


def test_a_count_through_an_alias_of_torch_cuda_is_read_as_torch_cuda() -> None:
    """``import torch.cuda as tc; assert tc.device_count() >= 1``: an accelerator is there (on the
    CPU it fails as the original did, on every accelerator it holds), the alias goes."""
    out = fix("""\
        import torch
        import torch.cuda as tc


        def test_count():
            assert tc.device_count() >= 1
        """)
    assert "assert torch.accelerator.is_available()" in out and "tc" not in out


# -- its report is honest ------------------------------------------------------------------------------

@pytest.mark.parametrize("target", ["devcaps", "torch"])
@pytest.mark.parametrize("source", [PRIMARY_CONTEXT, MULTIPROCESS])
def test_fixed_plus_left_is_found_for_every_rule(source: str, target: str) -> None:
    counts = fix_text(textwrap.dedent(source), "t.py", target).counts()  # type: ignore[arg-type]
    assert not counts.new
    for code, found in counts.found.items():
        assert counts.fixed.get(code, 0) + counts.left.get(code, 0) == found, code


def test_a_file_left_as_it_was_reports_nothing_fixed(monkeypatch: pytest.MonkeyPatch) -> None:
    source = textwrap.dedent(PRIMARY_CONTEXT).replace("x = torch.randn(1, device=\"cuda\")\n", "")
    monkeypatch.setattr(layout, "available", lambda: False)  # torch 2.13: no classes laid out
    result = fix_text(source, "t.py", "torch")
    assert result.after == result.before and sum(result.counts().fixed.values()) == 0
    # with HardwareClassification (torch 2.14) the class is only classified: that alone is fixed
    monkeypatch.setattr(layout, "available", lambda: True)
    result = fix_text(source, "t.py", "torch")
    assert result.counts().fixed == {"DC013": 1}
    assert "hw_classification = HardwareClassification.CUDA" in result.after
    assert 'instantiate_device_type_tests(TestCtx, globals(), only_for="cuda")' in result.after
    assert result.after.count("torch._C._cuda_hasPrimaryContext(0)") == 1 and "TestCase = NoTest" in result.after


# -- formatting and names ------------------------------------------------------------------------------

def test_device_type_goes_after_every_import_and_orphans_go() -> None:
    source = """\
        \"\"\"doc\"\"\"
        import unittest

        import torch
        from torch.testing._internal.common_utils import TEST_MULTIGPU, TestCase

        if not torch.cuda.is_available():
            print("no cuda")
            TestCase = object  # noqa: F811

        import torch.nn as nn


        class T(TestCase):
            @unittest.skipIf(not TEST_MULTIGPU, "only one GPU detected")
            def test_a(self):
                self.assertEqual(nn.Linear(2, 2).cuda().weight.shape, (2, 2))
        """
    out = fix(source)
    assert out.index("import torch.nn as nn") < out.index("device_type = (")
    assert "import unittest" not in out and "TEST_MULTIGPU" not in out
    ruff = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "F,E4,E7,E9", "--stdin-filename",
                           "t.py", "-"], input=out, capture_output=True, text=True, check=False)
    assert ruff.returncode == 0, ruff.stdout


def test_a_local_device_takes_the_fixture_under_a_free_name() -> None:
    out = fix("""\
        import torch


        def test_loop():
            for device in ["cpu"]:
                pass
            x = torch.ones(2).cuda()
        """)
    assert "def test_loop(devcaps_device):" in out and ".to(devcaps_device)" in out


def test_new_code_goes_through_the_name_the_module_binds_torch_to() -> None:
    out = fix("""\
        import unittest
        import torch as th


        class T(unittest.TestCase):
            @unittest.skipIf(not th.cuda.is_available(), "no cuda")
            def test_a(self):
                x = th.ones(2).cuda()
        """)
    assert "th.accelerator.is_available()" in out and "th.accelerator.current_accelerator(" in out
    assert "import torch\n" not in out and "torch." not in out.replace("th.", "")


def test_a_name_rebound_to_something_else_is_not_torch() -> None:
    assert analyze("from mylib import fake as torch\n\n\ndef test_a():\n    torch.cuda.synchronize()\n",
                   "t.py").findings == ()
    found = analyze('import pytest\ntorch = pytest.importorskip("torch")\n\n\ndef test_a():\n'
                    "    torch.cuda.synchronize()\n", "t.py").findings
    assert [f.code for f in found] == ["DC004"]


def test_a_class_of_the_files_own_cuda_method_is_not_torchs() -> None:
    out = fix("""\
        import torch


        class Wrapper:
            def __init__(self):
                self.t = torch.ones(2)

            def cuda(self):
                self.t = self.t.cuda()
                return self


        def test_w():
            w = Wrapper()
            w.cuda()
        """)
    assert "w.cuda()" in out and ".to(" not in out


def test_plain_pytest_files_get_pytest_marks_under_target_torch() -> None:
    out = fix("""\
        import pytest
        import torch


        @pytest.mark.skipif(torch.cuda.device_count() < 2, reason="2 gpus")
        def test_a():
            x = torch.ones(2).cuda()
        """, "torch")
    assert "@pytest.mark.skipif(torch.accelerator.device_count() < 2" in out and "unittest" not in out


def test_converted_code_uses_the_accelerator_that_is_usable() -> None:
    """A CUDA build with no GPU answers "cuda" to current_accelerator(): the converted
    ``device_type`` asks for a usable one (issue 33)."""
    out = fix("import torch\n\n\ndef helper():\n    return torch.ones(1, device='cuda')\n".replace("'", '"'), "torch")
    tree = ast.parse(out)
    assert "current_accelerator(check_available=True)" in out
    assert "current_accelerator()" not in out and tree


def test_an_assert_equal_on_the_cuda_type_follows_the_device() -> None:
    """torchao's ``assertEqual(x.device.type, "cuda")`` after ``device="cuda"`` became the device
    type: both change together, or the assertion fails on every other device."""
    out = fix("""\
        import unittest

        import torch
        from torch import nn


        class TestLin(unittest.TestCase):
            def test_lin(self):
                self.assertEqual(nn.Linear(2, 2, device="cuda").weight.device.type, "cuda")
        """)
    assert "nn.Linear(2, 2, device=device_type).weight.device.type, device_type)" in out


@pytest.mark.parametrize("source", [OWN_DEVICE_LIST, OWN_DEVICE_LIST.replace(
    '        if "cuda" in device and not torch.cuda.is_available():\n            pytest.skip("test requires a GPU")\n', "")])
def test_a_device_parametrization_is_found_under_either_target(source: str) -> None:
    """The parametrization is a finding of the file, whatever --fix writes: --target torch
    leaves it (no fixture), so found is the same and fixed + left adds up to it (the upstream
    bench saw fairscale's file found 15, fixed 9, left 5 under --target torch)."""
    counts = {target: fix_text(textwrap.dedent(source), "test_t.py", target).counts()  # type: ignore[arg-type]
              for target in ("devcaps", "torch")}
    assert counts["devcaps"].found == counts["torch"].found and "DC003" in counts["torch"].found
    for got in counts.values():
        assert sum(got.fixed.values()) + sum(got.left.values()) == sum(got.found.values())
    assert any(f.startswith("DC003 parametrizes `device` over hardcoded devices; not fixed: --target torch has no "
                            "device fixture") for f in left(source, "torch"))


def test_a_device_parametrization_read_as_a_string_stays_under_target_torch() -> None:
    """fairscale: ``parametrize("device", ["cpu", "cuda"])`` with ``"cuda" in device``: --target
    torch has no fixture at all. (--target devcaps: the skip goes with the parametrization, see
    test_an_own_cpu_cuda_list_and_its_skip_where_cuda_is_absent_go_together; a string use
    elsewhere keeps both, as the fixture, a torch.device, would raise TypeError there.)"""
    source = """\
        import pytest
        import torch


        @pytest.mark.parametrize("device", ["cpu", "cuda"])
        def test_add(device):
            if "cuda" in device and not torch.cuda.is_available():
                pytest.skip("test requires a GPU")
            assert torch.ones(2, device=device).sum() == 2
        """
    assert '@pytest.mark.parametrize("device", ["cpu", "cuda"])' in fix(source, "torch")


def test_the_torch_target_keeps_a_device_parametrization() -> None:
    out = fix("""\
        import pytest
        import torch


        @pytest.mark.parametrize("device", ["cpu", "cuda"])
        def test_add(device):
            assert torch.ones(2, device=device).sum() == 2
        """, "torch")
    assert '@pytest.mark.parametrize("device", ["cpu", "cuda"])' in out and "devcaps" not in out


# -- multi-process classes whose gate stays ------------------------------------------------------

MULTIPROCESS_KEPT = """\
    import torch
    from torch.testing._internal.common_distributed import MultiProcessTestCase, skip_if_lt_x_gpu


    class TestOverlap(MultiProcessTestCase):
        @property
        def world_size(self) -> int:
            return min(2, torch.cuda.device_count())

        @skip_if_lt_x_gpu(2)
        def test_overlap(self):
            x = torch.ones(2).cuda()
            self.assertGreater(torch.cuda.get_device_properties(0).multi_processor_count, 0)
            self.assertEqual(x.sum().item(), 2)
    """


def test_a_kept_multi_process_gate_holds_the_world_size_and_its_code() -> None:
    # world_size = min(2, torch.cuda.device_count()) is what keeps the ranks off another
    # accelerator (0 there); skip_if_lt_x_gpu lets HPU / XPU in, so even .cuda() is kept
    source = textwrap.dedent(MULTIPROCESS_KEPT)
    result = fix_text(source, "t.py")
    assert result.after == result.before
    assert sum(result.counts().fixed.values()) == 0


def test_under_target_torch_the_kept_multi_process_gate_holds_the_world_size() -> None:
    """test_fully_shard_overlap under --target torch: skip_if_lt_x_gpu stays as written, and so
    does ``world_size = min(2, torch.cuda.device_count())``. Widened to the accelerator count, the
    world was 2 on two emu devices, and FSDPTest's gloo barrier failed there before the gate ran
    (the test had skipped)."""
    result = fix_text(textwrap.dedent(MULTIPROCESS_KEPT), "t.py", "torch")
    assert "return min(2, torch.cuda.device_count())" in result.after
    assert "@skip_if_lt_x_gpu(2)" in result.after
    held = [f for f in result.left.findings if "device_count" in f.message]
    assert held and all("its gate (line" in f.message and "stays" in f.message for f in held)
    counts = result.counts()
    assert sum(counts.fixed.values()) + sum(counts.left.values()) == sum(counts.found.values())


# -- the device-module lookup of Hugging Face's suites -------------------------------------------

MODULE_LOOKUP = """\
    import torch as th

    torch_device = "cpu"


    def accelerator_module():
        return getattr(th, torch_device, th.cuda)
    """


@pytest.mark.parametrize("target", ["devcaps", "torch"])
def test_the_cuda_fallback_of_a_device_module_lookup_becomes_the_current_accelerator(target: str) -> None:
    """accelerate's ``getattr(torch, torch_device, torch.cuda)``: only the fallback names CUDA;
    it becomes ``torch.get_device_module()`` (torch.cuda wherever CUDA is the accelerator), through
    the name the module bound for torch, and the report adds up."""
    source = textwrap.dedent(MODULE_LOOKUP)
    result = fix_text(source, "test_t.py", target)  # type: ignore[arg-type]
    assert result.after == source.replace("getattr(th, torch_device, th.cuda)",
                                          "(getattr(th, torch_device, None) or th.get_device_module())")
    counts = result.counts()
    assert counts.fixed == {"DC004": 1} and not counts.left and counts.found == {"DC004": 1}


def test_the_converted_lookup_finds_the_module_the_original_found() -> None:
    """Where the device has a module of its own (here the CPU's), both find the same one."""
    import torch

    before: dict[str, object] = {}
    after: dict[str, object] = {}
    exec(compile(textwrap.dedent(MODULE_LOOKUP), "before", "exec"), before)
    exec(compile(fix(MODULE_LOOKUP), "after", "exec"), after)
    assert before["accelerator_module"]() is torch.cpu  # type: ignore[operator]
    assert after["accelerator_module"]() is torch.cpu  # type: ignore[operator]


@pytest.mark.parametrize("source", [
    # a getattr the file binds itself, in any of the ways Python binds a name, is not the builtin
    textwrap.dedent(MODULE_LOOKUP) + "\n\ndef getattr(obj, name, default):\n    return default\n",
    textwrap.dedent(MODULE_LOOKUP) + "\n\ntry:\n    pass\nexcept ImportError as getattr:\n    pass\n",
    textwrap.dedent(MODULE_LOOKUP) + "\n\ndef install():\n    global getattr\n    getattr = print\n",
    textwrap.dedent(MODULE_LOOKUP) + "\n\nfrom operator import attrgetter as getattr\n",
    textwrap.dedent(MODULE_LOOKUP) + "\n\nmatch 1:\n    case getattr:\n        pass\n",
    textwrap.dedent(MODULE_LOOKUP) + "\n\nfor getattr in ():\n    pass\n",
    # the CUDA module looked into, not a fallback
    textwrap.dedent(MODULE_LOOKUP).replace("getattr(th, torch_device, th.cuda)", "getattr(th.cuda, 'device_count')"),
    # the fallback of a lookup on another object
    textwrap.dedent(MODULE_LOOKUP).replace("getattr(th, torch_device, th.cuda)",
                                           "getattr(registry, torch_device, th.cuda)"),
])
def test_other_uses_of_the_cuda_module_stay_findings(source: str) -> None:
    assert unchanged(source)
    assert any("names the CUDA module" in f for f in left(source))


def test_a_star_import_is_not_assumed_to_bind_getattr() -> None:
    """``from m import *`` brings names that cannot be known; the builtin is still what is meant."""
    source = "from torch.testing._internal.common_utils import *\n" + textwrap.dedent(MODULE_LOOKUP)
    assert "(getattr(th, torch_device, None) or th.get_device_module())" in fix(source)


# -- streams and the device-side spin (PyTorch's FSDP overlap tests) ------------------------------

SPIN = """\
    import pytest
    import torch
    from torch.testing._internal.common_utils import get_cycles_per_ms


    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
    def test_overlap():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(int(2 * get_cycles_per_ms()))
        torch.cuda.current_stream().wait_stream(side)
    """


def test_a_spin_on_a_side_stream_runs_where_the_device_module_has_one() -> None:
    """torch.cuda._sleep is the device module's _sleep (CUDA, ROCm; XPU from torch 2.14) under
    runtime.sleep; get_cycles_per_ms() (CUDA's spin before 2.14) is our cycles_per_ms(device);
    the chained current_stream().wait_stream is the device's current stream's."""
    assert fix(SPIN) == textwrap.dedent("""\
        import pytest
        import torch
        from pytest_devcaps.runtime import cycles_per_ms


        @pytest.mark.requires_capability("runtime.streams", "runtime.sleep")
        def test_overlap(device):
            side = torch.Stream(device=device)
            side.wait_stream(torch.get_device_module(device).current_stream())
            with side:
                torch.get_device_module(device)._sleep(int(2 * cycles_per_ms(device)))
            torch.get_device_module(device).current_stream().wait_stream(side)
        """)
    assert left(SPIN) == []


def test_under_target_torch_the_spin_stays_and_says_why() -> None:
    out = fix(SPIN, "torch")
    assert "torch.cuda._sleep(int(2 * get_cycles_per_ms()))" in out
    assert "not torch.cuda.is_available()" in out  # its gate stays with it
    found = left(SPIN, "torch")
    assert any("torch.cuda._sleep()` is CUDA-only; not fixed: torch has no mark for "
               "requires_capability('runtime.sleep')" in f for f in found), found
    assert any(f.startswith("DC004 `get_cycles_per_ms()` times CUDA's spin") for f in found), found


def test_get_cycles_per_ms_of_another_device_is_not_a_finding() -> None:
    source = ("from torch.testing._internal.common_utils import get_cycles_per_ms\n\n\n"
              "def test_cpu():\n    assert get_cycles_per_ms(\"cpu\") > 0\n")
    assert analyze(source, "t.py").findings == ()


@pytest.mark.parametrize(("decorator", "count"), [("skip_if_single_gpu", 2), ("skip_if_less_than_four_gpu", 4)])
def test_fairscales_gpu_count_decorators_are_read(decorator: str, count: int) -> None:
    """fair_dev/testing/testing.py: ``skip_if_single_gpu`` is ``skipif(not cuda.is_available() or
    device_count() < 2)``, ``skip_if_less_than_four_gpu`` the same with 4."""
    out = fix(f"""\
        import torch
        from fairscale.fair_dev.testing.testing import {decorator}


        @{decorator}
        def test_two():
            assert torch.ones(2, device="cuda").sum() == 2
        """)
    assert f"@pytest.mark.requires_devices({count})\ndef test_two(device):" in out
    assert "torch.ones(2, device=device)" in out


SPAWNED = """\
    import pytest
    import torch
    import torch.multiprocessing as mp
    from fairscale.fair_dev.testing.testing import skip_if_single_gpu
    from fairscale.nn.data_parallel import FullyShardedDataParallel as FSDP


    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = FSDP(torch.nn.Linear(4, 4))


    def _worker(rank, world_size):
        torch.cuda.set_device(rank)
        model = Model().cuda()
        assert model.layer is not None


    @skip_if_single_gpu
    def test_spawned():
        mp.spawn(_worker, args=(2,), nprocs=2, join=True)
    """


def test_a_worker_handed_to_spawn_is_part_of_the_tests_region() -> None:
    """fairscale's FSDP tests run their body in ``mp.spawn(_worker, ...)``: the worker (and the
    model class it builds) is what the test runs. Its fairscale FullyShardedDataParallel makes
    CUDA streams only where CUDA is and reads one in every forward (a KeyError elsewhere), so
    the gate stays; the worker's own moves are rewritten (they change nothing where it runs)."""
    out = fix(SPAWNED)
    assert "@skip_if_single_gpu\ndef test_spawned():" in out
    assert "torch.get_device_module(device_type).set_device(rank)" in out
    assert any("fairscale's FullyShardedDataParallel" in f for f in left(SPAWNED)), left(SPAWNED)


def test_without_the_cuda_only_library_the_spawned_test_is_widened() -> None:
    source = SPAWNED.replace("    from fairscale.nn.data_parallel import FullyShardedDataParallel as FSDP\n", "") \
        .replace("FSDP(torch.nn.Linear(4, 4))", "torch.nn.Linear(4, 4)")
    out = fix(source)
    assert "@pytest.mark.requires_devices(2)\ndef test_spawned():" in out
    assert left(source) == []


# -- a second hostile sweep (issue 27): each a minimal input of our own -------------------------

def test_a_helper_decorated_with_cuda_autocast_keeps_the_gates_of_its_callers() -> None:
    """``@torch.cuda.amp.autocast(dtype=torch.bfloat16)`` on a helper runs where the helper is
    defined: it cannot take a ``device`` parameter (a NameError at import), and off CUDA it
    casts nothing, so a widened caller asserting bf16 failed on emu."""
    source = """\
        import pytest
        import torch


        @torch.cuda.amp.autocast(dtype=torch.bfloat16)
        def mm_bf16(a, b):
            return a @ b


        @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
        def test_bf16():
            a = torch.randn(8, 8, device="cuda")
            assert mm_bf16(a, a).dtype == torch.bfloat16
        """
    out = fix(source)
    assert "@torch.cuda.amp.autocast(dtype=torch.bfloat16)" in out and "device)" not in out.split("def test")[0]
    assert 'reason="needs CUDA"' in out
    assert any("a decorator or a default value runs where the function is defined" in f for f in left(source))


def test_a_cuda_default_argument_is_not_given_the_helpers_device() -> None:
    """``def make(n, device=torch.device("cuda"))`` became ``device=torch.device(device)``: a
    NameError at import, on CUDA too."""
    source = """\
        import pytest
        import torch


        def make_batch(n, device=torch.device("cuda")):
            return torch.arange(n, dtype=torch.float32, device=device)


        @pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available")
        def test_default_device():
            assert make_batch(4).is_cuda
        """
    assert unchanged(source)
    ast.parse(fix(source))


def test_current_device_under_the_device_fixture_stays() -> None:
    """``torch.cuda.current_device()`` is an index on CUDA; on the ``[cpu]`` copy the fixture
    gives, ``torch.get_device_module(device).current_device()`` is the string 'cpu'."""
    source = """\
        import pytest
        import torch


        @pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA unavailable")
        def test_index():
            out = torch.ones(2).cuda()
            assert out.device.index == torch.cuda.current_device()
        """
    assert unchanged(source)
    assert any("current_device() is 'cpu', not an index" in f for f in left(source))


@pytest.mark.parametrize("check", ["m.weight.get_device() == 0", "m.weight.device.index == 0",
                                   "all(t.device.type == 'cuda' for t in m.parameters())"])
def test_an_assertion_only_cuda_passes_keeps_the_gate(check: str) -> None:
    """A device index (-1 / None on the CPU) or a device-type check inside a generator: the
    ``[cpu]`` copy of a widened test fails it."""
    source = f"""\
        import pytest
        import torch


        @pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA unavailable")
        def test_moved():
            m = torch.nn.Linear(3, 3).cuda()
            assert {check}
        """
    assert unchanged(source)


def test_a_skip_in_a_fixture_holds_the_tests_that_request_it() -> None:
    """The fixture's gate stays (it sets CUDA as the default device); the tests requesting it
    are skipped by it, so they are held as they were: no ``device`` parameter, no rewritten
    assertion (their ``[cpu]`` copy failed on a CUDA machine)."""
    source = """\
        import pytest
        import torch


        @pytest.fixture
        def on_gpu():
            if not torch.cuda.is_available():
                pytest.skip("CUDA not available")
            torch.set_default_device("cuda")
            yield
            torch.set_default_device("cpu")


        def test_factory(on_gpu):
            assert torch.ones(3).device.type == "cuda"
        """
    assert unchanged(source)


def test_a_test_reading_module_code_on_device_type_uses_device_type_too() -> None:
    """``P = partial(torch.zeros, device="cuda")`` at module level takes the module's
    ``device_type``; a test reading it given the ``device`` fixture compared the accelerator
    with its ``[cpu]`` copy's CPU. It now skips without an accelerator and uses ``device_type``."""
    out = fix("""\
        import functools

        import pytest
        import torch

        make_gpu = functools.partial(torch.zeros, device="cuda")


        @pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA missing")
        def test_partial_zeros():
            z = make_gpu(3, 3)
            assert z.device.type == "cuda"
        """)
    assert "def test_partial_zeros():" in out and "(device)" not in out
    assert "torch.accelerator.is_available()" in out and "z.device.type == device_type" in out
