"""The benchmark scripts load and explain themselves without a GPU (their runs need one)."""
import subprocess
import sys

import pytest

from tests.conftest import ROOT

SCRIPTS = sorted(p.name for p in (ROOT / "bench").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS)
def test_bench_script_help(script):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--help"], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage" in r.stdout.lower(), r.stdout[:500]


NO_GPU_RUNS = [
    ["bench/throughput.py"], ["bench/throughput.py", "--arch", "sm_90"],
    ["bench/quality.py"], ["bench/quality.py", "--arch", "sm_90"],
    ["bench/event_loop_check.py", "examples/transpose_naive/transpose_naive.cu"],
    ["bench/event_loop_check.py", "examples/transpose_naive/transpose_naive.cu", "--arch", "sm_90"],
    ["bench/ncu_two_gpus.sh"], ["bench/ncu_two_gpus.sh", "--arch", "sm_90"],
    ["bench/eval_probe.py"], ["bench/sanitize_cost.py", "--arch", "sm_90"], ["bench/sanitize_interference.py"],
    ["bench/issue18_gpu.sh"], ["bench/issue18_gpu.sh", "--arch", "sm_90"], ["bench/issue25_gpu.sh"],
    ["bench/issue25_compiled.py"], ["bench/issue26_gpu.sh"],
    ["bench/final_timing.py", "tests/data/kernels/pair_fast.cu", "tests/data/kernels/pair_slow.cu"],
    ["bench/record_space.py", "examples/transpose_tiled/transpose_tiled.cu", "-o", "x.json"],
    ["bench/honest_kernels.py", "x.jsonl"],
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
