"""Issue 18: ``devcaps lint --fix`` converts inside unittest.TestCase classes and helpers, in
two vocabularies (``--target devcaps`` / ``--target torch``): one rule at a time on minimal
inputs of the real patterns, the wrong edits of the issue as regressions, the workflow flags,
and whole files (tests/lint/golden/) whose converted output is ruff-format clean and runs here."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_devcaps.commands.main import main

pytest.importorskip("libcst", reason="--fix needs the lint extra (pytest-devcaps[lint])")
from pytest_devcaps.lint import layout  # noqa: E402
from pytest_devcaps.lint.fix import fix_text  # noqa: E402  (after the importorskip)

from test_layout import linter_errors  # noqa: E402  (tests/lint is on sys.path, as for fleet_data)

GOLDEN = Path(__file__).resolve().parent / "golden"
FILES = ["multiprocess_style", "device_type_style", "torchao_style", "overlap_style"]
# the idiom that is right on every build: a CUDA build without a GPU answers "cuda" to plain
# current_accelerator() (issue 33), None with check_available=True; as ruff format lays it out
DEVICE_TYPE = ('device_type = (\n    acc.type\n    if (acc := torch.accelerator.current_accelerator(check_available=True))\n'
               '    else "cpu"\n)')
HEAD = "import unittest\n\nimport torch\n\n\n"


def fix(body: str, target: str = "devcaps") -> str:
    return fix_text(textwrap.dedent(body), "t.py", target).after  # type: ignore[arg-type]


def method(line: str, gate: str = "") -> str:
    """A TestCase whose one test runs ``line``."""
    return HEAD + f"class T(unittest.TestCase):\n    {gate}\n    def test_a(self):\n        {line}\n"


# -- one rule at a time ------------------------------------------------------------------------

@pytest.mark.parametrize(("cuda", "accelerator"), [
    # what torch.cpu has too goes to the device's module: the device type may be "cpu", where
    # torch.accelerator raises ("Cannot access accelerator device when none is available")
    ("torch.cuda.synchronize()", "torch.get_device_module(device_type).synchronize()"),
    ("torch.cuda.device_count()", "torch.accelerator.device_count()"),
    ("torch.cuda.current_device()", "torch.get_device_module(device_type).current_device()"),
    ("torch.cuda.set_device(1)", "torch.get_device_module(device_type).set_device(1)"),
    ('torch.cuda.set_device(f"cuda:{rank}")', "torch.get_device_module(device_type).set_device(rank)"),
    ("torch.cuda.memory_stats(device=0)", "torch.accelerator.memory_stats(0)"),
    ("torch.cuda.mem_get_info()", "torch.accelerator.get_memory_info()"),
    ("torch.cuda.max_memory_reserved()", "torch.accelerator.max_memory_reserved()"),
    ("torch.cuda.reset_accumulated_memory_stats()", "torch.accelerator.reset_accumulated_memory_stats()"),
    ("torch.cuda.manual_seed(0)", "torch.manual_seed(0)"),
    ("torch.cuda.Event()", "torch.Event()"),
    ("torch.ones(2).cuda()", "torch.ones(2).to(device_type)"),
    # device 0, not the current device (a rank that called set_device(rank) is on another)
    ("torch.ones(2).cuda(0)", "torch.ones(2).to(torch.device(device_type, 0))"),
    ("torch.ones(2).cuda(rank)", "torch.ones(2).to(torch.device(device_type, rank))"),
    ('torch.ones(2, device="cuda")', "torch.ones(2, device=device_type)"),
    ('torch.ones(2, device=f"cuda:{rank}")', 'torch.ones(2, device=f"{device_type}:{rank}")'),
    ("torch.cuda.amp.autocast()", "torch.autocast(device_type, dtype=torch.float16)"),
])
def test_testcase_call_becomes_device_generic(cuda: str, accelerator: str) -> None:
    out = fix(method(f"x = {cuda}"))
    assert f"x = {accelerator}" in out
    assert "torch.cuda" not in out
    assert ("device_type" in accelerator) == (DEVICE_TYPE in out)


def test_memory_readers_mark_the_test_with_a_dual_runner_decorator() -> None:
    out = fix(method("x = torch.cuda.memory_allocated()"))
    assert '    @requires_capability("runtime.memory_stats")\n    def test_a' in out
    assert "from pytest_devcaps import requires_capability" in out
    assert "pytest.mark" not in out  # PyTorch's run_tests ignores pytest marks


def test_empty_cache_stays_a_no_op_without_an_accelerator() -> None:
    out = fix(method("torch.cuda.empty_cache()"))
    assert "if torch.accelerator.is_available():\n            torch.accelerator.empty_cache()" in out


def test_nccl_in_a_helper_becomes_the_device_default_backend() -> None:
    out = fix("import torch.distributed as dist\n\n\ndef init(rank):\n    dist.init_process_group(\"nccl\", rank=rank)\n")
    assert "dist.init_process_group(dist.get_default_backend_for_device(device_type), rank=rank)" in out
    assert out.count(DEVICE_TYPE) == 1 and "import torch\n" in out


def test_device_type_is_added_once_after_the_imports() -> None:
    out = fix(HEAD + "A = torch.ones(1).cuda()\n\n\ndef f():\n    return torch.zeros(1).cuda()\n")
    assert out.count(DEVICE_TYPE) == 1
    assert out.index("import torch") < out.index(DEVICE_TYPE) < out.index("A = ")


def test_device_type_class_uses_its_device_and_device_type() -> None:
    src = ("import torch\nfrom torch.testing._internal.common_device_type import instantiate_device_type_tests\n"
           "from torch.testing._internal.common_utils import TestCase\n\n\nclass T(TestCase):\n"
           "    def test_a(self, device):\n        x = torch.ones(1, device=\"cuda\")\n"
           "        with torch.autocast(\"cuda\"):\n            pass\n\n"
           "    def test_b(self):\n        y = torch.ones(1).cuda()\n\n\n"
           "instantiate_device_type_tests(T, globals())\n")
    out = fix(src)
    assert 'torch.ones(1, device=device)' in out and "torch.autocast(self.device_type, dtype=torch.float16)" in out
    assert "torch.ones(1).to(self.device_type)" in out and DEVICE_TYPE not in out


def test_cuda_zero_keeps_its_index_without_a_fixture_and_takes_the_test_device_with_one() -> None:
    """``.cuda(0)`` is device 0: with only a device type at hand it stays index 0; a pytest test
    with the device fixture runs on its own device, which is what ``.cuda(0)`` chose before."""
    testcase = fix(method("x = torch.ones(2).cuda(0)"))
    assert "torch.ones(2).to(torch.device(device_type, 0))" in testcase
    pytest_style = fix("import torch\n\n\ndef test_a(device):\n    x = torch.ones(2).cuda(0)\n")
    assert "torch.ones(2).to(device)" in pytest_style


def test_only_for_cuda_becomes_except_for_cpu_and_says_it_widens() -> None:
    src = ("from torch.testing._internal.common_device_type import instantiate_device_type_tests\n\n"
           "class T:\n    pass\n\n\ninstantiate_device_type_tests(T, globals(), only_for=(\"cuda\",))\n")
    result = fix_text(src, "t.py")
    assert 'instantiate_device_type_tests(T, globals(), except_for="cpu")' in result.after
    assert any("widens" in (f.fix or "") for f in result.found.findings)  # type: ignore[union-attr]


def test_only_cuda_becomes_only_accelerator_in_device_type_tests() -> None:
    out = (GOLDEN / "device_type_style.devcaps.py.txt").read_text()
    assert "@onlyAccelerator" in out and "onlyCUDA" not in out


@pytest.mark.parametrize(("gate", "decorator"), [
    ("@skip_if_lt_x_gpu(2)", "@requires_devices(2)"),
    ('@unittest.skipIf(not TEST_CUDA_GRAPH, "graphs")', '@requires_capability("runtime.graphs")'),
    ('@unittest.skipIf(not SM89OrLater, "fp8")', '@requires_capability("dtype.fp8_e4m3fn", native=True)'),
    ('@unittest.skipIf(not PLATFORM_SUPPORTS_FLASH_ATTENTION, "fa")', '@requires_capability("attention.flash")'),
    ('@unittest.skipIf(not torch.cuda.is_available(), "cuda")',
     '@unittest.skipIf(not torch.accelerator.is_available(), "needs an accelerator")'),
])
def test_testcase_gates_become_decorators_that_work_under_unittest(gate: str, decorator: str) -> None:
    out = fix(method("x = torch.float8_e4m3fn", gate))
    assert decorator in out, out
    assert "pytest.mark" not in out


# -- names resolve through imports ---------------------------------------------------------------

@pytest.mark.parametrize("imports,call", [
    ("import torch.cuda as tc", "tc.synchronize()"),
    ("from torch import cuda", "cuda.synchronize()"),
    ("from torch.cuda import synchronize", "synchronize()"),
    ("import torch as th", "th.cuda.synchronize()"),
])
def test_names_resolve_through_imports(imports: str, call: str) -> None:
    out = fix(f"{imports}\n\n\ndef f():\n    {call}\n")
    # new code goes through the name the module binds torch to (th), never a second import
    torch_name = "th" if "as th" in imports else "torch"
    assert f"{torch_name}.accelerator.synchronize()" in out
    assert (imports in out) == (torch_name == "th")  # an import it made unused goes


def test_a_local_variable_named_torch_is_not_torch() -> None:
    src = "def f(torch):\n    torch.cuda.synchronize()\n"
    assert fix(src) == src


# -- the wrong edits of issue 18 ------------------------------------------------------------------

def test_vendor_keyed_branch_is_not_collapsed() -> None:
    src = ("from torch.testing._internal.common_utils import TEST_CUDA, TEST_XPU\n\n\n"
           "def key():\n    if TEST_CUDA or TEST_XPU:\n        return 'a'\n    return 'b'\n")
    result = fix_text(src, "t.py")
    assert result.after == src
    assert "vendor-keyed branch" in result.left.findings[0].message


def test_skip_if_lt_x_gpu_on_fsdp_style_method_is_not_a_pytest_only_mark() -> None:
    """On a multi-process class the gate is the world's ranks and a process-group backend for
    the device (requires_ranks), not a device count: on the CPU the ranks share the device."""
    out = (GOLDEN / "multiprocess_style.devcaps.py.txt").read_text()
    assert "@requires_ranks(2)" in out and "pytest.mark.requires_ranks" not in out
    assert "requires_devices" not in out


def test_stream_with_cuda_stream_attribute_stays() -> None:
    result = fix_text(method("s = torch.cuda.Stream()\n        print(s.cuda_stream)"), "t.py")
    assert "torch.cuda.Stream()" in result.after and "torch.Stream" not in result.after
    assert any("cuda_stream" in f.message for f in result.left.findings)


def test_synchronize_never_imports_pytest_devcaps_runtime() -> None:
    for target in ("devcaps", "torch"):
        # a helper given a device: that device's module (the device may be the CPU, where
        # torch.accelerator.synchronize() raises; torch.cpu.synchronize() is a no-op)
        out = fix("import torch\n\n\ndef helper(device):\n    torch.cuda.synchronize()\n", target)
        assert "torch.get_device_module(device).synchronize()" in out and "pytest_devcaps" not in out
        # a helper with no device and no caller to lend it one: torch.accelerator (the campaign's
        # form); under --target torch every helper takes the module's device_type
        out = fix("import torch\n\n\ndef helper():\n    torch.cuda.synchronize()\n", target)
        expected = "torch.accelerator" if target == "devcaps" else "torch.get_device_module(device_type)"
        assert f"{expected}.synchronize()" in out and "pytest_devcaps" not in out


def test_set_device_in_a_helper_given_the_device_runs_on_cpu() -> None:
    """The helper of a pytest test given the device fixture (the CPU here): torch.cuda.set_device
    becomes the device module's, which torch.cpu has as a no-op (torch.accelerator raises)."""
    source = ("import torch\n\n\ndef _init(rank, device):\n    torch.cuda.set_device(rank)\n\n\n"
              "def test_init():\n    _init(0, \"cuda\")\n")
    out = fix(source, "devcaps")
    assert "torch.get_device_module(device).set_device(rank)" in out
    assert "def test_init(device):" in out and "_init(0, device)" in out
    namespace: dict[str, object] = {}
    exec(compile(out, "t.py", "exec"), namespace)
    import torch

    namespace["test_init"](torch.device("cpu"))  # type: ignore[operator]


def test_sm89_fp8_gate_does_not_admit_emulation() -> None:
    out = (GOLDEN / "torchao_style.devcaps.py.txt").read_text()
    assert '@requires_capability("dtype.fp8_e4m3fn", native=True)' in out


def test_rewritten_signatures_and_imports_are_formatter_clean() -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists():
        pytest.skip("ruff not installed (pip install ruff, in the test extra)")
    for name in FILES:
        for target in ("devcaps", "torch"):
            code = (GOLDEN / f"{name}.{target}.py.txt").read_text()
            done = subprocess.run([ruff, "format", "--diff", "--stdin-filename", "x.py", "-"], input=code,
                                  capture_output=True, text=True, check=False)
            assert done.returncode == 0, f"{name} {target}:\n{done.stdout}"


def test_a_kept_gate_blocks_only_the_code_it_guards() -> None:
    out = (GOLDEN / "torchao_style.devcaps.py.txt").read_text()
    kept, independent = out.split("def test_kept_for_its_own_reason")[1].split("def test_independent")
    assert "torch.cuda.is_available()" in out.split("def test_kept_for_its_own_reason")[0].rsplit("@", 1)[1]
    assert "torch.accelerator.is_available()" in kept  # the next test's gate was converted


def test_no_fixture_refusals_for_rewrites_that_need_none() -> None:
    for name in FILES:
        result = fix_text((GOLDEN / f"{name}.py.txt").read_text(), f"{name}.py")
        for finding in result.left.findings:
            assert "cannot take the device fixture" not in finding.message
            assert "a helper without a device" not in finding.message


def test_accelerator_only_device_type_class_is_classified() -> None:
    """only_for=("cuda",) -> except_for="cpu": the generic class gets our class decorator, which
    sets hw_classification (instantiate_device_type_tests copies it and the class mark onto
    every generated class); torch 2.13 has no HardwareClassification, so --target torch adds none."""
    out = (GOLDEN / "device_type_style.devcaps.py.txt").read_text()
    assert '@hardware("accelerator")\nclass TestOps(TestCase):' in out
    assert "from pytest_devcaps import hardware" in out
    assert "hardware" not in (GOLDEN / "device_type_style.torch.py.txt").read_text()


def test_hardware_class_decorator_reaches_the_generated_classes(tmp_path: Path) -> None:
    source = (GOLDEN / "device_type_style.devcaps.py.txt").read_text().replace(', except_for="cpu"', "")
    (tmp_path / "test_generated.py").write_text(source)  # instantiated for the CPU too, to be seen here
    assert "except_for" not in source
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                           str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "hardware classes: accelerator 3 (0 without a declared class)" in done.stdout
    # the declared class decides where they run: the CPU instances skip, saying why
    assert "3 skipped" in done.stdout
    assert "hardware class accelerator needs an accelerator; this test's device is cpu" in done.stdout


# -- in-test skips of TestCase methods -----------------------------------------------------------

def _skip_method(*lines: str) -> str:
    body = "".join(f"        {line}\n" for line in lines)
    return HEAD + "from torch.testing._internal.common_cuda import SM89OrLater, TEST_CUDA\n\n\n" \
        f"class T(unittest.TestCase):\n    def test_a(self):\n{body}"


@pytest.mark.parametrize("target", ["devcaps", "torch"])
@pytest.mark.parametrize(("condition", "skip"), [
    ("not TEST_CUDA", 'self.skipTest("needs CUDA")'),
    ("not torch.cuda.is_available()", 'raise unittest.SkipTest("needs CUDA")'),
])
def test_in_test_cuda_skip_becomes_an_accelerator_check_in_place(condition: str, skip: str, target: str) -> None:
    out = fix(_skip_method(f"if {condition}:", f"    {skip}", "x = torch.ones(1)"), target)
    assert f"        if not torch.accelerator.is_available():\n            {skip}\n        x = torch.ones(1)" in out
    assert condition not in out
    if "TEST_CUDA" in condition:
        assert "SM89OrLater\n" in out  # TEST_CUDA's import went with its last use
    assert "pytest_devcaps" not in out


def test_in_test_skip_with_a_mark_moves_to_the_method_when_it_comes_first() -> None:
    out = fix(_skip_method('"""Doc."""', "if not SM89OrLater:", '    self.skipTest("fp8")', "x = 1"))
    assert '    @requires_capability("dtype.fp8_e4m3fn", native=True)\n    def test_a(self):\n' \
           '        """Doc."""\n        x = 1\n' in out
    assert "from pytest_devcaps import requires_capability" in out


def test_in_test_device_count_skip_under_target_torch_skips_in_any_testcase() -> None:
    """common_distributed.skip_if_lt_x_gpu ends a plain TestCase's process (sys.exit(77))."""
    out = fix(_skip_method("if torch.cuda.device_count() < 2:", '    self.skipTest("2 GPUs")', "x = 1"), "torch")
    assert '@unittest.skipIf(torch.accelerator.device_count() < 2, "needs 2 accelerators")' in out
    assert "skip_if_lt_x_gpu" not in out and "self.skipTest" not in out


def test_in_test_skip_after_other_code_keeps_its_place() -> None:
    source = _skip_method("y = torch.ones(1)", "if torch.cuda.device_count() < 2:", '    self.skipTest("2 GPUs")')
    result = fix_text(source, "t.py")
    assert "torch.cuda.device_count() < 2" in result.after
    assert any("a skip after other code in a TestCase method" in f.message for f in result.left.findings)


# -- targets ---------------------------------------------------------------------------------------

#: golden output -> (--target, whether the torch has HardwareClassification): ``torch`` is the
#: output of a torch without it (2.13), ``torch214`` of one with it (PyTorch's TEST_LINTER layout).
GOLDEN_TARGETS = {"devcaps": ("devcaps", False), "torch": ("torch", False), "torch214": ("torch", True)}


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("golden", list(GOLDEN_TARGETS))
def test_golden_output_is_idempotent(name: str, golden: str, monkeypatch: pytest.MonkeyPatch) -> None:
    target, classified = GOLDEN_TARGETS[golden]
    monkeypatch.setattr(layout, "available", lambda: classified)  # whichever torch is installed
    result = fix_text((GOLDEN / f"{name}.py.txt").read_text(), f"{name}.py", target)  # type: ignore[arg-type]
    assert result.after == (GOLDEN / f"{name}.{golden}.py.txt").read_text()
    assert not fix_text(result.after, f"{name}.py", target).changed  # type: ignore[arg-type]
    if target == "torch":
        assert "pytest_devcaps" not in result.after and "pytest" not in result.after.replace("pytest_", "")
    if classified:
        assert linter_errors(result.after) == []
        assert "DC013" in result.counts().fixed  # every class was laid out


@pytest.mark.parametrize("target", [
    "devcaps", "torch",
    pytest.param("torch214", marks=pytest.mark.skipif(
        not layout.available(), reason="the laid-out classes import HardwareClassification (torch 2.14+)"))])
def test_converted_files_collect_and_run_here(target: str, tmp_path: Path) -> None:
    """Every test passes, or skips naming a capability, a device count or an accelerator."""
    for name in FILES:
        (tmp_path / f"test_{name}.py").write_text((GOLDEN / f"{name}.{target}.py.txt").read_text())
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:randomly", "-p", "no:cacheprovider",
                           str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    skips = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skips and " passed" in done.stdout
    words = ("capabilit", "device", "accelerator", "cuda", "fp8", "memory_stats", "streams")
    for line in skips:
        assert any(w in line.lower() for w in words), line


# -- workflow --------------------------------------------------------------------------------------

def _files(tmp_path: Path) -> Path:
    path = tmp_path / "t.py"
    path.write_text(method("torch.cuda.synchronize()"))
    return path


def test_fix_check_exits_1_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _files(tmp_path)
    before = path.read_text()
    monkeypatch.chdir(tmp_path)
    assert main(["lint", "--fix", "--check", "t.py"]) == 1
    assert path.read_text() == before
    assert main(["lint", "--fix", "t.py"]) == 0
    assert main(["lint", "--fix", "--check", "t.py"]) == 0


def test_fix_check_passes_once_fixed_though_findings_are_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """--fix --check asks whether --fix would change anything (CI, pre-commit): what --fix leaves
    is reported but does not fail it (plain ``devcaps lint`` still exits 1 for it)."""
    path = tmp_path / "t.py"
    path.write_text(method("torch.cuda.synchronize()\n        torch.cuda.get_device_properties(0)"))
    monkeypatch.chdir(tmp_path)
    assert main(["lint", "--fix", "--check", "t.py"]) == 1
    assert main(["lint", "--fix", "t.py"]) == 1  # get_device_properties is left
    capsys.readouterr()
    assert main(["lint", "--fix", "--check", "t.py"]) == 0
    captured = capsys.readouterr()
    assert "DC004 `torch.cuda.get_device_properties()`" in captured.out and "left 1 (DC004 1)" in captured.err
    assert main(["lint", "t.py"]) == 1


def test_fix_writes_through_the_safe_writer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--fix keeps a CRLF file with a byte-order mark as it was (lint.writer) and its mode."""
    path = tmp_path / "t.py"
    path.write_bytes(b"\xef\xbb\xbf" + method("torch.cuda.synchronize()").replace("\n", "\r\n").encode())
    path.chmod(0o640)
    assert main(["lint", "--fix", str(tmp_path)]) == 0
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf") and b"torch.get_device_module(device_type).synchronize()\r\n" in data
    assert data.count(b"\n") == data.count(b"\r\n")
    assert path.stat().st_mode & 0o777 == 0o640


def test_fix_never_writes_through_a_link_out_of_the_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outside, tree = tmp_path / "outside", tmp_path / "tree"
    outside.mkdir()
    tree.mkdir()
    (outside / "t.py").write_text(method("torch.cuda.synchronize()"))
    (tree / "t.py").symlink_to(outside / "t.py")
    assert main(["lint", "--fix", str(tree)]) == 2
    assert (outside / "t.py").read_text() == method("torch.cuda.synchronize()")
    assert "outside" in capsys.readouterr().err


def test_fix_never_touches_an_unparsable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bad.py").write_text("def f(:\n    torch.cuda.synchronize()\n")
    monkeypatch.chdir(tmp_path)
    assert main(["lint", "--fix", "bad.py"]) == 2
    assert (tmp_path / "bad.py").read_text() == "def f(:\n    torch.cuda.synchronize()\n"


def test_fix_reports_per_file_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    _files(tmp_path)
    monkeypatch.chdir(tmp_path)
    main(["lint", "--fix", "--check", "t.py"])
    assert "t.py: found 1 (DC004 1); fixed 1 (DC004 1); left 0" in capsys.readouterr().err
    main(["lint", "--fix", "--check", "--format", "json", "t.py"])
    document = json.loads(capsys.readouterr().out)
    assert document["migration"] == [{"path": "t.py", "found": {"DC004": 1}, "fixed": {"DC004": 1}, "left": {},
                                      "new": {}, "totals": {"found": 1, "fixed": 1, "left": 0, "new": 0}}]


def test_pre_commit_hooks_run_devcaps_lint() -> None:
    text = (GOLDEN.parents[2] / ".pre-commit-hooks.yaml").read_text()
    assert "entry: devcaps lint --fix" in text and "id: devcaps-lint" in text


# -- pytest-style files under --target torch (issue 18: the output runs without this plugin) ----

PYTEST_STYLE = '''\
import pytest
import torch


@pytest.fixture
def weights():
    return torch.ones(3, device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gated(weights):
    x = torch.zeros(3, device="cuda")
    torch.cuda.synchronize()
    assert (x + weights).sum().item() == 3.0


def test_plain():
    y = torch.ones(3).cuda()
    z = torch.ones(3, device=torch.device("cuda"))
    assert (y + z).sum().item() == 6.0
'''


def test_pytest_style_file_under_target_torch_uses_device_type_not_the_fixture(tmp_path: Path) -> None:
    out = fix_text(PYTEST_STYLE, "test_p.py", "torch").after
    compile(out, "test_p.py", "exec")
    assert "pytest_devcaps" not in out and "device_runtime" not in out
    assert "def weights():" in out and "def test_gated(weights):" in out and "def test_plain():" in out
    assert out.count(DEVICE_TYPE) == 1
    assert "torch.ones(3).to(device_type)" in out and "torch.device(device_type)" in out
    assert "torch.get_device_module(device_type).synchronize()" in out and "cuda" not in out
    assert not fix_text(out, "test_p.py", "torch").changed
    (tmp_path / "test_p.py").write_text(out)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:devcaps", "-p", "no:randomly",
                           "-p", "no:cacheprovider", "test_p.py"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "error" not in done.stdout.lower()
    # test_plain runs on whatever device there is; test_gated skips without an accelerator
    ran = torch_accelerator_present()
    assert ("2 passed" if ran else "1 passed, 1 skipped") in done.stdout, done.stdout[-3000:]


def torch_accelerator_present() -> bool:
    import torch

    return bool(torch.accelerator.is_available())


def test_pytest_style_file_under_target_devcaps_keeps_the_device_fixture() -> None:
    out = fix_text(PYTEST_STYLE, "test_p.py", "devcaps").after
    assert "def weights(device):" in out and "def test_plain(device):" in out
    assert "device_runtime" in out and DEVICE_TYPE not in out
