"""GPU tests of the evaluation pipeline. Run on a GPU machine (see README):

    python3 -m pytest -m gpu tests/gpu -v
"""
import subprocess
import sys
from pathlib import Path

import pytest

from optiml.build import NvccBuilder, detect_arch
from optiml.runner import Candidate, Runner
from optiml.spec import find_spec, load_spec
from optiml.verify.harness import SubprocessHarness
from tests.conftest import DATA, EXAMPLES, ROOT

pytestmark = pytest.mark.gpu

KERNELS = DATA / "kernels"
EXAMPLE_KERNELS = sorted(EXAMPLES.glob("*/*.cu"))


@pytest.fixture(scope="module")
def builder(tmp_path_factory):
    return NvccBuilder(detect_arch(), cache_dir=tmp_path_factory.mktemp("cache"))


def evaluate(builder, kernel: Path, source: str | None = None, timeout_s: float = 120, time_it: bool = True, **kw):
    seed_src = kernel.read_text()
    spec = load_spec(find_spec(kernel), kernel, kernel_source=seed_src)
    ev = Runner.sequential(spec, seed_src, builder, SubprocessHarness(timeout_s=timeout_s), include_dir=kernel.parent, **kw)
    return ev.evaluate(Candidate(source or seed_src, name=kernel.name), time_it=time_it)


@pytest.mark.parametrize("kernel", EXAMPLE_KERNELS, ids=lambda p: p.stem)
def test_every_example_verifies_and_is_timed(builder, kernel):
    ev = evaluate(builder, kernel)
    assert ev.status == "ok", ev.message
    hr = ev.harness
    spec = load_spec(find_spec(kernel), kernel)
    assert len(hr.checks) == len(spec.verify_sizes) * spec.verify.trials + 2   # + timing size + the timed launches
    assert all(c.passed for c in hr.checks)
    verified, timed = hr.checks[:-1], hr.checks[-1]
    assert len({c.seed for c in verified}) == len(verified)         # fresh inputs for every case
    # the timed launches ran on the verified timing-size case's inputs, checked against its reference
    assert timed.size_index == 0 and timed.seed == next(c.seed for c in verified if c.size_index == 0)
    assert hr.timing.median_ms > 0 and hr.timing.reps >= 10 and hr.timing.flushed_l2
    print(f"{kernel.stem}: {ev.median_ms:.4f} ms (IQR {100 * hr.timing.spread:.2f}%)", file=sys.stderr)


def test_padding_the_conflicting_tile_verifies_against_the_seed(builder):
    kernel = EXAMPLES / "sgemm_tiled_conflicts" / "sgemm_tiled_conflicts.cu"
    padded = kernel.read_text().replace("__shared__ float Bs[TILE][TILE];", "__shared__ float Bs[TILE][TILE + 1];")
    assert padded != kernel.read_text()
    seed = evaluate(builder, kernel)
    ev = evaluate(builder, kernel, padded)
    assert ev.status == "ok", ev.message
    assert ev.median_ms < seed.median_ms / 2


def test_correct_kernel_verifies(builder):
    ev = evaluate(builder, KERNELS / "vadd_ok.cu")
    assert ev.status == "ok", ev.message


@pytest.mark.parametrize("name,status,check", [
    ("vadd_off_by_one", "wrong_output", "unwritten"),
    ("vadd_unwritten", "wrong_output", "unwritten"),
    ("vadd_wrong_tail", "wrong_output", "tolerance"),
    ("vadd_nan", "wrong_output", "nan"),
    ("vadd_modifies_input", "wrong_output", "input_modified"),
])
def test_wrong_kernels_fail_verification(builder, name, status, check):
    ev = evaluate(builder, KERNELS / f"{name}.cu")
    assert ev.status == status, ev.message
    failed = ev.harness.failed_checks
    assert len(failed) == 1 and failed[0].failed_check == check
    assert ev.harness.timing is None          # a wrong kernel is never timed


def test_off_by_one_fails_on_an_odd_size(builder):
    ev = evaluate(builder, KERNELS / "vadd_off_by_one.cu")
    failed = ev.harness.failed_checks[0]
    assert failed.sizes["N"] % 2 == 1 or failed.sizes["N"] % 256 != 0
    out = failed.outputs[0]
    assert out.unwritten == 1 and out.worst_index == [failed.sizes["N"] - 1]


def test_wrong_tail_passes_full_blocks_and_fails_partial_one(builder):
    ev = evaluate(builder, KERNELS / "vadd_wrong_tail.cu")
    failed = ev.harness.failed_checks[0]
    assert failed.sizes["N"] % 256 != 0


@pytest.mark.parametrize("name", ["vadd_oob", "vadd_trap"])
def test_faulting_kernel_is_a_runtime_error_and_the_parent_survives(builder, name):
    ev = evaluate(builder, KERNELS / f"{name}.cu")
    assert ev.status == "runtime_error", (ev.status, ev.message)
    assert ev.message
    # the parent goes on: the next evaluation works
    assert evaluate(builder, KERNELS / "vadd_ok.cu", time_it=False).status == "ok"


def test_endless_kernel_is_stopped_at_the_timeout(builder):
    ev = evaluate(builder, KERNELS / "vadd_hang.cu", timeout_s=15)
    assert ev.status == "timeout", ev.message
    assert "candidate" in ev.message                   # the stage it hung in
    assert ev.harness.wall_s < 60
    assert evaluate(builder, KERNELS / "vadd_ok.cu", time_it=False).status == "ok"


def test_too_much_shared_memory_is_a_launch_error(builder):
    kernel = KERNELS / "vadd_ok.cu"
    greedy = "// optiml:launch {shared_mem = 400000}\n" + kernel.read_text()
    ev = evaluate(builder, kernel, greedy)
    assert ev.status == "launch_error", (ev.status, ev.message)


def test_compile_error_is_reported_without_running(builder):
    ev = evaluate(builder, KERNELS / "vadd_compile_error.cu")
    assert ev.status == "compile_error" and ev.harness is None


def test_timing_the_same_kernel_twice_agrees(builder):
    kernel = EXAMPLES / "sgemm_naive" / "sgemm_naive.cu"
    a = evaluate(builder, kernel)
    b = evaluate(builder, kernel)
    assert a.ok and b.ok
    diff = abs(a.median_ms - b.median_ms) / min(a.median_ms, b.median_ms)
    print(f"sgemm_naive twice: {a.median_ms:.4f} ms, {b.median_ms:.4f} ms ({100 * diff:.2f}%)", file=sys.stderr)
    assert diff < 0.03


def test_cli_eval_prints_verdict_and_timing():
    kernel = EXAMPLES / "transpose_naive" / "transpose_naive.cu"
    r = subprocess.run([sys.executable, "-m", "optiml", "eval", str(kernel)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASSED" in r.stdout and "ms median" in r.stdout and "GB/s" in r.stdout
    r = subprocess.run([sys.executable, "-m", "optiml", "eval", str(KERNELS / "vadd_oob.cu")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 3 and "runtime_error" in r.stdout and "Traceback" not in r.stderr
