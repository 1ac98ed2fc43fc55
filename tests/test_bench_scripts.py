"""The benchmark scripts load and explain themselves without a GPU (their runs need one)."""
import subprocess
import sys

import pytest

from tests.conftest import ROOT

# every script under bench/, in whichever folder (a module it imports, a spec's reference or a task file
# runs nothing)
SCRIPTS = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "bench").rglob("*.py")
                 if 'if __name__ == "__main__":' in p.read_text())


def test_the_bench_scripts_are_found_in_their_folders():
    assert len(SCRIPTS) >= 26 and "bench/throughput/candidates_per_minute.py" in SCRIPTS, SCRIPTS
    assert "bench/common.py" not in SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_bench_script_help(script):
    r = subprocess.run([sys.executable, str(ROOT / script), "--help"], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage" in r.stdout.lower(), r.stdout[:500]


NO_GPU_RUNS = [
    ["bench/throughput/candidates_per_minute.py"], ["bench/throughput/candidates_per_minute.py", "--arch", "sm_90"],
    ["bench/throughput/parallel_quality.py"], ["bench/throughput/parallel_quality.py", "--arch", "sm_90"],
    ["bench/throughput/ncu_two_gpus.sh"], ["bench/throughput/ncu_two_gpus.sh", "--arch", "sm_90"],
    ["bench/throughput/cluster_two_gpus.sh", "out"],
    ["bench/throughput/gpu_reference.sh"],
    ["bench/timing/event_loop_check.py", "examples/transpose_naive/transpose_naive.cu"],
    ["bench/timing/event_loop_check.py", "examples/transpose_naive/transpose_naive.cu", "--arch", "sm_90"],
    ["bench/timing/final_timing.py", "tests/data/kernels/pair_fast.cu", "tests/data/kernels/pair_slow.cu"],
    ["bench/probes/eval_probe.py"],
    ["bench/sanitizer/sanitize_cost.py", "--arch", "sm_90"], ["bench/sanitizer/sanitize_interference.py"],
    ["bench/search_quality/declared_spaces.sh"], ["bench/search_quality/declared_spaces.sh", "--arch", "sm_90"],
    ["bench/search_quality/record_space.py", "examples/transpose_tiled/transpose_tiled.cu", "-o", "x.json"],
    ["bench/limits/optimize_examples.sh"],
    ["bench/templates/optimize_rewrites.sh"], ["bench/templates/time_torch_compile.py"],
    ["bench/templates/optimize_first_kernels.sh"],
    ["bench/adversarial/honest_kernels.py", "x.jsonl"],
]


@pytest.mark.parametrize("argv", NO_GPU_RUNS, ids=" ".join)
def test_bench_script_without_a_gpu_is_one_sentence(argv, tmp_path):
    """No nvidia-smi on PATH (as on this machine): one sentence on stderr, a failing exit, no traceback."""
    import os
    import shutil

    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("nvcc", "bash", "cu++filt", "c++filt"):     # what the scripts may use, but no nvidia-smi
        if shutil.which(tool):
            (bindir / tool).symlink_to(shutil.which(tool))
    env = dict(os.environ, PATH=str(bindir), OPTIML_CACHE_DIR=str(tmp_path / "cache"))
    cmd = (["bash"] if argv[0].endswith(".sh") else [sys.executable]) + [str(ROOT / argv[0]), *argv[1:]]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert r.returncode != 0, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "no GPU was found" in lines[0], r.stderr[-2000:]


def test_the_adversarial_cases_that_need_no_gpu_run_without_one():
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "adversarial" / "run_cases.py"), "--cpu-only"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "missed 0" in r.stdout and "Traceback" not in r.stderr, r.stdout[-1000:]
