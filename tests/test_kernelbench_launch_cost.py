"""How `optiml init --kernelbench` ranks launches that verify (optiml/draft/kernelbench.py,
_threads_at): by block preference, then by threads at the task's sizes; a launch the sizes do not
evaluate ranks after every one that does; a kernel striding over gridDim gets no ranking (any grid
verifies there, so the drafted launch is kept)."""
import math

from optiml.draft.kernelbench import _threads_at
from optiml.draft.trial import Launch

PLAIN = """__global__ void relu(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.f);
}
"""
STRIDED = """__global__ void relu(const float* x, float* y, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = fmaxf(x[i], 0.f);
}
"""
SIZES = {"batch_size": 100, "dim": 1000}


def test_a_plain_kernels_launches_cost_their_threads_at_the_tasks_sizes():
    cost = _threads_at(SIZES, {"BLOCK": 128}, PLAIN)
    assert cost is not None
    assert cost({}, Launch(("cdiv(batch_size * dim, BLOCK)",), ("BLOCK",))) == (0, 782 * 128)
    assert cost({"n": "batch_size"}, Launch(("n",), ("256",), prefer=1)) == (1, 100 * 256)
    assert cost({}, Launch(("batch_size",), ("dim",)), {"batch_size": 7, "dim": 3}) == (0, 21)


def test_a_launch_the_sizes_do_not_evaluate_ranks_after_those_that_do():
    cost = _threads_at(SIZES, {}, PLAIN)
    bad = Launch(("cdiv(rows, 256)",), ("256",))          # `rows` is no size of the task
    good = Launch(("batch_size * dim",), ("1024",))
    assert cost({}, bad) == (0, math.inf)
    assert sorted([bad, good], key=lambda la: cost({}, la)) == [good, bad]


def test_a_kernel_striding_over_the_grid_gets_no_launch_ranking():
    assert _threads_at(SIZES, {}, STRIDED) is None
