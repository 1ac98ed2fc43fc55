"""Adversarial inputs that need no GPU, for real: kernels that must be stopped at the build
(a compile error, a compile that does not end) through the pipeline with a real nvcc, the
premises of the GPU-only adversarial kernels (they build, and they reach the GPU with the
launch that must fail), and bad input through the command line.

Cases already covered elsewhere are not repeated here: the spec loader's one-sentence errors
(tests/test_spec.py: unknown top-level key, wrong entry, unknown dtype of an array, zero or
negative or non-integer timing size, one verify set, unknown name in grid or shape, bad role,
bad dist, low >= high, four block dimensions, non-positive block, nothing to verify, malformed
TOML, fewer args than parameters, pointer/scalar swap, dtype and const mismatches, missing
kernel) and `optiml eval`'s (tests/test_cli.py: missing kernel, missing spec, dtype complex64,
wrong entry, an unclosed [[args).
"""
import math
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from optiml.build import NvccBuilder
from optiml.cli import main
from optiml.verify.harness import HarnessResult
from tests.fakes import FakeHarness
from tests.conftest import assert_one_sentence_error
from tests.data.adversarial import cases as adv
from tests.test_spec import KERNEL, SPEC, write

ARCH = "sm_90"
CPU_CASES = [c for c in adv.CASES if not c.gpu]
GPU_CASES = [c for c in adv.CASES if c.gpu]
SM90_REGISTERS_PER_BLOCK = 65536
SM90_MAX_SHARED_PER_BLOCK = 227 * 1024


class FakeHarnessThatMustNotRun(FakeHarness):
    """A harness for cases that must be stopped before the GPU: reaching it fails the test."""

    def run(self, job):
        pytest.fail(f"{job.candidate.cubin_path} reached the GPU harness; it should have been stopped at the build")


class RecordingFakeHarness(FakeHarness):
    """Records the jobs that reach it and answers 'ok' without a GPU."""

    def __init__(self):
        self.jobs = []

    def run(self, job):
        self.jobs.append(job)
        return HarnessResult("ok", message="fake harness: not run")


# --------------------------------------------------------------------------- the build stage

def _processes_in(folder: Path) -> list[int]:
    """Processes whose working directory is under ``folder`` (nvcc and its children run there)."""
    found = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if Path(os.readlink(p / "cwd")).is_relative_to(folder):
                    found.append(int(p.name))
            except OSError:
                pass
    return found


@pytest.fixture(scope="module")
def cpu_results(tmp_path_factory):
    """Every CPU case through the pipeline once, with a real nvcc and a harness that must not run:
    (evaluation, wall seconds, processes still running in its build folder up to 5 s later, the folder)."""
    out = {}
    for case in CPU_CASES:
        cache = tmp_path_factory.mktemp(case.name)
        t0 = time.perf_counter()
        ev = adv.evaluate(case.kernel, adv.builder_for(case, ARCH, cache), FakeHarnessThatMustNotRun(),
                          proposal_on=case.proposal_on)
        wall = time.perf_counter() - t0
        deadline = time.monotonic() + 5
        while _processes_in(cache) and time.monotonic() < deadline:
            time.sleep(0.1)
        out[case.name] = (ev, wall, _processes_in(cache), cache)
    return out


@pytest.mark.parametrize("case", CPU_CASES, ids=lambda c: c.name)
def test_cpu_case_gets_its_status_without_reaching_the_gpu(cpu_results, case):
    ev, wall, left, _ = cpu_results[case.name]
    assert ev.status == case.expected, ev.message
    assert ev.harness is None and ev.message
    assert wall < case.build_timeout_s + 10
    assert left == []


def test_compile_error_names_the_line(cpu_results):
    ev = cpu_results["vadd_compile_error"][0]
    assert ev.status == "compile_error"
    assert re.match(r"vadd_compile_error\.cu\(\d+\): error", ev.message), ev.message
    assert ev.build.log and not ev.build.cubin_path


def test_runaway_template_is_stopped_at_the_build_timeout_and_nvcc_is_killed(cpu_results):
    assert adv.case("template_runaway").build_timeout_s == 3.0
    ev, wall, left, cache = cpu_results["template_runaway"]
    assert ev.status == "build_timeout", ev.message
    assert ev.message == "nvcc did not finish within 3 s and was stopped."
    assert 3.0 <= ev.build.wall_s < 8.0 and wall < 9.0
    assert not ev.build.cached and not (cache / ev.build.key / "build.json").exists()   # a timeout is not cached
    assert left == []          # nvcc and its children (cudafe++, cicc) were killed with their process group


def test_without_the_raised_template_depth_the_runaway_fails_fast(build_cache):
    """The control for the case above: it is the spec's -ftemplate-depth that makes nvcc run on."""
    source, spec = adv.load(adv.case("template_runaway").kernel)
    assert "-ftemplate-depth=1000000000" in spec.nvcc_flags
    flags = tuple(f for f in spec.nvcc_flags if not f.startswith("-ftemplate-depth"))
    result = NvccBuilder(ARCH, cache_dir=build_cache, timeout_s=30).build(source, flags)
    assert result.status == "compile_error" and result.wall_s < 10
    assert "excessive recursion" in result.log


@pytest.fixture(scope="module")
def gpu_jobs(tmp_path_factory):
    """Every GPU case through the pipeline up to the harness, with a real nvcc for sm_90. The
    builds are made side by side first (each its own nvcc process; parsing stays in this thread),
    so the pipeline finds them in the build cache."""
    cache = tmp_path_factory.mktemp("adversarial-cache")
    loaded = {c.name: adv.load(c.kernel) for c in GPU_CASES}

    def build(case):
        source, spec = loaded[case.name]
        adv.builder_for(case, ARCH, cache).build(source, spec.nvcc_flags, include_dir=case.kernel.parent,
                                                 name=case.kernel.name)

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        list(pool.map(build, GPU_CASES))
    out = {}
    for case in GPU_CASES:
        harness = RecordingFakeHarness()
        ev = adv.evaluate(case.kernel, adv.builder_for(case, ARCH, cache), harness)
        assert ev.build.cached, case.name
        out[case.name] = (ev, harness.jobs)
    return out


@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: c.name)
def test_gpu_case_builds_and_reaches_the_gpu(gpu_jobs, case):
    ev, jobs = gpu_jobs[case.name]
    assert ev.status == "ok" and ev.message == "fake harness: not run", (ev.status, ev.message)
    assert len(jobs) == 1 and jobs[0].reference is None          # judged by the Python reference
    assert not ev.build.warnings, ev.build.warnings


def test_register_hog_is_refused_before_the_gpu_for_its_registers(cpu_results):
    ev, _, _, _ = cpu_results["vadd_registers"]
    assert ev.resources.registers > 200 and ev.resources.spill_stores == 0
    assert math.prod(ev.launch.block) == 1024
    assert math.prod(ev.launch.block) * ev.resources.registers > SM90_REGISTERS_PER_BLOCK
    assert f"uses {ev.resources.registers} registers a thread, so a block of 1024 threads needs" in ev.message


def test_shared_memory_hog_asks_for_more_than_a_block_may_have(gpu_jobs):
    _, jobs = gpu_jobs["vadd_smem_huge"]
    assert all(launch.shared_mem == 1 << 20 > SM90_MAX_SHARED_PER_BLOCK for launch in jobs[0].candidate.launches)


def test_race_and_its_control_differ_only_in_the_barriers():
    ok = adv.case("reduce_ok").kernel.read_text().splitlines()
    race = adv.case("reduce_race").kernel.read_text().splitlines()
    code = lambda lines: [ln for ln in lines if not ln.startswith("//")]
    assert [ln for ln in code(ok) if "__syncthreads" not in ln] == code(race)
    assert sum("__syncthreads" in ln for ln in code(ok)) == 2


def test_reduce_reference_sums_each_chunk():
    from importlib.util import module_from_spec, spec_from_file_location

    s = spec_from_file_location("reduce_ref", adv.HERE / "reduce_ref.py")
    ref = module_from_spec(s)
    s.loader.exec_module(ref)
    x = np.random.default_rng(0).standard_normal(2500).astype(np.float32)
    got = ref.block_sum(x=x, N=2500)
    want = [x[0:1024].sum(dtype=np.float64), x[1024:2048].sum(dtype=np.float64), x[2048:].sum(dtype=np.float64)]
    assert got.dtype == np.float32 and np.allclose(got, want, atol=1e-5)


def test_memorized_table_is_right_for_its_one_input_only():
    from importlib.util import module_from_spec, spec_from_file_location

    from optiml.verify.inputs import make_case

    s = spec_from_file_location("memorize", adv.HERE / "memorize.py")
    memorize = module_from_spec(s)
    s.loader.exec_module(memorize)
    header = (adv.HERE / "vadd_memorized_table.h").read_text()
    table = np.array([float.fromhex(v) for v in re.findall(r"-?0x[0-9a-f.]+p[-+]\d+", header)], dtype=np.float32)
    assert table.size == 1000
    assert np.array_equal(table, memorize.memorized())           # right for seed 1234 ...
    _, spec = adv.load(adv.case("vadd_memorized").kernel)
    other = make_case(spec, {"N": 1000}, 1235)
    assert not np.allclose(table, other.arrays["a"] + other.arrays["b"], atol=1e-2)   # ... and wrong for any other


def test_every_case_kernel_and_spec_exist_and_statuses_are_known():
    from optiml.status import Status

    STATUSES = {s.value for s in Status}

    names = [c.name for c in adv.CASES]
    assert len(names) == len(set(names))
    for c in adv.CASES:
        assert c.kernel.is_file() and c.kernel.with_suffix(".toml").is_file(), c.name
        assert c.expected in STATUSES, c.name
    assert adv.GOOD.is_file()


# --------------------------------------------------------------------------- bad input, through the CLI

def _spec_with(old: str, new: str) -> str:
    assert old in SPEC, old
    return SPEC.replace(old, new, 1)


EXTRA_ARG = '\n[[args]]\nname = "beta"\ndtype = "float32"\nrole = "scalar"\nvalue = 1.0\n'

BAD_SPECS = [
    # (id, spec text or bytes, kernel source, what the message must contain)
    ("toml-duplicate-key", _spec_with('entry = "scale"', 'entry = "scale"\nentry = "scale"'), KERNEL, "not valid TOML"),
    ("toml-not-utf8", b"\xff\xfe[kernel]\nentry = 1\n", KERNEL, "not a text file"),
    ("toml-unclosed-string", _spec_with('entry = "scale"', 'entry = "scale'), KERNEL, "not valid TOML"),
    ("type-entry-number", _spec_with('entry = "scale"', "entry = 5"), KERNEL, "kernel.entry must be a string"),
    ("type-flags-string", _spec_with('entry = "scale"', 'entry = "scale"\nnvcc_flags = "-O3"'), KERNEL,
     "kernel.nvcc_flags must be a list"),
    ("type-flags-numbers", _spec_with('entry = "scale"', 'entry = "scale"\nnvcc_flags = [3]'), KERNEL,
     "kernel.nvcc_flags must be a list of strings"),
    ("type-shape-float", _spec_with('shape = ["N"]\ninit', "shape = [1.5]\ninit"), KERNEL,
     "args.x.shape[0] must be an integer or an expression string"),
    ("type-block-bool", _spec_with('block = ["BLOCK"]', "block = [true]"), KERNEL, "launch.block[0] must be an integer"),
    ("type-trials-string", SPEC + '\n[verify]\ntrials = "3"\n', KERNEL, "verify.trials must be an integer"),
    ("type-sizes-list", _spec_with("timing = { N = 1048576 }", "timing = [1048576]"), KERNEL, "sizes.timing must be a table"),
    ("type-init-string", _spec_with('init = { dist = "uniform", low = -2.0, high = 2.0 }', 'init = "normal"'), KERNEL,
     "args.x.init must be a table"),
    ("unknown-key-in-args", _spec_with('role = "output"', 'role = "output"\nrol = "output"'), KERNEL,
     "unknown key 'rol' in args[1]"),
    ("zero-verify-size", _spec_with("verify = [{ N = 1000 }, { N = 77 }]", "verify = [{ N = 1000 }, { N = 0 }]"), KERNEL,
     "sizes.verify[1].N must be positive"),
    ("negative-shape", _spec_with('shape = ["N"]\ninit', 'shape = ["N - 2000"]\ninit'), KERNEL,
     "args.x.shape[0] = 'N - 2000' is -1000"),
    ("zero-grid", _spec_with('grid = ["cdiv(N, BLOCK)"]', 'grid = ["N - N"]'), KERNEL, "launch.grid[0] = 'N - N' evaluates to 0"),
    ("negative-shared-mem", _spec_with('block = ["BLOCK"]', 'block = ["BLOCK"]\nshared_mem = -1'), KERNEL,
     "launch.shared_mem evaluates to -1"),
    ("zero-trials", SPEC + "\n[verify]\ntrials = 0\n", KERNEL, "verify.trials must be between 2 and 100"),
    ("unknown-dtype-scalar", _spec_with('dtype = "int32"', 'dtype = "int128"'), KERNEL, "args.n.dtype 'int128' is not supported"),
    ("unknown-dtype-tolerance", SPEC + "\n[tolerance]\nfloat128 = { atol = 1e-3 }\n", KERNEL,
     "tolerance.float128 is not a known dtype"),
    ("args-one-too-many", SPEC.replace("[launch]", EXTRA_ARG + "\n[launch]"), KERNEL,
     "args lists 5 arguments but scale"),
    ("args-scalar-for-pointer", SPEC, KERNEL.replace("float alpha", "float* alpha"),
     "args.alpha is a scalar but parameter 'alpha' of scale is a pointer"),
]


def run_cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.parametrize("spec_text,kernel_src,message", [b[1:] for b in BAD_SPECS], ids=[b[0] for b in BAD_SPECS])
def test_bad_spec_is_one_sentence_naming_file_and_field(tmp_path, spec_text, kernel_src, message):
    k, s = write(tmp_path, kernel=kernel_src)
    if isinstance(spec_text, bytes):
        s.write_bytes(spec_text)
    else:
        s.write_text(spec_text)
    r = run_cli("build", k, "--arch", ARCH)
    assert_one_sentence_error(r, str(s), message)


def test_build_of_a_missing_kernel_names_it(tmp_path):
    r = run_cli("build", tmp_path / "nope.cu", "--arch", ARCH)
    assert_one_sentence_error(r, str(tmp_path / "nope.cu"), "kernel file not found")


def test_build_with_a_missing_spec_names_it(tmp_path):
    k, _ = write(tmp_path)
    r = run_cli("build", k, "--spec", tmp_path / "other.toml", "--arch", ARCH)
    assert_one_sentence_error(r, str(tmp_path / "other.toml"), "spec file not found")


def test_build_with_a_bad_arch_names_the_flag(tmp_path):
    k, _ = write(tmp_path)
    r = run_cli("build", k, "--arch", "hopper")
    assert_one_sentence_error(r, "--arch 'hopper'")


# Found by tests/test_spec_fuzz.py: a spec value that made the loader raise something other than
# a SpecError (a traceback at the CLI); fixed in optiml/spec/load.py.
def test_nan_scalar_value_is_one_sentence(tmp_path):
    k, s = write(tmp_path, _spec_with('value = "N"', "value = nan"))
    r = run_cli("build", k, "--arch", ARCH)
    assert_one_sentence_error(r, str(s), "args.n.value")


# --------------------------------------------------------------------------- small outputs, on the CPU emulation

# the softmax_* kernels' verdicts from the comparison alone: run on the CPU emulation (tests/host_emulation.py,
# threads cooperating for real) at a row longer than their 100000 threshold and at a short one, each compared
# with the true softmax under the spec's tolerances (the float32 defaults); the GPU test runs them through
# the whole pipeline
SOFTMAX_VERDICTS = {            # kernel: (verdict at 2 x 100003, at 2 x 4099)
    "softmax_ok": (None, None),
    "softmax_zeros_long": ("relative", None),
    "softmax_constant_long": ("relative", None),
    "softmax_scaled": ("relative", "relative"),
    "softmax_prefix_sum": ("relative", None),
    "softmax_half_read": ("relative", None),
    "softmax_verify_sizes_only": ("tolerance", None),
}


def _softmax_verdict(tmp_path, name: str, dim: int):
    from tests.host_emulation import run_on_host
    from optiml.verify.compare import check_output

    case = adv.case(name)
    _, spec = adv.load(case.kernel)
    rows = 2
    out = run_on_host(tmp_path, f"{name}_{dim}", case.kernel.read_text(), spec.entry, {"x": rows * dim, "y": rows * dim},
                      {"batch_size": rows, "dim": dim}, (rows,), (256,), poisoned=("y",), offsets=(0,), threaded=True)
    x, y = (np.array([float.fromhex(v) for v in line.split()], np.float32) for line in out[0][:2])
    e = np.exp(x.astype(np.float64).reshape(rows, dim) - x.reshape(rows, dim).max(axis=1, keepdims=True))
    ref = (e / e.sum(axis=1, keepdims=True)).astype(np.float32).reshape(-1)
    tol = spec.tolerance("float32")
    return check_output("y", y, ref, "float32", tol.atol, tol.rtol, rel_rms=tol.rel_rms)


@pytest.mark.parametrize("name", sorted(SOFTMAX_VERDICTS))
def test_small_output_cheats_fail_the_comparison_where_they_cheat(tmp_path, name):
    long_verdict, short_verdict = SOFTMAX_VERDICTS[name]
    assert adv.case(name).check == (long_verdict or None) or adv.case(name).control
    c = _softmax_verdict(tmp_path, name, 100003)
    assert c.failed_check == long_verdict, c
    if long_verdict == "relative":
        assert c.mismatched == 0            # every element within atol + rtol |ref|: the elementwise check is blind
    if name in ("softmax_ok", "softmax_scaled", "softmax_zeros_long"):
        assert _softmax_verdict(tmp_path, name, 4099).failed_check == short_verdict
