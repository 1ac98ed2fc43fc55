"""Rounding of drafted tolerances (optiml/draft/tolerance.py): a grown rtol is rounded up to one
significant digit, floating-point noise in its computation not pushing it a digit further, and the
lowered atol's rounding down leaves zero, negative and non-finite values as they are."""
import math

import pytest

from optiml.draft.tolerance import _down, _up, draft_tolerance


def parse(value: str) -> dict:
    return {k.strip(): float(v) for k, v in (kv.split("=") for kv in value.strip("{} ").split(","))}


def test_rounding_up_ignores_noise_below_one_part_in_a_billion():
    """2e-4 computed with a relative error of a few 1e-10 is 2e-4, not 3e-4; a real excess is rounded up."""
    assert _up(2.0000000004e-4) == pytest.approx(2e-4, rel=1e-12)
    assert _up(2.0000000003) == 2
    assert _up(2.01e-4) == pytest.approx(3e-4, rel=1e-12)


def test_a_reduction_whose_rounding_bound_is_a_round_value_up_to_noise_keeps_that_value():
    """4 u sqrt(K) for this K is 2e-4 to within 2e-10 relative: the drafted rtol is 2e-4."""
    k = 703687.442
    grown = 4 * 2.0 ** -24 * math.sqrt(k)
    assert grown > 2e-4 and grown / 2e-4 - 1 < 3e-10         # the case this checks
    value, why = draft_tolerance("float32", reduction=k)
    assert parse(value) == {"atol": 1e-4, "rtol": 2e-4, "rel_rms": 1e-3}
    assert "rtol 0.0002 for sums of 7.04e+05 terms" in why


@pytest.mark.parametrize("x", [0.0, -3e-5, math.inf, -math.inf])
def test_rounding_down_leaves_zero_negative_and_infinite_values_as_they_are(x):
    assert _down(x) == x


def test_rounding_down_leaves_nan_as_it_is():
    assert math.isnan(_down(math.nan))


def test_an_atol_that_underflows_to_zero_is_drafted_as_zero():
    """An RMS so small that 10 rtol x RMS underflows: atol 0, not a crash."""
    value, why = draft_tolerance("float64", rms=1e-320)
    assert parse(value)["atol"] == 0.0
    assert "atol 0 = 10 rtol" in why


def test_rounding_down_a_subnormal_past_1e_323_keeps_it_instead_of_dividing_by_zero():
    """10 ** -324 underflows to 0.0 in a float: such a value is kept as it is (it raised
    ZeroDivisionError, reachable through a float64 draft with an RMS near 1e-314)."""
    from optiml.draft.tolerance import _down
    assert _down(5e-324) == 5e-324 and _down(3.5e-9) == pytest.approx(3e-9)


def test_a_single_term_is_not_called_a_sum_in_the_drafted_reason():
    """The reason beside a drafted tolerance mentions sums only where more than one term is summed."""
    from optiml.draft.tolerance import draft_tolerance
    one = draft_tolerance("float32", reduction=1)
    many = draft_tolerance("float32", reduction=4)
    assert one is not None and "sums of" not in one[1]
    assert many is not None and "sums of 4 terms" in many[1]
