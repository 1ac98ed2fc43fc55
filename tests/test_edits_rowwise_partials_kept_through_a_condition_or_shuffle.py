"""A row kernel that stores its accumulator into shared memory through a guard (`c ? s : 0`) or a
broadcast shuffle (`__shfl_sync(m, s, 0)`) still fills that array with the reduction's partial
results: the value read back from it after the kernel's own combining is the template's reduced value."""
import pytest

from optiml.edits.templates.rowwise import recognize_rowwise
from tests.test_edits_rowwise import ROWS

GUARDED_TREE = """
__global__ void k(const float *x, float *y, int rows, int cols) {
    __shared__ float sh[256];
    const float *xr = x + (size_t)blockIdx.x * cols;
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += 256) s += xr[c];
    sh[threadIdx.x] = threadIdx.x < cols ? s : 0.f;
    __syncthreads();
    for (int st = 128; st > 0; st >>= 1) {
        if (threadIdx.x < st) sh[threadIdx.x] += sh[threadIdx.x + st];
        __syncthreads();
    }
    float mean = sh[0] / cols;
    for (int c = threadIdx.x; c < cols; c += 256) y[(size_t)blockIdx.x * cols + c] = xr[c] - mean;
}
"""
SHUFFLED_PARTIALS = """
__global__ void k(const float *x, float *y, int rows, int cols) {
    __shared__ float part[8];
    const float *xr = x + (size_t)blockIdx.x * cols;
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += 256) s += xr[c];
    for (int o = 16; o; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = __shfl_sync(0xffffffffu, s, 0);
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.f;
        for (int w = 0; w < 8; w++) t += part[w];
        part[0] = t;
    }
    __syncthreads();
    float mean = part[0] / cols;
    for (int c = threadIdx.x; c < cols; c += 256) y[(size_t)blockIdx.x * cols + c] = xr[c] - mean;
}
"""


@pytest.mark.parametrize("source", [GUARDED_TREE, SHUFFLED_PARTIALS], ids=["guard", "shuffle"])
def test_partials_stored_through_a_guard_or_a_shuffle_give_the_reduced_value(source):
    """Centering a row: one sum, its partials stored as `c ? s : 0` (then a shared tree) or as a
    broadcast shuffle of s (then one thread's fold); the mean reads the template's reduced sum."""
    op, why = recognize_rowwise(source, "k", ROWS)
    assert op is not None, why
    assert [s.accs for s in op.steps if s.kind == "reduce"] == [(("s", "+"),)]
    assert [s.body for s in op.steps] == ["float s = 0.f;", "optiml_p_s += optiml_v;",
                                          "float mean = optiml_r1_s / cols;", "optiml_out = optiml_v - mean;"]
