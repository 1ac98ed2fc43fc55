"""Verification checks on host arrays: each failure kind is caught and named."""
import numpy as np
import pytest

from optiml import dtypes
from optiml.verify.compare import check_output, summarize
from optiml.verify.inputs import poisoned


def ref_and_out(dtype="float32", n=1000, seed=0):
    rng = np.random.default_rng(seed)
    ref = dtypes.to_storage(rng.standard_normal(n).astype(np.float32), dtype)
    return ref, ref.copy()


def test_identical_passes_with_zero_error():
    ref, out = ref_and_out()
    c = check_output("y", out, ref, "float32", 1e-4, 1e-4)
    assert c.failed_check is None and c.max_abs_err == 0.0


def test_small_reordering_error_passes_large_fails():
    ref, out = ref_and_out()
    out = out + np.float32(1e-6)
    assert check_output("y", out, ref, "float32", 1e-4, 1e-4).failed_check is None
    out[17] += 0.5
    c = check_output("y", out, ref, "float32", 1e-4, 1e-4)
    assert c.failed_check == "tolerance" and c.mismatched == 1 and c.worst_index == [17]
    assert c.max_abs_err == pytest.approx(0.5, rel=1e-3)


def test_unwritten_elements_are_caught():
    ref, _ = ref_and_out()
    out = poisoned(ref.shape, "float32")
    out[:-3] = ref[:-3]               # the tail left unwritten
    c = check_output("y", out, ref, "float32", 1e-4, 1e-4)
    assert c.failed_check == "unwritten" and c.unwritten == 3


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32", "uint8", "int64", "float64", "float32", "bool"])
def test_poisoned_buffers_hold_the_pattern_bytes(dtype):
    out = poisoned((5, 3), dtype)
    assert out.shape == (5, 3) and out.tobytes() == dtypes.poison_pattern(dtype).tobytes() * 15


def test_an_unwritten_bool_output_is_unwritten_not_mismatched():
    ref = dtypes.to_storage(np.arange(20) % 3 == 0, "bool")
    out = poisoned(ref.shape, "bool")
    out[:15] = ref[:15]
    c = check_output("y", out, ref, "bool", 0, 0)
    assert c.failed_check == "unwritten" and c.unwritten == 5


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32", "uint8", "int64", "float64"])
def test_unwritten_in_every_dtype(dtype):
    ref = dtypes.to_storage(np.arange(50) % 7, dtype)
    out = poisoned(ref.shape, dtype)
    out[:40] = ref[:40]
    assert check_output("y", out, ref, dtype, 0, 0).unwritten == 10


def test_nan_and_inf_where_reference_is_finite():
    ref, out = ref_and_out()
    out[3] = np.nan
    assert check_output("y", out, ref, "float32", 1e-4, 1e-4).failed_check == "nan"
    out[3] = ref[3]
    out[4] = np.inf
    assert check_output("y", out, ref, "float32", 1e-4, 1e-4).failed_check == "inf"


def test_nan_matching_reference_nan_passes():
    ref, out = ref_and_out()
    ref[5] = out[5] = np.nan
    assert check_output("y", out, ref, "float32", 1e-4, 1e-4).failed_check is None


def test_integers_are_exact():
    ref = np.arange(10, dtype=np.int32)
    out = ref.copy()
    out[2] += 1
    assert check_output("y", out, ref, "int32", 0, 0).failed_check == "tolerance"


def test_summary_reports_first_failure_and_modified_inputs():
    ref, out = ref_and_out()
    c = check_output("y", out, ref, "float32", 1e-4, 1e-4)
    case = summarize(1, {"N": 1000}, 7, [c], ["x"])
    assert not case.passed and case.failed_check == "input_modified" and "x" in case.message
    out[0] = 99.0
    case = summarize(1, {"N": 1000}, 7, [check_output("y", out, ref, "float32", 1e-4, 1e-4)], [])
    assert case.failed_check == "tolerance" and "1 of 1000" in case.message and "N" in case.message


def test_bf16_round_trip():
    x = np.array([1.0, 3.14159, -2.5e-3, 65504.0, -0.0], np.float32)
    back = dtypes.bf16_bits_to_float32(dtypes.float32_to_bf16_bits(x))
    assert np.allclose(back, x, rtol=4e-3)
    assert dtypes.float32_to_bf16_bits(np.array([1.0], np.float32))[0] == 0x3F80


def test_fast_path_figures_match_a_float64_computation():
    import numpy as np
    from optiml.verify.compare import check_output

    rng = np.random.default_rng(3)
    ref = rng.standard_normal(10_000).astype(np.float32)
    out = (ref + rng.uniform(-5e-5, 5e-5, ref.size)).astype(np.float32)
    ref[10], out[10] = 0.0, 0.0
    c = check_output("y", out, ref, "float32", 1e-4, 1e-4)
    d = np.abs(out.astype(np.float64) - ref.astype(np.float64))
    r = np.abs(ref.astype(np.float64))
    assert c.failed_check is None and c.mismatched == 0
    assert c.max_abs_err == pytest.approx(d.max(), rel=1e-6)
    assert c.max_rel_err == pytest.approx((d[r > 0] / r[r > 0]).max(), rel=1e-5)
    assert c.rel_l2_err == pytest.approx(np.linalg.norm(d) / np.linalg.norm(r), rel=1e-4)
    assert c.worst_index == [int(np.argmax(d))]
