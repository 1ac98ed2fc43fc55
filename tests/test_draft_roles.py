"""`optiml init`'s smarter draft: each pointer's role from what the entry and the functions it
calls read and write (not from `const`), and shapes and a launch from bounds checks and index
expressions; every draft still loads."""
from pathlib import Path

import pytest

from optiml.draft import draft_spec
from optiml.source import pointer_access
from optiml.spec import load_spec

DATA = Path(__file__).parent / "data" / "kernels"


def draft(tmp_path, name, entry=None):
    kernel = DATA / name
    text = draft_spec(kernel.read_text(), kernel, entry)
    (tmp_path / name).write_text(kernel.read_text())
    spec_path = tmp_path / Path(name).with_suffix(".toml")
    spec_path.write_text(text)
    return text, load_spec(spec_path, tmp_path / name)


@pytest.mark.parametrize("name, entry, roles", [
    # cuda-samples matrixMul: nothing const, the work in a template __device__ function
    ("mm_nonconst.cu", None, {"C": "output", "A": "input", "B": "input"}),
    ("mm_template.cu", "product_bs16", {"C": "output", "A": "input", "B": "input"}),
    ("roles_inout.cu", None, {"x": "input", "y": "inout"}),                 # y[i] += ...
    ("roles_device_write.cu", None, {"in": "input", "out": "output"}),      # through helpers, *(p + i) = v
    ("roles_atomic_hist.cu", None, {"keys": "input", "counts": "inout"}),   # atomicAdd(&counts[k], 1)
    ("roles_2d_bounds.cu", None, {"out": "output", "in": "input", "bias": "input"}),
])
def test_roles_follow_reads_and_writes_and_the_draft_loads(tmp_path, name, entry, roles):
    _, spec = draft(tmp_path, name, entry)
    assert {a.name: a.role for a in spec.args if a.role != "scalar"} == roles


def test_access_follows_calls_aliases_and_atomics():
    src = """
    __device__ void put(float *d, float v) { d[0] = v; }
    template <int B> __device__ void bump(float *p) { atomicMax(p, 1.0f); }
    __global__ void k(float *a, float *b, float *c, float *e) {
        float *row = a + 4;
        put(row, 1.0f);
        bump<8>(b + threadIdx.x);
        e[0] = c[1];
    }"""
    acc = pointer_access(src, "k")
    assert (acc["a"].read, acc["a"].write) == (False, True)
    assert (acc["b"].read, acc["b"].write) == (True, True)
    assert (acc["c"].read, acc["c"].write) == (True, False)
    assert (acc["e"].read, acc["e"].write) == (False, True)


def test_access_through_increments_address_of_casts_later_aliases_and_unknown_calls():
    src = """
    extern __device__ void opaque(float *p);
    __global__ void k(float *a, float *b, float *c, float *d, float *e, const float *f, int *g,
                      float *h, float *m) {
        a[threadIdx.x]++;                                  // read and written
        float *q = &b[1];                                  // an alias through &b[...]
        q[0] = 2.0f;
        float4 *v = reinterpret_cast<float4 *>(c);         // a cast: c is what v is
        e[0] = v[0].x;
        float *r;
        r = d;                                             // an alias made by assignment
        r[2] = 1.0f;
        h += 4;                                            // the pointer moved, then written
        h++;
        h[0] = 0.0f;
        for (float *w = m; w != m + 4; w++) *w++ = 1.0f;  // written through a moving alias
        if (f == nullptr || f != e) return;                // compared only: not read
        opaque(g ? (float *)g : e);                        // passed where optiml cannot look
    }"""
    acc = pointer_access(src, "k")
    got = {p: (a.read, a.write, a.unsure) for p, a in acc.items()}
    assert got["a"] == (True, True, False) and got["b"] == (False, True, False)
    assert got["c"] == (True, False, False) and got["d"] == (False, True, False)
    assert got["f"] == (False, False, False) and got["h"] == (False, True, False)
    assert got["m"] == (False, True, False)
    assert got["g"][2] and got["e"][1] and got["e"][2]     # unknown callee: unsure


def test_shapes_and_launch_from_bounds_and_indices(tmp_path):
    text, spec = draft(tmp_path, "roles_2d_bounds.cu")
    shapes = {a.name: a.shape for a in spec.args if a.role != "scalar"}
    assert shapes == {"out": ("M", "N"), "in": ("M", "N"), "bias": ("N",)}
    assert spec.launch.grid == ("cdiv(N, TILE)", "cdiv(M, TILE)") and spec.launch.block == ("TILE", "TILE")
    assert "TODO" in text.split("[launch]")[1].splitlines()[1]     # still marked as a guess

    _, spec = draft(tmp_path, "roles_inout.cu")     # blockIdx.x * blockDim.x + threadIdx.x, if (i < n)
    assert spec.launch.grid == ("cdiv(n, 256)",) and spec.launch.block == ("256",)
    assert [a.shape for a in spec.args[:2]] == [("n",), ("n",)]

    _, spec = draft(tmp_path, "mm_template.cu", "product_bs16")   # C[row * wB + col], no bounds checks
    assert {a.name: a.shape for a in spec.args if a.role != "scalar"} == {
        "C": ("M", "wB"), "A": ("M", "wA"), "B": ("wA", "wB")}
    assert spec.launch.grid == ("cdiv(wB, 16)", "cdiv(M, 16)")     # the tile the entry passes


def test_the_tune_proposal_is_kept(tmp_path):
    text, _ = draft(tmp_path, "mm_template.cu", "product_bs16")
    assert "# [tune]" in text and "# block_size = [" in text


def test_with_two_x_indices_the_grid_follows_the_one_the_kernel_bounds(tmp_path):
    """`base` is an x-axis index nothing bounds (an offset into a row), `i` the one under `i < N`: the
    drafted grid covers N with i, not a placeholder size with base."""
    from optiml.draft import draft_spec
    src = """__global__ void k(const float* x, float* y, int N) {
    int base = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) y[i] = x[i] * 2.0f + (float)(base & 1) * 0.0f;
}
"""
    text = draft_spec(src, tmp_path / "k.cu")
    grid = next(line for line in text.splitlines() if line.startswith("grid = "))
    assert grid.startswith('grid = ["cdiv(N, 256)"]'), grid


def test_an_index_assigned_after_its_declaration_drafts_the_launch_as_a_declared_one():
    """``int i; i = blockIdx.x * blockDim.x + threadIdx.x;`` is the same one-thread-an-element index
    as ``int i = ...;``: the same grid, block and shapes, and the note saying where they came from."""
    declared = ("__global__ void k(const float* x, float* y, int n) {\n"
                "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = 2.0f * x[i];\n}\n")
    assigned = declared.replace("    int i = ", "    int i;\n    i = ")
    lines = lambda text: [ln for ln in text.splitlines() if ln.startswith(("grid", "block", "shape"))]   # noqa: E731
    got = lines(draft_spec(assigned, Path("k.cu")))
    assert got == lines(draft_spec(declared, Path("k.cu")))
    assert 'grid = ["cdiv(n, 256)"]  # TODO: one thread per element, from i = blockIdx.x * blockDim.x + threadIdx.x; check' in got


def test_drafts_at_the_edges_say_what_they_could_not_read():
    """No kernel: one sentence. No parameter at all: a placeholder size N, said. A pointer handed to a
    function optiml cannot see into: drafted as an output with the guess said. An index along y with
    none along x: the launch is not read from it (a plain grid, marked to check)."""
    from optiml.spec import SpecError

    with pytest.raises(SpecError, match=r"^k\.cu: no __global__ function found, so there is nothing to draft"):
        draft_spec("__device__ int f() { return 1; }\n", Path("k.cu"))
    text = draft_spec("__global__ void k() { }\n", Path("k.cu"))
    assert "timing = { N = 4096 }  # TODO: no integer parameter was found; N is a placeholder size" in text

    text = draft_spec("__device__ void fill(float* p, int n);\n"
                      "__global__ void k(float* y, int n) { fill(y, n); }\n", Path("k.cu"))
    assert ('role = "output"  # TODO: passed where optiml cannot follow it; "inout" if the kernel also reads it, '
            '"input" if it only reads it') in text

    text = draft_spec("__global__ void k(float* y, int n) {\n    int i = blockIdx.y * blockDim.y + threadIdx.y;\n"
                      "    if (i < n) y[i] = 1.0f;\n}\n", Path("k.cu"))
    lines = [ln for ln in text.splitlines() if ln.startswith(("grid", "block"))]
    assert lines == ['grid = ["cdiv(n, 256)"]  # TODO: check against how the kernel indexes', "block = [256]  # TODO"]
