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


def test_no_free_name_for_a_knob_is_a_refusal_with_its_reason():
    """Both names a rewrite may give its new constant are taken: refused, saying so; one taken, the other."""
    from optiml.edits.structural import ITEMS_NAMES, KNOB_NAMES
    from optiml.edits.transforms import tie_block_literal

    body = "    if (i < n) y[i] = 2.0f * x[i];\n"
    taken = lambda names, src: "".join(f"// {n} is the user's\n" for n in names) + src
    assert grid_stride(taken(ITEMS_NAMES, kernel(body)), "k", LAUNCH) == (
        [], "not coarsened: no free name for the items per thread")
    (t,), _ = grid_stride(taken(ITEMS_NAMES[:1], kernel(body)), "k", LAUNCH)
    assert f"#define {ITEMS_NAMES[1]} 4" in t.source
    literal = kernel(body)                       # 256 in the launch only
    assert tie_block_literal(taken(KNOB_NAMES, literal), "k", LAUNCH) == ([], "no free name for the block size")
    ts, why = tie_block_literal(taken(KNOB_NAMES[:1], literal), "k", LAUNCH)
    assert why is None and ts and f"#define {KNOB_NAMES[1]} 256" in ts[0].source
