"""The flat templates: a kernel that handles one element ``i`` at a time is read as a
per-element program (elements, outputs, gathers, an atomic) and offered the elementwise or the
full-reduction template; kernels that are something else are not, or are refused with the reason;
the templates compile behind the user's signature at points covering their spaces (nvcc here)."""
import random
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from optiml.edits.rules import RulesProposer
from optiml.edits.templates import template_space, template_transforms
from optiml.edits.templates.flat import FLAT_TEMPLATES, instantiate_flat, recognize_flat
from optiml.edits.types import NodeView
from tests.host_emulation import GXX, run_on_host
from tests.test_edits_rowwise import covering
from tests.test_edits_templates import LINEAR, LINEAR_SPEC, NVCC, arg, build_all, spec_of

BENCH = Path(__file__).resolve().parents[1] / "bench"
N = spec_of(arg("x", "input", ("n",)), arg("y", "output", ("n",)), sizes=("n",))
N2 = spec_of(arg("x", "input", ("n",)), arg("y", "inout", ("n",)), arg("a", "scalar", dtype="float32", value=2.0),
             sizes=("n",))
SUM = spec_of(arg("x", "input", ("n",)), arg("out", "inout", (1,)), sizes=("n",))
SUM_BS = SimpleNamespace(args=SUM.args, launch=SimpleNamespace(grid=("cdiv(n, BS)",), block=("BS",)))  # a block macro
MSE = spec_of(arg("a", "input", ("n",)), arg("b", "input", ("n",)), arg("out", "inout", (1,)), sizes=("n",))
BIAS = spec_of(arg("x", "input", ("rows", "cols")), arg("b", "input", ("cols",)), arg("y", "output", ("rows", "cols")),
               sizes=("rows", "cols"))
HALF = spec_of(arg("x", "input", ("n",), "float16"), arg("y", "output", ("n",), "float16"), sizes=("n",))
LIT = SimpleNamespace(args=N.args, launch=SimpleNamespace(block=(256,)))

ONE = "__global__ void k(const float *x, float *y, int n) {{ int i = blockIdx.x * blockDim.x + threadIdx.x; {} }}"

# kernel, spec, kind, elems, outs, loaded, what the body must read as
RECOGNISED = [
    ("relu", ONE.format("if (i < n) y[i] = fmaxf(x[i], 0.f);"), N, "map", ["x"], ["y"], [],
     "optiml_o_y = fmaxf(optiml_e_x, 0.f);"),
    ("leaky if/else", ONE.format("if (i < n) { if (x[i] > 0.f) y[i] = x[i]; else y[i] = 0.01f * x[i]; }"), N, "map",
     ["x"], ["y"], [], "if (optiml_e_x > 0.f) optiml_o_y = optiml_e_x; else optiml_o_y = 0.01f * optiml_e_x;"),
    ("early return", ONE.format("if (i >= n) return; float v = x[i]; y[i] = tanhf(v);"), N, "map", ["x"], ["y"], [],
     "float v = optiml_e_x; optiml_o_y = tanhf(v);"),
    ("reversed guard", ONE.format("if (n > i) { y[i] = x[i] * x[i]; }"), N, "map", ["x"], ["y"], [], None),
    ("index in parentheses", ONE.replace("int i = blockIdx.x * blockDim.x + threadIdx.x;",
                                         "int i = (blockIdx.x * blockDim.x + threadIdx.x);").format(
        "if (i < n) y[i] = x[i] + 1.f;"), N, "map", ["x"], ["y"], [], "optiml_o_y = optiml_e_x + 1.f;"),
    ("grid-stride", "__global__ void k(const float *x, float *y, int n) { for (int i = blockIdx.x * blockDim.x + "
     "threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = x[i] * 3.f; }", N, "map", ["x"], ["y"], [], None),
    ("grid-stride over a stride variable", "__global__ void k(const float *x, float *y, int n) { int idx = threadIdx.x "
     "+ blockIdx.x * blockDim.x; int stride = blockDim.x * gridDim.x; for (int i = idx; i < n; i += stride) "
     "{ y[i] = sqrtf(fabsf(x[i])); } }", N, "map", ["x"], ["y"], [], None),
    ("saxpy", "__global__ void k(const float *x, float *y, float a, int n) { int i = blockIdx.x * blockDim.x + "
     "threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }", N2, "map", ["x"], ["y"], ["y"], None),
    ("compound", "__global__ void k(const float *x, float *y, float a, int n) { int i = blockIdx.x * blockDim.x + "
     "threadIdx.x; if (i < n) y[i] += a * x[i]; }", N2, "map", ["x"], ["y"], ["y"], "optiml_o_y += a * optiml_e_x;"),
    ("broadcast bias", "__global__ void k(const float *x, const float *b, float *y, int rows, int cols) { int i = "
     "blockIdx.x * blockDim.x + threadIdx.x; if (i < rows * cols) y[i] = fmaxf(x[i] + b[i % cols], 0.f); }", BIAS,
     "map", ["x"], ["y"], [], "optiml_o_y = fmaxf(optiml_e_x + b[i % cols], 0.f);"),
    ("fp16", "#include <cuda_fp16.h>\n__global__ void k(const __half *x, __half *y, int n) { int i = blockIdx.x * "
     "blockDim.x + threadIdx.x; if (i < n) y[i] = __float2half(fmaxf(__half2float(x[i]), 0.f)); }", HALF, "map",
     ["x"], ["y"], [], None),
    ("two in, two out", "__global__ void k(const float *p, const float *q, float *s, float *d, int n) { int i = "
     "blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { float a = p[i], b = q[i]; s[i] = a + b; d[i] = a - b; } }",
     spec_of(arg("p", "input", ("n",)), arg("q", "input", ("n",)), arg("s", "output", ("n",)),
             arg("d", "output", ("n",)), sizes=("n",)), "map", ["p", "q"], ["d", "s"], [], None),
    ("size_t index", "__global__ void k(const float *x, float *y, int n) { size_t i = (size_t)blockIdx.x * "
     "blockDim.x + threadIdx.x; if (i < (size_t)n) y[i] = expf(x[i]); }", N, "map", ["x"], ["y"], [], None),
    ("literal block", ONE.format("if (i < n) y[i] = -x[i];").replace("blockDim.x", "256"), LIT, "map", ["x"], ["y"],
     [], None),
    ("in place", "__global__ void k(float *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; "
     "if (i < n) x[i] = x[i] * 2.f; }", spec_of(arg("x", "inout", ("n",)), sizes=("n",)), "map", [], ["x"], ["x"],
     "optiml_o_x = optiml_o_x * 2.f;"),
    ("prelude and a loop of its own", "__global__ void k(const float *x, const float *c, float *y, float s, int n) { "
     "float inv = 1.0f / s; int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { float v = x[i] * inv, acc = 0.f; "
     "for (int k = 0; k < 4; k++) { acc = acc * v + c[k]; if (acc > 1e6f) break; } y[i] = acc; } }",
     spec_of(arg("x", "input", ("n",)), arg("c", "input", (4,)), arg("y", "output", ("n",)),
             arg("s", "scalar", dtype="float32", value=1.5), sizes=("n",)), "map", ["x"], ["y"], [], None),
    ("a macro's count", "#define COUNT (1 << 20)\n" + ONE.replace("int n)", "int unused)").format(
        "if (i < COUNT) y[i] = x[i] + 1.f;"), N, "map", ["x"], ["y"], [], None),
    ("a matrix with a row bias", "__global__ void k(const float *x, const float *b, float *y, int rows, int cols) { "
     "int r = blockIdx.y * blockDim.y + threadIdx.y; int c = blockIdx.x * blockDim.x + threadIdx.x; if (r < rows && "
     "c < cols) y[r * cols + c] = x[r * cols + c] * 2.f + b[c]; }", BIAS, "map", ["x"], ["y"], [],
     "optiml_o_y = optiml_e_x * 2.f + b[c];"),
    ("a matrix, early return, casts", "__global__ void k(const float *x, const float *b, float *y, int rows, int cols) { "
     "int c = threadIdx.x + blockIdx.x * blockDim.x; int r = threadIdx.y + blockDim.y * blockIdx.y; if (c >= cols || "
     "r >= rows) return; size_t at = (size_t)r * cols + c; y[(size_t)r * cols + c] = x[c + r * cols] - b[c] * r; }", BIAS,
     "map", ["x"], ["y"], [], None),
    # what a review found (each once wrong, a compile error or refused without need)
    ("a shorter array touched on some elements only", "__global__ void k(float *p, const float *g, float *b, float lr, "
     "int n, int nb) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { p[i] -= lr * g[i]; if (i < nb) "
     "b[i] -= lr * g[i]; } }", spec_of(arg("p", "inout", ("n",)), arg("g", "input", ("n",)), arg("b", "inout", ("nb",)),
                                        arg("lr", "scalar", dtype="float32", value=0.1), sizes=("n", "nb")),
     "map", ["g"], ["p"], ["p"], "optiml_o_p -= lr * optiml_e_g; if (i < nb) b[i] -= lr * optiml_e_g;"),
    ("a read behind a ternary", "__global__ void k(const float *a, float *y, int n, int m) { int i = blockIdx.x * "
     "blockDim.x + threadIdx.x; if (i < n) y[i] = (i < m) ? a[i] : 0.f; }",
     spec_of(arg("a", "input", ("m",)), arg("y", "output", ("n",)), sizes=("n", "m")), "map", [], ["y"], [],
     "optiml_o_y = (i < m) ? a[i] : 0.f;"),
    ("an optional bias", "__global__ void k(const float *x, const float *bias, float *y, int has_bias, int n) { int i = "
     "blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { float v = x[i]; if (has_bias) v += bias[i]; y[i] = v; } }",
     spec_of(arg("x", "input", ("n",)), arg("bias", "input", ("n",)), arg("y", "output", ("n",)),
             arg("has_bias", "scalar", dtype="int32", value=1), sizes=("n",)), "map", ["x"], ["y"], [], None),
    ("a conditional sum of a shorter array", "__global__ void k(const float *a, float *out, int n, int m) { int i = "
     "blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { if (i < m) atomicAdd(out, a[i]); } }",
     spec_of(arg("a", "input", ("m",)), arg("out", "inout", (1,)), sizes=("n", "m")), "reduce", [], [], [],
     "if (i < m) optiml_acc = optiml_acc + (OPTIML_ACC)(a[i]);"),
    ("a break inside a switch", "__global__ void k(const float *x, float *y, int mode, int n) { int i = blockIdx.x * "
     "blockDim.x + threadIdx.x; if (i < n) { float v = x[i]; switch (mode) { case 0: v = -v; break; default: break; } "
     "y[i] = v; } }", N, "map", ["x"], ["y"], [], None),
    ("auto index", ONE.replace("int i =", "auto i =").format("if (i < n) y[i] = x[i] + 1.f;"), N, "map", ["x"], ["y"],
     [], None),
    ("float3 elements", "__global__ void k(const float3 *x, float *y, int n) { int i = blockIdx.x * blockDim.x + "
     "threadIdx.x; if (i < n) { float3 v = x[i]; y[i] = v.x + v.y + v.z; } }", N, "map", [], ["y"], [], None),
    ("a member store", "__global__ void k(const float *a, float2 *z, int n) { int i = blockIdx.x * blockDim.x + "
     "threadIdx.x; if (i < n) { z[i].x = a[i]; z[i].y = -a[i]; } }", N, "map", ["a"], [], [], None),
    ("through a reference", "__device__ void relu_ip(float &v) { v = fmaxf(v, 0.f); }\n__global__ void k(float *y, "
     "int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) relu_ip(y[i]); }",
     spec_of(arg("y", "inout", ("n",)), sizes=("n",)), "map", [], [], [], "relu_ip(y[i]);"),
    ("a stride in the prelude", "__global__ void k(const float *x, float *y, int n) { int stride = blockDim.x * "
     "gridDim.x; int passes = stride > 0; for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) "
     "y[i] = x[i]; }", N, "map", ["x"], ["y"], [], None),
    ("a comment in the prelude", "__global__ void k(const float *x, float *y, float a, float b, int n) { float s = a // scale\n"
     "  * b; int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = s * x[i]; /* threadIdx is not used */ }",
     spec_of(arg("x", "input", ("n",)), arg("y", "output", ("n",)), arg("a", "scalar", dtype="float32", value=1.0),
             arg("b", "scalar", dtype="float32", value=2.0), sizes=("n",)), "map", ["x"], ["y"], [], None),
    ("arrays of arrays", "__global__ void k(const float *const *xs, float *y, int n) { int i = blockIdx.x * blockDim.x "
     "+ threadIdx.x; if (i < n) y[i] = xs[0][i] + xs[1][i]; }", N, "map", [], ["y"], [], None),
    ("a harmless macro, a lambda, a scalar named cg", "#define SQ(v) ((v) * (v))\n__global__ void k(const float *x, "
     "float *y, float cg, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { auto f = [](float v) "
     "{ return v > 0.f ? v : 0.f; }; y[i] = f(SQ(x[i])) * cg; } }", N, "map", ["x"], ["y"], [], None),
    ("__ldg", ONE.format("if (i < n) y[i] = __ldg(&x[i]) * 2.f;"), N, "map", [], ["y"], [], "optiml_o_y = __ldg(&x[i]) * 2.f;"),
    ("(void)atomicAdd", ONE.replace("float *y", "float *out").format("if (i < n) (void)atomicAdd(out, x[i]);"), SUM,
     "reduce", ["x"], [], [], None),
    ("a matrix's element named", "__global__ void k(const float *x, const float *b, float *y, int rows, int cols) { "
     "int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x; if (row < rows && "
     "col < cols) { int idx = row * cols + col; y[idx] = x[idx] + b[col]; } }", BIAS, "map", ["x"], ["y"], [],
     "int idx = row * cols + col; optiml_o_y = optiml_e_x + b[col];"),
    ("a grid-stride loop over a declared index", ONE.format("for (; i < n; i += blockDim.x * gridDim.x) y[i] = x[i];"),
     N, "map", ["x"], ["y"], [], None),
    ("a volatile output", ONE.replace("float *y", "volatile float *y").format("if (i < n) y[i] = x[i] * 2.f;"), N,
     "map", ["x"], [], [], "y[i] = optiml_e_x * 2.f;"),
    ("a member of an element in a constructor", "__global__ void k(const float2 *x, float *y, int n) { int i = "
     "blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { float t(x[i].x); y[i] = t; } }", N, "map", [], ["y"], [], None),
    ("another index declared from the element's", ONE.format("if (i < n) { int j = n - 1 - i; y[i] = x[i] + x[j]; }"),
     N, "map", ["x"], ["y"], [], "int j = n - 1 - i; optiml_o_y = optiml_e_x + x[j];"),
    ("a member of an element passed by value", "__global__ void k(const float2 *x, float *out, int n) { int i = "
     "blockIdx.x * blockDim.x + threadIdx.x; if (i < n) atomicAdd(out, hypotf(x[i].x, x[i].y)); }", SUM, "reduce",
     [], [], [], "optiml_acc = optiml_acc + (OPTIML_ACC)(hypotf(x[i].x, x[i].y));"),
    ("through a reference in a namespace", "namespace ops { __device__ void relu_ip(float &v) { v = fmaxf(v, 0.f); } }"
     "\n__global__ void k(float *y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) "
     "ops::relu_ip(y[i]); }", spec_of(arg("y", "inout", ("n",)), sizes=("n",)), "map", [], [], [], "ops::relu_ip(y[i]);"),
    ("a thread's sum added once", "__global__ void k(const float *x, float *out, int n) { float s = 0.0f; "
     "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) { float v = x[i]; "
     "if (v > 0.f) s += v * v; } atomicAdd(out, s); }", SUM, "reduce", ["x"], [], [],
     "float v = optiml_e_x; if (v > 0.f) optiml_acc = optiml_acc + (OPTIML_ACC)(v * v);"),
    ("a thread's sum scaled once", "__global__ void k(const float *x, float *out, int n) { float s = 0.0f; "
     "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) { float d = x[i] - 1.f; "
     "s += d * d; } atomicAdd(out, (s / n)); }", SUM, "reduce", ["x"], [], [],
     "float d = optiml_e_x - 1.f; optiml_acc = optiml_acc + (OPTIML_ACC)((d * d) / (n));"),
    ("a thread's sum through a block tree", "#define BS 128\n__global__ void k(const float *x, float *out, int n) { "
     "__shared__ float sh[BS]; int tid = threadIdx.x; float s = 0.f; "
     "for (int i = blockIdx.x * BS + tid; i < n; i += BS * gridDim.x) { float v = x[i]; s += v * v; } "
     "sh[tid] = s; __syncthreads(); for (int o = BS / 2; o > 0; o >>= 1) { if (tid < o) sh[tid] += sh[tid + o]; "
     "__syncthreads(); } if (tid == 0) atomicAdd(out, sh[0] / n); }", SUM_BS, "reduce", ["x"], [], [],
     "float v = optiml_e_x; optiml_acc = optiml_acc + (OPTIML_ACC)((v * v) / (n));"),
    ("a thread's sum through warp shuffles", "__global__ void k(const float *x, float *out, int n) { float s = 0.f; "
     "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) s += x[i]; "
     "for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffff, s, o); "
     "if ((threadIdx.x & 31) == 0) atomicAdd(out, s); }", SUM, "reduce", ["x"], [], [],
     "optiml_acc = optiml_acc + (OPTIML_ACC)(optiml_e_x);"),
    ("a local count and static_cast", "__global__ void k(const float *x, float *y, int rows, int cols) { const int "
     "total = rows * cols; int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < total) "
     "y[static_cast<size_t>(i)] = x[(i)] * 2.f; }", BIAS, "map", ["x"], ["y"], [], "optiml_o_y = optiml_e_x * 2.f;"),
    ("sum", ONE.replace("float *y", "float *out").format("if (i < n) atomicAdd(out, x[i]);"), SUM, "reduce", ["x"], [],
     [], "optiml_acc = optiml_acc + (OPTIML_ACC)(optiml_e_x);"),
    ("mse", "__global__ void k(const float *a, const float *b, float *out, int n) { int i = blockIdx.x * blockDim.x + "
     "threadIdx.x; if (i < n) { float d = a[i] - b[i]; atomicAdd(&out[0], d * d / n); } }", MSE, "reduce",
     ["a", "b"], [], [], "float d = optiml_e_a - optiml_e_b; optiml_acc = optiml_acc + (OPTIML_ACC)(d * d / n);"),
    ("conditional count", "__global__ void k(const float *x, int *out, int n) { int i = blockIdx.x * blockDim.x + "
     "threadIdx.x; if (i < n) { if (x[i] > 0.5f) atomicAdd(out, 1); } }",
     spec_of(arg("x", "input", ("n",)), arg("out", "inout", (1,), "int32"), sizes=("n",)), "reduce", ["x"], [], [], None),
    ("int max", "__global__ void k(const int *v, int *m, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; "
     "if (i < n) atomicMax(&m[0], v[i] * 3); }",
     spec_of(arg("v", "input", ("n",), "int32"), arg("m", "inout", (1,), "int32"), sizes=("n",)), "reduce", ["v"], [],
     [], "optiml_acc = max(optiml_acc, (OPTIML_ACC)(optiml_e_v * 3));"),
    ("int max of negatives", "__global__ void k(const int *v, int *m, int n) { int i = blockIdx.x * blockDim.x + "
     "threadIdx.x; if (i < n) atomicMax(m, v[i] - 100); }",
     spec_of(arg("v", "input", ("n",), "int32"), arg("m", "inout", (1,), "int32"), sizes=("n",)), "reduce", ["v"], [],
     [], None),
    ("grid-stride sum of squares", "__global__ void k(const float *x, float *out, int n) { for (int i = blockIdx.x * "
     "blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) atomicAdd(out, x[i] * x[i]); }", SUM, "reduce",
     ["x"], [], [], None),
]


@pytest.mark.parametrize("name, source, spec, kind, elems, outs, loaded, body", RECOGNISED, ids=[r[0] for r in RECOGNISED])
def test_one_element_a_thread_kernels_are_read_as_per_element_programs(name, source, spec, kind, elems, outs, loaded, body):
    op, why = recognize_flat(source, "k", spec)
    assert op is not None, why
    assert op.kind == kind
    assert [a for a, _ in op.elems] == elems and [a for a, _ in op.outs] == outs and list(op.loaded) == loaded
    if body is not None:
        assert re.sub(r"\s+", " ", op.body) == body
    assert not re.search(r"\b(threadIdx|blockIdx|atomic\w+)\b", op.body)


REFUSED = [
    ("a block tree", (BENCH / "templates" / "rewrites" / "block_sum.cu").read_text().replace("block_sum(", "k("), SUM,
     "threads cooperate outside the per-element code"),
    ("a write elsewhere", ONE.format("if (i < n) y[i + 1] = x[i];"), N, "a write of y at another index"),
    ("no per-element code", ONE.format("if (i < n) { }"), N, "not templated: the per-element code is empty"),
    ("an array passed whole", "__device__ float at(const float* p, int i) { return p[i]; }\n" +
     ONE.format("if (i < n) y[i] = at(x, i);"), N, "not templated: x is passed whole to a function in the per-element code"),
    ("pointer arithmetic", ONE.format("if (i < n) y[i] = *(x + i);"), N,
     "not templated: x is used as a pointer in the per-element code"),
    ("the total read back", "__global__ void k(const float *x, float *out, int n) { int i = blockIdx.x * blockDim.x + "
     "threadIdx.x; if (i < n) atomicAdd(out, x[i] + out[0]); }", SUM,
     "not templated: out, the atomic's target, is also read or written"),
    ("two atomic operations", "__global__ void k(const int *x, int *out, int n) { int i = blockIdx.x * blockDim.x + "
     "threadIdx.x; if (i < n) { atomicAdd(out, x[i]); atomicMax(out, x[i]); } }",
     spec_of(arg("x", "input", ("n",), "int32"), arg("out", "inout", (1,), "int32"), sizes=("n",)),
     "not templated: more than one atomic target or operation"),
    ("an output read elsewhere", ONE.format("if (i < n) y[i] = x[i] + (i > 0 ? y[i - 1] : 0.f);"), N,
     "y is written at the element and read at another index"),
    ("an early return inside", ONE.format("if (i < n) { if (x[i] < 0.f) return; y[i] = x[i]; }"), N, "leaves early"),
    ("a shuffle", ONE.format("if (i < n) y[i] = __shfl_down_sync(0xffffffffu, x[i], 1);"), N, "uses __shfl_down_sync"),
    ("the thread's own index", ONE.format("if (i < n) y[i] = x[i] * threadIdx.x;"), N, "uses threadIdx"),
    ("an atomic's result used", "__global__ void k(const float *x, float *y, int *cnt, int n) { int i = blockIdx.x * "
     "blockDim.x + threadIdx.x; if (i < n && x[i] > 0) { int p = atomicAdd(cnt, 1); y[p] = x[i]; } }", N,
     "the guard (i < n && x[i] > 0) is more than i < a count"),
    ("a stream compaction", "__global__ void k(const float *x, float *y, int *cnt, int n) { int i = blockIdx.x * "
     "blockDim.x + threadIdx.x; if (i < n) { int p = atomicAdd(cnt, 1); y[p] = x[i]; } }", N, "result of atomicAdd is used"),
    ("atomicExch", ONE.replace("float *y", "float *out").format("if (i < n) atomicExch(out, x[i]);"), SUM,
     "atomicExch"),
    ("a histogram", "__global__ void k(const int *x, int *h, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; "
     "if (i < n) atomicAdd(&h[x[i]], 1); }", spec_of(arg("x", "input", ("n",), "int32"), arg("h", "inout", (16,), "int32"),
                                                     sizes=("n",)), "a reduction adds to one value"),
    ("a map and an atomic", "__global__ void k(const float *x, float *y, float *out, int n) { int i = blockIdx.x * "
     "blockDim.x + threadIdx.x; if (i < n) { y[i] = x[i]; atomicAdd(out, x[i]); } }", N, "both writes elements"),
    ("a pointer", ONE.format("if (i < n) { const float *p = x + i; y[i] = *p; }"), N, "a pointer inside"),
    ("an element count the spec does not know", ONE.replace("int n)", "int n, int m)").format("if (i < m) y[i] = x[i];"),
     N, "uses m, which is not a scalar of the spec"),
    ("a transpose", "__global__ void k(const float *x, float *y, int rows, int cols) { int r = blockIdx.y * blockDim.y "
     "+ threadIdx.y; int c = blockIdx.x * blockDim.x + threadIdx.x; if (r < rows && c < cols) y[c * rows + r] = x[r * cols + c]; }",
     BIAS, "a write of y at another index"),
    ("a 2-D guard with more in it", "__global__ void k(const float *x, float *y, int rows, int cols) { int r = blockIdx.y * "
     "blockDim.y + threadIdx.y; int c = blockIdx.x * blockDim.x + threadIdx.x; if (r < rows && c < cols && c > 0) "
     "y[r * cols + c] = x[r * cols + c]; }", BIAS, "is more than c < a count"),
    ("no output", ONE.format("if (i < n) { float v = x[i]; (void)v; }"), N, None),
    ("a continue in a grid-stride loop", "__global__ void k(const float *x, float *y, int n) { for (int i = blockIdx.x "
     "* blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) { if (x[i] == 0.f) continue; y[i] = 1.f / x[i]; } }",
     N, "leaves early"),
    ("a continue inside a switch", "__global__ void k(const float *x, float *y, int mode, int n) { for (int i = blockIdx.x "
     "* blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) { switch (mode) { case 0: continue; } y[i] = x[i]; } }",
     N, "leaves early"),
    ("a prelude scalar changed", ONE.format("float acc = 0.f; if (i < n) { acc += x[i]; y[i] = acc; }").replace(
        "int i = blockIdx.x * blockDim.x + threadIdx.x; float acc", "float acc = 0.f; int i = blockIdx.x * blockDim.x + "
        "threadIdx.x; float unused").replace("float unused = 0.f; ", ""), N, "changes acc"),
    ("the index declared again", ONE.format("if (i < n) { float s = 0.f; for (int i = 0; i < 4; i++) s += x[i]; "
                                           "y[i] = s; }"), N, "declares i again"),
    ("a macro that returns", "#define SKIP_IF(c) if (c) return\n" + ONE.format("if (i < n) { SKIP_IF(x[i] != x[i]); "
                                                                              "y[i] = x[i] * 2.f; }"), N, "macro SKIP_IF"),
    ("a macro that stores", "#define SET_Y(v) y[i] = (v)\n" + ONE.format("if (i < n) { y[i] = x[i]; if (x[i] < 0.f) "
                                                                        "SET_Y(0.f); }"), N, "macro SET_Y"),
    # more kernels that are not per-element programs
    ("a scalar argument changed", "__global__ void k(float *y, unsigned seed, int n) { int i = blockIdx.x * blockDim.x "
     "+ threadIdx.x; if (i < n) { seed ^= i * 2654435761u; y[i] = (seed & 0xffffff) / 16777216.f; } }", N, "changes seed"),
    ("a prelude member changed", ONE.format("if (i < n) { acc.y += x[i]; y[i] = acc.y; }").replace(
        "int i = blockIdx", "float2 acc = make_float2(0.f, 0.f); int i = blockIdx"), N, "changes acc"),
    ("a prelude scalar changed by reference", "__device__ void addto(float &s, float v) { s += v; }\n" + ONE.format(
        "if (i < n) { addto(s, x[i]); y[i] = s; }").replace("int i = blockIdx", "float s = 0.f; int i = blockIdx"), N,
     "changes s"),
    ("the index changed by reference", "__device__ void bump(int &k) { k++; }\n" + ONE.format(
        "if (i < n) { bump(i); y[i] = x[i]; }"), N, "changes i"),
    ("a lambda that copies an output", ONE.format("if (i < n) { auto old = [=]() { return y[i]; }; y[i] = x[i] * 2.f; "
                                                  "y[i] += old(); }"), N, "a lambda in the per-element code uses an array"),
    ("a helper of a helper reads its lane", "__device__ int lane() { return threadIdx.x & 31; }\n__device__ float "
     "scale(float v) { return v * lane(); }\n" + ONE.format("if (i < n) y[i] = scale(x[i]);"), N, "calls scale"),
    ("asm", ONE.format('if (i < n) { unsigned l; asm("mov.u32 %0, %%laneid;" : "=r"(l)); y[i] = x[i] * l; }'), N,
     "asm"),
    ("a grid-stride loop by the grid's blocks", "__global__ void k(const float *x, float *out, int n) { for (int i = "
     "blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x) atomicAdd(out, x[i]); }", SUM, "not by the grid's"),
    ("a wider row than the guard's", "__global__ void k(const float *x, float *y, int rows, int cols) { int r = "
     "blockIdx.y * blockDim.y + threadIdx.y; int c = blockIdx.x * blockDim.x + threadIdx.x; if (r < rows && c < cols + 1) "
     "y[r * cols + 1 + c] = x[r * cols + 1 + c]; }", BIAS, "a write of y at another index"),
    ("a narrowing alias", ONE.format("if (i < n) { unsigned short j = i; y[j] = x[j] + 1.f; }"), N,
     "a write of y at another index"),
    ("a name of optiml's", ONE.format("if (i < n) { float optiml_e_x = 1.f; y[i] = x[i] + optiml_e_x; }"), N,
     "a name of optiml's templates"),
    ("a thread's sum read in its loop", "__global__ void k(const float *x, float *out, int n) { float s = 0.0f; "
     "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) { s += x[i]; "
     "if (s > 10.f) s = 0.f; } atomicAdd(out, s); }", SUM, "statements after the per-element loop"),
    ("an integer sum divided once", "__global__ void k(const int *x, int *out, int n) { int s = 0; "
     "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) s += x[i]; "
     "atomicAdd(out, s / n); }", SUM, "statements after the per-element loop"),
    ("a thread's sum scaled by what its loop changes", "__global__ void k(const float *x, float *out, int n, float g) "
     "{ float s = 0.0f; for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) { "
     "s += x[i]; g *= 0.5f; } atomicAdd(out, s * g); }", SUM, "statements after the per-element loop"),
    ("a thread's sum scaled by an element", "__global__ void k(const float *x, float *out, int n) { float s = 0.0f; "
     "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) s += x[i]; "
     "atomicAdd(out, s * x[0]); }", SUM, "statements after the per-element loop"),
    ("a thread's sum from one", "__global__ void k(const float *x, float *out, int n) { float s = 1.0f; "
     "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) s += x[i]; "
     "atomicAdd(out, s); }", SUM, "statements after the per-element loop"),
    ("a block tree of maxima", "#define BS 128\n__global__ void k(const float *x, float *out, int n) { __shared__ float sh[BS]; int tid = threadIdx.x; float s = 0.f; for (int i = blockIdx.x * BS + tid; i < n; i += BS * gridDim.x) s += x[i]; sh[tid] = s; __syncthreads(); for (int o = BS / 2; o > 0; o >>= 1) { if (tid < o) sh[tid] += sh[tid + o]; __syncthreads(); } if (tid == 0) atomicAdd(out, sh[0]); }".replace("sh[tid] += sh[tid + o]", "sh[tid] = fmaxf(sh[tid], sh[tid + o])"),
     SUM_BS, "threads cooperate"),
    ("a block tree's second partial", "#define BS 128\n__global__ void k(const float *x, float *out, int n) { __shared__ float sh[BS]; int tid = threadIdx.x; float s = 0.f; for (int i = blockIdx.x * BS + tid; i < n; i += BS * gridDim.x) s += x[i]; sh[tid] = s; __syncthreads(); for (int o = BS / 2; o > 0; o >>= 1) { if (tid < o) sh[tid] += sh[tid + o]; __syncthreads(); } if (tid == 0) atomicAdd(out, sh[0]); }".replace("atomicAdd(out, sh[0])", "atomicAdd(out, sh[1])"), SUM_BS,
     "threads cooperate"),
    ("a block tree added by thread 1", "#define BS 128\n__global__ void k(const float *x, float *out, int n) { __shared__ float sh[BS]; int tid = threadIdx.x; float s = 0.f; for (int i = blockIdx.x * BS + tid; i < n; i += BS * gridDim.x) s += x[i]; sh[tid] = s; __syncthreads(); for (int o = BS / 2; o > 0; o >>= 1) { if (tid < o) sh[tid] += sh[tid + o]; __syncthreads(); } if (tid == 0) atomicAdd(out, sh[0]); }".replace("if (tid == 0)", "if (tid == 1)"), SUM_BS, "threads cooperate"),
    ("a block tree of another value", "#define BS 128\n__global__ void k(const float *x, float *out, int n) { __shared__ float sh[BS]; int tid = threadIdx.x; float s = 0.f; for (int i = blockIdx.x * BS + tid; i < n; i += BS * gridDim.x) s += x[i]; sh[tid] = s; __syncthreads(); for (int o = BS / 2; o > 0; o >>= 1) { if (tid < o) sh[tid] += sh[tid + o]; __syncthreads(); } if (tid == 0) atomicAdd(out, sh[0]); }".replace("sh[tid] = s;", "sh[tid] = s * s;"), SUM_BS, "threads cooperate"),
    ("a template entry", "template <int B> __global__ void k(const float *x, float *y, int n) { int i = blockIdx.x * B "
     "+ threadIdx.x; if (i < n) y[i] = x[i]; }", N, "the entry is a C++ template"),
    ("a y index the element code uses", "__global__ void k(const float *x, float *y, int n) { "
     "int r = blockIdx.y * blockDim.y + threadIdx.y; int i = blockIdx.x * blockDim.x + threadIdx.x; "
     "if (i < n) y[i] = x[i] * (float)r; }", N, "not templated: the per-element code uses r, the kernel's own indexing"),
]


@pytest.mark.parametrize("name, source, spec, reason", REFUSED, ids=[r[0] for r in REFUSED])
def test_what_is_not_one_element_at_a_time_is_not_recognised(name, source, spec, reason):
    op, why = recognize_flat(source, "k", spec)
    assert op is None
    assert (why is None) if reason is None else (why is not None and reason in why), why


def test_a_gemm_and_a_row_wise_kernel_keep_their_own_templates():
    made, _ = template_transforms(LINEAR, "linear_relu", LINEAR_SPEC)
    assert {t.edit.split(" (")[0] for t in made} >= {"template gemm_f32_warp"}
    src, spec = bench("templates/rewrites", "softmax_long")
    assert [t.edit.split(" (")[0] for t in template_transforms(src, spec.entry, spec)[0]] == ["template row_reduce"]


def bench(folder, name):
    from optiml.spec import load_spec
    k = BENCH / folder / f"{name}.cu"
    src = k.read_text()
    return src, load_spec(k.with_suffix(".toml"), k, kernel_source=src)


def test_the_rules_offer_the_elementwise_template_at_the_seed_and_tune_its_space_below():
    src, spec = bench("templates/rewrites", "silu")
    made, why = template_transforms(src, spec.entry, spec)
    assert why is None and [t.edit for t in made] == ["template elementwise (THREADS 256, VEC 4, ITEMS 2)"]
    assert made[0].rationale.startswith("the kernel computes an elementwise map over n elements: x -> y; optiml's "
                                        "elementwise template (") and made[0].rationale.endswith("verified like any edit.")
    assert '// optiml:launch {grid = ["cdiv((n), OPTIML_THREADS * OPTIML_VEC * OPTIML_ITEMS)"]' in made[0].source
    t = next(t for t in FLAT_TEMPLATES if t.name == "elementwise")
    assert template_space(made[0].source, spec.entry) == t.tune_space
    prop = RulesProposer(templates=(src, made, why))
    node = NodeView(source=made[0].source, entry=spec.entry)
    for p in prop.propose(node, 6, random.Random(1)):
        if p.edit.startswith("OPTIML_"):
            point = {n: int(v) for n, v in re.findall(r"#define (OPTIML_[A-Z_]+) (\d+)\n", p.source) if n in t.space}
            assert point in t.points(), point


def test_a_count_from_a_macro_stays_the_macro_in_the_launch():
    src = "#define COUNT (1 << 20)\n" + ONE.format("if (i < COUNT) y[i] = x[i] + 1.f;")
    op, _ = recognize_flat(src, "k", N)
    assert op.n == "COUNT" and op.n_size == "COUNT"


def test_a_matrix_is_run_over_its_flat_index():
    src = next(r[1] for r in RECOGNISED if r[0] == "a matrix with a row bias")
    op, _ = recognize_flat(src, "k", BIAS)
    assert op.n == "(long long)(rows) * (cols)" and op.n_size == "(rows)*(cols)"     # no int overflow
    assert "optiml_r0 = optiml_i0 / optiml_w" in op.index_setup and "(long long)(cols)" in op.index_setup
    assert "const int r = (int)optiml_rr; const int c = (int)optiml_cc;" in op.index_decl


def test_a_full_reduction_is_offered_reduce_all_and_its_grid_is_capped():
    src = ONE.replace("float *y", "float *out").format("if (i < n) atomicAdd(out, x[i] * x[i]);")
    made, why = template_transforms(src, "k", SUM)
    assert why is None and [t.edit for t in made] == ["template reduce_all (THREADS 256, VEC 4, ITEMS 4, BLOCKS 1024)"]
    assert 'grid = ["min(cdiv((n), OPTIML_THREADS * OPTIML_VEC * OPTIML_ITEMS), OPTIML_BLOCKS)"]' in made[0].source
    assert "if (threadIdx.x == 0) atomicAdd(out, optiml_acc);" in made[0].source


def test_a_block_tree_sum_is_refused_with_its_reason_for_the_rules_to_show():
    src, spec = bench("templates/rewrites", "block_sum")
    made, why = template_transforms(src, spec.entry, spec)
    assert made == [] and "threads cooperate" in why


def test_points_covering_each_flat_space_compile_behind_varied_first_kernels(tmp_path):
    """Every value of every name behind an fp32 map, an fp16 map and a sum; the start point behind
    every recognised kernel above (one nvcc run)."""
    if NVCC is None:
        pytest.skip("nvcc is not installed")
    sources = []
    for name, source, spec, kind, *_ in RECOGNISED:
        op, _ = recognize_flat(source, "k", spec)
        t = next(t for t in FLAT_TEMPLATES if t.kind == op.kind)
        pts = [t.start_for(op)] + (covering(t) if name in ("relu", "fp16", "sum", "int max", "saxpy") else [])
        sources += [instantiate_flat(source, op, p, t.name) for p in pts]
    assert len(sources) > 40
    assert build_all(tmp_path, sources, "k") == []


# -- the elementwise template computes what the kernel computes (a CPU emulation, not a GPU) ------
HOST = [   # RECOGNISED's name, each array's count, the scalars, the original's grid and block, the outputs
    ("relu", dict(x=1003, y=1003), dict(n=1003), (4,), (256,), ("y",)),
    ("leaky if/else", dict(x=1003, y=1003), dict(n=1003), (4,), (256,), ("y",)),
    ("early return", dict(x=1003, y=1003), dict(n=1003), (8,), (128,), ("y",)),
    ("grid-stride", dict(x=1003, y=1003), dict(n=1003), (2,), (64,), ("y",)),
    ("saxpy", dict(x=1003, y=1003), dict(n=1003, a=1.5), (4,), (256,), ()),
    ("compound", dict(x=1003, y=1003), dict(n=1003, a=1.5), (4,), (256,), ()),
    ("broadcast bias", dict(x=7 * 149, b=149, y=7 * 149), dict(rows=7, cols=149), (5,), (256,), ("y",)),
    ("two in, two out", dict(p=1003, q=1003, s=1003, d=1003), dict(n=1003), (4,), (256,), ("s", "d")),
    ("in place", dict(x=1003), dict(n=1003), (4,), (256,), ()),
    ("prelude and a loop of its own", dict(x=1003, c=4, y=1003), dict(n=1003, s=1.5), (4,), (256,), ("y",)),
    ("a shorter array touched on some elements only", dict(p=1003, g=1003, b=500), dict(n=1003, nb=500, lr=0.25),
     (4,), (256,), ()),
    ("a read behind a ternary", dict(a=600, y=1003), dict(n=1003, m=600), (4,), (256,), ("y",)),
    ("an optional bias", dict(x=1003, bias=1003, y=1003), dict(n=1003, has_bias=0), (4,), (256,), ("y",)),
    ("a break inside a switch", dict(x=1003, y=1003), dict(n=1003, mode=0), (4,), (256,), ("y",)),
    ("a matrix with a row bias", dict(x=7 * 149, b=149, y=7 * 149), dict(rows=7, cols=149), (10, 1), (16, 16), ("y",)),
    ("a matrix, early return, casts", dict(x=7 * 149, b=149, y=7 * 149), dict(rows=7, cols=149), (10, 1), (16, 16),
     ("y",)),
    ("a matrix's element named", dict(x=7 * 149, b=149, y=7 * 149), dict(rows=7, cols=149), (10, 1), (16, 16), ("y",)),
    ("through a reference", dict(y=1003), dict(n=1003), (4,), (256,), ()),
    ("a volatile output", dict(x=1003, y=1003), dict(n=1003), (4,), (256,), ("y",)),
    ("a local count and static_cast", dict(x=7 * 149, y=7 * 149), dict(rows=7, cols=149), (5,), (256,), ("y",)),
    ("through a reference in a namespace", dict(y=1003), dict(n=1003), (4,), (256,), ()),
]


@pytest.mark.skipif(GXX is None, reason="g++ is not installed")
@pytest.mark.parametrize("name, counts, scalars, grid, block, poisoned", HOST, ids=[h[0] for h in HOST])
def test_the_elementwise_template_writes_what_the_kernel_writes_element_for_element(tmp_path, name, counts, scalars,
                                                                                     grid, block, poisoned):
    """Run on the CPU (tests/host_emulation.py: every thread in turn, under AddressSanitizer): the
    user's kernel, then the template at its start and at points with other vectors, items and
    threads, on aligned and misaligned arrays of a count no vector divides. Every array must end
    bit for bit the same (outputs poisoned before, so an element written or left differently shows)
    and nothing outside the arrays is touched."""
    source, spec = next((r[1], r[2]) for r in RECOGNISED if r[0] == name)
    op, why = recognize_flat(source, "k", spec)
    assert op is not None and op.kind == "map", why
    t = next(t for t in FLAT_TEMPLATES if t.name == "elementwise")
    from optiml.expr import evaluate
    n = int(evaluate(op.n_size, {k: v for k, v in scalars.items()}))
    want = run_on_host(tmp_path, "orig", source, "k", counts, scalars, grid, block, poisoned)    # offsets 0 and 1
    for i, p in enumerate([t.start_for(op), {"OPTIML_THREADS": 64, "OPTIML_VEC": 1, "OPTIML_ITEMS": 1},
                           {"OPTIML_THREADS": 128, "OPTIML_VEC": 8, "OPTIML_ITEMS": 4},
                           {"OPTIML_THREADS": 64, "OPTIML_VEC": 2, "OPTIML_ITEMS": 8}]):
        point = dict(t.start_for(op), **p)
        per_block = point["OPTIML_THREADS"] * point["OPTIML_VEC"] * point["OPTIML_ITEMS"]
        got = run_on_host(tmp_path, f"t{i}", instantiate_flat(source, op, p), "k", counts, scalars,
                          (-(-n // per_block),), (point["OPTIML_THREADS"],), poisoned)
        assert got == want, (name, p)


HOST_SUMS = [   # RECOGNISED's name, counts, scalars, the original's grid and block
    ("sum", dict(x=1003, out=1), dict(n=1003), (4,), (256,)),
    ("mse", dict(a=1003, b=1003, out=1), dict(n=1003), (4,), (256,)),
    ("conditional count", dict(x=1003, out=1), dict(n=1003), (4,), (256,)),
    ("int max", dict(v=1003, m=1), dict(n=1003), (4,), (256,)),
    ("int max of negatives", dict(v=1003, m=1), dict(n=1003), (4,), (256,)),      # not the identity 0
    ("grid-stride sum of squares", dict(x=1003, out=1), dict(n=1003), (3,), (64,)),
    ("a conditional sum of a shorter array", dict(a=600, out=1), dict(n=1003, m=600), (4,), (256,)),
    ("(void)atomicAdd", dict(x=1003, out=1), dict(n=1003), (4,), (256,)),
    ("a thread's sum added once", dict(x=1003, out=1), dict(n=1003), (3,), (128,)),
    ("a thread's sum scaled once", dict(x=1003, out=1), dict(n=1003), (3,), (128,)),
    ("a thread's sum through a block tree", dict(x=1003, out=1), dict(n=1003), (3,), (128,)),
    ("a thread's sum through warp shuffles", dict(x=1003, out=1), dict(n=1003), (3,), (128,)),
]


@pytest.mark.skipif(GXX is None, reason="g++ is not installed")
@pytest.mark.parametrize("name, counts, scalars, grid, block", HOST_SUMS, ids=[h[0] for h in HOST_SUMS])
def test_the_reduction_template_adds_what_the_kernel_adds(tmp_path, name, counts, scalars, grid, block):
    """On the CPU (threads one by one; the block all-reduce folded in thread order, see
    tests/host_emulation.py): the user's per-element atomics, then reduce_all at points with fewer
    blocks than the count needs (its grid-stride loop) and with other vectors, on aligned and
    misaligned arrays; the totals agree (floats to rounding, integers exactly) and the inputs are untouched."""
    source, spec = next((r[1], r[2]) for r in RECOGNISED if r[0] == name)
    op, why = recognize_flat(source, "k", spec)
    assert op is not None and op.kind == "reduce", why
    t = next(t for t in FLAT_TEMPLATES if t.name == "reduce_all")
    from optiml.expr import evaluate
    n = int(evaluate(op.n_size, dict(scalars)))
    cooperate = "__shared__" in source or "__shfl" in source      # the kernel's own block or warp combining
    wants = run_on_host(tmp_path, "orig", source, "k", counts, scalars, grid, block, threaded=cooperate)  # offsets 0, 1
    for i, p in enumerate([t.start_for(op), {"OPTIML_THREADS": 128, "OPTIML_VEC": 1, "OPTIML_ITEMS": 1, "OPTIML_BLOCKS": 2},
                           {"OPTIML_THREADS": 128, "OPTIML_VEC": 8, "OPTIML_ITEMS": 2, "OPTIML_BLOCKS": 3}]):
        point = dict(t.start_for(op), **p)
        per_block = point["OPTIML_THREADS"] * point["OPTIML_VEC"] * point["OPTIML_ITEMS"]
        blocks = min(-(-n // per_block), point["OPTIML_BLOCKS"])
        gots = run_on_host(tmp_path, f"t{i}", instantiate_flat(source, op, p), "k", counts, scalars,
                           (blocks,), (point["OPTIML_THREADS"],), allreduce=True)
        for want, got in zip(wants, gots):
            assert got[:-1] == want[:-1], (name, p)                   # the inputs, untouched
            w, g = want[-1].split(), got[-1].split()
            if "." in want[-1] or "p" in want[-1]:                    # floats, as %a
                assert float.fromhex(g[0]) == pytest.approx(float.fromhex(w[0]), rel=1e-5), (name, p)
            else:
                assert g == w, (name, p)
