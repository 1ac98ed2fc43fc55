"""Operation templates, the GEMM-like ones: kernels recognised from the spec and the source
(kernels it must recognise, kernels it must not, with the reason where one looked close), gemm_f32
instantiated behind the user's signature for every point of its default space and compiled with
nvcc, built through the runner with its own launch, and offered by the rules at the seed only.
Whether the template computes the right answer is checked on the GPU (verification, like any edit)."""
import random
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from optiml.edits.rules import RulesProposer
from optiml.edits.templates import (GEMM_TEMPLATES, instantiate_gemm, recognize_gemm, template_space, template_text,
                                    template_transforms)
from optiml.edits.types import NodeView
from optiml.source import parse_source

NVCC = shutil.which("nvcc")

LINEAR = """#include <cuda_runtime.h>
__global__ void linear_relu(const float* x, const float* w, const float* bias, float* y, int M, int N, int K) {
    int row = blockIdx.y * 16 + threadIdx.y;
    int col = blockIdx.x * 16 + threadIdx.x;
    if (row < M && col < N) {
        float sum = 0.0f;
        for (int k = 0; k < K; ++k) sum += x[row * K + k] * w[col * K + k];
        y[row * N + col] = fmaxf(sum + bias[col], 0.0f);
    }
}
"""

MATMUL = """__global__ void mm(const float *A, const float *B, float *C, int M, int N, int K) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r >= M || c >= N) return;
    float acc = 0.f;
    for (int i = 0; i < K; i++) {
        acc += A[(size_t)r * K + i] * B[(size_t)i * N + c];
    }
    C[(size_t)r * N + c] = acc;
}
"""


def arg(name, role, shape=(), dtype="float32", value=None):
    return SimpleNamespace(name=name, role=role, shape=tuple(shape), dtype=dtype, value=value)


def spec_of(*arrays, sizes=("M", "N", "K")):
    return SimpleNamespace(args=list(arrays) + [arg(s, "scalar", dtype="int32", value=s) for s in sizes])


LINEAR_SPEC = spec_of(arg("x", "input", ("M", "K")), arg("w", "input", ("N", "K")), arg("bias", "input", ("N",)),
                      arg("y", "output", ("M", "N")))
MATMUL_SPEC = spec_of(arg("A", "input", ("M", "K")), arg("B", "input", ("K", "N")), arg("C", "output", ("M", "N")))


FRONT_ONLY = ("-Xcicc", "-O0")      # the device optimiser off: a batch of points checked at a fifth of the cost


def build_all(tmp_path, sources: list[str], entry: str, flags=()) -> list[str]:
    """Compile many instantiations as one file (each its own entry name, the macros undefined between
    them: one nvcc run instead of one each); on a failure, each alone, to name the points that fail.
    The batch is built with the device optimiser off (``-Xcicc -O0``: five times faster): the front end
    still sees every point (each static_assert, each type) and ptxas every instruction and the shared
    memory; the first source is also built alone as the builder builds it (optimised), so the
    optimiser's part is compiled too. Returns the failures' messages."""
    import re
    parts, includes = [], []
    for i, src in enumerate(sources):
        body = []
        for line in src.splitlines():
            if line.startswith("#include"):
                if line not in includes:
                    includes.append(line)
            else:
                body.append(line)
        names = sorted(set(re.findall(r"#define (OPTIML_\w+)", src)))
        parts.append("\n".join(f"#undef {n}" for n in names) + "\n"
                     + "\n".join(body).replace(f" {entry}(", f" {entry}_{i}(").replace(f"\n{entry}(", f"\n{entry}_{i}("))
    quick = (*flags, *FRONT_ONLY)
    half = (len(parts) + 1) // 2                  # two files, one nvcc each, side by side
    jobs = [(f"all{i}", "\n".join(includes) + "\n" + "\n".join(ps), quick)
            for i, ps in enumerate([parts[:half], parts[half:]]) if ps] + [("full", sources[0], tuple(flags))]
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda j: build(tmp_path, j[1], j[0], j[2]), jobs))
    if all(r.returncode == 0 for r in runs):
        return []
    r = next(r for r in runs if r.returncode != 0)
    with ThreadPoolExecutor(2) as pool:
        alone = list(pool.map(lambda ij: build(tmp_path, ij[1], f"p{ij[0]}", quick), enumerate(sources)))
    return [r.stderr[-300:] for r in alone if r.returncode != 0] or [r.stderr[-500:]]


def compile_points(t) -> list[dict]:
    """The points of ``t``'s space that can compile differently: GROUP_M (the blocks' order) is read only
    by the index arithmetic, never by a static_assert, a restriction or the shared memory, so the points
    that differ in it alone compile alike; one of each such set is kept, GROUP_M taken in rotation so that
    each of its values is still compiled."""
    points = t.points()
    if "OPTIML_GROUP_M" not in t.space:
        return points
    code = [line.split("//")[0] for line in template_text(f"{t.stem}.cu").splitlines()]
    asserts = [line for line in code if "static_assert" in line or "#error" in line]
    assert not any("GROUP_M" in x for x in [*asserts, *t.restrictions, t.shared_mem, t.threads]), \
        "GROUP_M now decides whether a point compiles: compile every point"
    shapes = {}
    for p in points:
        shapes.setdefault(tuple(sorted((k, v) for k, v in p.items() if k != "OPTIML_GROUP_M")), []).append(p)
    out = [same[i % len(same)] for i, same in enumerate(shapes.values())]
    if t.start not in out:
        out[next(i for i, same in enumerate(shapes.values()) if t.start in same)] = t.start
    assert {p["OPTIML_GROUP_M"] for p in out} == set(t.space["OPTIML_GROUP_M"])
    return out


def build(tmp_path, source: str, name: str = "k", flags=()) -> subprocess.CompletedProcess:
    f = tmp_path / f"{name}.cu"
    f.write_text(source)
    return subprocess.run([NVCC, "-arch=sm_90", *flags, "-cubin", "-o", str(tmp_path / f"{name}.cubin"), str(f)],
                          capture_output=True, text=True)


# -- recognition ---------------------------------------------------------------------------------
def test_a_linear_layer_with_bias_and_relu_is_a_gemm_with_its_epilogue():
    g, why = recognize_gemm(LINEAR, "linear_relu", LINEAR_SPEC)
    assert why is None and g is not None
    assert (g.a, g.b, g.c, g.a_layout, g.b_layout) == ("x", "w", "y", "mk", "nk")
    assert g.epilogue == "fmaxf(acc + bias[n], 0.0f)"
    assert "A[M x K] x B[N x K]" in g.describe()


@pytest.mark.parametrize("source, spec, layouts, epilogue", [
    (MATMUL, MATMUL_SPEC, ("mk", "kn"), "acc"),
    (MATMUL.replace("C[(size_t)r * N + c] = acc;", "C[(size_t)r * N + c] = alpha * acc + C[(size_t)r * N + c];")
     .replace("int K)", "int K, float alpha)"), MATMUL_SPEC, ("mk", "kn"), "alpha * acc + C[(size_t)m * N + n]"),
    (MATMUL.replace("A[(size_t)r * K + i]", "A[(size_t)i * M + r]"),
     spec_of(arg("A", "input", ("K", "M")), arg("B", "input", ("K", "N")), arg("C", "output", ("M", "N"))),
     ("km", "kn"), "acc"),
    (MATMUL.replace("= acc;", "= tanhf(acc);").replace("B[(size_t)i * N + c]", "B[c * K + i]"),
     spec_of(arg("A", "input", ("M", "K")), arg("B", "input", ("N", "K")), arg("C", "output", ("M", "N"))),
     ("mk", "nk"), "tanhf(acc)"),
    (MATMUL.replace("A[(size_t)r * K + i] * B[(size_t)i * N + c]", "A[K * r + i] * B[c + N * i]"), MATMUL_SPEC,
     ("mk", "kn"), "acc"),
    # a GELU (erf form) epilogue
    (MATMUL.replace("= acc;", "= 0.5f * acc * (1.0f + erff(acc * 0.70710678f));"), MATMUL_SPEC, ("mk", "kn"),
     "0.5f * acc * (1.0f + erff(acc * 0.70710678f))"),
    # a scale and a per-row bias, the loop variable a size_t counted with ++
    (MATMUL.replace("for (int i = 0; i < K; i++)", "for (size_t i = 0; i < K; ++i)")
     .replace("= acc;", "= acc * scale + rb[r];").replace("int K)", "int K, float scale, const float* rb)"),
     spec_of(arg("A", "input", ("M", "K")), arg("B", "input", ("K", "N")), arg("rb", "input", ("M",)),
             arg("C", "output", ("M", "N"))), ("mk", "kn"), "acc * scale + rb[m]"),
    # both operands stored transposed (A as K x M, B as N x K), a max() epilogue
    (MATMUL.replace("A[(size_t)r * K + i] * B[(size_t)i * N + c]", "A[(size_t)i * M + r] * B[(size_t)c * K + i]")
     .replace("= acc;", "= max(acc, 0.0f);"),
     spec_of(arg("A", "input", ("K", "M")), arg("B", "input", ("N", "K")), arg("C", "output", ("M", "N"))),
     ("km", "nk"), "max(acc, 0.0f)"),
    # the accumulator named otherwise, the product's factors swapped in each index
    (MATMUL.replace("acc", "dot").replace("A[(size_t)r * K + i] * B[(size_t)i * N + c]", "A[i + r * K] * B[c + i * N]"),
     MATMUL_SPEC, ("mk", "kn"), "acc"),
    # fp32 accumulation of (float) casts of fp16 elements
    (MATMUL.replace("const float *A, const float *B", "const __half *A, const __half *B")
     .replace("A[(size_t)r * K + i] * B[(size_t)i * N + c]", "(float)A[(size_t)r * K + i] * (float)B[(size_t)i * N + c]"),
     spec_of(arg("A", "input", ("M", "K"), "float16"), arg("B", "input", ("K", "N"), "float16"),
             arg("C", "output", ("M", "N"))), ("mk", "kn"), "acc"),
])
def test_gemms_of_each_layout_and_epilogue_are_recognised(source, spec, layouts, epilogue):
    g, why = recognize_gemm(source, "mm", spec)
    assert why is None and g is not None, why
    assert (g.a_layout, g.b_layout) == layouts and g.epilogue == epilogue


LOCAL_EPILOGUE = LINEAR.replace("y[row * N + col] = fmaxf(sum + bias[col], 0.0f);",
                                "float v = (sum + bias[col]) * scale;\n        if (v < 0.0f) v *= slope;\n"
                                "        y[row * N + col] = v;").replace("int K)", "int K, float scale, float slope)")
LOCAL_SPEC = SimpleNamespace(args=LINEAR_SPEC.args + [arg("scale", "scalar", value=2.0), arg("slope", "scalar", value=0.1)])


@pytest.mark.parametrize("source, epilogue", [
    # the multiplier and a LeakyReLU through a local and an if: the if becomes ?:
    (LOCAL_EPILOGUE, "((((acc + bias[n]) * scale) < 0.0f) ? (((acc + bias[n]) * scale) * (slope)) : ((acc + bias[n]) * scale))"),
    # if / else, a compound assignment, a second local
    (LINEAR.replace("y[row * N + col] = fmaxf(sum + bias[col], 0.0f);",
                    "float v = sum;\n        v += bias[col];\n        float out;\n        if (v > 0.f) { out = v; } else out = 0.f;\n"
                    "        y[row * N + col] = out;").replace("float out;", "float out = 0.f;"),
     "((((acc) + (bias[n])) > 0.f) ? (((acc) + (bias[n]))) : (0.f))"),
])
def test_an_epilogue_through_locals_and_conditionals_is_folded_into_one_expression(source, epilogue):
    g, why = recognize_gemm(source, "linear_relu", LOCAL_SPEC)
    assert why is None and g is not None, why
    assert g.epilogue == epilogue


@pytest.mark.parametrize("tail, reason", [
    ("float v = sum;\n        if (v < 0.f) y[row * N + col] = 0.f;\n        y[row * N + col] = v;", "no store"),   # a store in a branch
    ("float v = sum;\n        y[row * N + col] = v;\n        y[row * N + col] = v + 1.f;", "no store"),     # two stores
    ("float v = sum;\n        if (v > 0.f) y[row * N + col] = v;", "no store"),      # the only store, in a branch
    ("float v = sum;\n        for (int j = 0; j < 2; j++) v *= 0.5f;\n        y[row * N + col] = v;", "no store"),  # a loop
])
def test_an_epilogue_that_does_more_than_compute_one_value_is_not_folded(tail, reason):
    src = LINEAR.replace("y[row * N + col] = fmaxf(sum + bias[col], 0.0f);", tail)
    g, why = recognize_gemm(src, "linear_relu", LINEAR_SPEC)
    assert g is None and reason in why, why


@pytest.mark.parametrize("source, spec, reason", [
    ("__global__ void mm(const float* A, float* C, int n) { int i = threadIdx.x; if (i < n) C[i] = 2 * A[i]; }",
     spec_of(arg("A", "input", ("n",)), arg("C", "output", ("n",)), sizes=("n",)), None),
    (MATMUL.replace("A[(size_t)r * K + i]", "A[(size_t)r * K + i + 1]"), MATMUL_SPEC, "do not index"),
    (MATMUL.replace("for (int i = 0; i < K; i++)", "for (int i = 1; i < K; i++)"), MATMUL_SPEC, "does not start at 0"),
    (MATMUL, spec_of(arg("A", "input", ("M", "K"), "int32"), arg("B", "input", ("K", "N"), "int32"),
                     arg("C", "output", ("M", "N"), "int32")), "templates take fp32, fp16 or bf16"),
    (MATMUL, spec_of(arg("A", "input", ("M", "K")), arg("B", "input", ("N", "K")), arg("C", "output", ("M", "N"))),
     "do not index"),
    # the output stored transposed (column-major C)
    (MATMUL.replace("C[(size_t)r * N + c] = acc;", "C[(size_t)c * M + r] = acc;"), MATMUL_SPEC, "is not row * N + col"),
    # a batched GEMM: 3-D operands
    (MATMUL, spec_of(arg("A", "input", ("B_", "M", "K")), arg("B", "input", ("B_", "K", "N")),
                     arg("C", "output", ("B_", "M", "N")), sizes=("M", "N", "K", "B_")), "not 2-D"),
    # a matrix-vector product: the output is 1-D
    ("""__global__ void mm(const float* A, const float* x, float* y, int M, int K) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    float acc = 0.f;
    for (int i = 0; i < K; i++) acc += A[r * K + i] * x[i];
    y[r] = acc;
}
""", spec_of(arg("A", "input", ("M", "K")), arg("x", "input", ("K",)), arg("y", "output", ("M",)), sizes=("M", "K")),
     "not row * N + col"),
    # a sum of squares into the output: one array twice, not A x B
    ("""__global__ void mm(const float* A, float* C, int M, int N, int K) {
    int r = blockIdx.y * blockDim.y + threadIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.f;
    for (int i = 0; i < K; i++) acc += A[r * K + i] * A[r * K + i];
    C[r * N + c] = acc;
}
""", spec_of(arg("A", "input", ("M", "K")), arg("C", "output", ("M", "N"))), "multiplies A by itself"),
])
def test_what_is_not_a_gemm_of_the_spec_is_not_recognised(source, spec, reason):
    g, why = recognize_gemm(source, "mm", spec)
    assert g is None
    assert (why is None) if reason is None else (reason in why), why


# -- instantiation -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [t.name for t in GEMM_TEMPLATES])
def test_the_template_is_real_cuda_on_its_own(tmp_path, name):
    if NVCC is None:
        pytest.skip("nvcc is not installed")
    t = next(t for t in GEMM_TEMPLATES if t.name == name)
    r = build(tmp_path, "".join(f"#define {k} {v}\n" for k, v in t.defines) + template_text(f"{t.stem}.cu"),
              flags=t.flags)
    assert r.returncode == 0, r.stderr


def test_the_instantiation_keeps_the_signature_and_carries_its_launch():
    g, _ = recognize_gemm(LINEAR, "linear_relu", LINEAR_SPEC)
    out = instantiate_gemm(LINEAR, g)
    assert out.startswith("#include <cuda_runtime.h>\n")
    assert "linear_relu(const float* x, const float* w, const float* bias, float* y, int M, int N, int K) {" in out
    assert "#define OPTIML_B(optiml_k, optiml_n) w[(size_t)(optiml_n) * (K) + (optiml_k)]" in out and "#define OPTIML_B_ALONG_K 1" in out
    assert "#define OPTIML_EPILOGUE(acc, m, n) (fmaxf((acc) + bias[n], 0.0f))" in out
    launch = parse_source(out).launch
    assert launch.grid == ("cdiv(N, OPTIML_BN)", "cdiv(M, OPTIML_BM)")
    assert launch.block == ("(OPTIML_BM / OPTIML_WM) * (OPTIML_BN / OPTIML_WN) * 32",)
    assert parse_source(out).kernel("linear_relu") is not None and "optiml_gemm_f32" not in out


F32_TEMPLATES = [t for t in GEMM_TEMPLATES if "float32" in t.dtypes]


@pytest.mark.parametrize("t", F32_TEMPLATES, ids=lambda t: t.name)
def test_every_point_of_the_default_space_compiles_behind_the_users_signature(tmp_path, t):
    if NVCC is None:
        pytest.skip("nvcc is not installed")
    g, _ = recognize_gemm(LINEAR, "linear_relu", LINEAR_SPEC)
    assert len(t.points()) >= 16 and t.start in t.points()
    failed = build_all(tmp_path, [instantiate_gemm(LINEAR, g, p, t.name) for p in compile_points(t)], "linear_relu")
    assert not failed, failed[:2]
    g2, _ = recognize_gemm(MATMUL, "mm", MATMUL_SPEC)                 # the other layouts
    assert build(tmp_path, instantiate_gemm(MATMUL, g2, template=t.name), "kn").returncode == 0
    at = MATMUL.replace("A[(size_t)r * K + i]", "A[(size_t)i * M + r]")
    g3, _ = recognize_gemm(at, "mm", spec_of(arg("A", "input", ("K", "M")), arg("B", "input", ("K", "N")),
                                             arg("C", "output", ("M", "N"))))
    assert build(tmp_path, instantiate_gemm(at, g3, template=t.name), "km").returncode == 0


def test_a_point_the_body_cannot_run_fails_to_compile_not_to_verify(tmp_path):
    if NVCC is None:
        pytest.skip("nvcc is not installed")
    g, _ = recognize_gemm(LINEAR, "linear_relu", LINEAR_SPEC)
    r = build(tmp_path, instantiate_gemm(LINEAR, g, {"OPTIML_WM": 64, "OPTIML_TM": 4, "OPTIML_TN": 8}, "gemm_f32_warp"))
    assert r.returncode != 0 and "gemm_f32_warp: a warp's (WM / TM) x (WN / TN) threads must be its 32 lanes" in r.stderr
    gh, _ = recognize_gemm(HGEMM, "hgemm", HGEMM_SPEC)
    r = build(tmp_path, instantiate_gemm(HGEMM, gh, {"OPTIML_BK": 24}, "gemm_f16_wmma"))
    assert r.returncode != 0 and "gemm_f16_wmma: BK must be a multiple of 16" in r.stderr
    r = build(tmp_path, instantiate_gemm(HGEMM, gh, {"OPTIML_BM": 256, "OPTIML_WARPS_M": 1}, "gemm_f16_mma"))
    assert r.returncode != 0 and "gemm_f16_mma: at most 128 accumulators a thread" in r.stderr


def test_the_template_candidate_builds_and_launches_through_the_runner(tmp_path):
    if NVCC is None:
        pytest.skip("nvcc is not installed")
    from optiml.build import NvccBuilder
    from optiml.runner import Candidate
    from optiml.spec.load import load_spec
    from tests.test_runner_prepare import RecordingFakeHarness, evaluator

    (tmp_path / "linear.cu").write_text(LINEAR)
    (tmp_path / "ref.py").write_text("import numpy as np\n\ndef ref(x, w, bias, y, M, N, K):\n"
                                     "    return np.maximum(x @ w.T + bias, 0)\n")
    (tmp_path / "linear.toml").write_text(SPEC_TOML)
    spec = load_spec(tmp_path / "linear.toml", tmp_path / "linear.cu", kernel_source=LINEAR)
    ts, why = template_transforms(LINEAR, "linear_relu", spec)
    assert why is None and [t.edit.split(" (")[0] for t in ts] == ["template gemm_f32_warp", "template gemm_f32_3xtf32"]
    harness = RecordingFakeHarness()
    ev = evaluator(spec, LINEAR, NvccBuilder("sm_90", cache_dir=tmp_path / "c"), harness)
    for t, block, smem in zip(ts, [256, 128], [0, 3 * (128 + 128 + 16) * (16 + 8) * 4]):
        r = ev.evaluate(Candidate(t.source))
        assert r.status == "ok", r.message
        launch = harness.jobs[-1].candidate.launches[0]         # the timing size: 1024 x 8192
        assert launch.block == (block, 1, 1) and launch.grid == (64, 8, 1) and launch.shared_mem == smem


SPEC_TOML = """
[kernel]
entry = "linear_relu"
[sizes]
timing = { M = 1024, N = 8192, K = 8192 }
verify = [{ M = 33, N = 65, K = 17 }, { M = 5, N = 3, K = 130 }]
[[args]]
name = "x"
dtype = "float32"
role = "input"
shape = ["M", "K"]
[[args]]
name = "w"
dtype = "float32"
role = "input"
shape = ["N", "K"]
[[args]]
name = "bias"
dtype = "float32"
role = "input"
shape = ["N"]
[[args]]
name = "y"
dtype = "float32"
role = "output"
shape = ["M", "N"]
[[args]]
name = "M"
dtype = "int32"
role = "scalar"
value = "M"
[[args]]
name = "N"
dtype = "int32"
role = "scalar"
value = "N"
[[args]]
name = "K"
dtype = "int32"
role = "scalar"
value = "K"
[launch]
grid = ["cdiv(N, 16)", "cdiv(M, 16)"]
block = [16, 16]
[reference]
python = "ref.py:ref"
"""


# -- the rules offer it at the seed -------------------------------------------------------------
def test_the_rules_offer_the_template_first_at_the_seed_and_nowhere_else():
    made, why = template_transforms(LINEAR, "linear_relu", LINEAR_SPEC)
    prop = RulesProposer(templates=(LINEAR, made, why))
    first = prop.propose(NodeView(source=LINEAR, entry="linear_relu"), 1, random.Random(0))
    assert first[0].edit.startswith("template gemm_f32_3xtf32")         # the higher prior of the two
    other = LINEAR.replace("++k", "k++")
    assert not any(p.edit.startswith("template") for p in prop.candidates(NodeView(source=other, entry="linear_relu")))


def test_a_near_miss_is_recorded_as_a_refused_template():
    near = MATMUL.replace("C[(size_t)r * N + c] = acc;", "for (int j = 0; j < 2; j++) acc *= 0.5f;\n    C[(size_t)r * N + c] = acc;")
    made, why = template_transforms(near, "mm", MATMUL_SPEC)
    refusals = [p for p in RulesProposer(templates=(near, made, why)).candidates(NodeView(source=near, entry="mm"))
                if p.refused]
    assert [p.edit for p in refusals] == ["template: refused"] and "acc changes after the loop" in refusals[0].refused


def test_no_templates_means_none_offered():
    from optiml.app.optimize import make_proposer
    from optiml.spec.load import load_spec
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "linear.cu").write_text(LINEAR)
        (Path(d) / "ref.py").write_text("def ref(**k):\n    return 0\n")
        (Path(d) / "linear.toml").write_text(SPEC_TOML)
        spec = load_spec(Path(d) / "linear.toml", Path(d) / "linear.cu", kernel_source=LINEAR)
        on = make_proposer("rules", None, None, 1.0, spec, source=LINEAR, templates=True)
        off = make_proposer("rules", None, None, 1.0, spec, source=LINEAR, templates=False)
        tf32 = make_proposer("rules", None, None, 1.0, spec, source=LINEAR, templates=True, tf32=True, arch="sm_90")
    view = NodeView(source=LINEAR, entry="linear_relu")
    assert any(p.edit.startswith("template") for p in on.candidates(view))
    assert not any(p.edit.startswith("template") for p in off.candidates(view))
    assert not any("gemm_tf32_mma" in p.edit for p in on.candidates(view))
    assert any(p.edit.startswith("template gemm_tf32_mma") for p in tf32.candidates(view))


def test_a_tiled_kernel_is_recognised_from_the_arrays_its_tiles_are_loaded_from():
    from optiml.spec.load import load_task
    from tests.conftest import EXAMPLES

    src, spec = load_task(EXAMPLES / "sgemm_tiled_conflicts" / "sgemm_tiled_conflicts.cu", None)
    g, why = recognize_gemm(src, spec.entry, spec)
    assert why is None and (g.a, g.b, g.c, g.a_layout, g.b_layout, g.epilogue) == ("A", "B", "C", "mk", "kn", "acc")
    # a tile filled from two arrays is not one operand
    mixed = src.replace("? A[row * K + ak] : 0.0f;", "? A[row * K + ak] + C[ak] : 0.0f;")
    g, why = recognize_gemm(mixed, spec.entry, spec)
    assert g is None and "loaded from one argument" in why
    for other in ("transpose_tiled", "softmax_rows", "reduce_sum"):       # shared tiles, but no GEMM
        src, spec = load_task(EXAMPLES / other / f"{other}.cu", None)
        assert recognize_gemm(src, spec.entry, spec)[0] is None


HGEMM = """#include <cuda_fp16.h>
__global__ void hgemm(const __half* A, const __half* B, __half* C, int M, int N, int K) {
    int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float sum = 0.0f;
        for (int k = 0; k < K; k++) sum += __half2float(A[row * K + k]) * __half2float(B[k * N + col]);
        C[row * N + col] = __float2half(sum);
    }
}
"""
HGEMM_SPEC = spec_of(arg("A", "input", ("M", "K"), "float16"), arg("B", "input", ("K", "N"), "float16"),
                     arg("C", "output", ("M", "N"), "float16"))


def test_an_fp16_gemm_is_offered_the_tensor_core_template_only():
    g, why = recognize_gemm(HGEMM, "hgemm", HGEMM_SPEC)
    assert why is None and g.dtype == "float16" and g.epilogue == "__float2half(acc)"
    ts, _ = template_transforms(HGEMM, "hgemm", HGEMM_SPEC)
    assert [t.edit.split(" (")[0] for t in ts] == ["template gemm_f16_wgmma_tma", "template gemm_f16_wgmma",
                                                   "template gemm_f16_mma", "template gemm_f16_wmma"]
    assert ts[0].flags == ts[1].flags == ("-arch=sm_90a",) and ts[2].flags == ()
    assert "#define OPTIML_WS 1" in ts[0].source and "#define OPTIML_WS 0" in ts[1].source
    assert parse_source(ts[0].source).launch.block == ("128 * (OPTIML_WGS + 1)",)    # and the producer warpgroup
    # the Hopper one only where the GPU is one (or not known)
    assert [t.edit.split(" (")[0] for t in template_transforms(HGEMM, "hgemm", HGEMM_SPEC, arch="sm_80")[0]] == \
        ["template gemm_f16_mma", "template gemm_f16_wmma"]
    ts = ts[2:]
    out = ts[1].source
    assert "#include <mma.h>" in out and "#define OPTIML_T __half" in out
    launch = parse_source(out).launch
    assert launch.grid == ("cdiv(N, (OPTIML_WARPS_N * OPTIML_TN * 16))", "cdiv(M, (OPTIML_WARPS_M * OPTIML_TM * 16))")
    assert launch.block == ("32 * OPTIML_WARPS_M * OPTIML_WARPS_N",)
    # the mma one asks for its stages' dynamic shared memory (past 48 KiB at some points)
    mma = parse_source(ts[0].source)
    assert mma.launch.shared_mem == "OPTIML_STAGES * (OPTIML_BM + OPTIML_BN + 16) * (OPTIML_BK + 8) * 2"
    assert "// optiml:helpers begin" in ts[0].source and "#define OPTIML_BF16 0" in ts[0].source
    # and the fp32 ones are not offered an fp16 kernel, nor the wmma one an fp32 kernel
    assert all("wmma" not in t.edit for t in template_transforms(LINEAR, "linear_relu", LINEAR_SPEC)[0])


@pytest.mark.parametrize("name, count, step", [("gemm_f16_wmma", 15, 1), ("gemm_f16_mma", 38, 1), ("gemm_f16_wgmma", 32, 1),
                                               ("gemm_f16_wgmma_tma", 75, 2)])
def test_every_point_of_the_tensor_core_spaces_compiles_for_fp16_and_bf16(tmp_path, name, count, step):
    """Every point of each space that can compile differently (see compile_points; every step-th of the
    largest), with the start point in bf16, B stored N x K and A stored K x M."""
    if NVCC is None:
        pytest.skip("nvcc is not installed")
    t = next(t for t in GEMM_TEMPLATES if t.name == name)
    g, _ = recognize_gemm(HGEMM, "hgemm", HGEMM_SPEC)
    assert len(t.points()) == count and t.start in t.points()     # the restrictions (shared memory, registers) hold
    points = compile_points(t)[::step]
    bf = HGEMM.replace("__half2float", "__bfloat162float").replace("__float2half", "__float2bfloat16") \
        .replace("__half", "__nv_bfloat16").replace("cuda_fp16.h", "cuda_bf16.h") \
        .replace("B[k * N + col]", "B[col * K + k]")
    gb, why = recognize_gemm(bf, "hgemm", spec_of(arg("A", "input", ("M", "K"), "bfloat16"),
                                                  arg("B", "input", ("N", "K"), "bfloat16"),
                                                  arg("C", "output", ("M", "N"), "bfloat16")))
    assert why is None and gb.dtype == "bfloat16" and gb.b_layout == "nk"
    at = HGEMM.replace("A[row * K + k]", "A[k * M + row]")            # A stored K x M
    ga, why = recognize_gemm(at, "hgemm", spec_of(arg("A", "input", ("K", "M"), "float16"),
                                                  arg("B", "input", ("K", "N"), "float16"),
                                                  arg("C", "output", ("M", "N"), "float16")))
    assert why is None and ga.a_layout == "km"
    failed = build_all(tmp_path, [instantiate_gemm(HGEMM, g, p, t.name) for p in points]
                       + [instantiate_gemm(bf, gb, t.start, t.name), instantiate_gemm(at, ga, t.start, t.name)], "hgemm",
                       t.flags)
    assert not failed, failed[:2]


def test_a_template_node_is_tuned_by_valid_moves_of_the_templates_space():
    made, why = template_transforms(LINEAR, "linear_relu", LINEAR_SPEC)
    prop = RulesProposer(templates=(LINEAR, made, why))
    node = NodeView(source=made[0].source, entry="linear_relu")
    t = next(t for t in GEMM_TEMPLATES if t.name == "gemm_f32_warp")
    moves = prop.space_moves(node)
    assert len(moves) == len(t.points()) - 1            # every other valid point (the space is small)
    for p in prop.propose(node, 6, random.Random(1)):
        assert p.edit.startswith("OPTIML_") and "template's space" in p.rationale
        point = {n: int(v) for n, v in re.findall(r"#define (OPTIML_[A-Z_]+) (\d+)\n", p.source) if n in t.space}
        assert point in t.points(), point
    # one constant at a time is not proposed there (most single steps break the lanes' restriction)
    assert not any(c.edit.startswith("OPTIML_") for c in prop.candidates(node))
    # and the user's own kernel keeps its usual tuning
    assert template_space(LINEAR, "linear_relu") is None


def test_const_is_not_offered_on_a_pointer_a_macro_writes_through():
    from optiml.edits.transforms import add_const
    made, _ = template_transforms(LINEAR, "linear_relu", LINEAR_SPEC)
    assert "OPTIML_C(optiml_m, optiml_n) y[" in made[0].source and add_const(made[0].source, "linear_relu") == []
    assert [t.edit for t in add_const(LINEAR.replace("const float* x", "float* x"), "linear_relu")] == ["const on x"]


def test_const_is_not_offered_through_a_macro_continued_over_lines_nor_on_an_unused_pointer():
    from optiml.edits.transforms import add_const
    src = ("#define STORE(i, v) \\\n    y[i] = (v)\n"
           "__global__ void k(float* x, float* y, float* unused) { STORE(threadIdx.x, x[threadIdx.x] * y[0]); }\n")
    assert [t.edit for t in add_const(src, "k")] == ["const on x"]       # y: read here, written by STORE
    assert [t.edit for t in add_const(src.replace(" y[0]", " 2.0f"), "k")] == ["const on x"]   # y, unused: not named


def test_optimize_offers_the_hopper_template_only_on_a_hopper_gpu():
    from pathlib import Path

    from optiml.app.optimize import make_proposer
    from optiml.spec.load import load_spec
    kernel = Path(__file__).resolve().parents[1] / "bench" / "templates" / "operations" / "hgemm.cu"
    src = kernel.read_text()
    spec = load_spec(kernel.with_suffix(".toml"), kernel, kernel_source=src)
    offered = {arch: [t.edit.split(" (")[0] for t in make_proposer("rules", None, None, 1.0, spec, source=src,
                                                                    templates=True, arch=arch).templates[1]]
               for arch in ("sm_90", "sm_80")}
    assert offered["sm_90"][:2] == ["template gemm_f16_wgmma_tma", "template gemm_f16_wgmma"]
    assert not any("wgmma" in name for name in offered["sm_80"])
    assert "template gemm_f16_mma" in offered["sm_80"]


def test_the_tf32_template_is_offered_only_to_a_user_who_opts_in():
    off, _ = template_transforms(LINEAR, "linear_relu", LINEAR_SPEC, arch="sm_90")
    on, _ = template_transforms(LINEAR, "linear_relu", LINEAR_SPEC, arch="sm_90", tf32=True)
    old, _ = template_transforms(LINEAR, "linear_relu", LINEAR_SPEC, arch="sm_75", tf32=True)
    names = lambda made: [t.edit.split(" (")[0] for t in made]
    assert names(old) == ["template gemm_f32_warp"]
    assert names(off) == ["template gemm_f32_warp", "template gemm_f32_3xtf32"]    # fp32-accurate: no opt-in
    assert names(on) == ["template gemm_f32_warp", "template gemm_tf32_mma", "template gemm_f32_3xtf32"]
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in on[1].source
    assert "#define OPTIML_TF32_SPLIT 1" in on[2].source and "#define OPTIML_TF32_SPLIT 1" not in on[1].source
    from click.testing import CliRunner
    from optiml.cli import main
    assert "--tf32" in CliRunner().invoke(main, ["optimize", "--help"]).output


def test_a_kernel_whose_sizes_are_named_like_the_templates_locals_still_builds(tmp_path):
    """The template's body sits in the user's signature: a size argument named rows, first or band
    (names the block order once used) must not collide with the template's own locals."""
    if NVCC is None:
        pytest.skip("nvcc is not installed")
    src = LINEAR.replace("int M, int N, int K", "int rows, int first, int band").replace("row < M && col < N", "row < rows && col < first")
    src = src.replace("k < K", "k < band").replace("row * K + k", "row * band + k").replace("col * K + k", "col * band + k")
    src = src.replace("row * N + col", "row * first + col")
    spec = spec_of(arg("x", "input", ("M", "K")), arg("w", "input", ("N", "K")), arg("bias", "input", ("N",)),
                   arg("y", "output", ("M", "N")), sizes=())
    spec.args += [arg("rows", "scalar", dtype="int32", value="M"), arg("first", "scalar", dtype="int32", value="N"),
                  arg("band", "scalar", dtype="int32", value="K")]
    g, why = recognize_gemm(src, "linear_relu", spec)
    assert g is not None, why
    t32 = [t for t in GEMM_TEMPLATES if "float32" in t.dtypes]
    assert build_all(tmp_path, [instantiate_gemm(src, g, None, t.name) for t in t32], "linear_relu") == []


def test_an_epilogue_reading_a_size_named_like_a_placeholder_reads_the_size():
    """A kernel whose N is an argument named n (the epilogue's column placeholder) and whose output
    adds a residual at row * n + col: the epilogue reads the size through OPTIML_N, the column as n,
    and the instantiation's operand macros take parameters no argument is named."""
    src = ("__global__ void mm(const float *A, const float *B, const float *R, float *C, int m, int n, int k) {\n"
           "    int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y * blockDim.y + threadIdx.y;\n"
           "    if (r >= m || c >= n) return;\n    float acc = 0.f;\n"
           "    for (int i = 0; i < k; i++) acc += A[(size_t)r * k + i] * B[(size_t)i * n + c];\n"
           "    C[(size_t)r * n + c] = acc + R[(size_t)r * n + c];\n}\n")
    spec = spec_of(arg("A", "input", ("M", "K")), arg("B", "input", ("K", "N")), arg("R", "input", ("M", "N")),
                   arg("C", "output", ("M", "N")), sizes=())
    spec.args += [arg("m", "scalar", dtype="int32", value="M"), arg("n", "scalar", dtype="int32", value="N"),
                  arg("k", "scalar", dtype="int32", value="K")]
    g, why = recognize_gemm(src, "mm", spec)
    assert g is not None, why
    assert g.epilogue == "acc + R[(size_t)m * OPTIML_N + n]", g.epilogue
    made = instantiate_gemm(src, g, None, "gemm_f32_warp")
    assert "#define OPTIML_A(optiml_m, optiml_k) A[(size_t)(optiml_m) * (k) + (optiml_k)]" in made


def test_a_kernel_no_reader_takes_is_refused_with_a_reason():
    """cuda-samples' matrixMul shape (the entry calls a template __device__ function that does the
    work) is refused with a sentence naming that function, and a kernel no operation reads as its
    own with one saying so: a template is never silently missing."""
    from pathlib import Path
    src = (Path(__file__).parent / "data" / "kernels" / "mm_nonconst.cu").read_text()
    spec = spec_of(arg("C", "output", ("M", "N")), arg("A", "input", ("M", "K")), arg("B", "input", ("K", "N")),
                   sizes=())
    spec.args += [arg("wA", "scalar", dtype="int64", value="K"), arg("wB", "scalar", dtype="int64", value="N")]
    made, why = template_transforms(src, "matrixMul_bs16_64bit", spec)
    assert made == [] and "the __device__ function matrixMul that matrixMul_bs16_64bit calls" in why
    odd = ("__global__ void k(const float* x, float* y, int n) {\n    for (int i = 1; i < n; i++) y[i] = y[i - 1] + x[i];\n}\n")
    made, why = template_transforms(odd, "k", spec_of(arg("x", "input", ("n",)), arg("y", "output", ("n",)), sizes=("n",)))
    assert made == [] and why and why.startswith("not templated:"), why


def test_a_users_argument_named_like_a_member_leaves_member_accesses_alone(tmp_path):
    """The template's locals named like the user's arguments are renamed, but not ``threadIdx.x`` or a
    struct's ``.x`` when the user's input is called ``x`` (an nn.Linear's): the instantiation compiles."""
    from pathlib import Path

    from optiml.spec.load import load_spec
    kernel = Path(__file__).resolve().parents[1] / "bench" / "templates" / "operations" / "linear_gelu_half.cu"
    src = kernel.read_text()
    spec = load_spec(kernel.with_suffix(".toml"), kernel, kernel_source=src)
    ts, why = template_transforms(src, spec.entry, spec, arch="sm_90")
    assert why is None and [t.edit.split(" (")[0] for t in ts][:2] == ["template gemm_f16_wgmma_tma", "template gemm_f16_wgmma"]
    for t in ts[:2]:
        assert "threadIdx.x" in t.source and "optiml_local_x" in t.source and ".optiml_local_x" not in t.source
    if NVCC is None:
        pytest.skip("nvcc is not installed")
    for i, t in enumerate(ts[:2]):
        r = build(tmp_path, t.source, f"gelu{i}", t.flags)
        assert r.returncode == 0, r.stderr[-600:]


ACC_AFTER = """#include <cuda_fp16.h>
__global__ void lin(const __half* x, const __half* w, const __half* b, __half* y, int M, int N, int K) {
    int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
    if (row < M && col < N) {
        float v = 0.0f;
        for (int k = 0; k < K; k++) v += __half2float(x[row * K + k]) * __half2float(w[col * K + k]);
        v += __half2float(b[col]);
        if (v < 0.0f) v = 0.1f * v;
        y[row * N + col] = __float2half(v);
    }
}
"""
ACC_AFTER_SPEC = spec_of(arg("x", "input", ("M", "K"), "float16"), arg("w", "input", ("N", "K"), "float16"),
                         arg("b", "input", ("N",), "float16"), arg("y", "output", ("M", "N"), "float16"))


def test_the_accumulator_changed_after_the_loop_is_part_of_the_epilogue():
    """``v += b[col];`` and ``if (v < 0) v = ...;`` between the loop and the store belong to the epilogue
    (the store alone would drop the bias); a change optiml cannot fold refuses the kernel, saying so."""
    g, why = recognize_gemm(ACC_AFTER, "lin", ACC_AFTER_SPEC)
    assert why is None and g.b_layout == "nk"
    e = g.epilogue.replace(" ", "")
    assert "__half2float(b[n])" in e and "?" in e and e.startswith("__float2half(")
    # the bias added first, then the leaky branch on the biased value
    assert e == ("__float2half(((((acc)+(__half2float(b[n])))<0.0f)?(0.1f*((acc)+(__half2float(b[n])))):"
                 "((acc)+(__half2float(b[n])))))")
    # a local computed from the accumulator and used beside it
    g, why = recognize_gemm(MATMUL.replace("C[(size_t)r * N + c] = acc;", "float t = acc * 2.f;\n    C[(size_t)r * N + c] = acc + t;"),
                            "mm", MATMUL_SPEC)
    assert why is None and g.epilogue == "acc + (acc * 2.f)"
    unfoldable = ACC_AFTER.replace("v += __half2float(b[col]);", "for (int j = 0; j < 2; j++) v += __half2float(b[j]);")
    g, why = recognize_gemm(unfoldable, "lin", ACC_AFTER_SPEC)
    assert g is None and why == "not a GEMM: v changes after the loop in statements optiml does not fold into one store"


@pytest.mark.parametrize("change, spec, why", [
    (("int i = 0; i < K", "int i = 1; i < K"), None, "not a GEMM: the loop over k does not start at 0"),
    (("i < K; i++", "i <= K; i++"), None, "not a GEMM: the loop over k is not `k < K`"),
    (("B[(size_t)i * N + c]", "A[(size_t)i * N + c]"), None, "not a GEMM: the product multiplies A by itself"),
    (("C[(size_t)r * N + c] = acc;", "C[(size_t)r * N + c + 1] = acc;"), None,
     "not a GEMM: the output index (size_t)r * N + c + 1 is not row * N + col"),
    (("C[(size_t)r * N + c] = acc;", "C[(size_t)r * M + c] = acc;"), None,
     "not a GEMM: the output index (size_t)r * M + c is not row * N + col"),
    (("C[(size_t)r * N + c] = acc;", ""), None, "not a GEMM: no store of the accumulator after the loop"),
    (("i < K; i++", "i < N; i++"), None, "not a GEMM: the loop runs to N, not to the spec's K"),
    (None, spec_of(arg("A", "input", ("M", "K")), arg("B", "input", ("K", "N")), arg("Z", "output", ("M", "N"))),
     "not a GEMM: the operands are not the spec's arrays"),
    (None, spec_of(arg("A", "input", ("M", "K", "K")), arg("B", "input", ("K", "N")), arg("C", "output", ("M", "N"))),
     "not a GEMM: the operands are not 2-D in the spec"),
    (None, spec_of(arg("A", "input", ("M", "K"), "float16"), arg("B", "input", ("K", "N")), arg("C", "output", ("M", "N"))),
     "not templated: inputs of float16 and float32 into float32 (templates take fp32, fp16 or bf16)"),
    (None, spec_of(arg("A", "input", ("M", "K")), arg("B", "input", ("K", "N")), arg("C", "output", ("M", "N")),
                   sizes=("N", "K")), "not a GEMM: the output's sizes are not kernel arguments"),
    (None, spec_of(arg("A", "input", ("M", "P")), arg("B", "input", ("Q", "N")), arg("C", "output", ("M", "N")),
                   sizes=("M", "N", "K", "P", "Q")), "not a GEMM: A and B share no one dimension"),
    (None, spec_of(arg("A", "input", ("K", "K")), arg("B", "input", ("K", "N")), arg("C", "output", ("M", "N"))),
     "not a GEMM: the operands' shapes do not match the output's"),
])
def test_a_matmul_it_does_not_take_says_which_part_it_could_not_read(change, spec, why):
    """The sentence a user reads in `optiml show` for a kernel the GEMM templates do not take, one
    change at a time from a matmul they do take (the plain loop over k, the spec's 2-D operands)."""
    assert recognize_gemm(MATMUL, "mm", MATMUL_SPEC)[1] is None
    source = MATMUL.replace(*change) if change else MATMUL
    g, said = recognize_gemm(source, "mm", spec or MATMUL_SPEC)
    assert g is None and said == why


def test_an_output_index_in_parentheses_is_read_as_written_without_them():
    """``C[((size_t)r * N + c)]``: the parentheses around the whole index change nothing."""
    from optiml.edits.templates import _terms

    assert _terms("((size_t)r * N + c)") == ["r*N", "c"] and _terms("(r * N)") == ["r*N"]
    g, why = recognize_gemm(MATMUL.replace("C[(size_t)r * N + c] = acc;", "C[((size_t)r * N + c)] = acc;"), "mm",
                            MATMUL_SPEC)
    assert why is None and g is not None
