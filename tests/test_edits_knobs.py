"""Knobs from literals (issue 25, part 1): a launch whose block is one literal, repeated in the
kernel's shared arrays, halving reduction strides and block-stride loop steps, becomes one named
constant the tuning can move; a literal that may mean something else is left alone, saying why.
Every variant is compiled with nvcc (sm_90), and its launch line is read back."""
import shutil
import subprocess

import pytest

from optiml.edits.rules import RulesProposer
from optiml.edits.transforms import tie_block_literal, tune_constants
from optiml.source import parse_source

NVCC = shutil.which("nvcc")

SOFTMAX = """#include <math.h>
__global__ void softmax(const float* x, float* y, int R, int C) {
    __shared__ float sh[1024];
    int row = blockIdx.x, tid = threadIdx.x;
    const float* xr = x + (size_t)row * C;
    float m = -INFINITY;
    for (int c = tid; c < C; c += 1024) m = fmaxf(m, xr[c]);
    sh[tid] = m;
    __syncthreads();
    for (int s = 512; s > 0; s >>= 1) {
        if (tid < s) sh[tid] = fmaxf(sh[tid], sh[tid + s]);
        __syncthreads();
    }
    m = sh[0];
    float sum = 0.f;
    for (int c = tid; c < C; c += blockDim.x) sum += expf(xr[c] - m);
    for (int c = tid; c < C; c += blockDim.x) y[(size_t)row * C + c] = expf(xr[c] - m) / sum;
}
"""

ELEMENTWISE = """__global__ void scale(const float* x, float* y, int n, float a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""


def compiles(tmp_path, source: str) -> bool:
    if NVCC is None:
        pytest.skip("nvcc is not installed")
    f = tmp_path / "k.cu"
    f.write_text(source)
    r = subprocess.run([NVCC, "-arch=sm_90", "-cubin", "-o", str(tmp_path / "k.cubin"), str(f)],
                       capture_output=True, text=True)
    return r.returncode == 0


def test_a_literal_block_repeated_in_the_kernel_becomes_one_knob(tmp_path):
    ts, why = tie_block_literal(SOFTMAX, "softmax", (("R",), (1024,), 0))
    assert why is None and len(ts) == 1
    t = ts[0]
    assert t.kind == "knob" and t.edit == "knob BLOCK_SIZE = 1024" and "3 places in the kernel" in t.rationale
    src = t.source
    assert "#define BLOCK_SIZE 1024" in src and "__shared__ float sh[BLOCK_SIZE];" in src
    assert "c += BLOCK_SIZE" in src and "for (int s = (BLOCK_SIZE / 2); s > 0; s >>= 1)" in src
    assert "1024" not in src.replace("#define BLOCK_SIZE 1024", "") and "512" not in src
    launch = parse_source(src).launch
    assert launch.grid == ("R",) and launch.block == ("BLOCK_SIZE",) and launch.shared_mem == 0
    assert compiles(tmp_path, src)
    # the knob is then tuned as any block dimension, within the hardware's 1024 threads
    tuned = {t.edit for t in tune_constants(src, "softmax")}
    assert tuned == {"BLOCK_SIZE 1024 -> 512"}


def test_the_grid_and_shared_memory_written_with_the_literal_follow_the_knob(tmp_path):
    ts, _ = tie_block_literal(ELEMENTWISE, "scale", (("cdiv(n, 256)",), ("256",), "4 * 256"))
    src = ts[0].source
    launch = parse_source(src).launch
    assert launch.grid == ("cdiv(n, BLOCK_SIZE)",) and launch.block == ("BLOCK_SIZE",)
    assert launch.shared_mem == "4 * BLOCK_SIZE" and "the launch only" in ts[0].rationale   # blockDim.x in the code
    assert compiles(tmp_path, src)


@pytest.mark.parametrize("body, said", [
    ("    if (threadIdx.x < 1024) y[0] = 1.0f;\n", "1024 at line"),
    ("    float local[1024];\n    local[threadIdx.x] = x[0];\n    y[0] = local[3];\n", "1024 at line"),
    ("    y[threadIdx.x] = x[threadIdx.x] * 512;\n", "512 at line"),
])
def test_a_literal_that_may_mean_something_else_is_left_alone(body, said):
    src = ("__global__ void k(const float* x, float* y) {\n    __shared__ float sh[1024];\n"
           "    sh[threadIdx.x] = x[threadIdx.x];\n" + body + "}\n")
    ts, why = tie_block_literal(src, "k", (("1",), (1024,), 0))
    assert ts == [] and said in why and "so it is not made a knob" in why


@pytest.mark.parametrize("launch", [
    (("R",), ("BLOCK",), 0),          # already a name
    (("R",), (100,), 0),              # not a power of two
    (("R",), (16, 16), 0),            # two-dimensional
    None,                             # no launch known
])
def test_no_knob_where_there_is_no_single_power_of_two_literal(launch):
    assert tie_block_literal(SOFTMAX, "softmax", launch) == ([], None)


def test_the_rules_propose_the_knob_from_the_specs_launch():
    from optiml.edits.types import NodeView

    node = NodeView(source=SOFTMAX, entry="softmax")
    with_launch = {p.edit for p in RulesProposer(launch=(("R",), (1024,), 0)).candidates(node)}
    assert "knob BLOCK_SIZE = 1024" in with_launch
    assert "knob BLOCK_SIZE = 1024" not in {p.edit for p in RulesProposer().candidates(node)}
