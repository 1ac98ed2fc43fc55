"""The row-wise templates: a kernel that reduces one dimension of X and maps its elements with
the results is read as a program (statements, reductions, one map), whatever way it spreads a row
over threads; kernels that are something else are not, or are refused with the reason; the
templates compile behind the user's signature at points covering their spaces (nvcc here)."""
import re
from pathlib import Path

import pytest

from optiml.edits.templates import template_space, template_transforms
from optiml.edits.templates.rowwise import ROW_TEMPLATES, instantiate_rowwise, recognize_rowwise
from optiml.source import parse_source
from tests.test_edits_templates import LINEAR, LINEAR_SPEC, NVCC, arg, build_all, spec_of

BENCH = Path(__file__).resolve().parents[1] / "bench"
ROWS = spec_of(arg("x", "input", ("rows", "cols")), arg("y", "output", ("rows", "cols")), sizes=("rows", "cols"))
ROWS_W = spec_of(arg("x", "input", ("rows", "cols")), arg("w", "input", ("cols",)), arg("y", "output", ("rows", "cols")),
                 sizes=("rows", "cols"))
CHANNELS = spec_of(arg("x", "input", ("n", "c", "hw"), "bfloat16"), arg("y", "output", ("n", "c", "hw"), "bfloat16"),
                   sizes=("n", "c", "hw"))

NAIVE_SOFTMAX = """
__global__ void k(const float *x, float *y, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        float m = -1e30f;
        for (int j = 0; j < cols; ++j) m = max(m, x[(size_t)r * cols + j]);
        float s = 0.f;
        for (int j = 0; j < cols; ++j) s = s + expf(x[(size_t)r * cols + j] - m);
        for (int j = 0; j < cols; ++j) y[(size_t)r * cols + j] = expf(x[(size_t)r * cols + j] - m) / s;
    }
}
"""
TWO_LEVEL = """
__global__ void k(const float *x, const float *w, float *y, int rows, int cols) {
    __shared__ float part[32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const float *xr = x + (size_t)blockIdx.x * cols;
    float *yr = y + (size_t)blockIdx.x * cols;
    double ss = 0.0;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) ss += (double)xr[i] * xr[i];
    for (int o = 16; o; o >>= 1) ss += __shfl_down_sync(0xffffffffu, ss, o);
    if (lane == 0) part[wid] = ss;
    __syncthreads();
    if (wid == 0) {
        ss = lane < blockDim.x / 32 ? part[lane] : 0.0;
        for (int o = 16; o; o >>= 1) ss += __shfl_down_sync(0xffffffffu, ss, o);
        if (lane == 0) part[0] = ss;
    }
    __syncthreads();
    float total = part[0];
    float inv = rsqrtf(total / cols + 1e-6f);
    for (int i = threadIdx.x; i < cols; i += blockDim.x) yr[i] = xr[i] * inv * w[i];
}
"""
GRID_STRIDE_MIN = """
__global__ void k(const float *x, float *y, int rows, int cols) {
    __shared__ float sh[256];
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        float lo = INFINITY;
        for (int c = threadIdx.x; c < cols; c += 256) lo = fminf(lo, x[(size_t)row * cols + c]);
        sh[threadIdx.x] = lo;
        __syncthreads();
        for (int s = 128; s > 0; s >>= 1) {
            if (threadIdx.x < s) sh[threadIdx.x] = fminf(sh[threadIdx.x], sh[threadIdx.x + s]);
            __syncthreads();
        }
        lo = sh[0];
        __syncthreads();
        for (int c = threadIdx.x; c < cols; c += 256) y[(size_t)row * cols + c] = x[(size_t)row * cols + c] - lo;
    }
}
"""
L2_CHANNELS = """
#include <cuda_bf16.h>
__global__ void k(const __nv_bfloat16 *x, __nv_bfloat16 *y, int n, int c, int hw) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (long long)n * hw) return;
    const __nv_bfloat16 *p = x + (t / hw) * c * hw + t % hw;
    __nv_bfloat16 *q = y + (t / hw) * c * hw + t % hw;
    float ss = 0.f, mx = 0.f;
    for (int ch = 0; ch < c; ch++) {
        float v = __bfloat162float(p[(size_t)ch * hw]);
        ss += v * v;
        mx = fmaxf(mx, fabsf(v));
    }
    float inv = 1.f / fmaxf(sqrtf(ss), 1e-12f);
    for (int ch = 0; ch < c; ch++) q[(size_t)ch * hw] = __float2bfloat16(__bfloat162float(p[(size_t)ch * hw]) * inv);
}
"""
CENTER = """
__global__ void k(const float *x, float *y, int rows, int cols) {
    int r = blockIdx.x;
    float acc = 0;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) { acc = acc + x[r * cols + j]; }
    __shared__ float sh[128];
    sh[threadIdx.x] = acc; __syncthreads();
    for (int s = 64; s > 0; s /= 2) { if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s]; __syncthreads(); }
    float mean = sh[0] / cols;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) { float d = x[r * cols + j] - mean; y[r * cols + j] = d; }
}
"""
ONE_PASS_NORM = """
__global__ void k(const float *x, float *y, int rows, int cols) {
    __shared__ float sq[256], sm[256];
    const float *xr = x + (size_t)blockIdx.x * cols;
    float s = 0.f, q = 0.f;
    for (int i = threadIdx.x; i < cols; i += 256) { float v = xr[i]; s += v; q += v * v; }
    sq[threadIdx.x] = q;
    sm[threadIdx.x] = s;
    __syncthreads();
    for (int h = 128; h > 0; h >>= 1) {
        if (threadIdx.x < h) { sm[threadIdx.x] += sm[threadIdx.x + h]; sq[threadIdx.x] += sq[threadIdx.x + h]; }
        __syncthreads();
    }
    float mean = sm[0] / cols;
    float rstd = rsqrtf(sq[0] / cols - mean * mean + 1e-5f);
    for (int i = threadIdx.x; i < cols; i += 256) y[(size_t)blockIdx.x * cols + i] = (xr[i] - mean) * rstd;
}
"""


def bench(name):
    from optiml.spec.load import load_spec
    cu = next(BENCH.glob(f"templates/*/{name}.cu"))
    src = cu.read_text()
    return src, load_spec(cu.with_suffix(".toml"), cu, kernel_source=src)


@pytest.mark.parametrize("name,strided,reductions", [
    ("softmax_long", False, [("m", "fmaxf"), ("sum", "+")]),
    ("rmsnorm_strided", True, [("ss", "+")]),
    ("layernorm_rows", False, [("mean", "+"), ("var", "+")]),
    ("logsoftmax_warp", False, [("mx", "fmaxf"), ("s", "+")]),
    ("rmsnorm_half", False, [("acc", "+")]),
])
def test_the_bench_first_kernels_are_row_wise_programs(name, strided, reductions):
    src, spec = bench(name)
    op, why = recognize_rowwise(src, spec.entry, spec)
    assert op is not None, why
    assert op.strided == strided
    assert [a for s in op.steps if s.kind in ("reduce", "online") for a in s.accs] == reductions
    assert [s.kind for s in op.steps][-1] == "map"
    assert op.j_timing == spec.timing_sizes[op.j_size]
    assert "optiml_v" in op.steps[-1].body and "optiml_out" in op.steps[-1].body


@pytest.mark.parametrize("source,spec,reductions,map_has", [
    (NAIVE_SOFTMAX, ROWS, [("m", "max"), ("s", "+")], "expf(optiml_v - m) / s"),
    (TWO_LEVEL, ROWS_W, [("ss", "+")], "optiml_v * inv * optiml_s_w"),
    (GRID_STRIDE_MIN, ROWS, [("lo", "fminf")], "optiml_v - lo"),
    (L2_CHANNELS, CHANNELS, [("mx", "fmaxf"), ("ss", "+")], "__bfloat162float(optiml_v) * inv"),
    (CENTER, ROWS, [("acc", "+")], "optiml_out = d"),
])
def test_row_wise_kernels_of_other_shapes_are_recognised(source, spec, reductions, map_has):
    op, why = recognize_rowwise(source, "k", spec)
    assert op is not None, why
    assert [a for s in op.steps if s.kind in ("reduce", "online") for a in s.accs] == reductions
    assert map_has in op.steps[-1].body


def test_the_kernels_own_combining_is_replaced_by_the_reduced_scalar():
    op, _ = recognize_rowwise(TWO_LEVEL, "k", ROWS_W)
    stmts = [s.body for s in op.steps if s.kind == "stmt"]
    assert "float total = optiml_r1_ss;" in stmts        # part[0] after the kernel's own tree: the reduced value
    assert not any("__shfl" in s or "part" in s or "lane" in s for s in stmts)
    op, _ = recognize_rowwise(CENTER, "k", ROWS)
    assert "float mean = optiml_r1_acc / cols;" in [s.body for s in op.steps]
    op, why = recognize_rowwise(ONE_PASS_NORM, "k", ROWS)     # two sums in one loop, each through its own array
    assert [s.accs for s in op.steps if s.kind == "reduce"] == [(("q", "+"), ("s", "+"))], why
    stmts = [s.body for s in op.steps if s.kind == "stmt"]
    assert "float mean = optiml_r1_s / cols;" in stmts and \
        "float rstd = rsqrtf(optiml_r1_q / cols - mean * mean + 1e-5f);" in stmts


READ_BACK = NAIVE_SOFTMAX.replace(
    "for (int j = 0; j < cols; ++j) y[(size_t)r * cols + j] = expf(x[(size_t)r * cols + j] - m) / s;",
    "for (int j = 0; j < cols; ++j) y[(size_t)r * cols + j] = expf(x[(size_t)r * cols + j] - m);\n"
    "        for (int j = 0; j < cols; ++j) y[(size_t)r * cols + j] /= s;")
ROW_BIAS = NAIVE_SOFTMAX.replace("/ s;", "/ s + (float)r;")
CUMSUM = """
__global__ void k(const float *x, float *y, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float acc = 0.f;
    for (int j = 0; j < cols; j++) { acc += x[r * cols + j]; y[r * cols + j] = acc; }
}
"""
BREAKS = NAIVE_SOFTMAX.replace("m = max(m, x[(size_t)r * cols + j]);",
                               "{ if (x[(size_t)r * cols + j] > 1e20f) break; m = max(m, x[(size_t)r * cols + j]); }")
ELEMENTWISE = """
__global__ void k(const float *x, float *y, int rows, int cols) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * cols) y[i] = x[i] / (1.f + expf(-x[i]));
}
"""
RESIDUAL_SPEC = spec_of(arg("x", "input", ("rows", "cols")), arg("w", "input", ("rows", "cols")),
                        arg("y", "output", ("rows", "cols")), sizes=("rows", "cols"))
ROW_SUMS_SPEC = spec_of(arg("x", "input", ("rows", "cols")), arg("y", "output", ("rows",)), sizes=("rows", "cols"))
ROW_SUMS = """
__global__ void k(const float *x, float *y, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.f;
    for (int j = 0; j < cols; j++) s += x[r * cols + j];
    y[r] = s;
}
"""
LITERAL_BOUND = NAIVE_SOFTMAX.replace("j < cols", "j < 64")
FIRST_OUTSIDE = NAIVE_SOFTMAX.replace("float m = -1e30f;", "float m = x[(size_t)r * cols];")
STATS_OUT = GRID_STRIDE_MIN.replace("lo = sh[0];", "lo = sh[0];\n        if (threadIdx.x == 0) y[row] = lo;")
# a row's sum and a column's sum, side by side: loops over both of X's dimensions
ROW_AND_COLUMN = """
__global__ void k(const float *x, float *y, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.f, t = 0.f;
    for (int j = 0; j < cols; j++) s += x[r * cols + j];
    for (int i = 0; i < rows; i++) t += x[i * cols + r % cols];
    for (int j = 0; j < cols; j++) y[r * cols + j] = x[r * cols + j] * s + t;
}
"""


@pytest.mark.parametrize("source,spec,reason", [
    (ELEMENTWISE, ROWS, None),
    (LINEAR, LINEAR_SPEC, None),
    (READ_BACK, ROWS, "the output is read back"),
    (ROW_BIAS, ROWS, "uses r, the kernel's own index"),
    (CUMSUM, ROWS, "acc is read in its own loop"),
    (BREAKS, ROWS, "its own control flow"),
    (NAIVE_SOFTMAX, RESIDUAL_SPEC, None),
    (ROW_SUMS, ROW_SUMS_SPEC, None),
    (LITERAL_BOUND, ROWS, None),
    (FIRST_OUTSIDE, ROWS, "reads the row outside a loop over it"),
    (STATS_OUT, ROWS, "writes y outside the row's map"),
    (ROW_AND_COLUMN, ROWS, "loops run over more than one of X's dimensions"),
])
def test_what_is_not_a_row_wise_program_is_not_recognised(source, spec, reason):
    op, why = recognize_rowwise(source, "k", spec)
    assert op is None
    assert (why is None) if reason is None else (why is not None and reason in why), why


def test_the_instantiation_keeps_the_signature_and_carries_its_launch_and_mark():
    src, spec = bench("rmsnorm_strided")
    op, _ = recognize_rowwise(src, spec.entry, spec)
    out = instantiate_rowwise(src, op)
    sig = "rmsnorm_strided(const float *x, float *y, int batch, int features, int spatial, float eps)"
    assert sig in re.sub(r"\s+", " ", out)
    assert re.search(r'// optiml:launch \{grid = \["cdiv\(\(spatial\), .*\* \(\(batch\)\)"\]', out)
    assert template_space(out, spec.entry) == next(t for t in ROW_TEMPLATES if t.name == "col_reduce").tune_space
    assert parse_source(out).ok if hasattr(parse_source(out), "ok") else True


def test_the_rules_offer_the_row_template_at_the_seed():
    src, spec = bench("softmax_long")
    made, why = template_transforms(src, spec.entry, spec)
    assert why is None and [t.edit.split(" (")[0] for t in made] == ["template row_reduce"]
    assert "THREADS 1024" in made[0].edit and "VEC 4" in made[0].edit      # 32768 long rows fit at 1024 x 4 x 8


def test_a_start_point_keeps_the_timing_row_in_registers():
    for name in ("softmax_long", "layernorm_rows", "logsoftmax_warp", "rmsnorm_half", "rmsnorm_strided"):
        src, spec = bench(name)
        op, _ = recognize_rowwise(src, spec.entry, spec)
        t = next(t for t in ROW_TEMPLATES if t.strided == op.strided)
        p = t.start_for(op)
        assert t.tune_space.violated(p, [{}]) is None, (name, p)
        per_thread = (p["OPTIML_THREADS"] if not op.strided else p["OPTIML_FS"]) * p["OPTIML_ITEMS"] * \
            (p["OPTIML_VEC"] if not op.strided else 1)
        assert per_thread >= op.j_timing, (name, p)


def covering(t) -> list[dict]:
    """Points of ``t``'s space that between them take every value of every name."""
    pts, seen = [], set()
    for p in t.points():
        new = {(k, v) for k, v in p.items()} - seen
        if new:
            pts.append(p)
            seen |= new
    return pts


def test_points_covering_each_templates_space_compile_behind_the_first_kernels(tmp_path):
    """Points taking every value of every name behind an fp32 row, an fp16 row and a strided
    dimension; the start point behind the others (one nvcc run a half: every point of both spaces
    compiled once by hand, 357 and 144 points, 211 s and 60 s)."""
    if NVCC is None:
        pytest.skip("nvcc is not installed")
    sources = []
    for name in ("softmax_long", "rmsnorm_half", "rmsnorm_strided", "layernorm_rows", "logsoftmax_warp"):
        src, spec = bench(name)
        op, _ = recognize_rowwise(src, spec.entry, spec)
        t = next(t for t in ROW_TEMPLATES if t.strided == op.strided)
        pts = (covering(t) if name in ("softmax_long", "rmsnorm_half", "rmsnorm_strided") else []) + [t.start_for(op)]
        assert len(pts) >= 5 or name in ("layernorm_rows", "logsoftmax_warp")
        sources += [instantiate_rowwise(src, op, p, t.name).replace(f" {spec.entry}(", " k(") for p in pts]
    assert build_all(tmp_path, sources, "k") == []


def test_a_norms_weight_and_bias_along_the_row_are_read_as_vectors_like_the_row():
    src, spec = bench("layernorm_rows")
    op, _ = recognize_rowwise(src, spec.entry, spec)
    assert op.steps[-1].sides == (("beta", "float"), ("gamma", "float"))
    assert op.steps[-1].body == "optiml_out = (optiml_v - mean) * rstd * optiml_s_gamma + optiml_s_beta;"
    out = instantiate_rowwise(src, op, {"OPTIML_VEC": 4})
    assert "*reinterpret_cast<const optiml_vec<float, OPTIML_VEC> *>(gamma + optiml_j0)" in out
    strided = instantiate_rowwise(src, op, template="col_reduce")     # the strided layout reads them one by one
    assert "const float optiml_s_gamma = gamma[optiml_j];" in strided


def test_the_start_reads_sixteen_bytes_a_thread_whatever_the_element():
    for name, vec in (("rmsnorm_half", 8), ("softmax_long", 4)):
        src, spec = bench(name)
        op, _ = recognize_rowwise(src, spec.entry, spec)
        assert ROW_TEMPLATES[0].start_for(op)["OPTIML_VEC"] == vec


def test_a_kernel_the_recognition_did_not_foresee_gives_a_reason_not_a_crash(monkeypatch):
    import optiml.edits.templates.rowwise as rowwise

    def boom(*a, **k):
        raise AttributeError("'NoneType' object has no attribute 'type'")
    monkeypatch.setattr(rowwise, "recognize_rowwise", boom)
    src, spec = bench("softmax_long")
    made, why = template_transforms(src, spec.entry, spec)
    assert made == [] and why.startswith("not templated: reading the kernel as an operation failed (AttributeError")


# -- kernels a review wrote against the recognition (each once wrong, compiled badly or crashed)
BLOCK_SUM = """
#define THREADS 256
#define N 4
__device__ float warpReduceSum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}
__global__ void k(const float *x, float *y, int rows, int cols) {
    __shared__ float sh[THREADS / 32];
    int r = blockIdx.x, t = threadIdx.x;
    float s = 0.f;
    for (int c = t; c < cols; c += THREADS) s += __ldg(&x[(size_t)r * cols + c]) * N;
    s = warpReduceSum(s);
    if (t % 32 == 0) sh[t / 32] = s;
    __syncthreads();
    s = 0.f;
    for (int w = 0; w < THREADS / 32; w++) s += sh[w];
    float inv = 1.f / s;
    for (int c = t; c < cols; c += THREADS) y[(size_t)r * cols + c] = x[(size_t)r * cols + c] * inv;
}
"""


def test_helpers_macros_and_a_last_combining_loop_are_the_kernels_own_combining(tmp_path):
    op, why = recognize_rowwise(BLOCK_SUM, "k", ROWS)
    assert op is not None, why
    body = [s.body for s in op.steps]
    assert "optiml_p_s += optiml_v * N;" in body                  # __ldg(&x[...]) is the element
    assert not any("warpReduceSum" in b for b in body)             # the helper combines: dropped
    last = len(body) - 1 - body[::-1].index("s = optiml_r1_s;")
    assert body.index("s = 0.f;") < last < body.index("float inv = 1.f / s;")   # the last loop gives the sum back
    if NVCC is not None:                                            # THREADS and N do not clash with the helpers
        for c in ('', 'extern "C" '):
            src = BLOCK_SUM.replace("__global__ void k(", c + "__global__ void k(")
            assert build_all(tmp_path, [instantiate_rowwise(src, recognize_rowwise(src, "k", ROWS)[0])], "k") == []
        braced = BLOCK_SUM.replace("__global__ void k(", 'extern "C" {\n__global__ void k(') + "}\n"
        assert build_all(tmp_path, [instantiate_rowwise(braced, recognize_rowwise(braced, "k", ROWS)[0])], "k") == []


def test_a_gemm_entry_inside_extern_c_gets_its_helpers_outside(tmp_path):
    if NVCC is None:
        pytest.skip("nvcc is not installed")
    from optiml.edits.templates import instantiate_gemm, recognize_gemm
    src = 'extern "C" {\n' + LINEAR + "}\n"
    g, why = recognize_gemm(src, "linear_relu", LINEAR_SPEC)
    assert g is not None, why
    assert build_all(tmp_path, [instantiate_gemm(src, g, template="gemm_f32_warp")], "linear_relu") == []


SOFTMAX1 = NAIVE_SOFTMAX
WELFORD = """
__global__ void k(const float *x, float *y, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float mean = 0.f;
    for (int j = 0; j < cols; j++) { float d = x[r * cols + j] - mean; mean += d / (j + 1); }
    for (int j = 0; j < cols; j++) y[r * cols + j] = x[r * cols + j] - mean;
}
"""
TRANSFORMED_SHARED = GRID_STRIDE_MIN.replace("        lo = sh[0];\n",
                                             "        if (threadIdx.x == 0) sh[0] = 1.f / sh[0];\n        __syncthreads();\n"
                                             "        lo = sh[0];\n")
SIBLINGS = """
__global__ void k(const float *x, float *y, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float mean, var;
    { float s = 0.f; for (int j = 0; j < cols; j++) s += x[r * cols + j]; mean = s / cols; }
    { float s = 0.f; for (int j = 0; j < cols; j++) s += x[r * cols + j] * x[r * cols + j]; var = s / cols - mean * mean; }
    for (int j = 0; j < cols; j++) y[r * cols + j] = (x[r * cols + j] - mean) * rsqrtf(var + 1e-5f);
}
"""
TEMPLATED = "template <int B>\n" + NAIVE_SOFTMAX.replace("__global__", "__global__", 1)


@pytest.mark.parametrize("source,reason", [
    (SOFTMAX1.replace("x[(size_t)r * cols + j] - m) / s", "x[(size_t)r * cols + cols - 1 - j] - m) / s"),
     "is not the row's element"),
    (SOFTMAX1.replace("s = s + expf(x[(size_t)r * cols + j] - m)", "s = s + fabsf(x[(size_t)r * cols + j] - x[(size_t)r * cols + j + 1])"),
     "is not the row's element"),
    (SOFTMAX1.replace("for (int j = 0; j < cols; ++j) s = s", "for (int j = 0; j < cols; j += 2) s = s"), "by steps of j+=2"),
    (SOFTMAX1.replace("y[(size_t)r * cols + j] = expf", "if (m > 0.f) y[(size_t)r * cols + j] = expf"), "stored under a condition"),
    (SOFTMAX1.replace("float s = 0.f;", "float s = 0.f; int cnt = 0;").replace(
        "s = s + expf(x[(size_t)r * cols + j] - m);", "{ s = s + expf(x[(size_t)r * cols + j] - m); cnt++; }"), "counts in a loop"),
    (WELFORD, "mean is read in its own loop"),
    (SOFTMAX1.replace("float s = 0.f;", "if (m < -1e29f) return;\n        float s = 0.f;"), "a return that depends on the row"),
    (TRANSFORMED_SHARED, "holds something other than a reduction's partial results"),
    (SIBLINGS, "s is declared twice"),
    (SOFTMAX1.replace("y[(size_t)r * cols + j] = expf(x[(size_t)r * cols + j] - m) / s;",
                      "y[(size_t)r * cols + j] = *(&x[(size_t)r * cols + j]) / s;"), "the row's address is taken"),
    (SOFTMAX1.replace("for (int j = 0; j < cols; ++j) m = max", "for (int j = 1; j < cols; ++j) m = max"),
     "a loop over the row from 1 by ++j"),
    (SOFTMAX1.replace("float s = 0.f;", "for (int j = 0; j < cols; ++j) { float t = x[(size_t)r * cols + j]; }\n"
                      "        float s = 0.f;"), "a loop over the row that neither reduces nor writes"),
    (SOFTMAX1.replace("s = s + expf(x[(size_t)r * cols + j] - m)", "s = expf(x[(size_t)r * cols + j] - m)"),
     "s = expf(x[(size_t)r * cols + j] - m) is not an accumulation"),
    (SOFTMAX1.replace("float s = 0.f;", "switch (rows) { default: break; }\n        float s = 0.f;"),
     "a statement optiml's row templates do not model: switch (rows)"),
    (SOFTMAX1.replace("float s = 0.f;", "int q = 0; do { q++; } while (q < 2);\n        float s = 0.f;"),
     "a statement optiml's row templates do not model: do { q++; }"),
])
def test_programs_the_templates_would_run_differently_are_refused(source, reason):
    op, why = recognize_rowwise(source, "k", ROWS)
    assert op is None and why is not None and reason in why, why


def test_a_template_kernel_and_a_second_output_are_refused():
    assert recognize_rowwise(TEMPLATED, "k", ROWS) == (None, "not templated: the entry is a C++ template")
    two = SOFTMAX1.replace("float s = 0.f;", "float s = 0.f;\n        y[0] = m;")
    assert "writes y outside the row's map" in recognize_rowwise(two, "k", ROWS)[1]


def test_the_strided_start_keeps_a_warp_of_columns():
    op = recognize_rowwise(L2_CHANNELS, "k", CHANNELS)[0]
    t = ROW_TEMPLATES[1]
    long = type(op)(**{**op.__dict__, "j_timing": 1000, "i_timing": 4096})
    assert t.tune_space.violated(t.start_for(long), [{}]) is None, t.start_for(long)


ATOMIC_TOTAL = """
__global__ void k(const float *x, float *y, int rows, int cols) {
    __shared__ float total;
    const float *xr = x + (size_t)blockIdx.x * cols;
    float s = 0.f;
    if (threadIdx.x == 0) total = 0.f;
    __syncthreads();
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += xr[c] * xr[c];
    atomicAdd(&total, s);
    __syncthreads();
    float r = rsqrtf(total / cols + 1e-6f);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) y[(size_t)blockIdx.x * cols + c] = xr[c] * r;
}
"""


def test_a_shared_total_filled_by_atomics_is_the_reduced_value(tmp_path):
    op, why = recognize_rowwise(ATOMIC_TOTAL, "k", ROWS)
    assert op is not None, why
    assert "float r = rsqrtf(optiml_r1_s / cols + 1e-6f);" in [s.body for s in op.steps]
    if NVCC is not None:
        assert build_all(tmp_path, [instantiate_rowwise(ATOMIC_TOTAL, op)], "k") == []


@pytest.mark.parametrize("source,reason", [
    (NAIVE_SOFTMAX.replace("x[(size_t)r * cols + j] - m) / s", "x[(size_t)r * cols + 2 * j] - m) / s"), "is not the row's element"),
    (NAIVE_SOFTMAX.replace("y[(size_t)r * cols + j] =", "y[j] ="), "is not the row's element"),
    (NAIVE_SOFTMAX.replace("m = max(m, x[(size_t)r * cols + j]);", "m = max(m, x[(size_t)j * rows + r]);"), "is not the row's element"),
    (NAIVE_SOFTMAX.replace("m = max(m, x[(size_t)r * cols + j]);", "m = max(m, x[(size_t)r * cols + j]) * 0.5f;"), "is not an accumulation"),
    (BLOCK_SUM.replace("float inv = 1.f / s;", "float inv = 1.f / __shfl_sync(0xffffffffu, s, 0);"), "arithmetic around"),
    (BLOCK_SUM.replace("s += sh[w];", "s += sh[w] * 2.f;"), "arithmetic around"),
    (BLOCK_SUM.replace("s = 0.f;\n    for (int w = 0; w < THREADS / 32; w++) s += sh[w];", "s = sh[1];"), "arithmetic around"),
])
def test_programs_that_would_differ_found_by_a_second_review_are_refused(source, reason):
    op, why = recognize_rowwise(source, "k", ROWS)
    assert op is None and why is not None and reason in why, why


ROWS_SCALE = spec_of(arg("x", "input", ("rows", "cols")), arg("scale", "input", ("rows",)),
                     arg("y", "output", ("rows", "cols")), arg("eps", "scalar", value=1e-6), sizes=("rows", "cols"))
ROWS_EPS = spec_of(arg("x", "input", ("rows", "cols")), arg("y", "output", ("rows", "cols")),
                   arg("eps", "scalar", value=1e-6), sizes=("rows", "cols"))


@pytest.mark.parametrize("source, spec, reason", [
    # a per-row value folded into a kept scalar through the kernel's own index (once dropped silently)
    ("""__global__ void k(const float *x, const float *scale, float *y, int rows, int cols, float eps) {
  int r = blockIdx.x * blockDim.x + threadIdx.x; if (r >= rows) return;
  float ss = 0.f; for (int j = 0; j < cols; j++) ss += x[r * cols + j] * x[r * cols + j];
  float inv = rsqrtf(ss / cols + eps);
  inv *= scale[r];
  for (int j = 0; j < cols; j++) y[r * cols + j] = x[r * cols + j] * inv; }""", ROWS_SCALE, "changes inv"),
    # a shared scalar given a function of the sum, not the sum (once read back as the sum)
    ("""__global__ void k(const float *x, float *y, int rows, int cols, float eps) {
  __shared__ float stat[1]; int r = blockIdx.x, lane = threadIdx.x;
  float ss = 0.f; for (int j = lane; j < cols; j += 32) ss += x[r * cols + j] * x[r * cols + j];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (lane == 0) stat[0] = rsqrtf(ss / cols + eps);
  __syncwarp();
  float inv = stat[0];
  for (int j = lane; j < cols; j += 32) y[r * cols + j] = x[r * cols + j] * inv; }""", ROWS_EPS,
     "holds something other than a reduction's partial results"),
    # the tree's result read straight from shared memory inside the row's loops (once a compile error)
    ("""__global__ void k(const float *x, float *y, int rows, int cols) {
  __shared__ float smax[128]; int tid = threadIdx.x; const float *xr = x + (size_t)blockIdx.x * cols;
  float m = -INFINITY; for (int j = tid; j < cols; j += 128) m = fmaxf(m, xr[j]);
  smax[tid] = m; __syncthreads();
  for (int s = 64; s > 0; s >>= 1) { if (tid < s) smax[tid] = fmaxf(smax[tid], smax[tid + s]); __syncthreads(); }
  for (int j = tid; j < cols; j += 128) y[(size_t)blockIdx.x * cols + j] = expf(xr[j] - smax[0]); }""", ROWS,
     "reads smax, shared"),
])
def test_a_third_reviews_row_kernels_are_refused_with_the_reason(source, spec, reason):
    op, why = recognize_rowwise(source, "k", spec)
    assert op is None and why is not None and reason in why, why


def test_a_weight_read_through_ldg_is_the_weights_element_not_a_local_address():
    src = """__global__ void k(const float *x, const float *w, float *y, int rows, int cols) {
  int r = blockIdx.x * blockDim.x + threadIdx.x; if (r >= rows) return; size_t off = (size_t)r * cols;
  float ss = 0.f; for (int j = 0; j < cols; ++j) ss += x[off + j] * x[off + j];
  float inv = rsqrtf(ss / cols + 1e-6f);
  for (int j = 0; j < cols; ++j) y[off + j] = __ldg(&x[off + j]) * inv * __ldg(&w[j]); }"""
    op, why = recognize_rowwise(src, "k", ROWS_W)
    assert op is not None, why
    assert op.steps[-1].body == "optiml_out = optiml_v * inv * optiml_s_w;"

def test_only_a_max_then_a_sum_of_exponentials_against_it_becomes_one_online_step():
    op, _ = recognize_rowwise(NAIVE_SOFTMAX, "k", ROWS)
    assert [s.kind for s in op.steps] == ["stmt", "online", "map"] and op.steps[1].exp == "expf"
    other = NAIVE_SOFTMAX.replace("s = s + expf(x[(size_t)r * cols + j] - m)", "s = s + (x[(size_t)r * cols + j] - m)")
    op, _ = recognize_rowwise(other, "k", ROWS)
    assert "online" not in [s.kind for s in op.steps] and [s.kind for s in op.steps].count("reduce") == 2
    shifted = NAIVE_SOFTMAX.replace("s = s + expf(x[(size_t)r * cols + j] - m)", "s = s + expf(2.f * x[(size_t)r * cols + j] - m)")
    assert "online" not in [s.kind for s in recognize_rowwise(shifted, "k", ROWS)[0].steps]
    src, spec = bench("rmsnorm_strided")                 # a strided dimension: col_reduce keeps its passes
    assert "online" not in [s.kind for s in recognize_rowwise(src, spec.entry, spec)[0].steps]


def test_a_max_written_as_an_if_is_the_same_reduction():
    src = NAIVE_SOFTMAX.replace("for (int j = 0; j < cols; ++j) m = max(m, x[(size_t)r * cols + j]);",
                                "for (int j = 0; j < cols; ++j) { float v = x[(size_t)r * cols + j]; if (v > m) m = v; }")
    assert src != NAIVE_SOFTMAX
    op, why = recognize_rowwise(src, "k", ROWS)
    assert op is not None, why
    assert [a for s in op.steps if s.kind in ("reduce", "online") for a in s.accs] == [("m", "max"), ("s", "+")]
    mins = src.replace("float m = -1e30f;", "float m = 1e30f;").replace("if (v > m) m = v;", "if (m > v) m = v;")
    assert ("m", "min") in [a for s in recognize_rowwise(mins, "k", ROWS)[0].steps for a in s.accs]


# -- one thread folding the warps' partials into shared scalars (KernelBench-style block softmax)
FOLD = """__global__ void k(const float *x, float *y, int rows, int cols) {
    __shared__ float part[8];
    __shared__ float row_stat;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const float *xr = x + (size_t)blockIdx.x * cols;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) ss += xr[c] * xr[c];
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_down_sync(0xffffffff, ss, o);
    if (lane == 0) part[warp] = ss;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int w = 0; w < 8; w++) t += part[w];
        row_stat = STAT;
    }
    __syncthreads();
    float inv = READ;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) y[(size_t)blockIdx.x * cols + c] = xr[c] * inv;
}
"""


@pytest.mark.parametrize("stat, read, want, fold", [
    ("t", "rsqrtf(row_stat / cols + 1e-6f)", "float inv = rsqrtf(optiml_r1_ss / cols + 1e-6f);", "t += part[w];"),
    ("rsqrtf(t / cols + 1e-6f)", "row_stat", "float inv = (rsqrtf(optiml_r1_ss / cols + 1e-6f));", "t += part[w];"),
    # the sum's fold written as an assignment, either way round
    ("t", "rsqrtf(row_stat / cols + 1e-6f)", "float inv = rsqrtf(optiml_r1_ss / cols + 1e-6f);", "t = t + part[w];"),
    ("t", "rsqrtf(row_stat / cols + 1e-6f)", "float inv = rsqrtf(optiml_r1_ss / cols + 1e-6f);", "t = part[w] + t;"),
])
def test_one_thread_folding_the_warps_partials_into_a_shared_scalar_gives_the_reduced_value(tmp_path, stat, read, want,
                                                                                            fold):
    src = FOLD.replace("STAT", stat).replace("READ", read).replace("t += part[w];", fold)
    op, why = recognize_rowwise(src, "k", ROWS)
    assert op is not None, why
    assert want in [s.body for s in op.steps]
    if NVCC is not None:
        assert build_all(tmp_path, [instantiate_rowwise(src, op)], "k") == []


@pytest.mark.parametrize("source, reason", [
    # the partials of a sum folded with a max: not the sum
    (FOLD.replace("STAT", "t").replace("READ", "row_stat").replace("t += part[w];", "t = fmaxf(t, part[w]);"),
     "a branch optiml's row templates do not model"),
    # the partials of a max folded with a sum: not the max
    (FOLD.replace("STAT", "t").replace("READ", "row_stat").replace("ss += xr[c] * xr[c];", "ss = fmaxf(ss, xr[c]);")
     .replace("ss += __shfl_down_sync", "ss = fmaxf(ss, __shfl_down_sync").replace("ss, o);", "ss, o));")
     .replace("t += part[w];", "t = t + part[w];"), "a branch optiml's row templates do not model"),
    # the fold reads something else besides the partials
    (FOLD.replace("STAT", "t").replace("READ", "row_stat").replace("t += part[w];", "t += part[w] * 2.f;"),
     "a branch optiml's row templates do not model"),
    # the shared scalar given a value of the thread's own partial, not the fold
    (FOLD.replace("STAT", "t + ss").replace("READ", "row_stat"), "a branch optiml's row templates do not model"),
    # thread 0 also writes the output
    (FOLD.replace("STAT", "t").replace("READ", "row_stat").replace("row_stat = t;", "row_stat = t; y[0] = t;"),
     "writes y outside the row's map"),
])
def test_folds_that_are_not_the_reduction_are_refused(source, reason):
    op, why = recognize_rowwise(source, "k", ROWS)
    assert op is None and why is not None and reason in why, why


SEEDED = """__global__ void k(const float *x, float *y, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        float m = x[SEED];
        for (int j = 1; j < cols; j++) m = fmaxf(m, x[r * cols + j]);
        float s = 0.f;
        for (int j = 0; j < cols; j++) s += expf(x[r * cols + j] - m);
        for (int j = 0; j < cols; j++) y[r * cols + j] = expf(x[r * cols + j] - m) / s;
    }
}
"""


def test_a_max_seeded_from_the_rows_first_element_is_the_max_from_minus_infinity():
    op, why = recognize_rowwise(SEEDED.replace("SEED", "r * cols"), "k", ROWS)
    assert op is not None, why
    assert [s.kind for s in op.steps] == ["stmt", "online", "map"] and op.steps[0].body == "float m = -INFINITY;"


@pytest.mark.parametrize("seed", ["r * cols + 1", "0", "r"])
def test_a_max_seeded_from_another_element_stays_refused(seed):
    op, why = recognize_rowwise(SEEDED.replace("SEED", seed), "k", ROWS)
    assert op is None and "reads the row outside a loop" in why, why


TWO_LEVEL_NORM = """__global__ void k(const float *x, float *y, int rows, int cols) {
    __shared__ float warp_sums[32];
    __shared__ float norm;
    const float *xr = x + (size_t)blockIdx.x * cols;
    float sum = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) { float v = xr[j]; sum += v * v; }
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xffffffff, sum, off);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = (threadIdx.x < blockDim.x / 32) ? warp_sums[threadIdx.x] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffff, v, off);
        if (threadIdx.x == WRITER) norm = sqrtf(v);
    }
    __syncthreads();
    for (int j = threadIdx.x; j < cols; j += blockDim.x) y[(size_t)blockIdx.x * cols + j] = xr[j] / norm;
}
"""


def test_the_first_warp_shuffling_the_warps_partials_gives_the_reduced_value():
    """The usual two-level block sum (shuffles, a slot a warp, the first warp shuffling the slots,
    thread 0 writing a shared scalar): KernelBench 39 as often written, once refused."""
    op, why = recognize_rowwise(TWO_LEVEL_NORM.replace("WRITER", "0"), "k", ROWS)
    assert op is not None, why
    assert op.steps[-1].body == "optiml_out = optiml_v / (sqrtf(optiml_r1_sum));"


def test_a_shared_scalar_written_by_another_lane_after_shfl_down_is_refused():
    op, why = recognize_rowwise(TWO_LEVEL_NORM.replace("WRITER", "1"), "k", ROWS)
    assert op is None and why is not None, why


@pytest.mark.parametrize("name", ["softmax_kb", "layernorm_rows"])
def test_the_cluster_form_spreads_a_row_over_a_cluster_and_compiles(tmp_path, name):
    """row_cluster (row_reduce.cu.j2 with `cluster`): a row a cluster of CLUSTER blocks, the launch
    CLUSTER blocks a row, each block a part of the row, the reductions through the cluster's shared
    memory, only rank 0 storing a row's one value; it compiles for sm_90 at its start and at points
    across its space (the host emulation has no clusters: the GPU verifies what it computes). It is not
    offered for a layout by default; the plain row_reduce of the same kernel has no cluster code."""
    folder = "operations"
    k = Path(__file__).resolve().parents[1] / "bench" / "templates" / folder / f"{name}.cu"
    from optiml.spec.load import load_spec
    src = k.read_text()
    spec = load_spec(k.with_suffix(".toml"), k, kernel_source=src)
    op, why = recognize_rowwise(src, spec.entry, spec)
    assert op is not None, why
    t = next(t for t in ROW_TEMPLATES if t.name == "row_cluster")
    start = t.start_for(op)
    assert start["OPTIML_ROWS"] == 1 and start["OPTIML_CLUSTER"] in (2, 4, 8) and start in t.points()
    out = instantiate_rowwise(src, op, start, "row_cluster")
    assert "__cluster_dims__(OPTIML_CLUSTER, 1, 1)" in out and "optiml_cluster_allreduce" in out
    assert parse_source(out).launch.grid == (f"({op.o_size}) * OPTIML_CLUSTER",)
    plain = instantiate_rowwise(src, op)
    assert not any(w in plain for w in ("__cluster_dims__", "optiml_cluster_allreduce", "optiml_rank"))
    assert "row_cluster" not in [x.name for x in ROW_TEMPLATES if not x.cluster]
    if NVCC is None:
        pytest.skip("nvcc is not installed")
    from concurrent.futures import ThreadPoolExecutor

    from tests.test_edits_templates import FRONT_ONLY, build
    # each alone (their helpers would clash in one file); the start optimised, the rest FRONT_ONLY
    points = [start, t.points()[-1]]
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda ip: build(tmp_path, instantiate_rowwise(src, op, ip[1], "row_cluster"), f"c{ip[0]}",
                                              ("-arch=sm_90", *(FRONT_ONLY if ip[0] else ()))), enumerate(points)))
    assert all(r.returncode == 0 for r in runs), [r.stderr[-400:] for r in runs if r.returncode][:1]


def test_the_cluster_form_is_offered_beside_the_row_template_on_hopper_where_a_block_cannot_hold_the_row():
    """On sm_90 and later, rows longer than the plain template's start keeps in registers (KernelBench
    23's 393216 floats) get row_cluster beside row_reduce, at a start that holds the row on chip with
    no point past the registers; short rows (4096) and older GPUs get row_reduce alone."""
    from optiml.edits.templates import template_transforms
    from optiml.spec.load import load_spec
    ops = Path(__file__).resolve().parents[1] / "bench" / "templates" / "operations"

    def offered(name, arch):
        k = ops / f"{name}.cu"
        src = k.read_text()
        spec = load_spec(k.with_suffix(".toml"), k, kernel_source=src)
        return [t.edit for t in template_transforms(src, spec.entry, spec, arch=arch)[0]]

    long_rows = offered("softmax_kb", "sm_90")
    assert [e.split(" (")[0] for e in long_rows] == ["template row_reduce", "template row_cluster", "template row_grid"]
    # two blocks an SM, each its part half in registers, half in shared memory, ptxas held to two blocks
    assert all(w in long_rows[1] for w in ("CLUSTER 8", "THREADS 512", "VEC 4", "ITEMS 12", "SITEMS 12", "MINB 2")), long_rows[1]
    assert all(w in long_rows[2] for w in ("GROUP 8", "THREADS 512", "VEC 4", "ITEMS 12", "SITEMS 12", "MINB 2")), long_rows[2]
    # before Hopper no clusters, but a group of blocks (sm_70: __nanosleep and acquire loads); before that neither
    assert [e.split(" (")[0] for e in offered("softmax_kb", "sm_80")] == ["template row_reduce", "template row_grid"]
    assert [e.split(" (")[0] for e in offered("softmax_kb", "sm_70")] == ["template row_reduce", "template row_grid"]
    assert [e.split(" (")[0] for e in offered("softmax_kb", "sm_61")] == ["template row_reduce"]
    assert [e.split(" (")[0] for e in offered("layernorm_rows", "sm_90")] == ["template row_reduce"]
    t = next(t for t in ROW_TEMPLATES if t.name == "row_cluster")
    assert all(p["OPTIML_THREADS"] * p["OPTIML_VEC"] * p["OPTIML_ITEMS"] <= 49152 and
               p["OPTIML_THREADS"] * p["OPTIML_VEC"] * p["OPTIML_SITEMS"] <= 49152 for p in t.points())


def test_a_softmaxs_description_counts_its_max_and_sum_read_in_one_pass():
    """A softmax read as one online step (its max and its sum of exponentials in one pass) is
    described with its two reductions, as the trajectory shows it: it read "0 reductions ()"."""
    from optiml.spec.load import load_spec
    k = Path(__file__).resolve().parents[1] / "bench" / "templates" / "operations" / "softmax_kb.cu"
    src = k.read_text()
    spec = load_spec(k.with_suffix(".toml"), k, kernel_source=src)
    op, why = recognize_rowwise(src, spec.entry, spec)
    assert op is not None and any(s.kind == "online" for s in op.steps), why
    assert "2 reductions (fmaxf, sum) then an elementwise map" in op.describe()


def _row_op(name):
    from optiml.spec.load import load_spec
    k = Path(__file__).resolve().parents[1] / "bench" / "templates" / "operations" / f"{name}.cu"
    src = k.read_text()
    spec = load_spec(k.with_suffix(".toml"), k, kernel_source=src)
    op, why = recognize_rowwise(src, spec.entry, spec)
    assert op is not None, why
    return src, op


@pytest.mark.parametrize("name", ["softmax_kb", "layernorm_rows"])
def test_the_grid_form_spreads_a_row_over_a_group_of_blocks_meeting_in_global_memory_and_compiles(tmp_path, name):
    """row_grid (row_reduce.cu.j2 with `grid`): GROUP blocks a row, each block its ticket (its row and
    rank), its part of the row, the reductions through the slot's partial results, every block at its
    end leaving the slot and counting itself done; the group at most the GPU's SMs (%nsmid); only rank 0
    stores a row's one value. It compiles for sm_80 at its start and at the ends of its space (the host
    emulation runs blocks one after another: the GPU verifies what it computes)."""
    src, op = _row_op(name)
    t = next(t for t in ROW_TEMPLATES if t.name == "row_grid")
    assert t.grouped and t.split and not t.cluster
    start = t.start_for(op)
    assert start["OPTIML_ROWS"] == 1 and start in t.points()
    out = instantiate_rowwise(src, op, start, "row_grid")
    for w in ("atomicAdd(&optiml_g_ticket, 1u)", "optiml_grid_allreduce", "optiml_grid_leave(optiml_gs);",
              "optiml_grid_done();", "%%nsmid", "#define OPTIML_GMAX 128", "ld.acquire.gpu"):
        assert w in out, w
    assert "__cluster_dims__" not in out and "optiml_cluster_allreduce" not in out
    assert parse_source(out).launch.grid == (f"({op.o_size}) * OPTIML_GROUP",)
    plain = instantiate_rowwise(src, op)
    assert not any(w in plain for w in ("optiml_grid", "optiml_g_ticket", "optiml_rank"))
    cluster = instantiate_rowwise(src, op, None, "row_cluster")
    assert "optiml_grid" not in cluster and "optiml_g_ticket" not in cluster
    if NVCC is None:
        pytest.skip("nvcc is not installed")
    from concurrent.futures import ThreadPoolExecutor

    from tests.test_edits_templates import FRONT_ONLY, build
    points = [start, t.points()[0], t.points()[-1]]
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda ip: build(tmp_path, instantiate_rowwise(src, op, ip[1], "row_grid"), f"g{ip[0]}",
                                              ("-arch=sm_80", *(FRONT_ONLY if ip[0] else ()))), enumerate(points)))
    assert all(r.returncode == 0 for r in runs), [r.stderr[-400:] for r in runs if r.returncode][:1]


def test_the_grid_forms_start_fills_the_gpu_with_few_rows_and_holds_a_part_on_chip():
    """The start of row_grid: the smallest group whose blocks hold their part of the row on chip
    (two blocks an SM where they can), but with few rows a group large enough that the rows' blocks
    fill a large GPU (128 blocks): KernelBench 40's 16 rows of 4 M values take groups of 128 (a
    part of 32 K values, two blocks an SM), 4 rows of KernelBench 23's length groups of 32, and its
    4096 rows groups of 8."""
    import dataclasses
    _, op = _row_op("softmax_kb")
    t = next(t for t in ROW_TEMPLATES if t.name == "row_grid")
    many = t.start_for(dataclasses.replace(op, o_timing=4096))
    assert many["OPTIML_GROUP"] == 8 and many["OPTIML_MINB"] == 2, many
    few = t.start_for(dataclasses.replace(op, o_timing=4))
    assert few["OPTIML_GROUP"] == 32, few
    kb40 = t.start_for(dataclasses.replace(op, o_timing=16, j_timing=64 * 256 * 256))
    assert kb40["OPTIML_GROUP"] == 128 and kb40["OPTIML_MINB"] == 2, kb40
    part = 64 * 256 * 256 // 128
    assert part <= kb40["OPTIML_THREADS"] * kb40["OPTIML_VEC"] * (kb40["OPTIML_ITEMS"] + kb40["OPTIML_SITEMS"])
    # the cluster form ignores the rows: its clusters are as small as hold the row
    c = next(t for t in ROW_TEMPLATES if t.name == "row_cluster")
    assert c.start_for(dataclasses.replace(op, o_timing=4))["OPTIML_CLUSTER"] == 8


def test_the_split_forms_read_a_row_held_on_chip_and_write_with_the_streaming_hint(tmp_path):
    """CS: where a block's part of the row stays on chip (read once), the split forms read it and write
    the output with the streaming hint (.cs, evicted from L2 first), so that what every row reads
    again (LayerNorm's weight and bias) stays in L2; where no point holds the part, the row is read
    twice, the second time from L2, and the start leaves the hint out. With CS 0 the plain loads and
    stores are kept. Each compiles, with vectors of 4 to 32 bytes."""
    import dataclasses
    src, op = _row_op("layernorm_rows")
    for name in ("row_grid", "row_cluster"):
        t = next(t for t in ROW_TEMPLATES if t.name == name)
        assert t.space["OPTIML_CS"] == [0, 1]
        assert t.start_for(op)["OPTIML_CS"] == 1
        assert t.start_for(dataclasses.replace(op, j_timing=1 << 30))["OPTIML_CS"] == 0
    t = next(t for t in ROW_TEMPLATES if t.name == "row_grid")
    start = t.start_for(op)
    hinted = instantiate_rowwise(src, op, start, "row_grid")
    plain = instantiate_rowwise(src, op, dict(start, OPTIML_CS=0), "row_grid")
    assert "#define OPTIML_CS 1" in hinted and "#define OPTIML_CS 0" in plain
    for out in (hinted, plain):
        assert "OPTIML_CACHED(optiml_it) = OPTIML_LOAD_X(optiml_xr + optiml_j0)" in out
        assert out.count("OPTIML_STORE_Y(optiml_yr + optiml_j0, optiml_o)") == 2
    assert "optiml_ld_cs" not in instantiate_rowwise(src, op) and "__stcs" not in instantiate_rowwise(src, op)
    if NVCC is None:
        pytest.skip("nvcc is not installed")
    from concurrent.futures import ThreadPoolExecutor

    from tests.test_edits_templates import FRONT_ONLY, build
    points = [dict(start, OPTIML_VEC=v, OPTIML_ITEMS=4, OPTIML_SITEMS=0, OPTIML_THREADS=256) for v in (1, 2, 8)]
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda ip: build(tmp_path, instantiate_rowwise(src, op, ip[1], "row_grid"), f"cs{ip[0]}",
                                              ("-arch=sm_80", *(FRONT_ONLY if ip[0] else ()))), enumerate(points)))
    assert all(r.returncode == 0 for r in runs), [r.stderr[-400:] for r in runs if r.returncode][:1]


def test_the_grid_form_is_not_offered_for_a_program_that_can_return_early():
    """Every block of a group must reach its end, where it frees its slot and counts itself done: a
    program holding a `return` would leave the next group (and the next launch) waiting, so it gets
    row_reduce and the cluster form only."""
    import dataclasses

    from optiml.edits.templates import _row_offers
    src, op = _row_op("softmax_kb")
    names = [t.edit.split(" (")[0] for t in _row_offers(src, op, "sm_90", "program")[0]]
    assert names == ["template row_reduce", "template row_cluster", "template row_grid"]
    steps = (op.steps[0], dataclasses.replace(op.steps[-1], body="if (optiml_v != optiml_v) return; " + op.steps[-1].body))
    early = dataclasses.replace(op, steps=op.steps[:-1] + steps[1:])
    names = [t.edit.split(" (")[0] for t in _row_offers(src, early, "sm_90", "program")[0]]
    assert names == ["template row_reduce", "template row_cluster"]


_L2 = "        for (int j = 0; j < cols; j++) s += expf(x[r * cols + j] - m);\n"
_L3 = "        for (int j = 0; j < cols; j++) y[r * cols + j] = expf(x[r * cols + j] - m) / s;\n"


@pytest.mark.parametrize("old, new, why", [
    ("        float s = 0.f;\n", "#if 1\n        float s = 0.f;\n#endif\n",
     "not templated: a preprocessor line inside the kernel: #if 1 float s = 0.f; #endif"),
    ("        float s = 0.f;\n", "        float s = 0.f;\n        int q = 0;\n        while (q < 2) q++;\n",
     "not templated: a loop optiml's row templates do not model: while (q < 2) q++;"),
    (_L3, "", "not row-wise: no loop over the row stores the output"),
    (_L3, _L3 + _L3, "not templated: the output is written by more than one loop, or a reduction follows it"),
    (_L2, _L2.replace("j++", "j += 2"), "not templated: a loop over the row by steps of j+=2"),
    (_L2, _L2.replace("- m);", "- m) + x[r * cols + j + 1];"), "not templated: x[r * cols + j + 1] is not the row's element j"),
    (_L3, _L3 + "        for (int j = 0; j < cols; j++) s += y[r * cols + j];\n",
     "not templated: the output is read back in a loop over the row"),
    (_L3, "        for (int j = 0; j < cols; j++) { s += x[r * cols + j]; y[r * cols + j] = s; }\n",
     "not templated: s is read in its own loop, not only accumulated"),
    (_L2, "        for (int j = 0; j < cols; j++) { s += expf(x[r * cols + j] - m); __syncthreads(); }\n",
     "not templated: a loop over the row with barriers or shuffles"),
    (_L2, _L2 + "        for (int j = 0; j < cols; j++) s += 1.0f;\n", "not templated: a loop over the row that does not read X"),
    (_L2, "        int j = 0;\n        for (; j < cols; j++) s += expf(x[r * cols + j] - m);\n",
     "not templated: a loop over the row without a start"),
    (_L2, "#pragma unroll 4\n" + _L2, None),            # a pragma is kept out of the way
])
def test_a_row_kernel_it_does_not_take_says_which_part_it_could_not_read(old, new, why):
    """The refusal a user reads for a thread-a-row softmax changed one part at a time."""
    source = SEEDED.replace("SEED", "r * cols")
    assert old in source
    op, said = recognize_rowwise(source.replace(old, new), "k", ROWS)
    assert said == why and (op is None) == (why is not None)


INT_ROWS = """
__global__ void k(const int *x, int *y, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        int s = 0;
        for (int j = 0; j < cols; ++j) s = s + x[(size_t)r * cols + j];
        for (int j = 0; j < cols; ++j) y[(size_t)r * cols + j] = x[(size_t)r * cols + j] - s;
    }
}
"""


@pytest.mark.parametrize("x_type, y_type, c_x, c_y", [("int32", "int32", "int", "int"),
                                                      ("float32", "int8", "float", "signed char")])
def test_a_row_program_over_element_types_the_templates_do_not_load_is_refused_naming_them(x_type, y_type, c_x, c_y):
    """A row-wise program read whole, over integers (or into int8): refused with the two types, as the
    templates load and store floating-point elements only."""
    spec = spec_of(arg("x", "input", ("rows", "cols"), x_type), arg("y", "output", ("rows", "cols"), y_type),
                   sizes=("rows", "cols"))
    src = INT_ROWS.replace("const int *x", f"const {c_x} *x").replace("int *y", f"{c_y} *y")
    assert recognize_rowwise(src, "k", spec) == (None, f"not templated: {x_type} into {y_type}")
