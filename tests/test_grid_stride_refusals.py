"""Thread coarsening (:func:`grid_stride`) refuses a body whose flow jumps, saying so, and leaves alone
a launch grid that is not exactly ``cdiv(X, B)`` with two non-empty arguments."""
import pytest

from optiml.edits.transforms import grid_stride

KERNEL = ("__global__ void k(const float* x, float* y, int n) {\n"
          "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n{body}}}\n")
LAUNCH = (("cdiv(n, 256)",), (256,), 0)


def kernel(body):
    return KERNEL.replace("{body}", body).replace("}}", "}")


@pytest.mark.parametrize("body", [
    "    if (i < n) { for (int r = 0; r < 4; r++) { if (x[i] > r) break; y[i] += 1.0f; } }\n",
    "    if (i < n) { for (int r = 0; r < 4; r++) { if (x[i] > r) continue; y[i] += 1.0f; } }\n",
    "    if (i < n) { if (x[i] < 0.0f) goto done; y[i] = x[i]; done: ; }\n",
])
def test_a_body_that_jumps_is_not_coarsened_and_says_why(body):
    ts, why = grid_stride(kernel(body), "k", LAUNCH)
    assert ts == [] and why == "not coarsened: the loop body breaks out of its flow"


def test_the_same_body_without_the_jump_is_coarsened():
    body = "    if (i < n) { for (int r = 0; r < 4; r++) { y[i] += 1.0f; } }\n"
    ts, why = grid_stride(kernel(body), "k", LAUNCH)
    assert why is None and len(ts) == 1


@pytest.mark.parametrize("grid", ["cdiv(n, 256, 2)", "cdiv(n, )", "cdiv(, 256)"])
def test_a_grid_that_is_not_a_two_argument_cdiv_is_left_alone(grid):
    body = "    if (i < n) y[i] = 2.0f * x[i];\n"
    assert grid_stride(kernel(body), "k", (("cdiv(n, 256)",), (256,), 0))[0]      # the control
    assert grid_stride(kernel(body), "k", ((grid,), (256,), 0)) == ([], None)
