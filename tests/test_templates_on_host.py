"""The Jinja2 templates (row_reduce, col_reduce, elementwise, reduce_all) run on the CPU against
the first kernels they replace, at small sizes of each kernel's spec: tests/host_emulation.py compiles
both as C++ and runs every thread of the grid, threads that cooperate for real (barriers of the
block and of each warp, shuffles, shared memory, atomics), under AddressSanitizer. A FAKE GPU for
semantics only: it shows that a template computes the kernel's outputs within the spec's tolerance
and touches no memory outside the arrays; it says nothing of speed or of the GPU's own behaviour."""
import math
import re
import sys
from pathlib import Path

import pytest

from optiml import expr
from optiml.edits.templates.flat import FLAT_TEMPLATES, instantiate_flat, recognize_flat
from optiml.edits.templates.rowwise import ROW_TEMPLATES, instantiate_rowwise, recognize_rowwise
from optiml.source import parse_source
from optiml.spec import load_spec
from tests.host_emulation import GXX, run_on_host

pytestmark = pytest.mark.skipif(GXX is None, reason="g++ is not installed")
BENCH = Path(__file__).resolve().parents[1] / "bench"
_COOPERATES = re.compile(r"__syncthreads|__shfl|__shared__|atomic")


def _run(tmp, name, spec, source, sizes, offsets=(0, 1)):
    info = parse_source(source)
    launch = spec.resolve_launch(sizes, info)
    env = spec.env(sizes, info.constants)
    counts = {a.name: math.prod(int(expr.evaluate(str(d), env)) for d in a.shape) for a in spec.args if a.role != "scalar"}
    scalars = {a.name: expr.evaluate(str(a.value), env) for a in spec.args if a.role == "scalar"}
    outs = tuple(a.name for a in spec.args if a.role == "output")
    return run_on_host(tmp, name, source, spec.entry, counts, scalars, launch.grid[:2], launch.block[:2], outs,
                       offsets, threaded=bool(_COOPERATES.search(source)))


def _agree(spec, want, got, what):
    """Inputs bit for bit; outputs within the spec's tolerance (poisoned before, so one left unwritten
    differs by far)."""
    names = [a.name for a in spec.args if a.role != "scalar"]
    for a, w, g in zip(names, want, got):
        arg = next(x for x in spec.args if x.name == a)
        if arg.role == "input":
            assert g == w, (what, a)
            continue
        tol = spec.tolerances.get(arg.dtype) if isinstance(spec.tolerances, dict) else None
        atol, rtol = (tol.atol, tol.rtol) if tol is not None else (1e-5, 1e-5)
        ws, gs = [float.fromhex(v) for v in w.split()], [float.fromhex(v) for v in g.split()]
        bad = [(i, x, y) for i, (x, y) in enumerate(zip(ws, gs)) if not abs(x - y) <= atol + rtol * abs(x)]
        assert len(ws) == len(gs) and not bad, (what, a, bad[:3])


def _spec(folder, name):
    if folder == "kernelbench/level1/k":        # the spec's reference is generated: write it first
        sys.path.insert(0, str(BENCH / "kernelbench" / "level1"))
        import check
        check.write_references([name])
    k = BENCH / folder / f"{name}.cu"
    src = k.read_text()
    return src, load_spec(k.with_suffix(".toml"), k, kernel_source=src)


# first kernel, the sizes it runs at here (longer rows than a small point's registers); logsoftmax_warp
# is left out: its literal grid of 1056 blocks of 256 cooperating threads takes 70 s to emulate
ROWS = [
    ("templates/rewrites", "softmax_long", {"rows": 2, "cols": 1001}),
    ("templates/rewrites", "rmsnorm_strided", {"batch": 2, "features": 7, "spatial": 333}),
    ("templates/operations", "layernorm_rows", {"rows": 3, "cols": 601}),
    # rows that every vector width divides (a tail vector past the last thread's first): at offset 0 every
    # array moves as vectors (the template's wide program), at offset 1 element by element
    ("templates/rewrites", "softmax_long", {"rows": 2, "cols": 1032}),
    ("templates/operations", "layernorm_rows", {"rows": 3, "cols": 1032}),
    # thread 0 folds the warps' partials into shared scalars; the row streams past the registers
    ("templates/operations", "softmax_kb", {"rows": 2, "cols": 1032}),
    ("templates/operations", "softmax_kb", {"rows": 2, "cols": 1001}),
    # a thread a row, its max seeded from the row's first element (KernelBench 23 as often written)
    ("kernelbench/level1/k", "softmax_thread", {"batch_size": 3, "dim": 1001}),
    # the first warp shuffling the warps' partials, thread 0 writing a shared norm (KernelBench 39)
    ("kernelbench/level1/k", "l2norm", {"batch_size": 2, "dim": 1001}),
    # a row of three trailing dimensions, its length an argument (KernelBench 40), a weight and bias alike
    ("kernelbench/level1/k", "layernorm_onepass", {"batch_size": 2, "features": 3, "dim1": 5, "dim2": 67}),
]


@pytest.mark.parametrize("folder, name, sizes", ROWS, ids=[f"{r[1]}-{'-'.join(map(str, r[2].values()))}" for r in ROWS])
def test_the_row_templates_compute_the_first_kernels_outputs(tmp_path, folder, name, sizes):
    """The start point (the row in registers), a point whose registers hold less than the row (each
    pass reads it again), and the space's last point."""
    src, spec = _spec(folder, name)
    op, why = recognize_rowwise(src, spec.entry, spec)
    assert op is not None, why
    t = next(t for t in ROW_TEMPLATES if t.strided == op.strided)
    small = next(p for p in t.points() if p["OPTIML_VEC"] * p["OPTIML_ITEMS"] *
                 (p["OPTIML_THREADS"] if not op.strided else p["OPTIML_FS"]) < 256)
    want = _run(tmp_path, "orig", spec, src, sizes)
    for i, p in enumerate([t.start_for(op), small, t.points()[-1]]):
        got = _run(tmp_path, f"t{i}", spec, instantiate_rowwise(src, op, p, t.name), sizes)
        for offset, (w, g) in enumerate(zip(want, got)):
            _agree(spec, w, g, (name, p, offset))


def test_the_fp32_gemm_template_computes_the_linear_layer(tmp_path):
    """gemm_f32_warp (warp tiles, float4 shared-memory reads, double buffering) behind the nn.Linear +
    bias + ReLU first kernel, at sizes no tile divides, at its start and the space's first and last
    points (the tensor-core templates need the GPU's own instructions: not emulated)."""
    from optiml.edits.templates import GEMM_TEMPLATES, instantiate_gemm, recognize_gemm
    src, spec = _spec("templates/operations", "linear_relu")
    g, why = recognize_gemm(src, spec.entry, spec)
    assert g is not None, why
    t = next(t for t in GEMM_TEMPLATES if t.name == "gemm_f32_warp")
    sizes = {"M": 37, "N": 68, "K": 44}
    want = _run(tmp_path, "orig", spec, src, sizes, offsets=(0,))
    for i, p in enumerate([t.start, t.points()[0], t.points()[-1]]):
        got = _run(tmp_path, f"t{i}", spec, instantiate_gemm(src, g, p, t.name), sizes, offsets=(0,))
        _agree(spec, want[0], got[0], ("linear_relu", p))


def test_the_fp32_gemm_template_computes_an_epilogue_written_through_locals(tmp_path):
    """A first kernel that finishes its output in steps (a scaled value in a local, a LeakyReLU by an
    if) against gemm_f32_warp with that epilogue folded into one expression, at its start point."""
    from optiml.edits.templates import GEMM_TEMPLATES, instantiate_gemm, recognize_gemm
    src, spec = _spec("templates/operations", "linear_relu")
    src = src.replace("y[row * N + col] = fmaxf(sum + bias[col], 0.0f);",
                      "float v = (sum + bias[col]) * 0.5f;\n        if (v < 0.0f) v *= 0.25f;\n        y[row * N + col] = v;")
    g, why = recognize_gemm(src, spec.entry, spec)
    assert g is not None and "?" in g.epilogue, why
    t = next(t for t in GEMM_TEMPLATES if t.name == "gemm_f32_warp")
    sizes = {"M": 37, "N": 68, "K": 44}
    want = _run(tmp_path, "orig", spec, src, sizes, offsets=(0,))
    got = _run(tmp_path, "t", spec, instantiate_gemm(src, g, t.start, t.name), sizes, offsets=(0,))
    _agree(spec, want[0], got[0], ("linear_relu through locals", t.start))



def test_the_gemm_templates_keep_working_where_the_arguments_are_named_like_their_locals(tmp_path):
    """A first kernel whose arguments are named a, b, c, acc, m, n, k (names the templates' bodies
    also declare): gemm_f32_warp computes it on the host, and no template's body declares a name of
    the signature, which its operand macros would then read instead of the argument."""
    from optiml.edits.cutree import _entry_def, _params, _tree
    from optiml.edits.templates import GEMM_TEMPLATES, _declared, instantiate_gemm, recognize_gemm
    import shutil
    from optiml.spec import load_spec
    k = BENCH / "templates" / "operations" / "linear_relu.cu"
    names = {"x": "a", "w": "b", "bias": "c", "y": "acc", "M": "m", "N": "n", "K": "k"}
    src = re.sub(r"\bk\b", "kk", k.read_text())
    src = re.sub(r"(?<!\.)\b(x|w|bias|y|M|N|K)\b", lambda m: names[m.group(1)], src)
    toml = re.sub(r'name = "(\w+)"', lambda m: f'name = "{names[m.group(1)]}"', k.with_suffix(".toml").read_text())
    (tmp_path / "k.cu").write_text(src)
    (tmp_path / "k.toml").write_text(toml)
    shutil.copy(k.parent / "ref.py", tmp_path / "ref.py")
    spec = load_spec(tmp_path / "k.toml", tmp_path / "k.cu", kernel_source=src)
    g, why = recognize_gemm(src, spec.entry, spec)
    assert g is not None, why
    sizes = {"M": 37, "N": 68, "K": 44}
    want = _run(tmp_path, "orig", spec, src, sizes, offsets=(0,))
    for t in GEMM_TEMPLATES:
        made = instantiate_gemm(src, g, None, t.name)
        fn, _ = _entry_def(_tree(made), spec.entry)
        body = made.encode()[fn.child_by_field_name("body").start_byte + 1:fn.end_byte].decode()
        assert not _declared(body) & set(names.values()), t.name
        if t.name == "gemm_f32_warp":
            got = _run(tmp_path, "t", spec, made, sizes, offsets=(0,))
            _agree(spec, want[0], got[0], ("linear_relu, arguments named like locals", t.start))

FLATS = [
    ("templates/rewrites", "silu", {"n": 1003}),
    ("templates/operations", "bias_gelu", {"rows": 7, "cols": 149}),
    ("templates/operations", "mse_loss", {"n": 2051}),
]


@pytest.mark.parametrize("folder, name, sizes", FLATS, ids=[f[1] for f in FLATS])
def test_the_flat_templates_compute_the_first_kernels_outputs(tmp_path, folder, name, sizes):
    """The start point, the space's first point and a point with fewer blocks than the count needs
    (reduce_all's grid-stride loop), threads and the block all-reduce for real."""
    src, spec = _spec(folder, name)
    op, why = recognize_flat(src, spec.entry, spec)
    assert op is not None, why
    t = next(t for t in FLAT_TEMPLATES if t.kind == op.kind)
    points = [t.start_for(op), t.points()[0]]
    if op.kind == "reduce":
        points.append({"OPTIML_THREADS": 128, "OPTIML_VEC": 2, "OPTIML_ITEMS": 2, "OPTIML_BLOCKS": 256})
    want = _run(tmp_path, "orig", spec, src, sizes)
    for i, p in enumerate(points):
        got = _run(tmp_path, f"t{i}", spec, instantiate_flat(src, op, p, t.name), sizes)
        for offset, (w, g) in enumerate(zip(want, got)):
            _agree(spec, w, g, (name, p, offset))


def _spec_toml(entry, sizes, verify, arrays, scalars, grid, block, tol):
    """A task spec's text: ``arrays`` (name, role, shape) in float32, ``scalars`` (name, dtype,
    value), the launch and the float32 tolerance (atol, rtol)."""
    lines = ["[kernel]", f'entry = "{entry}"', "", "[sizes]", f"timing = {{ {sizes} }}",
             "verify = [" + ", ".join(f"{{ {v} }}" for v in verify) + "]"]
    for name, role, shape in arrays:
        lines += ["", "[[args]]", f'name = "{name}"', 'dtype = "float32"', f'role = "{role}"', f"shape = {shape}"]
    for name, dtype, value in scalars:
        lines += ["", "[[args]]", f'name = "{name}"', f'dtype = "{dtype}"', 'role = "scalar"', f"value = {value}"]
    lines += ["", "[launch]", f"grid = {grid}", f"block = {block}", "", "[tolerance]",
              f"float32 = {{ atol = {tol[0]}, rtol = {tol[1]} }}"]
    return "\n".join(lines) + "\n"


def _mm_spec(a_shape: str, b_shape: str) -> str:
    return _spec_toml("mm", "M = 64, N = 64, K = 64", ["M = 37, N = 68, K = 44", "M = 5, N = 3, K = 7"],
                      [("A", "input", a_shape), ("B", "input", b_shape), ("C", "output", '["M", "N"]')],
                      [("M", "int32", '"M"'), ("N", "int32", '"N"'), ("K", "int32", '"K"'), ("alpha", "float32", 0.5)],
                      '["cdiv(N, 16)", "cdiv(M, 16)"]', "[16, 16]", ("1e-4", "1e-4"))


_MM = """__global__ void mm(const float *A, const float *B, float *C, int M, int N, int K, float alpha) {{
    int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r >= M || c >= N) return;
    float acc = 0.f;
    for (int i = 0; i < K; i++) acc += A[{a}] * B[{b}];
    C[(size_t)r * N + c] = tanhf(alpha * acc) + C[(size_t)r * N + c];
}}
"""
_LAYOUTS = {"mk": ('["M", "K"]', "(size_t)r * K + i"), "km": ('["K", "M"]', "(size_t)i * M + r"),
            "kn": ('["K", "N"]', "(size_t)i * N + c"), "nk": ('["N", "K"]', "(size_t)c * K + i")}


@pytest.mark.parametrize("la, lb", [("mk", "kn"), ("km", "kn"), ("km", "nk"), ("mk", "nk")])
def test_the_fp32_gemm_template_computes_each_operand_layout_with_an_epilogue_reading_c(tmp_path, la, lb):
    """gemm_f32_warp for A as M x K or K x M and B as K x N or N x K (only the nn.Linear layout ran on
    the GPU), with an epilogue of a scalar, a function and C's old value, at its start point."""
    from optiml.edits.templates import GEMM_TEMPLATES, instantiate_gemm, recognize_gemm
    (tmp_path / "mm.toml").write_text(_mm_spec(_LAYOUTS[la][0], _LAYOUTS[lb][0]))
    src = _MM.format(a=_LAYOUTS[la][1], b=_LAYOUTS[lb][1])
    (tmp_path / "mm.cu").write_text(src)
    spec = load_spec(tmp_path / "mm.toml", tmp_path / "mm.cu", kernel_source=src)
    g, why = recognize_gemm(src, "mm", spec)
    assert g is not None and (g.a_layout, g.b_layout) == (la, lb), why
    t = next(t for t in GEMM_TEMPLATES if t.name == "gemm_f32_warp")
    sizes = {"M": 37, "N": 68, "K": 44}
    (want,) = _run(tmp_path, "orig", spec, src, sizes, offsets=(0,))
    (got,) = _run(tmp_path, "t", spec, instantiate_gemm(src, g, None, t.name), sizes, offsets=(0,))
    _agree(spec, want, got, (la, lb))


_SQUARE = """__global__ void sq(const float *A, const float *B, float *C, int N) {{
    int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < N && c < N) {{
        float acc = 0.f;
        for (int i = 0; i < N; i++) acc += A[{a}] * B[{b}];
        C[r * N + c] = acc;
    }}
}}
"""
_SQUARE_IDX = {"mk": "r * N + i", "km": "i * N + r", "kn": "i * N + c", "nk": "c * N + i"}


@pytest.mark.parametrize("la, lb", [("mk", "kn"), ("km", "kn"), ("km", "nk"), ("mk", "nk")])
def test_square_matrices_take_the_layout_their_indexing_says(tmp_path, la, lb):
    """KernelBench's task 1 (C = A B, all N x N): the spec's shapes allow both layouts of each
    operand, so the loop's indexing decides (the row-major guess was once taken for A[k][m] and B[n][k],
    which every candidate failed); the template computes what the kernel does."""
    from optiml.edits.templates import GEMM_TEMPLATES, instantiate_gemm, recognize_gemm
    (tmp_path / "sq.toml").write_text(_spec_toml(
        "sq", "N = 64", ["N = 37", "N = 5"], [("A", "input", '["N", "N"]'), ("B", "input", '["N", "N"]'),
                                             ("C", "output", '["N", "N"]')],
        [("N", "int32", '"N"')], '["cdiv(N, 16)", "cdiv(N, 16)"]', "[16, 16]", ("1e-4", "1e-4")))
    src = _SQUARE.format(a=_SQUARE_IDX[la], b=_SQUARE_IDX[lb])
    (tmp_path / "sq.cu").write_text(src)
    spec = load_spec(tmp_path / "sq.toml", tmp_path / "sq.cu", kernel_source=src)
    g, why = recognize_gemm(src, "sq", spec)
    assert g is not None and (g.a_layout, g.b_layout) == (la, lb), why
    t = next(t for t in GEMM_TEMPLATES if t.name == "gemm_f32_warp")
    (want,) = _run(tmp_path, "orig", spec, src, {"N": 37}, offsets=(0,))
    (got,) = _run(tmp_path, "t", spec, instantiate_gemm(src, g, None, t.name), {"N": 37}, offsets=(0,))
    _agree(spec, want, got, (la, lb))


def test_a_tall_skinny_product_takes_k_from_the_output_shape(tmp_path):
    """KernelBench's task 9: A M x N, B N x M, C M x M: A and B share both sizes; C's say K is N."""
    from optiml.edits.templates import recognize_gemm
    (tmp_path / "ts.toml").write_text(_spec_toml(
        "ts", "M = 64, N = 16", ["M = 37, N = 5", "M = 3, N = 2"], [("A", "input", '["M", "N"]'), ("B", "input", '["N", "M"]'),
                                                  ("C", "output", '["M", "M"]')],
        [("M", "int32", '"M"'), ("N", "int32", '"N"')], '["cdiv(M, 16)", "cdiv(M, 16)"]', "[16, 16]", ("1e-4", "1e-4")))
    src = """__global__ void ts(const float *A, const float *B, float *C, int M, int N) {
    int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < M) { float s = 0.f; for (int k = 0; k < N; ++k) s += A[row * N + k] * B[k * M + col];
        C[(size_t)row * M + col] = s; }
}
"""
    (tmp_path / "ts.cu").write_text(src)
    spec = load_spec(tmp_path / "ts.toml", tmp_path / "ts.cu", kernel_source=src)
    g, why = recognize_gemm(src, "ts", spec)
    assert g is not None and (g.m, g.n, g.k, g.a_layout, g.b_layout) == ("M", "M", "N", "mk", "kn"), why


_KB_RMSNORM = """__global__ void rms(const float *__restrict__ x, float *__restrict__ y, int batch_size, int features,
                    int dim1, int dim2, float eps) {
    int spatial = dim1 * dim2;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= batch_size * spatial) return;
    int b = idx / spatial;
    int s = idx % spatial;
    const float *xp = x + (size_t)b * features * spatial + s;
    float *yp = y + (size_t)b * features * spatial + s;
    float sumsq = 0.0f;
    for (int f = 0; f < features; ++f) { float v = xp[(size_t)f * spatial]; sumsq += v * v; }
    float inv_rms = rsqrtf(sumsq / features + eps);
    for (int f = 0; f < features; ++f) yp[(size_t)f * spatial] = xp[(size_t)f * spatial] * inv_rms;
}
"""


def test_a_local_name_for_a_product_of_sizes_is_read_as_its_value(tmp_path):
    """KernelBench's task 36 as a first kernel writes it (``int spatial = dim1 * dim2;`` then
    ``xp[(size_t)f * spatial]``): refused while the alias hid the stride; now the strided template,
    which computes what the kernel does."""
    from optiml.edits.templates import template_transforms
    four = '["batch_size", "features", "dim1", "dim2"]'
    (tmp_path / "rms.toml").write_text(_spec_toml(
        "rms", "batch_size = 4, features = 64, dim1 = 32, dim2 = 32",
        ["batch_size = 3, features = 7, dim1 = 5, dim2 = 11", "batch_size = 2, features = 3, dim1 = 4, dim2 = 4"],
        [("x", "input", four), ("y", "output", four)],
        [("batch_size", "int32", '"batch_size"'), ("features", "int32", '"features"'), ("dim1", "int32", '"dim1"'),
         ("dim2", "int32", '"dim2"'), ("eps", "float32", 1e-5)],
        '["cdiv(batch_size * dim1 * dim2, 256)"]', "[256]", ("1e-5", "1e-5")))
    (tmp_path / "rms.cu").write_text(_KB_RMSNORM)
    spec = load_spec(tmp_path / "rms.toml", tmp_path / "rms.cu", kernel_source=_KB_RMSNORM)
    made, why = template_transforms(_KB_RMSNORM, "rms", spec)
    assert made and made[0].edit.startswith("template col_reduce"), why
    sizes = {"batch_size": 3, "features": 7, "dim1": 5, "dim2": 11}
    want = _run(tmp_path, "orig", spec, _KB_RMSNORM, sizes)
    got = _run(tmp_path, "t", spec, made[0].source, sizes)
    for offset, (w, g) in enumerate(zip(want, got)):
        _agree(spec, w, g, ("kb rmsnorm", offset))


_SCALED_SOFTMAX = """__global__ void k(const float *x, float *y, int rows, int cols, float scale) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float *xr = x + (size_t)r * cols;
    float m = -INFINITY;
    for (int j = 0; j < cols; j++) m = fmaxf(m, xr[j] * scale);
    float s = 0.f;
    for (int j = 0; j < cols; j++) s += __expf(xr[j] * scale - m);
    for (int j = 0; j < cols; j++) y[(size_t)r * cols + j] = __expf(xr[j] * scale - m) / s;
}
"""
def _rows_spec(grid: str, block: str, scale: bool = True) -> str:
    """x and y of rows x cols, with a scalar scale where the kernel takes one."""
    return _spec_toml("k", "rows = 64, cols = 4096", ["rows = 5, cols = 1001", "rows = 3, cols = 7"],
                      [("x", "input", '["rows", "cols"]'), ("y", "output", '["rows", "cols"]')],
                      [("rows", "int32", '"rows"'), ("cols", "int32", '"cols"')] + ([("scale", "float32", 2.5)] if scale else []),
                      grid, block, ("1e-6", "1e-4"))


_SCALED_SPEC = _rows_spec('["cdiv(rows, 32)"]', "[32]")


def test_a_streamed_softmax_takes_one_pass_for_its_max_and_sum(tmp_path):
    """A scaled softmax (a thread a row, __expf): its max and its sum of exponentials become one
    online step; where the row streams (a point whose registers hold less than the row) the template
    reads it once for both, and the outputs match the kernel's, rows of 1001 and of 7."""
    (tmp_path / "k.toml").write_text(_SCALED_SPEC)
    (tmp_path / "k.cu").write_text(_SCALED_SOFTMAX)
    spec = load_spec(tmp_path / "k.toml", tmp_path / "k.cu", kernel_source=_SCALED_SOFTMAX)
    op, why = recognize_rowwise(_SCALED_SOFTMAX, "k", spec)
    assert op is not None, why
    online = [s for s in op.steps if s.kind == "online"]
    assert len(online) == 1 and online[0].x == "optiml_v * scale" and online[0].exp == "__expf"
    t = ROW_TEMPLATES[0]
    streamed = {"OPTIML_THREADS": 32, "OPTIML_ROWS": 2, "OPTIML_VEC": 2, "OPTIML_ITEMS": 2}
    for sizes in ({"rows": 5, "cols": 1001}, {"rows": 3, "cols": 7}):
        want = _run(tmp_path, "orig", spec, _SCALED_SOFTMAX, sizes)
        for i, p in enumerate([t.start_for(op), streamed, {**streamed, "OPTIML_THREADS": 128, "OPTIML_ROWS": 1}]):
            got = _run(tmp_path, f"t{i}", spec, instantiate_rowwise(_SCALED_SOFTMAX, op, p, t.name), sizes)
            for w, g in zip(want, got):
                _agree(spec, w, g, (sizes, p))


@pytest.mark.parametrize("loop, online", [
    ("for (int j = 0; j < cols; j++) if (xr[j] * scale > m) m = xr[j] * scale;", 1),
    ("for (int j = 0; j < cols; j++) { float v = xr[j] * scale; if (v > m) m = v; }", 0),     # two passes kept
])
def test_a_softmax_whose_max_is_an_if_computes_the_same(tmp_path, loop, online):
    src = _SCALED_SOFTMAX.replace("for (int j = 0; j < cols; j++) m = fmaxf(m, xr[j] * scale);", loop)
    assert src != _SCALED_SOFTMAX
    (tmp_path / "k.toml").write_text(_SCALED_SPEC)
    (tmp_path / "k.cu").write_text(src)
    spec = load_spec(tmp_path / "k.toml", tmp_path / "k.cu", kernel_source=src)
    op, why = recognize_rowwise(src, "k", spec)
    assert op is not None and [s.kind for s in op.steps].count("online") == online, why
    sizes = {"rows": 5, "cols": 1001}
    want = _run(tmp_path, "orig", spec, src, sizes, offsets=(0,))
    for i, p in enumerate([ROW_TEMPLATES[0].start_for(op), {"OPTIML_THREADS": 32, "OPTIML_ROWS": 2, "OPTIML_VEC": 2,
                                                            "OPTIML_ITEMS": 2}]):
        got = _run(tmp_path, f"t{i}", spec, instantiate_rowwise(src, op, p), sizes, offsets=(0,))
        _agree(spec, want[0], got[0], p)


_LAYERNORM_SHARED = """__global__ void k(const float *x, float *y, int rows, int cols) {
    __shared__ float sh[256];
    __shared__ float s_mean, s_rstd;
    int tid = threadIdx.x; const float *xr = x + (size_t)blockIdx.x * cols; float *yr = y + (size_t)blockIdx.x * cols;
    float s = 0.f;
    for (int j = tid; j < cols; j += 256) s += xr[j];
    sh[tid] = s; __syncthreads();
    for (int o = 128; o > 0; o >>= 1) { if (tid < o) sh[tid] += sh[tid + o]; __syncthreads(); }
    if (tid == 0) s_mean = sh[0] / cols;
    __syncthreads();
    float mean = s_mean;
    float v = 0.f;
    for (int j = tid; j < cols; j += 256) v += (xr[j] - mean) * (xr[j] - mean);
    __syncthreads();
    sh[tid] = v; __syncthreads();
    for (int o = 128; o > 0; o >>= 1) { if (tid < o) sh[tid] += sh[tid + o]; __syncthreads(); }
    if (tid == 0) s_rstd = rsqrtf(sh[0] / cols + 1e-5f);
    __syncthreads();
    float rstd = s_rstd;
    for (int j = tid; j < cols; j += 256) yr[j] = (xr[j] - mean) * rstd;
}
"""


def _statistics_in_arrays(index: str) -> str:
    """_LAYERNORM_SHARED with the mean and 1/std kept in element ``index`` of shared arrays."""
    src = _LAYERNORM_SHARED.replace("__shared__ float s_mean, s_rstd;", "__shared__ float s_mean[2], s_rstd[2];")
    for name in ("s_mean", "s_rstd"):
        src = src.replace(f"{name} = ", f"{name}[{index}] = ").replace(f"= {name};", f"= {name}[{index}];")
    return src


@pytest.mark.parametrize("index,said", [("0", None), ("1", "float mean = s_mean[1]; reads s_mean at 1")])
def test_a_statistic_kept_in_a_shared_arrays_first_element_is_read_as_its_value(tmp_path, index, said):
    """stat[0] = sh[0] / cols is the statistic, as a shared scalar is; another element is not read."""
    src = _statistics_in_arrays(index)
    (tmp_path / "k.toml").write_text(_rows_spec('["rows"]', "[256]", scale=False))
    (tmp_path / "k.cu").write_text(src)
    spec = load_spec(tmp_path / "k.toml", tmp_path / "k.cu", kernel_source=src)
    op, why = recognize_rowwise(src, "k", spec)
    if said is None:
        assert op is not None, why
        assert "float mean = (optiml_r1_s / cols);" in [s.body for s in op.steps]
    else:
        assert op is None and why == f"not templated: {said}"


@pytest.mark.parametrize("in_loop", [False, True])
def test_statistics_thread_0_keeps_in_shared_scalars_are_read_as_their_values(tmp_path, in_loop):
    """A block-a-row LayerNorm whose thread 0 puts the mean and 1/std in __shared__ scalars from the
    trees' results (s_mean = sh[0] / cols), read into locals or straight inside the output's loop:
    the program reads those values, and the template's outputs match the kernel's."""
    src = _LAYERNORM_SHARED if not in_loop else _LAYERNORM_SHARED.replace("(xr[j] - mean) * rstd;", "(xr[j] - mean) * s_rstd;")
    (tmp_path / "k.toml").write_text(_rows_spec('["rows"]', "[256]", scale=False))
    (tmp_path / "k.cu").write_text(src)
    spec = load_spec(tmp_path / "k.toml", tmp_path / "k.cu", kernel_source=src)
    op, why = recognize_rowwise(src, "k", spec)
    assert op is not None, why
    assert "float mean = (optiml_r1_s / cols);" in [s.body for s in op.steps]
    sizes = {"rows": 3, "cols": 1001}
    want = _run(tmp_path, "orig", spec, src, sizes, offsets=(0,))
    for i, p in enumerate([ROW_TEMPLATES[0].start_for(op), {"OPTIML_THREADS": 32, "OPTIML_ROWS": 2, "OPTIML_VEC": 2,
                                                            "OPTIML_ITEMS": 2}]):
        got = _run(tmp_path, f"t{i}", spec, instantiate_rowwise(src, op, p), sizes, offsets=(0,))
        _agree(spec, want[0], got[0], p)
