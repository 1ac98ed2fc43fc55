"""Drafts chosen by testing (optiml/draft/emulate.py, optiml/draft/trial.py): the CPU emulation runs a
kernel with the launch and scalars given at run time, and `init --kernelbench` keeps the assignment that
computes what the task computes. Never a GPU result: these check the choice of a draft, on the CPU."""

import numpy as np
import pytest

from optiml.draft.emulate import GXX, HostKernel, Param

pytestmark = pytest.mark.skipif(GXX is None, reason="the CPU emulation compiles with g++")

SCALE = r"""
__global__ void scale(const float* x, float* y, int n, float a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""

ROWSUM = r"""
#define THREADS 64
__global__ void rowsum(const float* x, float* out, int rows, int cols) {
    __shared__ float part[THREADS];
    int r = blockIdx.x, t = threadIdx.x;
    float s = 0.0f;
    for (int c = t; c < cols; c += THREADS) s += x[r * cols + c];
    part[t] = s;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if (t < h) part[t] += part[t + h];
        __syncthreads();
    }
    if (t == 0) out[r] = part[0];
}
"""


def _scale_host():
    return HostKernel(SCALE, "scale", [Param("x", True, "float32"), Param("y", True, "float32"),
                                       Param("n", False, "int32"), Param("a", False, "float32")])


def test_a_kernel_runs_with_the_launch_and_scalars_given_at_run_time():
    host = _scale_host()
    try:
        x = np.arange(1000, dtype=np.float32)
        got = host.run((4,), (256,), 0, {"x": x, "y": np.full(1000, np.nan, np.float32), "n": 1000, "a": 0.5})
        assert np.array_equal(got["y"], 0.5 * x)
        short = host.run((2,), (256,), 0, {"x": x, "y": np.full(1000, np.nan, np.float32), "n": 1000, "a": 0.5})
        assert np.isnan(short["y"][512:]).all() and np.array_equal(short["y"][:512], 0.5 * x[:512])
    finally:
        host.close()


def test_a_write_past_an_array_is_a_sentence_under_the_sanitizer_and_counted_without_it():
    host = _scale_host()
    try:
        x = np.ones(100, dtype=np.float32)
        vals = {"x": x, "y": np.zeros(100, np.float32), "n": 300, "a": 2.0}    # n past the arrays' 100
        said = host.run((2,), (256,), 0, vals, sanitize=True)
        assert isinstance(said, str) and "AddressSanitizer" in said
        got = host.run((2,), (256,), 0, vals)
        assert not isinstance(got, str) and np.all(got["y"] == 2.0)
    finally:
        host.close()


def test_threads_that_cooperate_run_as_threads_and_a_launch_a_gpu_refuses_is_a_sentence():
    host = HostKernel(ROWSUM, "rowsum", [Param("x", True, "float32"), Param("out", True, "float32"),
                                         Param("rows", False, "int32"), Param("cols", False, "int32")])
    try:
        assert host.threaded
        x = np.random.default_rng(0).standard_normal((5, 301)).astype(np.float32)
        got = host.run((5,), (64,), 0, {"x": x, "out": np.zeros(5, np.float32), "rows": 5, "cols": 301})
        assert np.allclose(got["out"], x.sum(axis=1), rtol=1e-5, atol=1e-5)
        assert "no GPU runs" in host.run((5,), (2048,), 0, {"x": x, "out": np.zeros(5, np.float32), "rows": 5, "cols": 301})
    finally:
        host.close()


def test_a_launch_too_large_for_the_sanitizers_threads_is_confirmed_by_the_plain_runs_at_larger_sizes():
    """A block a row of 64 threads over 1601 rows is past what AddressSanitizer's OS threads run at
    every case; its plain (fiber) runs at the cases and at larger sizes confirm it, and a wrong launch
    there is still refused."""
    from optiml.draft.trial import Case, Launch, Trial
    host = HostKernel(ROWSUM, "rowsum", [Param("x", True, "float32"), Param("out", True, "float32"),
                                         Param("rows", False, "int32"), Param("cols", False, "int32")])
    rng = np.random.default_rng(1)

    def case(rows, cols):
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        return Case({"R": rows, "C": cols}, {"x": x, "out": np.full(rows, np.nan, np.float32)},
                    {"x": None, "out": x.sum(axis=1)})
    try:
        trial = Trial(host, [case(1601, 9), case(1603, 5)], {"THREADS": 64}, larger=lambda *spread: case(1700, 131))
        assert trial.confirmed({"rows": "R", "cols": "C"}, Launch(("R",), ("THREADS",))) == ""
        assert trial.confirmed({"rows": "R", "cols": "C"}, Launch(("R",), ("32",))) != ""
    finally:
        host.close()


# ------------------------------------------------------------------ init --kernelbench chooses by testing

torch = pytest.importorskip("torch", reason="the KernelBench tasks are PyTorch modules: pip install torch")

TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.act = nn.LeakyReLU(negative_slope=0.2)

    def forward(self, x):
        return self.act(self.gemm(x))

batch = 256
in_features = 512
out_features = 1024

def get_inputs():
    return [torch.randn(batch, in_features)]

def get_init_inputs():
    return [in_features, out_features]
'''

# a thread an output on a 1-D grid over all outputs: the count and the sizes under names of the
# kernel's own, reached only through i / C and i % C; the slope a float argument kept in a submodule
# under another name
KERNEL = r'''
__global__ void fused(const float* a, const float* w, const float* b, float* o, int total, int D, int C, float s) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) {
        int r = i / C, c = i % C;
        float acc = b[c];
        for (int k = 0; k < D; ++k) acc += a[r * D + k] * w[c * D + k];
        o[i] = acc > 0.0f ? acc : acc * s;
    }
}
'''


def _draft(tmp_path, kernel, test=True):
    from optiml.draft.kernelbench import draft_kernelbench
    task, cu = tmp_path / "task.py", tmp_path / "fused.cu"
    task.write_text(TASK)
    cu.write_text(kernel)
    return draft_kernelbench(task, kernel, cu, "fused", test=test)[0]


def test_init_finds_the_sizes_the_scalar_and_the_launch_reading_cannot(tmp_path):
    import tomllib
    text = _draft(tmp_path, KERNEL)
    spec = tomllib.loads(text)
    values = {a["name"]: a.get("value") for a in spec["args"] if a["role"] == "scalar"}
    assert values == {"total": "batch * out_features", "D": "in_features", "C": "out_features", "s": 0.2}
    assert spec["launch"]["grid"] == ["cdiv((batch * out_features), 256)"] and spec["launch"]["block"] == ["256"]
    assert "chosen by testing on the CPU emulation" in text
    assert not [line for line in text.splitlines() if "TODO" in line and ("value =" in line or "grid =" in line)]


def test_init_without_testing_keeps_the_reading_and_says_what_to_fill_in(tmp_path):
    text = _draft(tmp_path, KERNEL, test=False)
    assert "CPU emulation" not in text
    assert [line for line in text.splitlines() if line.startswith("value =") and "TODO" in line]


def test_a_kernel_no_assignment_verifies_says_what_was_tried(tmp_path):
    text = _draft(tmp_path, KERNEL.replace("acc * s", "acc * s * 2.0f"))      # computes something else
    assert "on the CPU emulation the draft fails" in text and "other values and launches tried" in text


SHARED_READ = r"""
#define SLOTS 64
__global__ void total(const float* x, float* out) {
    __shared__ float slot[SLOTS];
    slot[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    if (threadIdx.x == 0) { float t = 0.0f; for (int i = 0; i < SLOTS; i++) t += slot[i]; out[blockIdx.x] = t; }
}
"""


def test_shared_memory_no_thread_wrote_reads_as_garbage_not_as_last_blocks_values(tmp_path):
    """On a GPU shared memory starts each block as garbage: the emulation fills it with NaN a block, so
    a launch of fewer threads than the kernel's shared array has slots does not verify by reading zeros
    (or the previous block's values)."""
    k = HostKernel(SHARED_READ, "total", [Param("x", True, "float32"), Param("out", True, "float32")], tmp_path)
    x = np.arange(64, dtype=np.float32)
    full = k.run((2,), (64,), 0, {"x": x, "out": np.zeros(2, np.float32)})
    assert np.allclose(full["out"], x.sum())
    short = k.run((2,), (32,), 0, {"x": x, "out": np.zeros(2, np.float32)})
    assert np.isnan(short["out"]).all(), short


def test_a_rows_length_and_count_are_among_the_sizes_tried():
    """A LayerNorm's normalized size is the product of the output's trailing dimensions, its row count
    the product of the leading ones: both are tried, before products of any two sizes."""
    from optiml.draft.trial import size_exprs
    dims = ["batch_size", "features", "dim1", "dim2"]
    got = size_exprs(dims, dims)
    assert "features * dim1 * dim2" in got and "batch_size * features * dim1" in got
    assert got.index("features * dim1 * dim2") < got.index("batch_size * dim2")


def test_a_2d_block_side_is_a_tile_constant_whose_square_a_block_holds():
    """The sides of a square block worth trying are the file's tile constants from 4 to 32 (32 x 32 is
    1024 threads, a block's most; 33 x 33 is more), then 16, 32 and 8."""
    from optiml.draft.trial import tile_sizes

    got = tile_sizes({"TILE_A": 32, "TILE_B": 33, "TILE_C": 4, "TILE_D": 3, "OTHER": 16})
    assert got == ["TILE_A", "TILE_C", "16", "32", "8"], got
