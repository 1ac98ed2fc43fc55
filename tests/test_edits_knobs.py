"""Knobs from literals: a launch whose block is one literal, repeated in the
kernel's shared arrays, halving reduction strides and block-stride loop steps, becomes one named
constant the tuning can move; a literal that may mean something else is left alone, saying why.
Every variant is compiled with nvcc (sm_90), and its launch line is read back."""
import re
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
    assert t.kind == "knob" and t.edit == "knob OPTIML_BLOCK_SIZE = 1024" and "3 places in the kernel" in t.rationale
    src = t.source
    assert src.startswith("#include <math.h>\n#define OPTIML_BLOCK_SIZE 1024\n")     # after the includes
    assert "__shared__ float sh[OPTIML_BLOCK_SIZE];" in src
    assert "c += OPTIML_BLOCK_SIZE" in src and "for (int s = (OPTIML_BLOCK_SIZE / 2); s > 0; s >>= 1)" in src
    assert "1024" not in src.replace("#define OPTIML_BLOCK_SIZE 1024", "") and "512" not in src
    launch = parse_source(src).launch
    assert launch.grid == ("R",) and launch.block == ("OPTIML_BLOCK_SIZE",) and launch.shared_mem == 0
    assert compiles(tmp_path, src)
    # the knob is then tuned as any block dimension, within the hardware's 1024 threads
    tuned = {t.edit for t in tune_constants(src, "softmax")}
    assert tuned == {"OPTIML_BLOCK_SIZE 1024 -> 512"}


def test_a_cdiv_grid_written_with_the_literal_follows_the_knob(tmp_path):
    ts, _ = tie_block_literal(ELEMENTWISE, "scale", (("cdiv(n, 256)",), ("256",), 0))
    src = ts[0].source
    launch = parse_source(src).launch
    assert launch.grid == ("cdiv(n, OPTIML_BLOCK_SIZE)",) and launch.block == ("OPTIML_BLOCK_SIZE",)
    assert "the launch only" in ts[0].rationale            # blockDim.x in the code
    assert compiles(tmp_path, src)


@pytest.mark.parametrize("launch, said", [
    (((256,), (256,), 0), "the launch's grid 256 also holds 256"),          # 256 blocks, not their size
    ((("cdiv(n, 256)",), (256,), "4 * 256"), "the launch's shared memory 4 * 256 also holds 256"),
])
def test_the_literal_elsewhere_in_the_launch_is_left_alone(launch, said):
    ts, why = tie_block_literal(ELEMENTWISE, "scale", launch)
    assert ts == [] and said in why


def test_the_sources_own_launch_line_is_rewritten_in_place_wherever_it_is(tmp_path):
    src = ELEMENTWISE + '// optiml:launch {grid = ["cdiv(n, 256)"], block = [256], shared_mem = 0}'      # last line
    for out in (tie_block_literal(src, "scale", (("1",), (1,), 0))[0][0].source,
                grid_stride(src, "scale", (("1",), (1,), 0))[0][0].source):
        assert out.count("optiml:launch") == 1 and parse_source(out).launch is not None
        assert "__global__ void scale" in out and compiles(tmp_path, out)


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


def test_a_two_dimensional_shared_array_a_row_per_thread_follows_the_knob():
    """``__shared__ float pairs[1024][2]``: its first side is the block (a row a thread), made the knob too."""
    src = ("__global__ void k(const float* x, float* y) {\n    __shared__ float pairs[1024][2];\n"
           "    pairs[threadIdx.x][0] = x[threadIdx.x];\n    y[threadIdx.x] = pairs[threadIdx.x][0];\n}\n")
    ts, why = tie_block_literal(src, "k", (("1",), (1024,), 0))
    assert why is None and "__shared__ float pairs[OPTIML_BLOCK_SIZE][2];" in ts[0].source


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
    assert "knob OPTIML_BLOCK_SIZE = 1024" in with_launch
    assert "knob OPTIML_BLOCK_SIZE = 1024" not in {p.edit for p in RulesProposer().candidates(node)}


# -- thread coarsening: a grid-stride loop with ITEMS_PER_THREAD items a thread -------------------
from optiml.edits.transforms import grid_stride  # noqa: E402

RELU = """__global__ void relu(const float* x, float* y, int n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    y[i] = v > 0.f ? v : 0.f;
}
"""


@pytest.mark.parametrize("src, entry", [(ELEMENTWISE, "scale"), (RELU, "relu")])
def test_a_one_item_kernel_becomes_a_grid_stride_loop(tmp_path, src, entry):
    ts, why = grid_stride(src, entry, (("cdiv(n, 256)",), (256,), 0))
    assert why is None and len(ts) == 1 and ts[0].kind == "coarsen"
    out = ts[0].source
    assert "#define OPTIML_ITEMS_PER_THREAD 4" in out and "+= blockDim.x * gridDim.x)" in out
    assert "if (i" not in out and "return" not in out
    launch = parse_source(out).launch
    assert launch.grid == ("cdiv(n, (256) * OPTIML_ITEMS_PER_THREAD)",) and launch.block == (256,)
    assert compiles(tmp_path, out)
    assert {t.edit for t in tune_constants(out, entry)} == {"OPTIML_ITEMS_PER_THREAD 4 -> 2",
                                                            "OPTIML_ITEMS_PER_THREAD 4 -> 8"}


@pytest.mark.parametrize("body, said", [
    ("    if (i < n) { y[i] = x[i]; __syncthreads(); }\n", "synchronises threads"),
    ("    if (i < n) { if (x[i] < 0) return; y[i] = x[i]; }\n", "returns early"),
    ("    if (i < n) { y[i] = x[i]; i += 1; y[i] = 0; }\n", "changes i"),
    ("    if (i < n) atomicAdd(&y[blockIdx.x], x[i]);\n", "uses the thread's place in the grid"),
    ("    if (i < n) { unsigned m = __ballot_sync(0xffffffffu, x[i] > 0); y[i] = m; }\n", "works across a warp"),
    ("    if (i < n) y[i] = twice(x[i]);\n", "calls twice, whose body is not checked"),
    ("    if (i < n) { for (int k = 0; k < 4; ++k) { if (x[i] > k) break; y[i] = k; } }\n", "breaks out of its flow"),
    ("    if (i < n) { y[i] = x[i]; --i; }\n", "changes i"),
])
def test_a_body_that_cannot_loop_is_not_coarsened(body, said):
    src = ("__device__ float twice(float v) { return 2 * v; }\n"
           "__global__ void k(const float* x, float* y, int n) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           + body + "}\n")
    ts, why = grid_stride(src, "k", (("cdiv(n, 256)",), (256,), 0))
    assert ts == [] and said in why


def test_a_source_with_shared_memory_is_not_coarsened():
    """Shared memory anywhere in the file (another kernel's here): the rewrite does not look into
    whether this kernel shares it, and says so."""
    src = ("__global__ void k(const float* x, float* y, int n) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "    if (i < n) y[i] = x[i];\n}\n")
    assert grid_stride(src, "k", (("cdiv(n, 256)",), (256,), 0))[0]
    ts, why = grid_stride(src + "__global__ void u(float *z) { __shared__ float q[2]; q[0] = 1; z[0] = q[0]; }\n",
                          "k", (("cdiv(n, 256)",), (256,), 0))
    assert ts == [] and why.endswith("belongs to a kernel that uses shared memory")


@pytest.mark.parametrize("src, launch", [
    (ELEMENTWISE, (("n",), (256,), 0)),                               # the grid is not cdiv(X, B)
    (ELEMENTWISE, (("cdiv(n, 16)", "4"), (16, 4), 0)),                 # two-dimensional
    (SOFTMAX, (("cdiv(R, 1)",), (1024,), 0)),                          # not a one-item kernel
    ("__global__ void k(float* y, int n) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
     "    if (i < n) y[i] = 1.0f;\n    y[0] = 2.0f;\n}\n", (("cdiv(n, 256)",), (256,), 0)),   # work after the if
    ("__global__ void k(const float* x, float* y, int n) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
     "    if (i >= n || x[i] <= 0.0f) return;\n    y[i] = x[i];\n}\n", (("cdiv(n, 256)",), (256,), 0)),  # a compound guard
    ("__global__ void k(const float* x, float* y, int n) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
     "    if (i < n && x[i] > 0.0f) y[i] = x[i];\n}\n", (("cdiv(n, 256)",), (256,), 0)),
    ("__global__ void k(const float* x, float* y, int n) {\n    int i = 2 * (blockIdx.x * blockDim.x + threadIdx.x);\n"
     "    if (i < n) y[i] += x[i];\n}\n", (("cdiv(n, 512)",), (256,), 0)),                   # two items a thread
    ("__global__ void k(const float* x, float* y, int n) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x, j = 0;\n"
     "    if (i < n) y[i] = x[i] + j;\n}\n", (("cdiv(n, 256)",), (256,), 0)),                  # two declarators
])
def test_no_coarsening_where_the_kernel_is_not_a_one_item_kernel(src, launch):
    assert grid_stride(src, "", launch)[0] == []


def test_a_search_with_the_rules_moves_the_knob_it_made():
    """The real MCTS and rules proposer over a FAKE evaluator (a made-up landscape where a block of
    256 is fastest; no GPU result): from a kernel whose launch is block = [1024], written as literals,
    the search names the knob and then tunes it down to 256."""
    from optiml.search.mcts import MCTS, SearchConfig
    from optiml.search.result import Result

    class BlockLandscape:
        def evaluate(self, source, flags):
            m = re.search(r"#define OPTIML_BLOCK_SIZE (\d+)", source)
            block = int(m.group(1)) if m else 1024
            return Result("ok", median_ms={1024: 1.0, 512: 0.8, 256: 0.6, 128: 0.7, 64: 0.9}.get(block, 1.0),
                          spread=0.002)

    search = MCTS(SOFTMAX, BlockLandscape(), RulesProposer(launch=(("R",), (1024,), 0)), entry="softmax",
                  config=SearchConfig(budget=25, seed=0))
    best = search.run()
    assert best.path()[0] == "knob OPTIML_BLOCK_SIZE = 1024"
    assert "#define OPTIML_BLOCK_SIZE 256" in best.source and best.median_ms == 0.6


def test_the_coarsened_loop_keeps_a_const_index_and_the_comments(tmp_path):
    src = ("#include <cuda_fp16.h>\n__global__ void k(const float* x, float* y, int n) {\n"
           "    const int i = threadIdx.x + blockIdx.x * blockDim.x;\n    if (i >= n) return;\n"
           "    // the scale\n    y[i] = 2.0f * x[i];\n}\n")
    out = grid_stride(src, "k", (("cdiv(min(n, 1 << 30), 256)",), (256,), 0))[0][0].source
    assert "for (int i = threadIdx.x + blockIdx.x * blockDim.x;" in out and "// the scale" in out
    assert out.startswith("#include <cuda_fp16.h>\n#define OPTIML_ITEMS_PER_THREAD 4\n")
    assert parse_source(out).launch.grid == ("cdiv(min(n, 1 << 30), (256) * OPTIML_ITEMS_PER_THREAD)",)
    assert compiles(tmp_path, out)


def test_a_rewrite_that_raises_costs_its_proposal_not_the_run(monkeypatch):
    import optiml.edits.transforms as tr

    def boom(*a, **k):
        raise IndexError("a bug")
    monkeypatch.setattr(tr, "tie_block_literal", boom)
    edits = {t.edit for t in tr.all_transforms(SOFTMAX, "softmax", launch=(("R",), (1024,), 0))}
    assert edits and not any(e.startswith("knob") for e in edits)


# -- vectorized access: float4 loads and stores with an aligned guard and a scalar tail ------------
from optiml.edits.transforms import vectorize_float4  # noqa: E402

AXPY = """#include <cuda_runtime.h>
__global__ void axpy(const float* __restrict__ x, float* y, int n, float a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; y[i] += a * v; }
}
"""


@pytest.mark.parametrize("src, entry", [(AXPY, "axpy"), (RELU, "relu"), (ELEMENTWISE, "scale")])
def test_an_elementwise_float_kernel_gets_float4_loads_and_stores(tmp_path, src, entry):
    ts, why = vectorize_float4(src, entry, (("cdiv(n, 256)",), (256,), 0))
    assert why is None and len(ts) == 1 and ts[0].kind == "vectorize"
    out = ts[0].source
    assert "reinterpret_cast<const float4*>(x)[optiml_v]" in out and "& 15) == 0" in out
    assert "(n) > 0 ? (size_t)(n) / 4 : 0" in out                # a negative count is no work, as before
    assert out.count("for (") == 3                            # the vector loop, its tail, the unaligned loop
    assert parse_source(out).launch.grid == ("cdiv(n, (256) * 4)",)
    assert compiles(tmp_path, out)


def test_the_axpy_lanes_read_and_write_their_own_component():
    out = vectorize_float4(AXPY, "axpy", (("cdiv(n, 256)",), (256,), 0))[0][0].source
    for c in "xyzw":
        assert f"{{ {{ float v = optiml_x.{c}; optiml_y.{c} += a * v; }} }}" in out
    assert "float4 optiml_y = reinterpret_cast<const float4*>(y)[optiml_v];" in out      # += reads y
    assert "reinterpret_cast<float4*>(y)[optiml_v] = optiml_y;" in out and "float4*>(x)[optiml_v] =" not in out


@pytest.mark.parametrize("body, said", [
    ("    if (i < n) y[i] = x[i] * i;\n", "uses i as a value"),
    ("    if (i < n) y[i] = x[i + 1];\n", "x[i + 1] is not x[i]"),
    ("    if (i < n) y[i] = x[i] + (float)m[i];\n", "touches m, which is not a float array"),
])
def test_a_body_that_is_not_elementwise_on_floats_is_not_vectorized(body, said):
    src = ("__global__ void k(const float* x, float* y, const int* m, int n) {\n"
           "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n" + body + "}\n")
    ts, why = vectorize_float4(src, "k", (("cdiv(n, 256)",), (256,), 0))
    assert ts == [] and said in why


def test_a_coarsened_grid_still_ties_its_block_literal(tmp_path):
    coarse, _ = grid_stride(ELEMENTWISE, "scale", (("cdiv(n, 256)",), (256,), 0))
    ts, why = tie_block_literal(coarse[0].source, "scale", (("cdiv(n, 256)",), (256,), 0))
    assert why is None and ts
    out = ts[0].source
    assert parse_source(out).launch.grid == ("cdiv(n, (OPTIML_BLOCK_SIZE) * OPTIML_ITEMS_PER_THREAD)",)
    assert parse_source(out).launch.block == ("OPTIML_BLOCK_SIZE",)
    assert compiles(tmp_path, out)


TEMPLATED = """template <int TILE>
__device__ float partial(const float* x, int i) {
    float s = 0.f;
    for (int j = 0; j < TILE; j++) s += x[i * TILE + j];
    return s;
}
__global__ void k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = partial<8>(x, i) + partial<8>(x, i + 1) * 0.0f;
}
"""


def test_a_template_argument_of_the_entry_is_tuned_at_every_place_together(tmp_path):
    ts = {t.edit: t for t in tune_constants(TEMPLATED, "k")}
    assert set(ts) == {"TILE 8 -> 4", "TILE 8 -> 16"}
    out = ts["TILE 8 -> 16"].source
    assert out.count("partial<16>(") == 2 and "partial<8>" not in out
    assert compiles(tmp_path, out)
    # two values: not one quantity, left alone
    assert tune_constants(TEMPLATED.replace("partial<8>(x, i + 1)", "partial<4>(x, i + 1)"), "k") == []
    # a name that is not a tunable's (a problem size) is left alone
    assert tune_constants(TEMPLATED.replace("TILE", "N"), "k") == []


# cuda-samples' matrixMul shape: the tile is the template parameter `block_size` of a __device__
# function an extern "C" entry instantiates, and the spec's launch names it
SAMPLES_MM = """template <int block_size, typename index_t>
__device__ void matrixMul(float *C, const float *A, const float *B, index_t wA, index_t wB) {
  __shared__ float As[block_size][block_size];
  __shared__ float Bs[block_size][block_size];
  index_t bx = blockIdx.x, by = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y;
  float Csub = 0.0f;
  for (index_t a = wA * block_size * by, b = block_size * bx; a <= wA * block_size * by + wA - 1;
       a += block_size, b += block_size * wB) {
    As[ty][tx] = A[a + wA * ty + tx];
    Bs[ty][tx] = B[b + wB * ty + tx];
    __syncthreads();
    for (int k = 0; k < block_size; ++k) Csub += As[ty][k] * Bs[k][tx];
    __syncthreads();
  }
  C[wB * block_size * by + block_size * bx + wB * ty + tx] = Csub;
}
extern "C" __global__ void matrixMul_bs16(float *C, const float *A, const float *B, int wA, int wB) {
  matrixMul<16, int>(C, A, B, wA, wB);
}
"""
SAMPLES_LAUNCH = (("WB / block_size", "HA / block_size"), ("block_size", "block_size"), 0)


def test_a_lowercase_template_block_size_the_launch_names_is_tuned_and_the_launch_follows(tmp_path):
    from tests.host_emulation import GXX, run_on_host
    assert parse_source(SAMPLES_MM).constants == {"block_size": 16}
    ts = {t.edit: t for t in tune_constants(SAMPLES_MM, "matrixMul_bs16", launch=SAMPLES_LAUNCH)}
    assert set(ts) == {"block_size 16 -> 8", "block_size 16 -> 32"}
    at32 = SAMPLES_MM.replace("<16, int>", "<32, int>")
    assert {t.edit for t in tune_constants(at32, "matrixMul_bs16", launch=SAMPLES_LAUNCH)} == \
        {"block_size 32 -> 16"}                                             # 64 x 64 threads: never
    wider = ts["block_size 16 -> 32"].source
    assert "matrixMul<32, int>(" in wider and parse_source(wider).constants == {"block_size": 32}
    assert compiles(tmp_path, wider)
    # a name given two values in the file is no constant (which would the launch mean?)
    two = SAMPLES_MM + SAMPLES_MM.split("extern")[1].join(["extern", ""]).replace("bs16", "bs8").replace("<16,", "<8,")
    assert "block_size" not in parse_source(two).constants
    if GXX is None:
        return
    HA, WA, WB = 64, 96, 32
    outs = []
    for src in (SAMPLES_MM, wider):
        bs = parse_source(src).constants["block_size"]
        outs.append(run_on_host(tmp_path, f"bs{bs}", src, "matrixMul_bs16", {"C": HA * WB, "A": HA * WA, "B": WA * WB},
                                {"wA": WA, "wB": WB}, (WB // bs, HA // bs), (bs, bs), ("C",), (0,), threaded=True)[0])
    assert outs[0] == outs[1]             # the same products, summed in the same order of k


def test_the_launched_entry_of_several_gives_the_launch_its_block_size_and_it_is_tuned():
    """cuda-samples' form: three entries give block_size 8, 16 and 32; the spec launches the 16 one
    without a [tune] table. The launch reads the launched entry's value, the rules tune that entry's
    template argument, and the launch follows the candidate (bench/search_quality/matrixmul)."""
    from pathlib import Path

    from optiml.spec.load import load_spec
    here = Path(__file__).resolve().parents[1] / "bench" / "search_quality" / "matrixmul"
    spec = load_spec(here / "matrixMul_kernel.toml", here / "matrixMul_kernel.cu")
    src = (here / "matrixMul_kernel.cu").read_text()
    assert "block_size" not in parse_source(src).constants          # three values in the file
    assert parse_source(src, "matrixMul_bs32_64bit").constants["block_size"] == 32
    launch = (spec.launch.grid, spec.launch.block, spec.launch.shared_mem)
    ts = {t.edit: t for t in tune_constants(src, spec.entry, launch=launch)}
    assert set(ts) == {"block_size 16 -> 8", "block_size 16 -> 32"}
    wider = ts["block_size 16 -> 32"].source
    assert "matrixMul<32, size_t>(C, A, B, wA, wB);\n}\nextern \"C\" __global__ void matrixMul_bs32" in wider
    assert wider.count("matrixMul<8, size_t>") == 1                # the other entries are left as they were
    at = {s: spec.resolve_launch(spec.timing_sizes, spec.source_info(s)) for s in (src, wider)}
    assert (at[src].grid[:2], at[src].block[:2]) == ((256, 256), (16, 16))
    assert (at[wider].grid[:2], at[wider].block[:2]) == ((128, 128), (32, 32))


def test_a_kernel_writing_one_value_a_block_gets_no_block_knob():
    """partial[blockIdx.x] = ...: the block size decides what each output sums, so a knob (and the
    tuning after it) would change the outputs' layout; the chunked-partials rewrite is the move there."""
    from pathlib import Path
    here = Path(__file__).resolve().parents[1] / "bench" / "templates" / "rewrites"
    launch = (("cdiv(n, 256)",), (256,), 0)
    ts, why = tie_block_literal((here / "block_partial.cu").read_text(), "block_partial", launch)
    assert ts == [] and "one value a block (partial[blockIdx.x])" in why
    ts, why = tie_block_literal((here / "block_sum.cu").read_text(), "block_sum", launch)   # an atomic into one value: free
    assert [t.edit for t in ts] == ["knob OPTIML_BLOCK_SIZE = 256"] and why is None


@pytest.mark.parametrize("ty, edits", [("double", ["TILE 4 -> 2"]), ("long long", ["TILE 4 -> 2"]),
                                       ("size_t", ["TILE 4 -> 2"]), ("float", ["TILE 4 -> 2", "TILE 4 -> 8"])])
def test_shared_memory_is_counted_at_each_elements_size(ty, edits):
    """TILE * 1024 elements of shared memory: 32 KiB of doubles (8 bytes) at TILE 4, so 8 would be
    64 KiB, past the 48 KiB of static shared memory; of floats, 32 KiB at 8 fits."""
    src = (f"#define TILE 4\n__global__ void k({ty}* x) {{ __shared__ {ty} s[TILE * 1024]; s[threadIdx.x] = "
           "x[threadIdx.x]; __syncthreads(); x[threadIdx.x] = s[1023 - threadIdx.x]; }\n")
    assert [t.edit for t in tune_constants(src, "k")] == edits


def test_a_block_tuned_stays_within_the_entrys_literal_launch_bounds():
    """``__launch_bounds__(256)`` on the entry: a block of 512 would not launch, so BLOCK 256 is tuned
    down only; without the bounds, up too."""
    src = ("#define BLOCK 256\n__global__ void __launch_bounds__(256) k(const float* x, float* y, int n) {\n"
           "    int i = blockIdx.x * BLOCK + threadIdx.x;\n    if (i < n) y[i] = x[i];\n}\n")
    assert {t.edit for t in tune_constants(src, "k", block=("BLOCK",))} == {"BLOCK 256 -> 128"}
    free = src.replace("__launch_bounds__(256) ", "")
    assert {t.edit for t in tune_constants(free, "k", block=("BLOCK",))} == {"BLOCK 256 -> 128", "BLOCK 256 -> 512"}
