import numpy as np

from optiml import dtypes
from optiml.spec import Init
from optiml.verify.inputs import draw, make_case
from tests.test_spec import load


def test_draws_follow_the_spec():
    rng = np.random.default_rng(1)
    u = draw(Init("uniform", low=-2, high=3), (10000,), "float32", rng)
    assert u.dtype == np.float32 and u.min() >= -2 and u.max() < 3 and u.std() > 1
    i = draw(Init("integers", low=5, high=9), (1000,), "int64", rng)
    assert set(np.unique(i)) == {5, 6, 7, 8}
    n = draw(Init("normal", mean=10, std=0.5), (10000,), "float16", rng)
    assert n.dtype == np.float16 and abs(float(n.astype(np.float32).mean()) - 10) < 0.05
    b = draw(Init("normal"), (100,), "bfloat16", rng)
    assert b.dtype == np.uint16 and np.isfinite(dtypes.bf16_bits_to_float32(b)).all()
    c = draw(Init("constant", value=3), (4,), "uint8", rng)
    assert c.tolist() == [3, 3, 3, 3]


def test_an_integer_array_drawn_uniform_or_normal_takes_whole_numbers_over_the_whole_range():
    """uniform(-5, 5) for int32: floored, so -5 comes up as often as 4 (truncating toward zero would make
    -5 all but never appear and 0 twice as likely); normal(0, 1): rounded to the nearest, so about
    38 % zeros (truncating: 68 %)."""
    rng = np.random.default_rng(3)
    u = draw(Init("uniform", low=-5, high=5), (20000,), "int32", rng)
    counts = {v: int((u == v).sum()) for v in range(-5, 5)}
    assert u.dtype == np.int32 and set(np.unique(u)) == set(range(-5, 5))
    assert max(counts.values()) < 1.2 * min(counts.values()), counts
    n = draw(Init("normal", mean=0.0, std=1.0), (20000,), "int16", rng)
    assert n.dtype == np.int16 and 0.34 < float((n == 0).mean()) < 0.42


def test_case_is_seeded_fresh_and_outputs_poisoned(tmp_path):
    spec = load(tmp_path)
    a = make_case(spec, {"N": 1000}, seed=1)
    b = make_case(spec, {"N": 1000}, seed=1)
    c = make_case(spec, {"N": 1000}, seed=2)
    assert np.array_equal(a.arrays["x"], b.arrays["x"])
    assert not np.array_equal(a.arrays["x"], c.arrays["x"])
    assert not (a.arrays["x"] == 0).any()
    assert np.isnan(a.arrays["y"]).all()
    assert a.scalars == {"n": 1000, "alpha": 0.5}
