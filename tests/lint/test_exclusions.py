"""Issue 27, "Precision": a gate that only takes devices away from a test that runs elsewhere
(torchao's ``skip_if_rocm``, PyTorch's ``skipIfRocm``, ``torch.cuda.is_available() and not
is_sm_at_least_90()``) is rewritten as ``skip_on`` of the same condition over device facts, so
exactly the devices it skipped skip (the author's reason kept); a gate that keeps a test on CUDA
is not (that is a kept gate, never "fixed"), nor one the facts cannot say exactly."""

from __future__ import annotations

import ast
import textwrap

import pytest

pytest.importorskip("libcst", reason="--fix needs the lint extra (pytest-devcaps[lint])")
from pytest_devcaps.config.expressions import compile_expression  # noqa: E402
from pytest_devcaps.config.facts import builtin_vocabulary  # noqa: E402
from pytest_devcaps.lint import layout, rules  # noqa: E402
from pytest_devcaps.lint.gating import FixedUses, classify, fact_condition, generic_atom, only_excludes  # noqa: E402
from tests.lint._fixing import fix, left  # noqa: E402


def facts_of(condition: str, holds: bool = True) -> str | None:
    def atom_of(e: ast.expr):  # type: ignore[no-untyped-def]
        return classify(e, FixedUses(), in_condition=True) or generic_atom(e)
    return fact_condition(ast.parse(condition, mode="eval").body, holds, atom_of)


ROCM_SKIP = """\
    import pytest
    import torch
    from torchao.testing.utils import skip_if_rocm


    @skip_if_rocm("ROCm enablement in progress")
    def test_a():
        assert torch.ones(2).sum() == 2
    """

SM90_REFINEMENT = """\
    import unittest

    import torch
    from torchao.utils import is_sm_at_least_90


    class TestGemm(unittest.TestCase):
        @unittest.skipIf(not torch.accelerator.is_available(), "GPU not available")
        @unittest.skipIf(
            torch.cuda.is_available() and not is_sm_at_least_90(),
            "Requires CUDA capability >= 9.0",
        )
        def test_axiswise(self):
            device = torch.accelerator.current_accelerator()
            self.assertEqual(torch.ones(2, device=device).sum().item(), 2)
    """


def test_a_rocm_exclusion_becomes_skip_on_the_amd_vendor_with_its_message() -> None:
    assert fix(ROCM_SKIP) == textwrap.dedent("""\
        import pytest
        import torch


        @pytest.mark.skip_on("vendor == 'amd'", reason="ROCm enablement in progress")
        def test_a():
            assert torch.ones(2).sum() == 2
        """)
    assert left(ROCM_SKIP) == []


def test_pytorchs_skip_if_rocm_in_a_testcase_is_our_decorator_of_that_mark() -> None:
    out = fix("""\
        import torch
        from torch.testing._internal.common_utils import TestCase, skipIfRocm


        class T(TestCase):
            @skipIfRocm
            def test_a(self):
                self.assertEqual(torch.ones(2).sum().item(), 2)
        """)
    assert "from pytest_devcaps import skip_on" in out and "    @skipIfRocm\n" not in out
    assert "import TestCase\n" in out  # the orphaned import went
    assert '    @skip_on("vendor == \'amd\'", reason="where @skipIfRocm skipped")\n    def test_a(self):' in out


def test_an_architecture_floor_on_cuda_devices_becomes_that_condition() -> None:
    """The sm_90 floor is not a capability's threshold (fp8 is sm_89): it is kept exactly, as a
    condition, not mapped to a capability and not widened."""
    out = fix(SM90_REFINEMENT)
    assert ('        @skip_on(\n' not in out and
            '    @skip_on("type == \'cuda\' and not (vendor == \'nvidia\' and compute_capability >= 9.0)", '
            'reason="Requires CUDA capability >= 9.0")\n    def test_axiswise(self):' in out)
    assert "is_sm_at_least_90" not in out  # its import went with its last use
    assert '@unittest.skipIf(not torch.accelerator.is_available(), "GPU not available")' in out
    assert left(SM90_REFINEMENT) == []


# Where the torchao gate let the test run, by the hardware of each profile: NVIDIA from sm_90
# (torchao's is_sm_at_least_90() needs a CUDA build, so no ROCm device passes it), and every
# device that is not CUDA's (the gate asked torch.cuda.is_available() first).
SM90_RUNS = {"nvidia-h100": True, "nvidia-b200": True, "nvidia-l4": False, "nvidia-a100": False,
             "amd-mi300x": False, "intel-max-1550": True, "apple-m3": True, "habana-gaudi2": True}
# skip_if_rocm: every ROCm device skips, nothing else does.
ROCM_RUNS = {"nvidia-h100": True, "amd-mi300x": False, "amd-rx7900xtx": False, "intel-max-1550": True,
             "apple-m3": True}


@pytest.mark.parametrize(("source", "profile", "runs"),
                         [(SM90_REFINEMENT, p, r) for p, r in SM90_RUNS.items()]
                         + [(ROCM_SKIP, p, r) for p, r in ROCM_RUNS.items()])
def test_the_rewritten_exclusion_skips_where_the_gate_skipped(source: str, profile: str, runs: bool,
                                                              pytester: pytest.Pytester) -> None:
    """The mark the rewrite writes, planned on simulated vendors (``--devcaps-profile``; the
    bodies touch no device): it skips exactly where the original gate skipped."""
    out = fix(source)
    marks = [line.strip() for line in out.splitlines() if "skip_on(" in line]
    assert len(marks) == 1
    mark = marks[0].removeprefix("@").removeprefix("pytest.mark.")
    pytester.makepyfile(test_x=f"import pytest\n\n\n@pytest.mark.{mark}\ndef test_x():\n    pass\n")
    result = pytester.runpytest("-p", "no:randomly", f"--devcaps-profile={profile}")
    if runs:
        result.stdout.fnmatch_lines([f"1 would run, 0 would be skipped on {profile}*"])
    else:
        result.stdout.fnmatch_lines(["SKIP test_x.py::test_x: skip_on(*) holds on *",
                                     f"0 would run, 1 would be skipped on {profile}*"])


def test_on_this_cpu_the_rewritten_exclusions_run_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x=fix(ROCM_SKIP).replace("from torchao.testing.utils import skip_if_rocm\n", ""))
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=1)


@pytest.mark.parametrize("gate", [
    "not is_sm_at_least_90()",              # runs on NVIDIA sm_90+ only: it keeps the test on CUDA
    "not torch.cuda.is_available()",        # "needs CUDA": decided as every availability gate
    "not (is_sm_at_least_89() or is_MI300())",
])
def test_a_gate_that_keeps_the_test_on_cuda_is_not_an_exclusion(gate: str) -> None:
    skip = facts_of(gate)
    assert skip is not None and not only_excludes(skip)


def test_a_restricting_architecture_gate_stays_and_is_left() -> None:
    source = """\
        import pytest
        import torch
        from torchao.utils import is_sm_at_least_90


        @pytest.mark.skipif(not is_sm_at_least_90(), reason="needs sm90")
        def test_a():
            assert torch.ones(2).cuda().sum() == 2
        """
    out = fix(source)
    assert "@pytest.mark.skipif(not is_sm_at_least_90()" in out and "skip_on" not in out
    assert any(f.startswith("DC006") for f in left(source))


@pytest.mark.parametrize("decorator", ['skipIfRocmVersionLessThan((6, 2))', 'skipIfRocmArch(("gfx942",))'])
def test_a_rocm_skip_on_some_versions_or_arches_is_not_read_as_every_rocm_device(decorator: str) -> None:
    source = f"""\
        import torch
        from torch.testing._internal.common_utils import TestCase, {decorator.split("(")[0]}


        class T(TestCase):
            @{decorator}
            def test_a(self):
                self.assertTrue(torch.ones(1).item())
        """
    assert f"@{decorator}" in fix(source)
    assert "skip_on" not in fix(source)


def test_under_target_torch_an_exclusion_stays_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a torch that has no HardwareClassification (2.13) nothing else changes either."""
    monkeypatch.setattr(layout, "available", lambda: False)
    assert fix(ROCM_SKIP, "torch") == textwrap.dedent(ROCM_SKIP)
    assert fix(SM90_REFINEMENT, "torch") == textwrap.dedent(SM90_REFINEMENT)


def test_under_target_torch_with_classification_the_exclusion_stays_while_the_class_is_laid_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch with HardwareClassification (2.14+) gets the class classified and instantiated
    (PyTorch's TEST_LINTER asks for both), and the exclusion gate still stays word for word."""
    monkeypatch.setattr(layout, "available", lambda: True)
    out = fix(SM90_REFINEMENT, "torch")
    gates = ('    @unittest.skipIf(not torch.accelerator.is_available(), "GPU not available")\n'
             "    @unittest.skipIf(\n"
             "        torch.cuda.is_available() and not is_sm_at_least_90(),\n"
             '        "Requires CUDA capability >= 9.0",\n'
             "    )\n")
    assert gates in out
    assert "skip_on" not in out
    assert "hw_classification = HardwareClassification.ACCELERATOR" in out
    assert 'instantiate_device_type_tests(TestGemm, globals(), except_for="cpu")' in out


@pytest.mark.parametrize(("condition", "facts"), [
    ("torch.version.hip is not None", "vendor == 'amd'"),
    ("torch.version.hip is None", "not vendor == 'amd'"),
    ("is_ROCM() and is_MI300()", "vendor == 'amd' and arch in ('gfx940', 'gfx941', 'gfx942')"),
    ("is_sm_at_least_100()", "vendor == 'nvidia' and compute_capability >= 10.0"),
    ("torch.cuda.is_available() and not is_sm_at_least_89()",
     "type == 'cuda' and not (vendor == 'nvidia' and compute_capability >= 8.9)"),
])
def test_conditions_read_as_device_facts(condition: str, facts: str) -> None:
    assert facts_of(condition) == facts


@pytest.mark.parametrize("condition", [
    "SM90OrLater",                            # PyTorch's also holds on ROCm (gfx versions)
    "torch.cuda.get_device_capability() >= (9, 0)",
    "is_sm_at_least_90() and HAS_FOO",        # a part that is no device gate
    "TEST_CUDA_GRAPH",                        # CUDA and a capability
])
def test_conditions_the_facts_cannot_say_exactly_have_none(condition: str) -> None:
    assert facts_of(condition) is None


def test_every_fact_the_rules_write_is_a_known_device_fact() -> None:
    """The conditions the rewrite writes compile against the fact vocabulary a session uses (a
    misspelled fact would fail the converted test's collection)."""
    vocabulary = builtin_vocabulary()
    written = [rules.ON_CUDA, rules.ON_ROCM, rules.ON_NVIDIA, rules.sm_at_least_fact(89)]
    written += [fact for name in rules.AMD_MODEL_ARCHES if (fact := rules.amd_model_fact(f"is_{name}")) is not None]
    for text in written:
        compile_expression(text, facts=vocabulary)


def test_fairscales_cpu_only_skip_is_an_exclusion_of_cuda_devices() -> None:
    """fairscale's ``skip_if_cuda`` (fair_dev/testing/testing.py: ``skipif(torch.cuda.is_available(),
    "Testing only on CPUs to save time")``) skips where CUDA is and runs everywhere else."""
    out = fix("""\
        import torch
        from fairscale.fair_dev.testing.testing import skip_if_cuda


        @skip_if_cuda
        def test_cpu_path():
            assert torch.ones(2).sum() == 2
        """)
    assert '@pytest.mark.skip_on("type == \'cuda\'", reason="where @skip_if_cuda skipped")\ndef test_cpu_path():' in out
    assert "import pytest\n" in out and "skip_if_cuda\n" not in out
