"""The row templates write Y's map only: a row kernel that also adds a per-row value into an
argument with an atomic, outside its loops over the row, is refused and the atomic is named."""
from optiml.edits.templates.rowwise import recognize_rowwise
from tests.test_edits_rowwise import GRID_STRIDE_MIN, ROWS

ATOMIC_STAT = GRID_STRIDE_MIN.replace("lo = sh[0];", "lo = sh[0];\n        if (threadIdx.x == 0) atomicAdd(&y[row], lo);")


def test_the_row_kernel_without_the_atomic_is_a_row_program():
    """The grid-stride row minimum alone is read as one fminf reduction and a map."""
    op, why = recognize_rowwise(GRID_STRIDE_MIN, "k", ROWS)
    assert op is not None, why


def test_an_atomic_into_an_argument_outside_the_rows_loops_is_refused():
    """`atomicAdd(&y[row], lo)` after the combining writes y outside the row's map: refused, the
    reason quoting the atomic and the array it writes."""
    op, why = recognize_rowwise(ATOMIC_STAT, "k", ROWS)
    assert op is None
    assert why == "not templated: atomicAdd(&y[row], lo) writes y outside the row's map"
