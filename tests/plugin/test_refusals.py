"""What the plugin refuses: every input that would otherwise change nothing, silently.

One test per class: --devcaps-require names, absent or duplicated device types, marker
arguments, timeouts, the JSON report path, and config-time warnings under ``-W error``.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from pytest_devcaps.errors import ConfigError, MarkerError, short_repr
from pytest_devcaps.marks.evaluation import MAX_SIZE, parse_size
from pytest_devcaps.model import KNOWN_DEVICE_TYPES
from pytest_devcaps.registry import RegistryOptions, discover
from pytest_devcaps._util.durations import MAX_PROBE_TIMEOUT, check_probe_timeout, parse_seconds

USAGE_ERROR = pytest.ExitCode.USAGE_ERROR

# -- --devcaps-require ------------------------------------------------------------------------


@pytest.mark.parametrize("surface", ["option", "env", "ini"])
def test_unknown_required_capability_is_a_usage_error_naming_its_source(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, surface: str) -> None:
    pytester.makepyfile("def test_x(): pass")
    args: list[str] = []
    if surface == "option":
        args.append("--devcaps-require=dtype.bf16,runtime.memory_stat")
        source = "--devcaps-require"
    elif surface == "env":
        monkeypatch.setenv("PYTEST_DEVCAPS_REQUIRE", "runtime.memory_stat")
        source = "PYTEST_DEVCAPS_REQUIRE environment variable"
    else:
        pytester.makeini("[pytest]\ndevcaps_require = runtime.memory_stat\n")
        source = "ini option devcaps_require in *"
    result = pytester.runpytest(*args)
    assert result.ret == USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: pytest-devcaps: {source}: unknown capability "
                                 "'runtime.memory_stat' (did you mean 'runtime.memory_stats'?)"])


def test_required_capability_inside_any_of_is_enforced(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.requires_capability(any_of=["dtype.fp8_e4m3fn", "dtype.fp8_e4m3fnuz"])
        def test_any_fp8(device):
            pass

        @pytest.mark.requires_capability(any_of=["runtime.graphs", "dtype.tf32"])
        def test_other(device):
            pass
        """
    )
    result = pytester.runpytest("-rsE", "--devcaps-devices=cpu", "--devcaps-require=dtype.fp8_e4m3fn",
                                "--devcaps-set=dtype.fp8_e4m3fn=unsupported",
                                "--devcaps-set=dtype.fp8_e4m3fnuz=unsupported",
                                "--devcaps-set=runtime.graphs=unsupported", "--devcaps-set=dtype.tf32=unsupported")
    # The any_of holding the required capability errors; the other one still only skips.
    result.assert_outcomes(errors=1, skipped=1)
    result.stdout.fnmatch_lines(["*ERROR at setup of test_any_fp8?cpu?*",
                                 "dtype.fp8_e4m3fn required on this runner (--devcaps-require) but: "
                                 "requires any of dtype.fp8_e4m3fn, dtype.fp8_e4m3fnuz on cpu: *"])


def test_required_skip_is_an_error_at_setup_not_a_failure(pytester: pytest.Pytester,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(
        """
        import pytest, torch

        @pytest.mark.dtypes(torch.float32, torch.bfloat16)
        def test_dtype(device, dtype):
            pass

        def test_backend(dist_backend):
            pass
        """
    )
    monkeypatch.setenv("PYTEST_DEVCAPS_REQUIRE", "dtype.bf16,dist.gloo")
    result = pytester.runpytest("-rE", "--devcaps-devices=cpu", "--devcaps-set=dtype.bf16=unsupported",
                                "--devcaps-set=dist.gloo=unsupported")
    # The dtype parameter and the dist_backend fixture are held to it as markers are.
    result.assert_outcomes(passed=1, errors=2, failed=0)
    result.stdout.fnmatch_lines([
        "*ERROR at setup of test_dtype?cpu-bfloat16?*",
        "dtype.bf16 required on this runner (PYTEST_DEVCAPS_REQUIRE environment variable) but: "
        "requires dtype.bf16 on cpu: unsupported*",
        "*ERROR at setup of test_backend?cpu?*",
        "dist.gloo required on this runner (PYTEST_DEVCAPS_REQUIRE environment variable) but: *",
    ])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


# -- --devcaps-devices ------------------------------------------------------------------------

DEVICE_TEST = "def test_where(device):\n    pass\n"


def test_absent_device_type_is_a_usage_error(pytester: pytest.Pytester) -> None:
    # Before, the test got id [NOTSET] and the skip "got empty parameter set", exit 0.
    present = {identity.type for identity in discover()}
    absent = next(t for t in KNOWN_DEVICE_TYPES if t not in present)
    pytester.makepyfile(DEVICE_TEST)
    result = pytester.runpytest(f"--devcaps-devices=cpu,{absent}")
    assert result.ret == USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: pytest-devcaps: --devcaps-devices: device type '{absent}' is not "
                                 "present on this machine (present: cpu*); leave the option unset *"])
    result.stdout.no_fnmatch_line("*NOTSET*")


def test_duplicate_device_types_run_once(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(DEVICE_TEST)
    result = pytester.runpytest("-v", "--devcaps-devices=cpu, cpu,cpu")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*devcaps: reproduce with: --devcaps-devices=cpu"])


def test_device_list_that_names_nothing_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(DEVICE_TEST)
    result = pytester.runpytest("--devcaps-devices=,")
    assert result.ret == USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: pytest-devcaps: --devcaps-devices: ',' names nothing"])


def test_set_for_a_device_that_matches_nothing_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(DEVICE_TEST)
    result = pytester.runpytest("--devcaps-set=dtype.bf16=unsupported@cpuu")
    assert result.ret == USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: pytest-devcaps: command line: dtype.bf16@cpuu: no device here "
                                 "matches 'cpuu' (did you mean 'cpu'?); devices: cpu*"])
    # A device type or key that is present still works.
    pytester.runpytest("--devcaps-set=dtype.bf16=unsupported@cpu").assert_outcomes(passed=1)


# -- marker arguments -------------------------------------------------------------------------

BAD_MARKS = {
    "native_not_bool": ('@pytest.mark.requires_capability("dtype.bf16", native="no")',
                        "requires_capability: native= must be True or False, got 'no'"),
    "unknown_keyword": ('@pytest.mark.requires_memory("1GiB", per_alloc="1GiB")',
                        "requires_memory: unexpected keyword argument 'per_alloc' (did you mean "
                        "'per_allocation'?); it takes per_allocation=, free="),
    "keyword_on_positional_marker": ("@pytest.mark.requires_devices(2, per_device=1)",
                                     "requires_devices: unexpected keyword argument 'per_device'; "
                                     "it takes no keyword arguments"),
    "devices_bool": ("@pytest.mark.requires_devices(True)",
                     "requires_devices: count must be a positive int, got True"),
    "devices_two_args": ("@pytest.mark.requires_devices(1, 2)",
                         "requires_devices: takes one device count, got 2 positional arguments"),
    "ranks_bool": ("@pytest.mark.requires_ranks(True)",
                   "requires_ranks: count must be a positive int, got True"),
    "ranks_zero": ("@pytest.mark.requires_ranks(0)", "requires_ranks: count must be a positive int, got 0"),
    "ranks_string": ("@pytest.mark.requires_ranks('2')",
                     "requires_ranks: count must be a positive int, got '2'"),
    "ranks_keyword": ("@pytest.mark.requires_ranks(2, world_size=2)",
                      "requires_ranks: unexpected keyword argument 'world_size'; it takes no keyword "
                      "arguments"),
    "memory_bool": ("@pytest.mark.requires_memory(True)",
                    "requires_memory: size must be a size like '24GiB' or a positive int of bytes, got True"),
    "memory_huge_text": ("@pytest.mark.requires_memory('9' * 400 + 'TiB')",
                         "requires_memory: size must be more than 0 bytes and at most 16EiB *, "
                         "got '999*...*TiB'"),
    "memory_huge_int": ("@pytest.mark.requires_memory(10 ** 5000)",
                        "requires_memory: size must be more than 0 bytes and at most 16EiB *, "
                        "got <int too large to show>"),
    "memory_inf": ("@pytest.mark.requires_memory(float('inf'))",
                   "requires_memory: size must be a size like '24GiB' *, got inf"),
    "memory_nan_keyword": ("@pytest.mark.requires_memory('1GiB', per_allocation=float('nan'))",
                           "requires_memory: per_allocation= must be a size like '24GiB' *, got nan"),
    "memory_zero": ("@pytest.mark.requires_memory('0GiB')",
                    "requires_memory: size must be more than 0 bytes *, got '0GiB'"),
    "dtypes_string": ("@pytest.mark.dtypes('float32')",
                      "dtypes: argument 1 must be a torch.dtype, got 'float32' (write torch.float32)"),
    "dtypes_int": ("@pytest.mark.dtypes(torch.float32, 5)",
                   "dtypes: argument 2 must be a torch.dtype, got 5"),
    "dtypes_none": ("@pytest.mark.dtypes(None)", "dtypes: argument 1 must be a torch.dtype, got None"),
    "dtypes_empty": ("@pytest.mark.dtypes()", "dtypes: needs at least one torch.dtype"),
    "any_of_string": ("@pytest.mark.requires_capability(any_of='dtype.bf16')",
                      "requires_capability: any_of= must be a list of capability names, got "
                      "'dtype.bf16' (write any_of=?'dtype.bf16'?)"),
    "any_of_int": ("@pytest.mark.requires_capability(any_of=5)",
                   "requires_capability: any_of= must be a non-empty list of capability names, got 5"),
    "any_of_empty": ('@pytest.mark.requires_capability("dtype.bf16", any_of=[])',
                     "requires_capability: any_of= must be a non-empty list of capability names, got []"),
    "capability_not_a_name": ("@pytest.mark.requires_capability(5)",
                              "requires_capability: argument 1 must be a capability name or a list of "
                              "them, got 5"),
    "capability_typo_in_any_of": ("@pytest.mark.requires_capability(any_of=['dtype.bf61'])",
                                  "requires_capability: any_of=: unknown capability 'dtype.bf61' (did "
                                  "you mean 'dtype.bf16'?)"),
}


@pytest.mark.parametrize("case", sorted(BAD_MARKS))
def test_bad_marker_argument_errors_the_test_naming_marker_and_argument(
        pytester: pytest.Pytester, case: str) -> None:
    mark, message = BAD_MARKS[case]
    pytester.makepyfile(f"import pytest, torch\n\n{mark}\ndef test_it(device, dtype):\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # that test errors, as under skipif
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*test_it: {message}"])
    result.stdout.no_fnmatch_line("*Traceback*")


def test_dtypes_on_a_test_without_dtype_fixture_is_a_collection_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_own_mark="""
        import pytest, torch

        @pytest.mark.dtypes(torch.float32, torch.bfloat16)
        def test_forgot_dtype(device):
            pass
        """,
        # A module's (or class's) mark serves the tests that take a dtype; the others ignore it.
        test_module_mark="""
        import pytest, torch

        pytestmark = pytest.mark.dtypes(torch.float32, torch.float64)

        def test_with_dtype(dtype):
            pass

        def test_without_dtype():
            pass
        """,
    )
    result = pytester.runpytest("--continue-on-collection-errors")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["*test_forgot_dtype: dtypes: the test takes no 'dtype' argument, so the "
                                 "mark would parametrize nothing*"])


def test_bad_marks_on_unittest_classes_error_at_setup(pytester: pytest.Pytester) -> None:
    """unittest classes are collected without pytest_generate_tests: their bad marks still fail."""
    pytester.makepyfile(
        """
        import unittest
        import pytest

        class TestCase(unittest.TestCase):
            @pytest.mark.requires_memory("lots")
            def test_memory(self):
                pass

            @pytest.mark.requires_capability("dtype.fp64")
            def test_fine(self):
                pass
        """
    )
    result = pytester.runpytest("-rE")
    result.assert_outcomes(errors=1, passed=1)
    result.stdout.fnmatch_lines(["*ERROR at setup of TestCase.test_memory*",
                                 "*::TestCase::test_memory: requires_memory: size must be a size like '24GiB'*, got 'lots'"])


def test_parse_size_bounds() -> None:
    assert parse_size("16TiB") == 16 * 2**40 and parse_size("1.5 kb") == 1500
    assert parse_size(MAX_SIZE) == MAX_SIZE
    for bad in (MAX_SIZE + 1, 0, -1, True, 1.5, "1e3GiB", "inf", "nan", "-1GiB", None):
        with pytest.raises(MarkerError, match="^requires_memory: size must be"):
            parse_size(bad)


# -- timeouts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "0", "-5", "soon", "1e400", "", True, None, 10**5000,
                                   threading.TIMEOUT_MAX * 2], ids=short_repr)
def test_parse_seconds_refuses_what_is_not_a_finite_positive_duration(value: object) -> None:
    with pytest.raises(ConfigError, match="^SRC: must be a finite number of seconds above 0 and at most"):
        parse_seconds(value, "SRC")


def test_parse_seconds_accepts_durations_up_to_its_maximum() -> None:
    assert [parse_seconds(v, "s") for v in ("2.5", " 3 ", 4, 0.25)] == [2.5, 3.0, 4.0, 0.25]
    assert check_probe_timeout("86400") == MAX_PROBE_TIMEOUT
    with pytest.raises(ConfigError, match="^--x: .* at most 86400, got '86401'$"):
        check_probe_timeout("86401", source="--x")


@pytest.mark.parametrize("value", [float("inf"), "10"], ids=short_repr)
def test_registry_options_check_their_timeout(value: object) -> None:
    with pytest.raises(ConfigError, match="^probe_timeout: (must be a finite|expected a number)"):
        RegistryOptions(probe_timeout=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("surface", ["option", "env", "ini"])
def test_probe_timeout_is_checked_on_every_surface(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                   surface: str) -> None:
    pytester.makepyfile("def test_x(): pass")
    args: list[str] = []
    if surface == "option":
        args.append("--devcaps-probe-timeout=inf")
        source, value = "--devcaps-probe-timeout", "inf"
    elif surface == "env":
        monkeypatch.setenv("PYTEST_DEVCAPS_PROBE_TIMEOUT", "nan")
        source, value = "PYTEST_DEVCAPS_PROBE_TIMEOUT environment variable", "nan"
    else:
        pytester.makeini("[pytest]\ndevcaps_probe_timeout = -5\n")
        source, value = "ini option devcaps_probe_timeout in *", "-5"
    result = pytester.runpytest(*args)
    assert result.ret == USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: pytest-devcaps: {source}: must be a finite number of seconds "
                                 f"above 0 and at most 86400, got '{value}'"])


# -- the JSON report path ---------------------------------------------------------------------


def test_json_path_that_is_a_directory_or_under_a_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    pytester.mkdir("reports")
    pytester.makefile(".txt", notes="x")
    for path, message in (("reports", "'reports' exists and is a directory*"),
                          ("notes.txt/r.json", "'notes.txt' is not a directory*"),
                          ("", "needs a file path")):
        result = pytester.runpytest(f"--devcaps-json={path}")
        assert result.ret == USAGE_ERROR, path
        result.stderr.fnmatch_lines([f"ERROR: pytest-devcaps: --devcaps-json: {message}"])


def test_json_path_that_is_a_device_node_is_refused_untouched(pytester: pytest.Pytester) -> None:
    if not stat.S_ISCHR(os.stat(os.devnull).st_mode):
        pytest.skip(f"{os.devnull} is not a character device on this platform")
    before = os.stat(os.devnull)
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest(f"--devcaps-json={os.devnull}")
    assert result.ret == USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: *--devcaps-json: '{os.devnull}' exists and is not a regular file*"])
    after = os.stat(os.devnull)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)


def test_json_path_that_turns_bad_during_the_run_is_an_error_not_a_traceback(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import os

        def test_makes_the_report_path_a_folder():
            os.mkdir("report.json")
        """
    )
    result = pytester.runpytest_subprocess("--devcaps-json=report.json")
    assert result.ret == USAGE_ERROR
    result.stdout.fnmatch_lines(["ERROR: pytest-devcaps: --devcaps-json: cannot write 'report.json': *"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert Path(pytester.path, "report.json").is_dir()


# -- config-time warnings ---------------------------------------------------------------------

BROKEN_BACKEND = """
class Broken:
    type = "npu"
    visible_devices_variable = None
    def is_available(self):
        raise RuntimeError("driver exploded")
    def discover(self):
        return []

def pytest_devcaps_register_backends(registrar):
    registrar.add(Broken())
"""


def test_config_time_warning_is_a_pytest_warning_in_the_summary(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(BROKEN_BACKEND)
    pytester.makepyfile("def test_x(device): pass")  # a test that needs the registry builds it
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*warnings summary*", "*DevcapsConfigWarning: pytest-devcaps: skipping the "
                                 "npu backend: RuntimeError: driver exploded"])
    quiet = pytester.runpytest_subprocess("-W", "ignore::pytest_devcaps.errors.DevcapsWarning")
    quiet.assert_outcomes(passed=1)
    quiet.stdout.no_fnmatch_line("*driver exploded*")


def test_config_time_warning_under_w_error_is_a_usage_error_not_internalerror(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(BROKEN_BACKEND)
    pytester.makepyfile("def test_x(device): pass")
    result = pytester.runpytest_subprocess("-W", "error")
    assert result.ret == USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: pytest-devcaps: skipping the npu backend: "
                                 "RuntimeError: driver exploded (a warning, made an error by -W or "
                                 "filterwarnings)"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_required_alias_is_enforced_as_the_capability_it_names(pytester: pytest.Pytester) -> None:
    # dtype.fp8 is PyTorch's name (PLATFORM_SUPPORTS_FP8) for what our catalogue calls mm.scaled:
    # requiring the alias must hold tests to mm.scaled, whichever name the test used.
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.requires_capability("mm.scaled")
        def test_real_name(device):
            pass

        @pytest.mark.requires_capability("dtype.fp8")
        def test_alias(device):
            pass
        """
    )
    result = pytester.runpytest("-rE", "--devcaps-devices=cpu", "--devcaps-require=dtype.fp8",
                                "--devcaps-set=mm.scaled=unsupported")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*mm.scaled required on this runner (--devcaps-require) but: *"])


def test_marks_checked_once_per_session_still_fail_every_test_they_do_not_fit(pytester: pytest.Pytester) -> None:
    """Marks that passed are not checked again for the next test with the same marks (a cost per
    test), but the same marks on a test they do not fit, and a typo repeated, fail each module."""
    header = "import pytest, torch\n\nDTYPES = pytest.mark.dtypes(torch.float32)\n"
    pytester.makepyfile(
        test_a=header + "@DTYPES\ndef test_fits(dtype):\n    pass\n\n@DTYPES\ndef test_fits_too(dtype):\n    pass\n",
        test_b=header + "@DTYPES\ndef test_no_dtype_argument(device):\n    pass\n",
        test_c=header + "@pytest.mark.requires_capability('dtype.bf61')\ndef test_typo(device):\n    pass\n",
        test_d=header + "@pytest.mark.requires_capability('dtype.bf61')\ndef test_same_typo(device):\n    pass\n",
    )
    result = pytester.runpytest("--continue-on-collection-errors", "-p", "no:randomly")
    result.assert_outcomes(passed=2, errors=3)
    result.stdout.fnmatch_lines_random(["*test_no_dtype_argument: dtypes: the test takes no 'dtype'*",
                                        "*test_typo: *dtype.bf61*", "*test_same_typo: *dtype.bf61*"])
