"""Row-wise, reduction and elementwise templates built from the reference's operation
(optiml/edits/templates/traced_rows.py), whatever way the first kernel was written. Each template is
run on the CPU (tests/host_emulation.py, a FAKE GPU for semantics only: threads that cooperate for
real, under AddressSanitizer) and its outputs compared with the torch reference run on the same
inputs; the refusals are asserted by their sentences."""
import importlib.util
import math
import re
import sys
from pathlib import Path

import pytest

from optiml import expr
from optiml.edits.templates import template_transforms
from optiml.edits.templates.flat import FLAT_TEMPLATES, FlatOp, instantiate_flat
from optiml.edits.templates.rowwise import ROW_TEMPLATES, RowOp, instantiate_rowwise
from optiml.edits.templates.traced_rows import read_reference
from optiml.source import parse_source
from optiml.spec import load_spec
from tests.host_emulation import GXX, run_on_host

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(GXX is None, reason="g++ is not installed")
BENCH = Path(__file__).resolve().parents[1] / "bench"


def _instantiate(src, op, point):
    if isinstance(op, RowOp):
        t = next(t for t in ROW_TEMPLATES if t.strided == op.strided)
        return instantiate_rowwise(src, op, point, t.name), t
    t = next(t for t in FLAT_TEMPLATES if t.kind == op.kind)
    return instantiate_flat(src, op, point, t.name), t


def _against_reference(tmp, spec, source, sizes, tag, offsets=(0, 1)):
    """Run ``source`` (a template's text, with its launch line) on the host at ``sizes`` and compare each
    output with the spec's torch reference on the inputs it ran with."""
    info = parse_source(source)
    launch = spec.resolve_launch(sizes, info)
    env = spec.env(sizes, info.constants)
    arrays = [a for a in spec.args if a.role != "scalar"]
    shapes = {a.name: tuple(int(expr.evaluate(str(d), env)) for d in a.shape) for a in arrays}
    scalars = {a.name: spec.scalar_value(a, sizes, info.constants) for a in spec.args if a.role == "scalar"}
    outs = tuple(a.name for a in arrays if a.role == "output")
    got = run_on_host(tmp, tag, source, spec.entry, {n: math.prod(s) for n, s in shapes.items()}, scalars,
                      launch.grid[:2], launch.block[:2], outs, offsets, threaded=True)
    mod_spec = importlib.util.spec_from_file_location(f"ref_{tag}_{id(spec)}", spec.reference.path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    ref = getattr(mod, spec.reference.function)
    for offset, lines in zip(offsets, got):
        values = {a.name: torch.tensor([float.fromhex(v) for v in line.split()], dtype=torch.float64)
                  .reshape(shapes[a.name]).to(getattr(torch, a.dtype)) for a, line in zip(arrays, lines)}
        want = ref(**{n: t for n, t in values.items() if n not in outs}, **scalars)
        want = want if isinstance(want, (tuple, list)) else (want,)
        for name, w in zip(outs, want):
            g, w = values[name].double().reshape(-1), w.double().reshape(-1)
            bad = (g - w).abs() > 1e-4 + 1e-4 * w.abs()
            assert g.numel() == w.numel() and not bool(bad.any()), \
                (tag, offset, name, int(bad.sum()), g[bad][:3].tolist(), w[bad][:3].tolist())


def _corpus(name):
    sys.path.insert(0, str(BENCH / "kernelbench" / "level1"))
    import check
    check.write_references([name])
    k = BENCH / "kernelbench" / "level1" / "k" / f"{name}.cu"
    src = k.read_text()
    return src, load_spec(k.with_suffix(".toml"), k, kernel_source=src)


# first kernels no reading of the CUDA takes (a shared-memory tree, vector loads, a pointer along the
# row, a matrix-vector product), and one a thread an output that the reference reads as a row reduction
CORPUS = [
    ("max_dim", {"batch_size": 3, "dim1": 37, "dim2": 21}, "col_reduce"),
    ("mean_dim", {"batch_size": 3, "dim1": 37, "dim2": 21}, "col_reduce"),
    ("sum_dim_block", {"batch_size": 3, "dim1": 37, "dim2": 21}, "col_reduce"),
    ("min_dim", {"batch_size": 3, "dim1": 37, "dim2": 21}, "col_reduce"),
    ("gemv", {"M": 5, "K": 203}, "row_reduce"),
    ("layernorm_block", {"batch_size": 2, "features": 3, "dim1": 5, "dim2": 41}, "row_reduce"),
    ("relu_vec4", {"batch_size": 3, "dim": 203}, "elementwise"),
]


@pytest.mark.parametrize("name, sizes, template", CORPUS, ids=[c[0] for c in CORPUS])
def test_the_reference_s_operation_is_templated_and_computes_the_task(tmp_path, name, sizes, template):
    src, spec = _corpus(name)
    sizes = {**spec.verify_sizes[-1], **sizes}        # a size the task fixes (reduce_dim = 1) as the spec has it
    op, why = read_reference(src, spec.entry, spec)
    assert op is not None, why
    offered = [t.edit for t in template_transforms(src, spec.entry, spec)[0]]
    assert any(template in label for label in offered), offered
    text, t = _instantiate(src, op, None)
    assert t.name == template
    _against_reference(tmp_path, spec, text, sizes, f"{name}_start")
    small = t.points()[0]
    _against_reference(tmp_path, spec, _instantiate(src, op, small)[0], sizes, f"{name}_first", offsets=(1,))


def _spec_for(tmp, forward: str, arrays: list, scalars: list, sizes: dict, signature: str, verify: dict):
    """A spec for a kernel of ``signature`` (its body a placeholder: the template replaces it) whose
    reference is ``forward``, a torch function of the arrays by name."""
    (tmp / "ref.py").write_text("import torch\n\n\ndef reference(**t):\n    " + forward.replace("\n", "\n    ") + "\n")
    lines = ['[kernel]\nentry = "k"\n', "[sizes]",
             "timing = {" + ", ".join(f"{k} = {v}" for k, v in sizes.items()) + "}",
             "verify = [{" + ", ".join(f"{k} = {v}" for k, v in verify.items()) + "}, {" +
             ", ".join(f"{k} = {v + 1}" for k, v in verify.items()) + "}]\n"]
    for name, role, shape in arrays:
        lines += ["[[args]]", f'name = "{name}"', 'dtype = "float32"', f'role = "{role}"',
                  "shape = [" + ", ".join(f'"{s}"' for s in shape) + "]\n"]
    for name in scalars:                 # a size's name, or (name, its value)
        name, value = name if isinstance(name, tuple) else (name, name)
        lines += ["[[args]]", f'name = "{name}"', 'dtype = "int32"', 'role = "scalar"', f'value = "{value}"\n']
    lines += ['[launch]\ngrid = ["1"]\nblock = [32]\n', '[reference]\ntorch = "ref.py:reference"\n']
    (tmp / "k.toml").write_text("\n".join(lines))
    src = f"__global__ void k({signature}) {{ }}\n"
    (tmp / "k.cu").write_text(src)
    return src, load_spec(tmp / "k.toml", tmp / "k.cu", kernel_source=src)


SYNTHETIC = [
    # softmax over the middle dimension: two passes with a stride after the row
    ("return torch.softmax(t['x'], dim=1)", [("x", "input", ["B", "C", "D"]), ("y", "output", ["B", "C", "D"])],
     ["B", "C", "D"], "const float* x, float* y, int B, int C, int D", {"B": 3, "C": 29, "D": 7}, "col_reduce"),
    # log-softmax over contiguous rows (one pass where streamed)
    ("return torch.log_softmax(t['x'], dim=-1)", [("x", "input", ["R", "N"]), ("y", "output", ["R", "N"])],
     ["R", "N"], "const float* x, float* y, int R, int N", {"R": 3, "N": 301}, "row_reduce"),
    # RMSNorm with a weight along the row
    ("x = t['x']\nreturn x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * t['w']",
     [("x", "input", ["R", "N"]), ("w", "input", ["N"]), ("y", "output", ["R", "N"])],
     ["R", "N"], "const float* x, const float* w, float* y, int R, int N", {"R": 4, "N": 203}, "row_reduce"),
    # unbiased variance over the last dimension, one value a row
    ("return torch.var(t['x'], dim=2)", [("x", "input", ["B", "C", "D"]), ("y", "output", ["B", "C"])],
     ["B", "C", "D"], "const float* x, float* y, int B, int C, int D", {"B": 2, "C": 3, "D": 129}, "row_reduce"),
    # logsumexp over the first dimension
    ("return torch.logsumexp(t['x'], dim=0)", [("x", "input", ["R", "N"]), ("y", "output", ["N"])],
     ["R", "N"], "const float* x, float* y, int R, int N", {"R": 33, "N": 19}, "col_reduce"),
    # a vector times a matrix: the vector along the reduced dimension of a column reduction
    ("return t['v'] @ t['a']", [("v", "input", ["K"]), ("a", "input", ["K", "N"]), ("y", "output", ["N"])],
     ["K", "N"], "const float* v, const float* a, float* y, int K, int N", {"K": 45, "N": 37}, "col_reduce"),
    # an elementwise chain with a per-channel bias and a where
    ("z = t['x'] + t['b'].view(1, -1, 1)\nreturn torch.where(z > 0, z, 0.2 * z).clamp(max=1.5)",
     [("x", "input", ["B", "C", "D"]), ("b", "input", ["C"]), ("y", "output", ["B", "C", "D"])],
     ["B", "C", "D"], "const float* x, const float* b, float* y, int B, int C, int D", {"B": 2, "C": 5, "D": 33},
     "elementwise"),
    # a max over values all below zero (the pass starts from -inf, not 0)
    ("return torch.amax(t['x'] - 3.0, dim=1)", [("x", "input", ["R", "N"]), ("y", "output", ["R"])],
     ["R", "N"], "const float* x, float* y, int R, int N", {"R": 5, "N": 77}, "row_reduce"),
    # LayerNorm with no weight and an eps that matters
    ("return torch.nn.functional.layer_norm(t['x'], (t['x'].shape[-1],), eps=0.5)",
     [("x", "input", ["R", "N"]), ("y", "output", ["R", "N"])],
     ["R", "N"], "const float* x, float* y, int R, int N", {"R": 3, "N": 131}, "row_reduce"),
    # the L2 norm over the last dimension through linalg.vector_norm, divided out
    ("x = t['x']\nreturn x / torch.linalg.vector_norm(x, dim=1, keepdim=True)",
     [("x", "input", ["R", "N"]), ("y", "output", ["R", "N"])],
     ["R", "N"], "const float* x, float* y, int R, int N", {"R": 3, "N": 257}, "row_reduce"),
]


@pytest.mark.parametrize("forward, arrays, scalars, signature, sizes, template", SYNTHETIC,
                         ids=["softmax_dim1", "log_softmax", "rmsnorm", "var", "logsumexp_dim0", "vecmat",
                              "bias_where_clamp", "amax_negative", "layer_norm_eps", "l2_normalize"])
def test_operations_read_from_the_reference_compute_it(tmp_path, forward, arrays, scalars, signature, sizes, template):
    verify = {k: v + 2 + i for i, (k, v) in enumerate(sizes.items())}
    src, spec = _spec_for(tmp_path, forward, arrays, scalars, sizes, signature, verify)
    op, why = read_reference(src, spec.entry, spec)
    assert op is not None, why
    text, t = _instantiate(src, op, None)
    assert t.name == template
    _against_reference(tmp_path, spec, text, sizes, "start")
    _against_reference(tmp_path, spec, _instantiate(src, op, t.points()[-1])[0], sizes, "last", offsets=(1,))


@pytest.mark.parametrize("forward, why", [
    ("x = t['x']\nreturn x.sum(1, keepdim=True) + x.amax(2, keepdim=True)", "reductions over different dimensions"),
    ("return t['x'].sum()", "a reduction of every element into one value"),
    ("return (t['x'].sum(2) - 1).clamp_min(0).mean()", "reduces the rows' results again"),
    ("return torch.cumsum(t['x'], 1)", "cumsum is not read"),
    ("return t['x'] * torch.randn(t['x'].shape[-1])", "a tensor the reference made"),
    ("return t['x'], t['x']", "the reference returns more than one output"),
    ("t['x'].add_(1.0)\nreturn t['x'] * 2", "the reference's add_ is not translated"),
    ("return torch.div(t['x'], 2.0, rounding_mode='floor')", "the reference divides with rounding"),
    ("return (t['x'] > 0).float().sum(2, keepdim=True) * t['x']", "a reduction of a comparison"),
    ("return torch.sort(t['x'], dim=2).values", "the reference's sort is not read as a row-wise or elementwise operation"),
    ("return t['x'] * t['x'].sum(1, keepdim=True).flip(0)", "the reference's flip is not translated"),
    ("return t['x'].view(torch.int32) + 1", "the array x is of torch.int32"),
    ("return t['x'].transpose(0, 2) * 2", "x (6 x 5 x 4) does not broadcast over 4 x 5 x 6"),
    ("return t['x'][:, 0:1, :] * t['x']", "x is read with strides (30, 0, 1) over the frame, not as it lies in memory"),
    ("return t['x'][0].sum(1)", "a reduction of a reshaped value"),
    ("return t['x'].unsqueeze(0).sum(1)", "a reduction of a value shaped otherwise than the frame"),
    ("return t['x'].sum((0, 2))", "a reduction over dimensions that are not one run"),
    ("return (t['x'] * 2).to(torch.int32)", "the reference's _to_copy gives torch.int32"),
    ("return (t['x'] * 2).reshape(4, 30)", "the reference reshapes an element value (view, to 4 x 30)"),
    ("return t['x'].sum(2).transpose(0, 1)", "the reference reorders a row value (transpose)"),
    ("x = t['x']\nreturn x * x.sum(1, keepdim=True)[0:1]",
     "a row value (1 x 1 x 6) is broadcast over the frame otherwise than along the reduced dimensions"),
    ("return 3.0 * torch.ones(4, 5, 6)", "the reference's output does not depend on the kernel's arrays"),
    ("x = t['x']\nreturn x * (x[0] @ x[0].t()).sum()", "the reference's mm multiplies two matrices"),
    ("return t['x'] * t['x'].prod(2, keepdim=True)", "the reference's prod is not read as a row-wise or elementwise"),
    ("x = t['x']\nreturn x + torch.lerp(x, x * 2, 0.5)", "the reference's lerp takes a tensor"),
    # x viewed as pairs: 60 rows of 2, neither a size of the spec nor a product of two
    ("return t['x'].view(-1, 2) * 2", "a dimension of 60 is no size of the spec"),
])
def test_what_the_reference_reading_refuses_it_says(tmp_path, forward, why):
    arrays = [("x", "input", ["B", "C", "D"]), ("y", "output", ["B", "C", "D"])]
    src, spec = _spec_for(tmp_path, forward, arrays, ["B", "C", "D"], {"B": 4, "C": 5, "D": 6},
                          "const float* x, float* y, int B, int C, int D", {"B": 4, "C": 5, "D": 6})
    op, got = read_reference(src, spec.entry, spec)
    assert op is None and why in got and got.startswith("not templated:"), got


@pytest.mark.parametrize("forward, template", [
    ("x = t['x']\nreturn torch.atan2(x, x + 1) + torch.fmod(x, 0.5) + torch.clamp(x, min=-0.5, max=0.5) + "
     "torch.clamp_max(x, 0.1) + torch.logical_and(x > 0, x < 1).float()", "elementwise"),
    ("x = t['x']\nv, m = torch.var_mean(x, dim=2, keepdim=True)\nreturn (x - m) * v + x * torch.norm(x, p=1, dim=2, "
     "keepdim=True) + torch.norm(x, p=float('inf'), dim=2, keepdim=True) - torch.norm(x, p=3, dim=2, keepdim=True)",
     "row_reduce"),
    ("x = t['x']\nreturn [torch.add(x, x, alpha=2) + torch.rsub(x, 1.0) + x.masked_fill(x > 0, 0.0) + "
     "torch.logical_not(x > 0).float()]", "elementwise"),
    ("x = t['x']\nreturn torch.clamp(x, x.amin(2, keepdim=True) * 0.5, x.amax(2, keepdim=True) * 0.5) + "
     "torch.clamp_max(x, x.amax(2, keepdim=True) * 0.25) * x.std(2, keepdim=True, unbiased=False)", "row_reduce"),
], ids=["atan2_fmod_clamps_logical_and", "var_mean_and_p_norms", "alpha_rsub_masked_fill_not_in_a_list",
        "clamps_by_row_values_and_a_biased_std"])
def test_more_operations_read_from_the_reference_compute_it(tmp_path, forward, template):
    """Binary functions, both clamps and a logical and in one elementwise chain; var_mean and the
    1-, infinity- and 3-norms over a row in one row program; add's alpha, rsub, masked_fill and
    logical_not, the output returned in a list; clamps whose bounds are row values, and the biased
    deviation: each as the reference computes it."""
    arrays = [("x", "input", ["B", "C", "D"]), ("y", "output", ["B", "C", "D"])]
    sizes = {"B": 2, "C": 3, "D": 37}
    src, spec = _spec_for(tmp_path, forward, arrays, ["B", "C", "D"], sizes,
                          "const float* x, float* y, int B, int C, int D", {"B": 3, "C": 4, "D": 29})
    op, why = read_reference(src, spec.entry, spec)
    assert op is not None, why
    text, t = _instantiate(src, op, None)
    assert t.name == template
    _against_reference(tmp_path, spec, text, sizes, "start", offsets=(0,))


def test_a_loss_over_rows_is_refused_with_the_op_it_stops_at():
    src, spec = _corpus("cross_entropy")
    op, why = read_reference(src, spec.entry, spec)
    assert op is None and "nll_loss" in why, why
    assert re.search(r"\bnot templated\b", template_transforms(src, spec.entry, spec)[1] or "")


def test_an_array_broadcast_over_part_of_the_reduced_run_is_refused(tmp_path):
    """A per-channel weight where each row is (channels x length): not one value along the row, so
    no side array of the row templates (which read it at the row's element)."""
    arrays = [("x", "input", ["B", "C", "D"]), ("w", "input", ["C"]), ("y", "output", ["B", "C", "D"])]
    src, spec = _spec_for(tmp_path, "x = t['x'] * t['w'].view(1, -1, 1)\nreturn x / x.sum((1, 2), keepdim=True)",
                          arrays, ["B", "C", "D"], {"B": 4, "C": 5, "D": 6},
                          "const float* x, const float* w, float* y, int B, int C, int D", {"B": 4, "C": 5, "D": 6})
    op, why = read_reference(src, spec.entry, spec)
    assert op is None and "w is broadcast along rows" in why, why


def test_a_kernel_read_one_element_a_thread_keeps_its_own_template_where_the_reference_is_a_norm(tmp_path):
    """A softmax written one output a thread, each thread looping over its row: the kernel's own reading
    takes it as per-element code (the row reading refuses its store), and the reference reads as a row
    operation whose output has X's shape. Only a reduction to one value a row is added beside the
    kernel's own reading, so the search is offered the elementwise template alone, with no reason to
    give (not a failure of the reference's reading)."""
    src, _ = _spec_for(tmp_path, "return torch.softmax(t['x'], dim=-1)",
                       [("x", "input", ["R", "N"]), ("y", "output", ["R", "N"])], ["R", "N"],
                       {"R": 3, "N": 301}, "const float* x, float* y, int R, int N", {"R": 4, "N": 37})
    src = src.replace("{ }", """{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * N) return;
    int r = i / N;
    float m = -INFINITY;
    for (int j = 0; j < N; ++j) m = fmaxf(m, x[r * N + j]);
    float s = 0.f;
    for (int j = 0; j < N; ++j) s += expf(x[r * N + j] - m);
    y[i] = expf(x[i] - m) / s;
}""")
    (tmp_path / "k.cu").write_text(src)
    spec = load_spec(tmp_path / "k.toml", tmp_path / "k.cu", kernel_source=src)
    assert isinstance(read_reference(src, spec.entry, spec)[0], RowOp)
    offers, why = template_transforms(src, spec.entry, spec)
    assert [t.edit.split(" (")[0] for t in offers] == ["template elementwise"] and why is None, (offers, why)


def test_a_kernel_given_the_rows_as_one_product_reads_the_frame_as_the_product_of_its_two_arguments(tmp_path):
    """An elementwise map over x of B x S x D whose kernel takes rows = B * S and cols = D: the frame's
    B * S * D elements are the product of the two arguments (no argument is B or S alone)."""
    src, spec = _spec_for(tmp_path, "return torch.tanh(t['x']) * 2", [("x", "input", ["B", "S", "D"]),
                          ("y", "output", ["B", "S", "D"])], [("rows", "B * S"), ("cols", "D")],
                          {"B": 2, "S": 3, "D": 37}, "const float* x, float* y, int rows, int cols",
                          {"B": 3, "S": 4, "D": 29})
    op, why = read_reference(src, spec.entry, spec)
    assert isinstance(op, FlatOp) and (op.n, op.n_size) == ("(rows * cols)", "B * S * D"), why
