"""Forms of a torch reference that the traced readings (optiml/edits/templates/traced.py and
traced_rows.py) take: softplus with its beta and threshold given by position, an nn.Linear whose
parameters are copied from the kernel's arrays, a kernel of two outputs, and a reduction's result
without its reduced dimension broadcast back over the input."""
import pytest

from optiml.edits.templates import template_transforms
from optiml.edits.templates.traced import gemm_from_reference
from optiml.edits.templates.traced_rows import read_reference
from optiml.spec import load_spec
from tests.test_templates_on_host import _spec_toml
from tests.test_templates_traced import _spec
from tests.test_traced_rows import _spec_for

torch = pytest.importorskip("torch", reason="the reference is traced with PyTorch: pip install torch")


def test_softplus_with_positional_beta_and_threshold_becomes_the_gemm_epilogue(tmp_path):
    """``F.softplus(t, 2.0, 5.0)`` after the product: the epilogue uses beta 2 and threshold 5."""
    src, spec = _spec(tmp_path, "return F.softplus(F.linear(x, w, bias), 2.0, 5.0) - r\n")
    made, why = template_transforms(src, "k", spec)
    assert made and made[0].edit.startswith("template gemm_f32_warp"), why
    assert "((optiml_v0) * 2.0f > 5.0f ? (optiml_v0) : log1pf(expf((optiml_v0) * 2.0f)) / 2.0f)" in made[0].source


def test_a_linear_layer_whose_parameters_are_copied_from_the_kernels_arrays_reads_as_their_gemm(tmp_path):
    """A reference that builds an nn.Linear and copies w and bias into it (as a KernelBench Model's
    state is loaded) multiplies the kernel's own x and w: the GEMM template is offered over them."""
    forward = ("lin = torch.nn.Linear(w.shape[1], w.shape[0])\nwith torch.no_grad():\n    lin.weight.copy_(w)\n"
               "    lin.bias.copy_(bias)\nreturn F.leaky_relu(lin(x), 0.2) * 3.0 - r\n")
    src, spec = _spec(tmp_path, forward)
    made, why = template_transforms(src, "k", spec)
    assert made and made[0].edit.startswith("template gemm_f32_warp"), why
    text = made[0].source
    assert "OPTIML_B(optiml_k, optiml_n) w[(size_t)(optiml_n) * (inner) + (optiml_k)]" in text
    assert "(float)bias[(size_t)(n)]" in text and "from the reference" in made[0].rationale


def test_a_kernel_of_two_outputs_with_a_torch_reference_keeps_its_elementwise_template(tmp_path):
    """The GEMM reading of the reference declines a kernel of two outputs with its sentence; the
    kernel's own reading as an elementwise map is still offered."""
    kernel = ("__global__ void k(const float *p, const float *q, float *s, float *d, int n) {\n"
              "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
              "    if (i < n) { float a = p[i], b = q[i]; s[i] = a + b; d[i] = a - b; }\n}\n")
    (tmp_path / "ref.py").write_text("def reference(p, q, **_):\n    return p + q, p - q\n")
    (tmp_path / "k.cu").write_text(kernel)
    (tmp_path / "k.toml").write_text(_spec_toml(
        "k", "n = 4096", ["n = 37", "n = 5"],
        [("p", "input", '["n"]'), ("q", "input", '["n"]'), ("s", "output", '["n"]'), ("d", "output", '["n"]')],
        [("n", "int32", '"n"')], '["cdiv(n, 256)"]', "[256]", ("1e-5", "1e-5"))
        + '\n[reference]\ntorch = "ref.py:reference"\n')
    spec = load_spec(tmp_path / "k.toml", tmp_path / "k.cu", kernel_source=kernel)
    assert gemm_from_reference(kernel, "k", spec) == \
        (None, "the reference is not traced: the kernel has more than one output", False)
    made, why = template_transforms(kernel, "k", spec)
    assert [t.edit.split(" (")[0] for t in made] == ["template elementwise"], why


def test_a_column_sum_without_keepdim_divided_out_reads_as_a_column_reduction(tmp_path):
    """``x / x.sum(0)``: the sum (N values) broadcasts back along the reduced first dimension, so the
    reference reads as a reduction over dimension 0 and an elementwise map."""
    src, spec = _spec_for(tmp_path, "x = t['x']\nreturn x / x.sum(0)",
                          [("x", "input", ["R", "N"]), ("y", "output", ["R", "N"])], ["R", "N"],
                          {"R": 33, "N": 19}, "const float* x, float* y, int R, int N", {"R": 5, "N": 7})
    op, why = read_reference(src, "k", spec)
    assert op is not None, why
    assert op.dim == 0 and op.strided
    assert op.describe() == "row-wise x -> y over dimension 0 (size R, stride N): 1 reduction (sum) then an elementwise map"
