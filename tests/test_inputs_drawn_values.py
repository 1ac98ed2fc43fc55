"""The exact values a case's host-side data holds: a constant init keeps its value in the
argument's type (a fraction stays a fraction), an output buffer holds the poison pattern's exact
bytes, and a scalar argument reaches the kernel with the C type the spec names."""
import numpy as np
import pytest

from optiml import dtypes as _dt
from optiml.spec import ArgSpec, Init
from optiml.verify import inputs
from tests.test_spec import load


@pytest.mark.parametrize("dtype,value", [("float32", 0.5), ("float64", -2.75), ("float16", 0.25), ("bfloat16", 1.5)])
def test_a_constant_float_input_keeps_its_fraction(dtype, value):
    got = inputs.draw(Init("constant", value=value), (3,), dtype, np.random.default_rng(0))
    assert got.dtype == np.dtype(_dt.get(dtype).storage) and got.shape == (3,)
    assert _dt.to_values(got, dtype).astype(np.float64).tolist() == [value] * 3


@pytest.mark.parametrize("dtype,value", [("int32", -7), ("uint8", 200), ("int64", 1 << 40)])
def test_a_constant_integer_input_is_that_integer(dtype, value):
    got = inputs.draw(Init("constant", value=value), (2, 2), dtype, np.random.default_rng(0))
    assert got.dtype == np.dtype(_dt.get(dtype).storage) and got.shape == (2, 2)
    assert (got == value).all()


def test_a_constant_bool_input_is_true_for_any_nonzero_value():
    rng = np.random.default_rng(0)
    assert inputs.draw(Init("constant", value=3), (4,), "bool", rng).tolist() == [True] * 4
    assert inputs.draw(Init("constant", value=0), (4,), "bool", rng).tolist() == [False] * 4


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16", "int32", "uint8", "int64", "bool"])
def test_an_output_buffer_holds_the_poison_patterns_exact_bytes(dtype):
    pattern = _dt.poison_pattern(dtype)
    buf = inputs.poisoned((3, 5), dtype)
    assert buf.shape == (3, 5) and buf.dtype == pattern.dtype
    assert buf.tobytes() == pattern.tobytes() * 15        # a bool keeps 0xA5, a NaN keeps its payload


def test_a_case_draws_inputs_poisons_outputs_and_evaluates_scalars(tmp_path):
    spec = load(tmp_path)           # x: input, y: output, n = N and alpha = 0.5: scalars
    case = inputs.make_case(spec, {"N": 77}, seed=3)
    assert list(case.arrays) == ["x", "y"] and case.scalars == {"n": 77, "alpha": 0.5}
    x = spec.args[0]
    want = inputs.draw(x.init, (77,), "float32", np.random.default_rng([3, 0]))    # its own stream: (seed, index)
    assert case.arrays["x"].tobytes() == want.tobytes()
    assert case.arrays["y"].tobytes() == _dt.poison_pattern("float32").tobytes() * 77


def _scalar(dtype, value):
    return inputs.scalar_numpy(ArgSpec("s", dtype, "scalar"), value)


@pytest.mark.parametrize("dtype,value", [("float32", 0.1), ("float64", 0.1), ("int32", -7), ("uint32", 3_000_000_000),
                                         ("int64", (1 << 53) + 1), ("uint8", 255), ("int8", -128)])
def test_a_scalar_has_the_c_type_of_its_dtype(dtype, value):
    got = _scalar(dtype, value)
    want = np.dtype(_dt.get(dtype).storage).type(value)
    assert type(got) is type(want) and got == want


def test_a_bool_scalar_is_one_byte_zero_or_one():
    for value, want in [(True, 1), (False, 0), (5, 1), (0, 0)]:
        got = _scalar("bool", value)
        assert type(got) is np.uint8 and got == want


def test_a_float16_scalar_is_passed_as_its_bits():
    got = _scalar("float16", 1.5)
    assert type(got) is np.uint16 and got == 0x3E00


def test_a_bfloat16_scalar_is_passed_as_its_rounded_bits():
    assert type(_scalar("bfloat16", 1.5)) is np.uint16
    assert _scalar("bfloat16", 1.5) == 0x3FC0
    assert _scalar("bfloat16", -2.0) == 0xC000
    assert _scalar("bfloat16", 1.0 + 2.0 ** -8) == 0x3F80        # a tie rounds to the even neighbour
    assert _scalar("bfloat16", 1.0 + 3 * 2.0 ** -9) == 0x3F81     # past the tie rounds up
