"""A block reduction's partials rewrite (optiml/edits/partials.py) takes a tree loop only when its
body is the guarded add and then a barrier: a loop without the barrier, with a warp barrier in its
place, or with more statements is refused with the reason (no exception, no rewrite)."""
import pytest

from optiml.edits.partials import chunk_partials
from tests.test_edits_partials import LAUNCH, PARTIAL

LOOP = "for (int s = blockDim.x / 2; s > 0; s >>= 1) { if (t < s) sh[t] += sh[t + s]; __syncthreads(); }"
HEAD = "for (int s = blockDim.x / 2; s > 0; s >>= 1) "


@pytest.mark.parametrize("body", [
    "{ if (t < s) sh[t] += sh[t + s]; }",
    "if (t < s) sh[t] += sh[t + s];",
    "{ if (t < s) sh[t] += sh[t + s]; __syncwarp(); }",
    "{ if (t < s) sh[t] += sh[t + s]; __syncthreads(); __syncthreads(); }",
], ids=["no_barrier", "no_braces_no_barrier", "warp_barrier", "three_statements"])
def test_a_tree_loop_other_than_a_guarded_add_and_a_barrier_is_refused(body):
    assert LOOP in PARTIAL
    got = chunk_partials(PARTIAL.replace(LOOP, HEAD + body), "partial_sums", LAUNCH)
    assert got == ([], "not chunked: the tree loop does more than one guarded add and a barrier")


def test_the_tree_loop_of_a_guarded_add_and_a_barrier_is_taken():
    ts, why = chunk_partials(PARTIAL, "partial_sums", LAUNCH)
    assert why is None and len(ts) == 1


@pytest.mark.parametrize("head", ["int s = blockDim.x / 2; for (; s > 0; s >>= 1) ",
                                  "for (int s = blockDim.x / 2; ; s >>= 1) ", "for (int s = blockDim.x / 2; s > 0;) "],
                         ids=["no_initializer", "no_condition", "no_update"])
def test_a_loop_header_missing_a_part_is_not_a_tree_loop_and_no_error(head):
    """A `for` without its initializer, condition or update is not read as the halving tree loop: no
    rewrite, and no exception out of the rule."""
    source = PARTIAL.replace(LOOP, head + "{ if (t < s) sh[t] += sh[t + s]; __syncthreads(); }")
    assert chunk_partials(source, "partial_sums", LAUNCH)[0] == []
