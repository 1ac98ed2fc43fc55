"""Capture compute-sanitizer's real output for small kernels with one planted bug each (a write
past the end, a read past the end, an uninitialized read, a shared-memory race, a divergent
barrier) and a clean one, for the parser's fixtures (tests/data/sanitizer/).

    python3 bench/sanitizer/sanitizer_probe.py OUT_DIR          # on a GPU machine (pycuda, nvcc, compute-sanitizer)
    python3 bench/sanitizer/sanitizer_probe.py --case NAME      # what compute-sanitizer runs: one case
"""
import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

CASES = {
    # name: (kernel source, threads, n) -- every kernel is k(float* out, const float* in, int n)
    "clean": ("if (i < n) out[i] = in[i] * 2.0f;", 1000, 1000),
    "write_past_end": ("if (i <= n) out[i] = (i < n ? in[i] : 0.0f) * 2.0f;", 1001, 1000),  # i == n: one past the end
    "read_past_end": ("if (i < n) out[i] = in[i] * 2.0f + 0.0f * in[i + 1];", 1000, 1000),
    "uninitialized_read": ("if (i < n) out[i] = 1.0f + 0.0f * in[i];", 1000, 1000),   # `in` never written
    "shared_race": ("__shared__ float s[64]; int t = threadIdx.x; s[t] = in[i]; out[i] = s[63 - t];", 64, 64),
    "divergent_barrier": ("if (threadIdx.x < 16) __syncthreads(); if (i < n) out[i] = in[i];", 64, 64),
}
TOOLS = {"memcheck": ["--leak-check", "no"], "initcheck": [], "racecheck": [], "synccheck": []}


def run_case(name: str) -> None:
    import numpy as np
    import pycuda.autoinit  # noqa: F401
    import pycuda.driver as drv
    from pycuda.compiler import SourceModule

    body, threads, n = CASES[name]
    mod = SourceModule("extern \"C\" __global__ void k(float* out, const float* in, int n) {\n"
                       f"  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  {body}\n}}\n",
                       options=["-lineinfo"], no_extern_c=True)
    k = mod.get_function("k")
    out = drv.mem_alloc(n * 4)
    inp = drv.mem_alloc(n * 4)
    if name != "uninitialized_read":
        drv.memcpy_htod(inp, np.random.default_rng(0).random(n, dtype=np.float32))
    block = min(threads, 256) if name not in ("shared_race", "divergent_barrier") else threads
    grid = (threads + block - 1) // block
    k(out, inp, np.int32(n), block=(block, 1, 1), grid=(grid, 1))
    drv.Context.synchronize()
    print(f"{name}: ran")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?", type=Path)
    ap.add_argument("--case", choices=sorted(CASES))
    a = ap.parse_args()
    if a.case:
        run_case(a.case)
        return
    if a.out is None or shutil.which("compute-sanitizer") is None:
        sys.exit("give OUT_DIR, on a machine with compute-sanitizer, nvcc and pycuda")
    a.out.mkdir(parents=True, exist_ok=True)
    for tool, extra in TOOLS.items():
        for name in CASES:
            cmd = ["compute-sanitizer", "--tool", tool, *extra, "--error-exitcode", "86", "--print-limit", "3",
                   sys.executable, __file__, "--case", name]
            t0 = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            wall = time.perf_counter() - t0
            (a.out / f"{tool}-{name}.txt").write_text(p.stdout + p.stderr)
            print(f"{tool:10} {name:20} exit {p.returncode:3} {wall:6.2f} s", flush=True)


if __name__ == "__main__":
    main()
