"""The element types' facts a spec is checked and filled with: each type's value range (a scalar
outside it is refused), bfloat16's rounding to nearest even and its NaN, and the never-written
marks that must read as no value an honest kernel writes."""
import numpy as np
import pytest

from optiml import dtypes as _dt


@pytest.mark.parametrize("name, lo, hi", [("bool", 0, 1), ("int8", -128, 127), ("uint8", 0, 255),
                                          ("int32", -2**31, 2**31 - 1), ("uint64", 0, 2**64 - 1),
                                          ("float16", -65504.0, 65504.0)])
def test_value_range(name, lo, hi):
    assert _dt.value_range(name) == (lo, hi)


def test_the_bfloat16_range_is_its_largest_finite_value_0x7f7f():
    largest = float(_dt.bf16_bits_to_float32(np.array([0x7F7F], np.uint16))[0])
    assert _dt.value_range("bfloat16") == (-largest, largest) and largest == _dt.BF16_MAX
    assert _dt.value_range("float32")[1] == float(np.finfo(np.float32).max)


def test_bfloat16_rounds_to_nearest_even_and_keeps_nan():
    one_ulp = 2.0 ** -7                          # bfloat16 keeps 7 bits of fraction
    x = np.array([1.0, 1 + one_ulp / 2, 1 + 3 * one_ulp / 2, 1 + one_ulp / 2 + 2 ** -20, -2.5, np.nan], np.float32)
    bits = _dt.float32_to_bf16_bits(x)
    back = _dt.bf16_bits_to_float32(bits)
    assert list(back[:5]) == [1.0, 1.0, 1 + 2 * one_ulp, 1 + one_ulp, -2.5]   # ties to even; past the tie, up
    assert bits[5] == 0x7FC0 and np.isnan(back[5])
    assert bits.dtype == np.uint16 and np.array_equal(_dt.to_storage(x[:5], "bfloat16"), bits[:5])
    assert np.array_equal(_dt.to_values(bits[:5], "bfloat16"), back[:5])


@pytest.mark.parametrize("name", sorted(_dt.DTYPES))
def test_the_never_written_mark_is_a_nan_for_floats_and_a_rare_value_of_the_type_else(name):
    mark = _dt.poison_pattern(name)
    d = _dt.DTYPES[name]
    assert mark.shape == (1,) and mark.dtype.itemsize == d.itemsize
    if d.kind == "float":
        assert np.isnan(_dt.to_values(mark, name).astype(np.float64))[0]
    elif d.kind == "int":
        info = np.iinfo(d.storage)
        assert mark.dtype == np.dtype(d.storage) and int(mark[0]) not in (0, 1, -1, info.max if info.min < 0 else info.min)
        assert info.min <= int(mark[0]) <= info.max
        # far from the small non-negative values kernels write most (counts, indices): negative where
        # the type is signed, in the top half of its range where it is not
        assert int(mark[0]) < 0 if info.min < 0 else int(mark[0]) > info.max // 2, int(mark[0])
    else:
        assert mark.view(np.uint8)[0] == 0xA5          # neither 0 nor 1: a bool never written is seen
