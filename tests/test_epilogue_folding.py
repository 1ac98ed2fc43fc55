"""What :func:`folded_store` folds after a GEMM's loop over k: scalar locals are folded into the one
store; a pointer or array local there is not (None), so the caller refuses the kernel."""
import pytest

from optiml.edits.cutree import _tree
from optiml.edits.templates.epilogue import folded_store
from optiml.source import _walk

GEMM = """__global__ void mm(const float *A, const float *B, float *C, int M, int N, int K) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.f;
    for (int k = 0; k < K; k++) acc += A[row * K + k] * B[k * N + col];
EPILOGUE}
"""
ACC_RE = r"(?<![\w.])acc(?![\w\[])"


def fold(epilogue):
    root = _tree(GEMM.replace("EPILOGUE", epilogue))
    loop = next(n for n in _walk(root) if n.type == "for_statement")
    return folded_store(loop, {"A", "B", "C"}, ACC_RE, "acc")


def test_scalar_locals_fold_into_the_store():
    out = fold("    float v = acc * 2.f;\n    if (v < 0.f) v *= 0.1f;\n    C[row * N + col] = v;\n")
    assert out == ("C", "row * N + col", "(((acc * 2.f) < 0.f) ? ((acc * 2.f) * (0.1f)) : (acc * 2.f))")


@pytest.mark.parametrize("local", [
    "    float *out = C + row * N;\n",          # a pointer local
    "    float v[2] = {acc, acc};\n",           # an array local
])
def test_a_pointer_or_array_local_is_not_folded(local):
    assert fold("    C[row * N + col] = acc;\n") == ("C", "row * N + col", "acc")      # the control
    assert fold(local + "    C[row * N + col] = acc;\n") is None


def test_without_a_named_accumulator_the_store_is_read_as_written():
    """The caller may not know the accumulator's name: no local is then folded in, and the one store
    is read as it is written."""
    root = _tree(GEMM.replace("EPILOGUE", "    C[row * N + col] = acc;\n"))
    loop = next(n for n in _walk(root) if n.type == "for_statement")
    assert folded_store(loop, {"A", "B", "C"}, ACC_RE) == ("C", "row * N + col", "acc")


def test_a_gemms_description_names_its_epilogue_only_where_it_has_one():
    from optiml.edits.templates import Gemm

    g = Gemm("mm", "A", "B", "C", "M", "N", "K", "M", "N", "mk", "kn", "acc")
    assert g.describe() == "GEMM C[M x N] = A[M x K] x B[K x N] over K in float32"
    relu = Gemm("mm", "A", "B", "C", "M", "N", "K", "M", "N", "mk", "nk", "fmaxf(acc, 0.f)", dtype="float16")
    assert relu.describe() == "GEMM C[M x N] = A[M x K] x B[N x K] over K in float16, epilogue fmaxf(acc, 0.f)"
    told = Gemm("mm", "A", "B", "C", "M", "N", "K", "M", "N", "mk", "kn", "acc", formula="relu(x @ w)")
    assert told.describe().endswith(", epilogue relu(x @ w) (from the reference)")
