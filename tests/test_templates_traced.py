"""The GEMM and its elementwise chain read from a torch reference (optiml/edits/templates/traced.py):
what is offered where the CUDA reading of the kernel refuses, the refusals' sentences, the kernel's
own size arguments for the template, and each translated op computing what torch computes (the C
expressions compiled with g++ and compared with torch on the CPU)."""
import subprocess
import textwrap

import numpy as np
import pytest

from optiml.edits.templates import template_transforms
from optiml.spec import load_spec
from tests.host_emulation import GXX
from tests.test_templates_on_host import _spec_toml

torch = pytest.importorskip("torch", reason="the reference is traced with PyTorch: pip install torch")

# a thread an output whose chain goes through a __device__ helper: the CUDA reading refuses it
KERNEL = """
__device__ float act(float v) { return v > 0.f ? v : 0.2f * v; }
__global__ void k(const float* x, const float* w, const float* bias, const float* r, float* out,
                  int total, int inner, int cols) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) {
        int row = i / cols, col = i % cols;
        float acc = 0.f;
        for (int j = 0; j < inner; ++j) acc += x[row * inner + j] * w[col * inner + j];
        out[i] = act(acc + bias[col]) * 3.0f - r[i];
    }
}
"""

def _spec(tmp_path, forward: str, kernel: str = KERNEL, total: str = "M * N"):
    """The kernel, and its spec whose torch reference runs ``forward`` (x, w, bias, r given)."""
    (tmp_path / "ref.py").write_text("import torch\nimport torch.nn.functional as F\n\n"
                                     "def reference(x, w, bias, r, **_):\n" + textwrap.indent(forward, "    "))
    cu = tmp_path / "k.cu"
    cu.write_text(kernel)
    (tmp_path / "k.toml").write_text(_spec_toml(
        "k", "M = 256, K = 128, N = 64", ["M = 13, K = 7, N = 5", "M = 3, K = 11, N = 9"],
        [("x", "input", '["M", "K"]'), ("w", "input", '["N", "K"]'), ("bias", "input", '["N"]'),
         ("r", "input", '["M", "N"]'), ("out", "output", '["M", "N"]')],
        [("total", "int32", f'"{total}"'), ("inner", "int32", '"K"'), ("cols", "int32", '"N"')],
        '["cdiv(M * N, 256)"]', '["256"]', ("1e-4", "1e-4")) + '\n[reference]\ntorch = "ref.py:reference"\n')
    return kernel, load_spec(tmp_path / "k.toml", cu, kernel_source=kernel)


def test_a_gemm_whose_epilogue_the_kernel_hides_is_read_from_the_reference(tmp_path):
    src, spec = _spec(tmp_path, "return F.leaky_relu(F.linear(x, w, bias), 0.2) * 3.0 - r\n")
    made, why = template_transforms(src, "k", spec)
    assert made and made[0].edit.startswith("template gemm_f32_warp"), why
    text = made[0].source
    # the kernel's own arguments: M is total / cols, the residual read at m * N + n
    assert "#define OPTIML_M ((total / cols))" in text and "#define OPTIML_N (cols)" in text
    assert "#define OPTIML_K (inner)" in text
    assert "(float)r[(size_t)(m) * OPTIML_N + (size_t)(n)]" in text
    assert "OPTIML_B(optiml_k, optiml_n) w[(size_t)(optiml_n) * (inner) + (optiml_k)]" in text          # nn.Linear's weight, N x K
    assert "from the reference" in made[0].rationale and "leaky_relu" in made[0].rationale
    assert "// optiml:launch {grid = [\"cdiv(N, OPTIML_BN)\", \"cdiv(M, OPTIML_BM)\"]" in text


def test_b_stored_k_by_n_reads_as_such(tmp_path):
    src, spec = _spec(tmp_path, "return torch.tanh(x @ w.reshape(x.shape[1], -1) + bias) + r\n")
    made, why = template_transforms(src, "k", spec)
    assert made, why
    assert "OPTIML_B(optiml_k, optiml_n) w[(size_t)(optiml_k) * (cols) + (optiml_n)]" in made[0].source


@pytest.mark.parametrize("forward, said", [
    ("y = F.linear(x, w, bias)\nreturn y / y.sum(dim=1, keepdim=True) + r\n", "the reference's sum reduces along rows or columns"),
    ("return torch.softmax(F.linear(x, w, bias), dim=1) + r\n", "softmax reduces along rows or columns"),
    ("return F.linear(F.linear(x, w, bias), torch.ones(5, 5)) + r\n", "multiplies matrices more than once"),
    ("return F.linear(x * 2, w, bias) + r\n", "operands are not two of the kernel's arrays"),
    ("return torch.where(F.linear(x, w, bias) > 0, r, -r)\n", "the reference's gt gives torch.bool"),
    ("return torch.addmm(bias, x, w.t(), beta=0.5) + r\n", "the reference's addmm scales its terms"),
    ("return torch.div(F.linear(x, w, bias), 2.0, rounding_mode='floor') + r\n",
     "after the matrix product the reference divides with rounding"),
    ("return torch.cumsum(F.linear(x, w, bias), 1) + r\n", "the reference's cumsum reduces along rows or columns"),
    ("return F.linear(x, w, bias).clamp(min=r)\n", "after the matrix product the reference's clamp takes a tensor"),
    ("return F.linear(x, w, bias), r\n", "the reference returns more than one output"),
    ("return torch.bmm(x.unsqueeze(0), w.t().unsqueeze(0))[0] + r\n",
     "the reference's matrix product is aten.bmm, which the GEMM templates do not take yet"),
    ("return F.linear(x, w, bias) + r * torch.randn(1)\n",
     "an operand of the chain is a tensor the reference made, not a kernel array"),
    ("return F.linear(x, w, bias).flip(1) + r\n", "after the matrix product the reference's flip is not translated into an epilogue"),
    ("return (F.linear(x, w, bias) + r).to(torch.float16)\n",
     "after the matrix product the reference converts it (_to_copy, to torch.float16)"),
    ("return F.linear(x, w, bias).reshape(-1)[:r.numel()].reshape(r.shape) + r\n",
     "after the matrix product the reference reshapes it (view, to 65)"),
])
def test_what_the_reference_does_past_a_gemm_chain_is_said(tmp_path, forward, said):
    src, spec = _spec(tmp_path, forward)
    made, why = template_transforms(src, "k", spec)
    assert not made and said in why and why.endswith("(read from the reference)"), why


R_MN = "(float)r[(size_t)(m) * OPTIML_N + (size_t)(n)]"


@pytest.mark.parametrize("forward, value", [
    ("return torch.add(F.linear(x, w, bias), r, alpha=0.5)\n", f"(optiml_v0 + (0.5f * {R_MN}))"),
    ("return torch.rsub(F.linear(x, w, bias), r)\n", f"({R_MN} - optiml_v0)"),
    ("return torch.maximum(F.linear(x, w, bias), r)\n", f"fmaxf(optiml_v0, {R_MN})"),
    ("return F.linear(x, w, bias) + r[:, :1]\n", "(optiml_v0 + (float)r[(size_t)(m) * OPTIML_N])"),
    ("return F.linear(x, w, bias) * torch.full((1,), 2.0)\n", "(optiml_v0 * 2.0f)"),
    ("return [F.linear(x, w, bias) - r]\n", f"(optiml_v0 - {R_MN})"),
], ids=["add_alpha", "rsub", "maximum", "a_column_of_r", "a_full_constant", "in_a_list"])
def test_the_epilogue_computes_the_references_chain(tmp_path, forward, value):
    """The value after the bias (optiml_v0) as the reference goes on: add's alpha scales the
    other term, rsub subtracts the product, a column of r is read at its row, a tensor full of one
    number is that number, and an output returned in a list is the output."""
    src, spec = _spec(tmp_path, forward)
    made, why = template_transforms(src, "k", spec)
    assert made and made[0].edit.startswith("template gemm_f32_warp"), why
    epilogue = next(ln for ln in made[0].source.splitlines() if ln.startswith("#define OPTIML_EPILOGUE"))
    assert f"const float optiml_v1 = {value}; return optiml_v1;" in epilogue, epilogue


@pytest.mark.parametrize("forward, said", [
    ("return torch.tanh(F.linear(x, w, bias) + r)\n", "epilogue tanh((acc + bias) + r) (from the reference)"),
    ("return torch.sigmoid(F.linear(x, w, bias)) * r\n", "epilogue (sigmoid(acc + bias) * r) (from the reference)"),
], ids=["a_function_of_a_sum", "a_product_of_a_function"])
def test_the_epilogue_is_described_with_one_pair_of_parentheses_a_call(tmp_path, forward, said):
    src, spec = _spec(tmp_path, forward)
    made, why = template_transforms(src, "k", spec)
    assert made and said in made[0].rationale, why or made[0].rationale


def test_a_reduction_after_the_product_overrides_a_cuda_reading_as_a_gemm(tmp_path):
    """The kernel's store of the accumulator reads as a GEMM (offered without a reference); the
    reference normalizes the rows after the product, so no GEMM template is offered."""
    plain = """
__global__ void k(const float* x, const float* w, const float* bias, const float* r, float* out,
                  int total, int inner, int cols) {
    int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < total && col < cols) {
        float acc = 0.f;
        for (int j = 0; j < inner; ++j) acc += x[row * inner + j] * w[col * inner + j];
        out[row * cols + col] = acc;
    }
}
"""
    src, spec = _spec(tmp_path, "return F.layer_norm(x @ w.t(), (w.shape[0],))\n", kernel=plain, total="M")
    seed_only = load_spec(tmp_path / "k.toml", tmp_path / "k.cu", kernel_source=src)
    object.__setattr__(seed_only, "reference", type(spec.reference)())          # no torch reference
    assert template_transforms(src, "k", seed_only)[0], "the CUDA reading no longer reads this kernel as a GEMM"
    made, why = template_transforms(src, "k", spec)
    assert not made and "layer_norm reduces along rows or columns" in why, why


def test_a_reference_that_does_not_run_on_the_cpu_is_said_and_nothing_breaks(tmp_path):
    src, spec = _spec(tmp_path, "return (x @ w.t() + bias).cuda() if False else undefined_name\n")
    made, why = template_transforms(src, "k", spec)
    assert not made and "the reference is not traced" in why and "NameError" in why, why


# each translated op against torch on the same inputs: the C expression compiled with g++
OPS = [
    ("relu", torch.relu, {}), ("sigmoid", torch.sigmoid, {}), ("tanh", torch.tanh, {}),
    ("silu", torch.nn.functional.silu, {}), ("mish", torch.nn.functional.mish, {}),
    ("gelu", lambda t: torch.nn.functional.gelu(t), {}),
    ("gelu", lambda t: torch.nn.functional.gelu(t, approximate="tanh"), {"approximate": "tanh"}),
    ("leaky_relu", lambda t: torch.nn.functional.leaky_relu(t, 0.3), {"negative_slope": 0.3}),
    ("elu", lambda t: torch.nn.functional.elu(t, 0.7), {"alpha": 0.7}),
    ("hardtanh", lambda t: torch.nn.functional.hardtanh(t, -0.5, 2.0), {"min_val": -0.5, "max_val": 2.0}),
    ("clamp", lambda t: torch.clamp(t, min=-1.5), {"min": -1.5}),
    ("clamp", lambda t: torch.clamp(t, max=0.25), {"max": 0.25}),
    ("softplus", torch.nn.functional.softplus, {}),
    ("softplus", lambda t: torch.nn.functional.softplus(t, beta=2.0, threshold=5.0), {"beta": 2.0, "threshold": 5.0}),
    ("hardsigmoid", torch.nn.functional.hardsigmoid, {}), ("hardswish", torch.nn.functional.hardswish, {}),
    ("exp", torch.exp, {}), ("abs", torch.abs, {}), ("neg", torch.neg, {}), ("erf", torch.erf, {}),
    ("square", torch.square, {}), ("pow", lambda t: torch.pow(t, 3.0), "3.0"),
    ("log", torch.log, {}), ("log1p", torch.log1p, {}), ("sqrt", torch.sqrt, {}),
    ("reciprocal", torch.reciprocal, {}), ("sigmoid", torch.sigmoid, {}),
    ("clamp_min", lambda t: torch.clamp_min(t, -0.75), "-0.75"), ("clamp_max", lambda t: torch.clamp_max(t, 0.5), "0.5"),
    ("clamp", lambda t: torch.clamp(t, -2.0, float("inf")), {"min": -2.0, "max": float("inf")}),
    ("clamp", lambda t: torch.clamp(t, float("-inf"), 1.0), {"min": float("-inf"), "max": 1.0}),
    ("hardtanh", torch.nn.functional.hardtanh, {}),
    ("pow", lambda t: torch.pow(t, 2.0), "2.0"), ("pow", lambda t: torch.pow(t, 1.0), "1.0"),
    ("elu", lambda t: torch.nn.functional.selu(t), {"alpha": 1.6732632423543772, "scale": 1.0507009873554805}),
]


@pytest.mark.skipif(GXX is None, reason="g++ is not installed")
def test_each_translated_op_computes_what_torch_computes(tmp_path):
    from optiml.edits.templates.traced import _unary
    xs = np.concatenate([np.linspace(-30, 30, 241), np.linspace(-3, 3, 121)]).astype(np.float32)
    funcs = []
    for i, (name, _, kw) in enumerate(OPS):
        rest, kw = ([float(kw)], {}) if isinstance(kw, str) else ([], kw)
        funcs.append(f"static float f{i}(float x) {{ return {_unary(name, 'x', rest, kw)}; }}")
    calls = "".join(f"    printf(\"%a\\n\", f{i}(v));\n" for i in range(len(OPS)))
    (tmp_path / "ops.cpp").write_text(
        "#include <math.h>\n#include <stdio.h>\n#include <stdlib.h>\n" + "\n".join(funcs) +
        "\nint main(int argc, char** argv) {\n  for (int a = 1; a < argc; ++a) {\n    float v = strtof(argv[a], 0);\n"
        + calls + "  }\n}\n")
    subprocess.run([GXX, "-O1", "-o", str(tmp_path / "ops"), str(tmp_path / "ops.cpp")], check=True)
    out = subprocess.run([str(tmp_path / "ops"), *[float(x).hex() for x in xs]], capture_output=True, text=True,
                         check=True).stdout.split()
    got = np.array([float.fromhex(v) for v in out], dtype=np.float64).reshape(len(xs), len(OPS))
    t = torch.from_numpy(xs)
    for i, (name, fn, _) in enumerate(OPS):
        want = fn(t).double().numpy()
        np.testing.assert_allclose(got[:, i], want, rtol=2e-5, atol=2e-6, err_msg=f"{name} {OPS[i][2]}")
