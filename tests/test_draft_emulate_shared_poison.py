"""The CPU emulation fills each ``__shared__`` array declared in a function with NaN once a block
(optiml.draft.emulate._poisoned), so a read of what no thread wrote shows; a file-scope or
``extern`` (dynamic) declaration is left alone, wherever it stands in the file. Pure text, no compiler."""
from optiml.draft.emulate import _poisoned

SOURCE = r"""
__device__ float twice(float v) { return 2.0f * v; }
__shared__ float table[64];
__global__ void k(float* x) {
    __shared__ float tile[32];
    extern __shared__ float dyn[];
    tile[threadIdx.x] = twice(x[threadIdx.x]);
    __syncthreads();
    x[threadIdx.x] = tile[31 - threadIdx.x] + table[0];
}
"""


def test_only_a_functions_own_shared_arrays_are_poisoned_even_after_another_function():
    out = _poisoned(SOURCE)
    assert "optiml_host_poison(tile, optiml_stamp_tile);" in out
    assert "optiml_host_poison(table" not in out and "optiml_stamp_table" not in out
    assert "optiml_host_poison(dyn" not in out
    assert out.count("optiml_host_poison(") == 1
    assert "__shared__ float table[64];\n__global__" in out      # the file-scope line as it was
