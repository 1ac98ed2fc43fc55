"""The reduction length behind a drafted tolerance in `optiml init --kernelbench`
(optiml/draft/kernelbench.py, _tolerances): for a kernel that reads as a GEMM it is K, from the
drafted flops (2 M N K / (2 M N)), not the largest input's elements per output element."""
import pytest

from optiml.draft.kernelbench import _tolerances

torch = pytest.importorskip("torch", reason="the KernelBench tasks are PyTorch modules: pip install torch")

SIZES = {"M": 64, "N": 64, "K": 1_000_000}
SA, SB = {"M": 8, "N": 8, "K": 16}, {"M": 4, "N": 4, "K": 8}


def gemm_arrays():
    def at(s, *dims):
        return torch.ones(*(s[d] for d in dims))
    arrays = [("input", 0, at(SA, "M", "K"), at(SB, "M", "K")),
              ("input", 1, at(SA, "K", "N"), at(SB, "K", "N")),
              ("output", 0, at(SA, "M", "N"), at(SB, "M", "N"))]
    return arrays, [["M", "K"], ["K", "N"], ["M", "N"]]


def test_a_gemms_rtol_follows_its_k_from_the_flops():
    """K = 1e6 float32 terms: 4 u sqrt(K) = 2.4e-4, so rtol is raised to 3e-4."""
    arrays, dims = gemm_arrays()
    lines = _tolerances(arrays, dims, SIZES, SA, SB, "2 * M * N * K")
    entry = [line for line in lines if line.startswith("float32 =")]
    assert entry == ["float32 = { atol = 0.0001, rtol = 0.0003, rel_rms = 0.001 }"]
    assert "sums of 1e+06 terms" in "\n".join(lines)


def test_without_flops_the_reduction_is_the_largest_inputs_elements_per_output():
    """64e6 input elements over 4096 outputs: 15625 terms, which the float32 defaults fit."""
    arrays, dims = gemm_arrays()
    lines = _tolerances(arrays, dims, SIZES, SA, SB, None)
    assert "float32 = { atol = 0.0001, rtol = 0.0001, rel_rms = 0.001 }" in lines
    assert "sums of 1.56e+04 terms fit them" in "\n".join(lines)


MATMUL = """__global__ void matmul(const float* A, const float* B, float* C, int M, int N, int K) {
    int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];
        C[row * N + col] = acc;
    }
}
"""


def test_the_drafted_flops_of_a_kernel_that_reads_as_a_gemm_are_2_m_n_k():
    """Over the task's arrays matched to A, B and C: 2 M N K in the kernel's size arguments."""
    from optiml.draft.kernelbench import _gemm_flops
    from optiml.source import parse_source

    kern = parse_source(MATMUL).kernel("matmul")
    pointers = [p for p in kern.params if p.is_pointer]
    ints = [p for p in kern.params if not p.is_pointer]
    arrays, dims = gemm_arrays()
    assert _gemm_flops(MATMUL, "matmul", pointers, arrays, dims, ints, {}) == "2 * M * N * K"
    assert _gemm_flops(MATMUL.replace("acc += A", "acc = A"), "matmul", pointers, arrays, dims, ints, {}) is None
