"""The draws of an integer input in a spec built from arrays: within the given values' range as
soon as they hold two different values (a 0/1 mask keeps both), the dtype's default only for a
constant array. And an output named by its position, counted from 0."""
import numpy as np
import pytest

from optiml.spec import SpecError, spec_data_from_arrays, spec_from_arrays

MASKED = r"""
__global__ void masked(const float* x, const int* mask, float* y, int n) {
    int i = blockIdx.x * 128 + threadIdx.x;
    if (i < n) y[i] = mask[i] ? x[i] : 0.0f;
}
"""


def args(mask):
    n = mask.size
    return [np.linspace(-1, 1, n, dtype=np.float32), mask, np.zeros(n, np.float32), np.int32(n)]


TASK = dict(outputs=["y"], grid="cdiv(N, 128)", block=128, sizes={"N": 64})


def test_a_zero_one_mask_draws_zeros_and_ones():
    """An int32 mask of 0s and 1s is drawn from the integers 0 and 1 (high is exclusive: 2)."""
    mask = (np.arange(64) % 2).astype(np.int32)
    data = spec_data_from_arrays(MASKED, args(mask), **TASK)
    assert data["args"][1]["init"] == {"dist": "integers", "low": 0, "high": 2}
    init = spec_from_arrays(MASKED, args(mask), **TASK).args[1].init
    assert (init.dist, init.low, init.high) == ("integers", 0, 2)


def test_a_constant_int_array_gets_the_default_draws():
    """All ones: no range to go by (constant inputs hide wrong kernels), so no init is written
    and the spec's default for int32 applies."""
    data = spec_data_from_arrays(MASKED, args(np.ones(64, np.int32)), **TASK)
    assert "init" not in data["args"][1]
    data = spec_data_from_arrays(MASKED, args(np.full(64, 7, np.int32) - (np.arange(64) % 3)), **TASK)
    assert data["args"][1]["init"] == {"dist": "integers", "low": 5, "high": 8}


INPLACE = r"""
__global__ void scale(float* y, const float* x, int n) {
    int i = blockIdx.x * 128 + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
"""


def test_an_output_given_by_position_counts_from_zero():
    n = 64
    given = [np.zeros(n, np.float32), np.linspace(-1, 1, n, dtype=np.float32), np.int32(n)]
    spec = spec_from_arrays(INPLACE, given, outputs=[0], grid="cdiv(N, 128)", block=128, sizes={"N": n})
    assert [a.role for a in spec.args] == ["output", "input", "scalar"]
    with pytest.raises(SpecError, match=r"outputs= names 3, which is not a parameter of scale \(y, x, n; "
                                        r"or give its position, 0 to 2\)"):
        spec_from_arrays(INPLACE, given, outputs=[3], grid="cdiv(N, 128)", block=128, sizes={"N": n})
