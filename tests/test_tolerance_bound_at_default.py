"""Drafted tolerances (optiml/draft/tolerance.py) for a reduction whose rounding bound 4 u sqrt(K)
equals the dtype's default exactly: the defaults already allow it, so the reason says the sums fit
them and claims no raised rtol or rel_rms."""
import math

from optiml.draft.tolerance import draft_tolerance


def test_a_reduction_whose_bound_is_exactly_the_default_keeps_the_defaults_and_says_they_fit():
    s = 1e-2 * 2 ** 22                  # 4 * 2**-24 * s == 1e-2 exactly, float16's rtol and rel_rms
    k = s * s
    assert math.sqrt(k) == s and 4 * 2.0 ** -24 * math.sqrt(k) == 1e-2     # the case this checks
    value, why = draft_tolerance("float16", reduction=k)
    assert value == "{ atol = 0.01, rtol = 0.01, rel_rms = 0.01 }"
    assert why.startswith("rtol 0.01 and rel_rms 0.01: the float16 defaults (sums of 1.76e+09 terms fit them);")
    assert "likewise" not in why


def test_a_float32_reduction_at_the_rel_rms_bound_raises_rtol_only():
    s = 1e-3 * 2 ** 22                  # the bound equals float32's rel_rms 1e-3, above its rtol 1e-4
    value, why = draft_tolerance("float32", reduction=s * s)
    assert value == "{ atol = 0.0001, rtol = 0.001, rel_rms = 0.001 }"
    assert why.startswith("rtol 0.001 for sums of 1.76e+07 terms (4 u sqrt(K)); atol 0.0001")
