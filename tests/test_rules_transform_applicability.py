"""Where the rules proposer's source transforms (optiml/edits/transforms.py) apply: pointer parameters
written without spaces, loop bounds written on the left, arrays that are not shared, and the
structural rewrites kept where a declared space tunes its own names."""
from optiml.edits.transforms import add_const, add_pragma_unroll, all_transforms, pad_shared

SCALE = """__global__ void scale(const float* x, float* y, int n, float a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""


def test_const_is_added_to_a_read_only_pointer_written_without_spaces():
    """``float*x`` (no space anywhere in the parameter) that the kernel only reads gets ``const``;
    the written ``float*y`` does not."""
    src = "__global__ void k(float*x, float*y) { y[0] = x[0]; }"
    made = add_const(src, "k")
    assert [t.edit for t in made] == ["const on x"]
    assert "k(const float*x, float*y)" in made[0].source


def test_a_loop_whose_constant_bound_is_written_first_is_unrolled():
    """``for (int i = 0; N > i; ++i)`` has a compile-time trip count just as ``i < N`` does, so it
    gets ``#pragma unroll``."""
    src = "#define N 8\n__global__ void k(float *y) {\n    for (int i = 0; N > i; ++i) y[i] = 0.f;\n}\n"
    made = add_pragma_unroll(src)
    assert [t.edit for t in made] == ["#pragma unroll for (int i = 0; N > i; ++i)"]
    assert "    #pragma unroll\n    for (int i = 0; N > i; ++i)" in made[0].source


def test_only_shared_arrays_are_padded():
    """A thread's own 2-D array (registers or local memory, no banks) is left as it is; the shared
    tile beside it is padded."""
    src = ("#define TILE 32\n__global__ void k(const float *x, float *y) {\n    __shared__ float s[TILE][TILE];\n"
           "    float r[4][TILE];\n    int tx = threadIdx.x;\n"
           "    for (int j = 0; j < 4; ++j) { r[j][tx] = x[j * TILE + tx]; s[tx][j] = r[j][tx]; }\n"
           "    __syncthreads();\n    y[tx] = s[tx][0];\n}\n")
    assert [t.edit for t in pad_shared(src)] == ["pad s[TILE][TILE] -> s[TILE][TILE + 1]"]


def test_a_declared_space_keeps_the_rewrites_that_add_no_constant_to_tune():
    """Without auto-tuning (a declared space tunes its own names) the float4 rewrite, which adds no
    tunable constant, is still offered, and the rewrites that add one (the block-size knob, the
    grid-stride loop's items per thread) are not; with auto-tuning all three are."""
    launch = (("cdiv(n, 256)",), ("256",), 0)
    tuned = {t.kind for t in all_transforms(SCALE, "scale", auto_tune=True, launch=launch)}
    assert {"knob", "coarsen", "vectorize"} <= tuned
    declared = [t for t in all_transforms(SCALE, "scale", auto_tune=False, launch=launch)]
    kinds = {t.kind for t in declared}
    assert "vectorize" in kinds and "float4 loads and stores" in [t.edit for t in declared]
    assert not kinds & {"knob", "coarsen"}
