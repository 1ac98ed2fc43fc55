"""gpu_ops without a GPU: the kernels build with a real nvcc, the NumPy mirror of the device fill
(host_fill) draws what inputs.draw would draw in distribution, and the NumPy mirror of the device
compare (host_compare) gives check_output's verdict. tests/gpu/test_gpu_ops_device.py holds the
device to these mirrors."""
import math
import re

import numpy as np
import pytest

from optiml import dtypes as _dt
from optiml.build import NvccBuilder, nvcc_path
from optiml.errors import EnvironmentProblem
from optiml.spec import Init
from optiml.verify import gpu_ops
from optiml.verify.compare import check_output
from optiml.verify.gpu_ops import host_compare, host_fill
from optiml.verify.inputs import draw

ALL = list(_dt.DTYPES)
KERNELS = ({f"fill_{d}_{t}" for d in ("uniform", "normal", "integers") for t in ALL}
           | {f"{k}_{t}" for k in ("compare", "argmax") for t in ALL}
           | {f"fill_pattern_{w}" for w in (1, 2, 4, 8)} | {"reset_result", "count_diff_bytes"})


def _have_nvcc() -> bool:
    try:
        nvcc_path()
        return True
    except EnvironmentProblem:
        return False


needs_nvcc = pytest.mark.skipif(not _have_nvcc(), reason="nvcc is not installed")


# ----------------------------------------------------------------------------- build


@needs_nvcc
def test_gpu_ops_cu_builds_for_sm_90_with_every_kernel_and_no_spills(build_cache):
    result = NvccBuilder("sm_90", cache_dir=build_cache).build(gpu_ops.source_text(), gpu_ops.NVCC_FLAGS, name="gpu_ops.cu")
    assert result.ok, result.log
    assert set(result.symbols) == KERNELS
    assert all(r.spill_stores == 0 and r.spill_loads == 0 and r.stack_frame == 0 for r in result.resources.values())
    assert not result.warnings, result.warnings
    path = gpu_ops.cubin_for("sm_90", cache_dir=build_cache)
    assert path.read_bytes()[:4] == b"\x7fELF"
    assert str(path) == result.cubin_path            # built once: the build cache answers


def test_the_constants_of_the_cu_file_are_those_of_the_mirror():
    defines = dict(re.findall(r"^#define (OPTIML_\w+) (.+)$", gpu_ops.SOURCE.read_text(), re.M))
    parse = lambda text: tuple(int(x, 16) for x in re.findall(r"0x([0-9A-F]+)ULL", text))  # noqa: E731
    assert parse(defines["OPTIML_GAMMA"]) == (gpu_ops.GAMMA,)
    assert parse(defines["OPTIML_LOG_COEFFS"]) == gpu_ops.LOG_COEFFS
    assert parse(defines["OPTIML_SIN_COEFFS"]) == gpu_ops.SIN_COEFFS
    assert parse(defines["OPTIML_COS_COEFFS"]) == gpu_ops.COS_COEFFS
    for name in ("LN2", "PIO2", "SQRT2"):
        assert parse(defines[f"OPTIML_{name}"]) == (getattr(gpu_ops, name),)


def test_the_constants_are_the_series_they_claim():
    f = gpu_ops._f64
    assert [f(b) for b in gpu_ops.LOG_COEFFS] == [1 / (2 * k + 1) for k in range(12)]
    assert [f(b) for b in gpu_ops.SIN_COEFFS] == [(-1) ** k / math.factorial(2 * k + 1) for k in range(9)]
    assert [f(b) for b in gpu_ops.COS_COEFFS] == [(-1) ** k / math.factorial(2 * k) for k in range(10)]
    assert (f(gpu_ops.LN2), f(gpu_ops.PIO2), f(gpu_ops.SQRT2)) == (math.log(2), math.pi / 2, math.sqrt(2))


def test_the_polynomial_log_and_cos_are_accurate_to_a_few_ulp():
    h = gpu_ops.draw_bits(12345, np.arange(1 << 18, dtype=np.uint64), 0)
    h = np.concatenate([h, np.array([0, 2 ** 64 - 1, 2 ** 63, 2 ** 62, 3 << 62, 1 << 11], np.uint64)])
    u = ((h >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * 2.0 ** -53
    ln = gpu_ops.ln_unit(h)
    assert np.all(np.abs(ln - np.log(u)) <= 4 * np.spacing(np.maximum(np.abs(np.log(u)), 1e-300)) + 1e-300)
    v = (h >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    assert np.max(np.abs(gpu_ops.cos_turn(h) - np.cos(2 * np.pi * v))) < 2e-15


# ----------------------------------------------------------------------------- host_fill

DISTS = [Init("uniform", low=-2.0, high=3.0), Init("normal", mean=0.5, std=2.0), Init("integers", low=-5, high=7),
         Init("constant", value=3.0)]


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("init", DISTS, ids=lambda i: i.dist)
def test_host_fill_is_a_function_of_seed_stream_and_index(dtype, init):
    a = host_fill(1000, dtype, init, seed=7, stream=2)
    assert a.dtype == np.dtype(_dt.get(dtype).storage) and a.shape == (1000,)
    assert np.array_equal(a, host_fill(1000, dtype, init, seed=7, stream=2))
    assert np.array_equal(a[:333], host_fill(333, dtype, init, seed=7, stream=2))        # not a function of n
    assert host_fill(0, dtype, init, 7, 2).shape == (0,)
    if init.dist != "constant" and dtype != "bool":
        assert not np.array_equal(a, host_fill(1000, dtype, init, seed=8, stream=2))
        assert not np.array_equal(a, host_fill(1000, dtype, init, seed=7, stream=3))


def test_host_fill_does_not_depend_on_its_chunking(monkeypatch):
    whole = host_fill(5000, "float32", Init("normal"), 3, 1)
    monkeypatch.setattr(gpu_ops, "_CHUNK", 777)
    assert np.array_equal(host_fill(5000, "float32", Init("normal"), 3, 1), whole)


def test_streams_and_seeds_are_uncorrelated():
    n = 200_000
    a = host_fill(n, "float64", Init("normal"), 1, 0)
    others = [host_fill(n, "float64", Init("normal"), 1, 1), host_fill(n, "float64", Init("normal"), 2, 0),
              host_fill(n, "float64", Init("normal"), 1, 0)[1:].copy()]
    for b in others:
        m = min(a.size, b.size)
        assert abs(np.corrcoef(a[:m], b[:m])[0, 1]) < 5 / math.sqrt(n)
    u = host_fill(n, "float64", Init("uniform", low=0.0, high=1.0), 1, 0)
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 5 / math.sqrt(n)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_uniform_covers_its_range_evenly(dtype):
    v = _dt.to_values(host_fill(1_000_000, dtype, Init("uniform", low=-2.0, high=3.0), 11, 0), dtype).astype(np.float64)
    assert v.min() >= -2.0 and v.max() <= 3.0
    assert v.min() < -1.99 and v.max() > 2.99
    assert abs(v.mean() - 0.5) < 0.01 and abs(v.var() - 25 / 12) < 0.02
    counts = np.histogram(v, bins=10, range=(-2, 3))[0]
    assert counts.min() > 0.097 * v.size and counts.max() < 0.103 * v.size


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_normal_has_the_moments_and_tails_of_a_normal(dtype):
    n = 1_000_000
    v = host_fill(n, dtype, Init("normal", mean=0.5, std=2.0), 5, 3).astype(np.float64)
    z = (v - 0.5) / 2.0
    assert abs(z.mean()) < 0.005 and abs(z.std() - 1) < 0.005
    assert abs(np.mean(z ** 3)) < 0.015 and abs(np.mean(z ** 4) - 3) < 0.04
    phi = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))  # noqa: E731
    for x in (-2.0, -1.0, 0.0, 0.5, 1.0, 2.0):
        p = phi(x)
        assert abs(np.mean(z < x) - p) < 5 * math.sqrt(p * (1 - p) / n) + 1e-4, x
    tail = 2 * (1 - phi(3.0))
    assert abs(np.mean(np.abs(z) > 3) - tail) < 6 * math.sqrt(tail / n)
    assert np.abs(z).max() < 8.6


def test_integers_stay_in_low_high_and_hit_both_ends():
    v = host_fill(120_000, "int32", Init("integers", low=-5, high=7), 1, 0)
    values, counts = np.unique(v, return_counts=True)
    assert list(values) == list(range(-5, 7))
    assert counts.min() > 0.95 * 10_000 and counts.max() < 1.05 * 10_000


def test_integers_wrap_into_narrow_types_as_to_storage_does():
    # the spec's default for int8 is integers [0, 256): every bit pattern, 128..255 wrapped
    v = host_fill(100_000, "int8", Init("integers", low=0, high=256), 1, 0)
    assert set(np.unique(v)) == set(range(-128, 128))
    b = host_fill(100_000, "bool", Init("integers", low=0, high=2), 1, 0)
    assert abs(b.mean() - 0.5) < 0.01
    full = host_fill(100_000, "int64", Init("integers", low=-2 ** 63, high=2 ** 63), 1, 0)   # range 2^64
    assert abs(np.mean(full < 0) - 0.5) < 0.01 and full.min() < -2 ** 62 and full.max() > 2 ** 62
    u64 = host_fill(1000, "uint64", Init("integers", low=2 ** 62, high=2 ** 63), 1, 0)
    assert u64.min() >= 2 ** 62 and u64.max() < 2 ** 63


def test_integer_types_floor_uniform_and_round_normal_and_saturate():
    v = host_fill(100_000, "int16", Init("uniform", low=-3.0, high=4.0), 1, 0)
    assert set(np.unique(v)) == set(range(-3, 4))
    u8 = host_fill(100_000, "uint8", Init("normal", mean=0.0, std=10.0), 1, 0)
    phi = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))  # noqa: E731
    assert u8.min() == 0 and abs(np.mean(u8 == 0) - phi(0.05)) < 0.01        # P(10 z < 0.5): no wrap to 255
    i8 = host_fill(100_000, "int8", Init("normal", mean=100.0, std=50.0), 1, 0)
    assert i8.max() == 127 and abs(np.mean(i8 == 127) - (1 - phi(0.53))) < 0.01
    w = host_fill(100_000, "int32", Init("normal", mean=0.0, std=3.0), 1, 0)
    assert abs(w.mean()) < 0.05 and abs(w.std() - 3.0) < 0.05


def test_store_drawn_is_to_storage_for_floats_and_saturates_for_integers():
    bits = np.concatenate([np.random.default_rng(0).integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32),
                           np.array([0x7F800000, 0xFF800000, 0x80000000, 0x00000001, 0x477FF000, 0x477FEFFF,
                                     0x33000000, 0x33000001, 0x3F808000, 0x3F818000, 0x7F7FFFFF], np.uint32)])
    f32 = bits.view(np.float32)
    f32 = f32[~np.isnan(f32)]                  # draws are never NaN
    for dtype in ("float32", "float16", "bfloat16"):
        with np.errstate(over="ignore"):
            expected = _dt.to_storage(f32, dtype)
        assert np.array_equal(gpu_ops.store_drawn(f32, dtype, "uniform"), expected), dtype
    f64 = np.random.default_rng(1).standard_normal(1000) * 1e3
    assert np.array_equal(gpu_ops.store_drawn(f64, "float64", "normal"), _dt.to_storage(f64, "float64"))
    for dtype in ("int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8"):
        lo, hi = _dt.value_range(dtype)
        inside = np.array([lo, hi, 0, lo + 1, hi - 1, 0.4, -0.4, 2.5], np.float64)
        inside = inside[(inside >= lo) & (inside <= hi) & (np.abs(inside) < 2 ** 24)]   # exact in float32
        inside = inside.astype(np.float32)
        assert np.array_equal(gpu_ops.store_drawn(inside, dtype, "uniform"), _dt.to_storage(np.floor(inside), dtype))
        assert np.array_equal(gpu_ops.store_drawn(inside, dtype, "normal"), _dt.to_storage(np.rint(inside), dtype))
        out = gpu_ops.store_drawn(np.array([-3e38, 3e38, -np.inf, np.inf], np.float32), dtype, "uniform")
        assert list(out) == [lo, hi, lo, hi], dtype
    assert list(gpu_ops.store_drawn(np.array([0.5, -0.5, 1.5, 0.0], np.float32), "bool", "uniform")) == [False, True, True, False]
    assert list(gpu_ops.store_drawn(np.array([0.5, -0.5, 1.5, 0.0], np.float32), "bool", "normal")) == [False, False, True, False]


CONSTANTS = [(d, v) for d in ALL for v in (0.0, 0.5, 1.0, -2.7, 100.0, 1e-8)
             if _dt.value_range(d)[0] <= v <= _dt.value_range(d)[1]]      # the spec loader rejects the others


@pytest.mark.parametrize("dtype,value", CONSTANTS)
def test_constant_is_what_inputs_draw_stores(dtype, value):
    init = Init("constant", value=value)
    expected = draw(init, (5,), dtype, np.random.default_rng(0))
    assert host_fill(5, dtype, init, 1, 0).tobytes() == expected.tobytes()


def test_stream_key_folds_big_and_negative_seeds():
    keys = {gpu_ops.stream_key(s, k) for s in (0, 1, -1, 2 ** 64, 2 ** 70 + 3) for k in range(3)}
    assert len(keys) == 15 - 3         # 2**64 is seed 0 again, nothing else collides
    assert all(0 <= k < 2 ** 64 for k in keys)


# ----------------------------------------------------------------------------- compare mirror

TOL = {"float64": (1e-9, 1e-9), "float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (2e-2, 2e-2)}
INJECTIONS_FLOAT = ["nan_out", "inf_out", "neg_inf_vs_inf", "ref_nan_matched", "ref_nan_unmatched", "ref_inf_matched",
                    "ref_inf_unmatched", "out_inf_ref_nan", "poison", "poison_both", "far", "zero_ref", "tiny_ref"]
INJECTIONS_INT = ["poison", "poison_both", "far", "zero_ref", "extremes"]


def _put(arr: np.ndarray, i: int, value, dtype: str) -> None:
    if _dt.get(dtype).kind == "float":
        arr[i] = _dt.to_storage(np.array([value], np.float64), dtype)[0]
    else:
        arr[i] = np.array([int(value)], dtype=arr.dtype)[0]


def make_pair(dtype: str, n: int, seed: int, injections=(), noise: float = 0.3):
    """(out, ref) in storage layout: out within tolerance of ref, then the injections at random places."""
    rng = np.random.default_rng(seed)
    kind = _dt.get(dtype).kind
    atol, rtol = TOL.get(dtype, (0.0, 0.0))
    if kind == "float":
        r = rng.standard_normal(n) * 3
        ref = _dt.to_storage(r, dtype)
        rv = _dt.to_values(ref, dtype).astype(np.float64)
        out = _dt.to_storage(rv + noise * (atol + rtol * np.abs(rv)) * rng.uniform(-1, 1, n), dtype)
    else:
        lo, hi = _dt.value_range(dtype)
        ref = _dt.to_storage(rng.integers(max(lo, -50), min(hi, 50) + 1, n), dtype)
        out = ref.copy()
    bits = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[ref.dtype.itemsize]
    poison = _dt.poison_pattern(dtype).view(bits)[0]           # raw bytes: a bool array would store 0x01
    places = rng.choice(n, size=min(n, 3 * len(injections)), replace=False) if injections else []
    for k, what in enumerate(injections):
        for i in places[3 * k: 3 * k + 3]:
            rv = float(_dt.to_values(ref[i:i + 1], dtype)[0])
            if what == "nan_out":
                _put(out, i, np.nan, dtype)
            elif what == "inf_out":
                _put(out, i, np.inf, dtype)
            elif what == "neg_inf_vs_inf":
                _put(ref, i, np.inf, dtype); _put(out, i, -np.inf, dtype)
            elif what == "ref_nan_matched":
                _put(ref, i, np.nan, dtype); _put(out, i, np.nan, dtype)
            elif what == "ref_nan_unmatched":
                _put(ref, i, np.nan, dtype); _put(out, i, 1.0, dtype)
            elif what == "ref_inf_matched":
                _put(ref, i, -np.inf, dtype); _put(out, i, -np.inf, dtype)
            elif what == "ref_inf_unmatched":
                _put(ref, i, np.inf, dtype); _put(out, i, 2.0, dtype)
            elif what == "out_inf_ref_nan":
                _put(ref, i, np.nan, dtype); _put(out, i, np.inf, dtype)
            elif what == "poison":
                out.view(bits)[i] = poison
            elif what == "poison_both":
                out.view(bits)[i] = poison; ref.view(bits)[i] = poison
            elif what == "far":
                _put(out, i, rv + 10 * (atol + rtol * abs(rv)) + 3, dtype)
            elif what == "zero_ref":
                _put(ref, i, 0.0, dtype); _put(out, i, atol / 2 if kind == "float" else 0, dtype)
            elif what == "tiny_ref":
                tiny = {"float64": 1e-310, "float32": 1e-40}.get(dtype, 1e-7)
                _put(ref, i, tiny, dtype); _put(out, i, 2 * tiny, dtype)
            elif what == "extremes":
                lo, hi = _dt.value_range(dtype)
                _put(ref, i, lo, dtype); _put(out, i, hi, dtype)
    return out, ref


def same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return a == b or (math.isnan(a) and math.isnan(b))


def assert_agrees(got, want, rel_l2_tol: float = 1e-6, err_tol: float = 0.0):
    """Counts, verdict and worst element exactly; max_abs_err / max_rel_err within err_tol
    (relative), rel_l2_err within rel_l2_tol."""
    assert (got.unwritten, got.nan, got.inf, got.mismatched) == (want.unwritten, want.nan, want.inf, want.mismatched)
    assert got.failed_check == want.failed_check
    assert got.elements == want.elements and got.worst_index == want.worst_index
    assert same(got.worst_value, want.worst_value) and same(got.worst_expected, want.worst_expected), (got, want)
    for a, b in ((got.max_abs_err, want.max_abs_err), (got.max_rel_err, want.max_rel_err)):
        assert a == b or a == pytest.approx(b, rel=err_tol, abs=0), (got, want)
    assert got.rel_l2_err == pytest.approx(want.rel_l2_err, rel=rel_l2_tol, abs=1e-300)
    assert got.ref_rms == pytest.approx(want.ref_rms, rel=rel_l2_tol, abs=1e-300)
    assert (got.gross_ref, got.rel_rms_bound, got.atol) == (want.gross_ref, want.rel_rms_bound, want.atol)


def _tol(dtype):
    return TOL.get(dtype, (0.0, 0.0))


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("poisonable", [True, False])
def test_host_compare_agrees_with_check_output_injection_by_injection(dtype, poisonable):
    injections = INJECTIONS_FLOAT if _dt.get(dtype).kind == "float" else INJECTIONS_INT
    atol, rtol = _tol(dtype)
    for k, what in enumerate([None] + injections + ["all"]):
        inj = injections if what == "all" else [] if what is None else [what]
        out, ref = make_pair(dtype, 500, 100 + k, inj)
        rel = _dt.DEFAULT_REL_RMS.get(dtype)
        want = check_output("y", out, ref, dtype, atol, rtol, poisonable, rel_rms=rel)
        if what is None:
            assert want.failed_check is None
        assert_agrees(host_compare("y", out, ref, dtype, atol, rtol, poisonable, rel_rms=rel), want)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int32", "uint8", "bool"])
def test_host_compare_agrees_with_check_output_on_random_mixtures(dtype):
    injections = INJECTIONS_FLOAT if _dt.get(dtype).kind == "float" else INJECTIONS_INT
    rng = np.random.default_rng(5)
    for trial in range(40):
        inj = list(rng.choice(injections, size=rng.integers(0, 4), replace=False))
        n = int(rng.choice([1, 2, 31, 257, 4096]))
        out, ref = make_pair(dtype, n, trial, inj[: max(1, n // 3)] if n > 2 else inj[:0], noise=float(rng.choice([0.3, 0.999, 1.2])))
        atol, rtol = _tol(dtype)
        poisonable = bool(rng.integers(2))
        rel = _dt.DEFAULT_REL_RMS.get(dtype)
        assert_agrees(host_compare("z", out, ref, dtype, atol, rtol, poisonable, rel_rms=rel),
                      check_output("z", out, ref, dtype, atol, rtol, poisonable, rel_rms=rel))


def test_host_compare_of_empty_and_all_special_arrays():
    e = np.zeros(0, np.float32)
    assert_agrees(host_compare("e", e, e, "float32", 1e-4, 1e-4), check_output("e", e, e, "float32", 1e-4, 1e-4))
    nan = np.full(7, np.nan, np.float32)
    got = host_compare("n", nan, nan, "float32", 1e-4, 1e-4)
    assert_agrees(got, check_output("n", nan, nan, "float32", 1e-4, 1e-4))
    assert got.failed_check is None and got.worst_index is None
    poison = np.full(5, _dt.poison_pattern("float16")[0])
    got = host_compare("p", poison, np.zeros(5, np.float16), "float16", 1e-2, 1e-2)
    assert_agrees(got, check_output("p", poison, np.zeros(5, np.float16), "float16", 1e-2, 1e-2))
    assert got.unwritten == 5 and got.worst_index == [0] and got.worst_value is None


def _boundary_pairs(want_fast: bool, n: int = 64):
    """float32 (out, ref) pairs at the float32 tolerance bound whose float32 verdict (check_output's
    fast path) is want_fast and whose float64 verdict is the opposite."""
    rng = np.random.default_rng(3)
    atol = rtol = 1e-4
    found_o, found_r = [], []
    while len(found_o) < n:
        r = rng.uniform(-4, 4, 100_000).astype(np.float32)
        bound = np.float32(atol) + np.float32(rtol) * np.abs(r)
        o = (r + bound * np.float32(rng.choice([-1, 1]))).astype(np.float32)
        o = np.nextafter(o, o + rng.integers(-1, 2, o.size).astype(np.float32)).astype(np.float32)
        fast = np.abs(o - r) <= np.float32(atol) + np.float32(rtol) * np.abs(r)
        o64, r64 = o.astype(np.float64), r.astype(np.float64)
        full = np.abs(o64 - r64) <= atol + rtol * np.abs(r64)
        pick = (fast == want_fast) & (full != want_fast)
        found_o += list(o[pick]); found_r += list(r[pick])
    return np.array(found_o[:n], np.float32), np.array(found_r[:n], np.float32)


@pytest.mark.parametrize("fast_passes", [True, False])
def test_host_compare_follows_check_outputs_float32_fast_path_at_the_tolerance_bound(fast_passes):
    """Elements right at the bound, where float32 and float64 arithmetic disagree: check_output
    passes an output if either its float32 fast path or its float64 accounting passes it."""
    out, ref = _boundary_pairs(fast_passes)
    want = check_output("b", out, ref, "float32", 1e-4, 1e-4)
    assert want.failed_check is None                # both orders of disagreement end in a pass
    assert_agrees(host_compare("b", out, ref, "float32", 1e-4, 1e-4), want)
    stats = gpu_ops.host_compare_stats(out, ref, "float32", 1e-4, 1e-4)
    assert stats.fast_path == fast_passes and (stats.mismatched > 0) == fast_passes


def test_host_compare_rel_l2_is_close_to_check_outputs_on_large_fast_path_arrays():
    """check_output's fast path takes the norms in float32 (numpy's dot): on a million elements
    they are a few 1e-6 off the float64 sums the device makes."""
    out, ref = make_pair("float32", 1 << 20, 9)
    want = check_output("l", out, ref, "float32", 1e-4, 1e-4)
    got = host_compare("l", out, ref, "float32", 1e-4, 1e-4)
    assert_agrees(got, want, rel_l2_tol=2e-5)
    o, r = out.astype(np.float64), ref.astype(np.float64)
    assert got.rel_l2_err == pytest.approx(np.linalg.norm(o - r) / np.linalg.norm(r), rel=1e-6)


# ----------------------------------------------------------------------------- GpuOps on a fake driver
# A stand-in for pycuda.driver whose kernels are the NumPy mirrors: it checks each prepare() format
# against the kernel's C signature in gpu_ops.cu and runs GpuOps's plumbing (argument order,
# result words, argmax and element reads) without a GPU.

_CTYPE = {"u64": "Q", "i64": "q", "double": "d", "float": "f", "int": "i"}


def _signatures() -> dict[str, str]:
    src = gpu_ops.SOURCE.read_text().replace("\\\n", " ")
    out = {}
    for m in re.finditer(r'extern "C" __global__ void __launch_bounds__\(BLOCK\) (\w+?)(?:##\w+)?\(([^)]*)\)', src):
        params = [" ".join(p.split()) for p in m.group(2).split(",")]
        out[m.group(1)] = "".join("P" if "*" in p else _CTYPE[p.rsplit(" ", 1)[0]] for p in params)
    return out


class _Alloc(int):
    def free(self):
        pass


class FakeDriver:
    class device_attribute:
        MULTIPROCESSOR_COUNT = "sms"

    def __init__(self):
        self.mem: dict[int, np.ndarray] = {}
        self.next = 1 << 32
        self.launches: list[tuple[str, tuple]] = []
        drv = self

        class Context:
            @staticmethod
            def get_device():
                return type("Dev", (), {"get_attribute": lambda self, a: 2})()

            @staticmethod
            def synchronize():
                pass

        self.Context = Context
        self.sigs = _signatures()
        self.module_from_file = lambda path: type("Mod", (), {"get_function": lambda self, name: _FakeFn(drv, name)})()

    def mem_alloc(self, nbytes):
        ptr = self.next
        self.mem[ptr] = np.zeros(nbytes, np.uint8)
        self.next += (nbytes + 511) // 256 * 256
        return _Alloc(ptr)

    def view(self, ptr: int, nbytes: int) -> np.ndarray:
        base = max(b for b in self.mem if b <= ptr)
        assert ptr + nbytes <= base + self.mem[base].size, "out of bounds"
        return self.mem[base][ptr - base: ptr - base + nbytes]

    def put(self, arr: np.ndarray) -> int:
        buf = self.mem_alloc(max(arr.nbytes, 1))
        self.view(buf, arr.nbytes)[:] = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        return buf

    def pagelocked_zeros(self, n, dtype):
        return np.zeros(n, dtype)

    def memcpy_dtoh_async(self, dest, src, stream=None):
        dest.reshape(-1).view(np.uint8)[:] = self.view(int(src), dest.nbytes)

    memcpy_dtoh = memcpy_dtoh_async


class _FakeFn:
    def __init__(self, drv: FakeDriver, name: str):
        self.drv, self.name = drv, name
        self.kernel = next(k for k in drv.sigs if name == k or (k.endswith("_") and name.startswith(k)))

    def prepare(self, fmt):
        assert fmt == self.drv.sigs[self.kernel], (self.name, fmt, self.drv.sigs[self.kernel])
        self.fmt = fmt

    def prepared_async_call(self, grid, block, stream, *args):
        assert len(args) == len(self.fmt) and block == (gpu_ops.BLOCK, 1, 1) and 1 <= grid[0] <= 16
        drv, name = self.drv, self.name
        drv.launches.append((name, args))
        res = lambda ptr: drv.view(ptr, 16 * 8).view(np.uint64)  # noqa: E731
        if name == "reset_result":
            res(args[0])[:] = 0
            res(args[0])[[6, 7]] = 2 ** 64 - 1
            return
        if name == "count_diff_bytes":
            a, b, r, nbytes = args
            res(r)[14] += int((drv.view(a, nbytes) != drv.view(b, nbytes)).sum())
            return
        if name.startswith("fill_pattern_"):
            width = int(name.rsplit("_", 1)[1])
            ptr, n, pattern = args
            one = np.array([pattern], np.uint64).view(np.uint8)[:width]
            drv.view(ptr, n * width)[:] = np.tile(one, n)
            return
        kind, dtype = name.split("_", 1) if not name.startswith("fill_") else name[5:].split("_", 1)
        storage = np.dtype(_dt.get(dtype).storage)
        if name.startswith("fill_"):
            ptr, n, key, a, b, lo, rng = args
            values = gpu_ops._fill_chunk(np.arange(n, dtype=np.uint64), key, dtype, (kind, a, b, lo, rng))
            drv.view(ptr, n * storage.itemsize)[:] = np.asarray(values, storage).view(np.uint8)
            return
        o, r, rp, n = args[:4]
        out = drv.view(o, n * storage.itemsize).view(storage)
        ref = drv.view(r, n * storage.itemsize).view(storage)
        w = res(rp)
        if kind == "argmax":
            target, mode = args[4:]
            w[7] = min(int(w[7]), gpu_ops.host_argmax(out, ref, dtype, mode, target))
            return
        atol, rtol, poison, atol32, rtol32, poisonable = args[4:]
        assert poison == gpu_ops._bits(_dt.poison_pattern(dtype))
        assert (np.float32(atol32), np.float32(rtol32)) == (np.float32(atol), np.float32(rtol))
        st = gpu_ops.host_compare_stats(out, ref, dtype, atol, rtol, bool(poisonable))
        w[:6] = [st.unwritten, st.nan, st.inf, st.mismatched, st.fast_fail, st.finite_pairs]
        w[6] = 2 ** 64 - 1 if st.first_bad is None else st.first_bad
        w.view(np.float64)[8:14] = [st.max_abs, st.max_rel, st.max_abs_w, st.max_rel_w, st.sum_sq_diff, st.sum_sq_ref]
        w.view(np.float64)[15] = st.gross_ref


@pytest.fixture
def fake():
    drv = FakeDriver()
    return drv, gpu_ops.GpuOps(drv, "gpu_ops.cubin")


def test_the_kernels_gpuops_launches_are_the_cu_files_kernels():
    """Every kernel GpuOps launches is in gpu_ops.cu with the argument format it prepares (the
    fake driver checks both at each launch), and every kernel there is used."""
    drv = FakeDriver()
    ops = gpu_ops.GpuOps(drv, "gpu_ops.cubin")
    for dtype in ALL:
        buf = drv.mem_alloc(64 * _dt.get(dtype).itemsize)
        for init in DISTS:
            ops.fill(buf, 64, dtype, init, seed=1, stream_id=0)
        ops.poison(buf, 64, dtype)
    for dtype in ("float32", "int32"):
        for inj in ([], INJECTIONS_FLOAT if dtype == "float32" else INJECTIONS_INT):   # right (fast path), wrong
            out, ref = make_pair(dtype, 600, 1, inj)
            ops.compare(drv.put(out), drv.put(ref), out.size, dtype, *_tol(dtype), True, None)
    a = drv.put(np.arange(100, dtype=np.uint8))
    ops.count_differing_bytes(a, a, 100)
    kernels = {_FakeFn(drv, name).kernel for name, _ in drv.launches}
    assert kernels == set(_signatures()) and len(kernels) >= 8


@pytest.mark.parametrize("dtype", ALL)
def test_gpuops_fill_and_poison_on_the_fake_driver_write_host_fill(fake, dtype):
    drv, ops = fake
    n, size = 301, _dt.get(dtype).itemsize
    for init in DISTS:
        buf = drv.mem_alloc(n * size)
        ops.fill(buf, n, dtype, init, seed=5, stream_id=2)
        assert drv.view(buf, n * size).tobytes() == host_fill(n, dtype, init, 5, 2).tobytes(), init
    ops.poison(buf, n, dtype)
    assert drv.view(buf, n * size).tobytes() == _dt.poison_pattern(dtype).tobytes() * n
    ops.fill(buf, 0, dtype, Init("normal"), 1, 0)
    assert drv.launches[-1][0].startswith("fill_pattern")            # n = 0: nothing launched


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int32", "bool"])
def test_gpuops_compare_on_the_fake_driver_is_check_output(fake, dtype):
    drv, ops = fake
    atol, rtol = _tol(dtype)
    injections = INJECTIONS_FLOAT if _dt.get(dtype).kind == "float" else INJECTIONS_INT
    for k, inj in enumerate([[], ["far"], ["poison"], injections, ["ref_nan_matched"] if dtype == "float32" else []]):
        out, ref = make_pair(dtype, 600, k, inj)
        rel = _dt.DEFAULT_REL_RMS.get(dtype)
        got = ops.compare(drv.put(out), drv.put(ref), out.size, dtype, atol, rtol, True, None, name="q", rel_rms=rel)
        assert got.name == "q"
        assert_agrees(got, check_output("q", out, ref, dtype, atol, rtol, rel_rms=rel))
    assert ops.compare(drv.put(out), drv.put(ref), 0, dtype, atol, rtol).elements == 0


def test_gpuops_differs_on_the_fake_driver(fake):
    drv, ops = fake
    a = np.arange(1000, dtype=np.uint8)
    b = a.copy()
    b[997] ^= 1
    pa, pb = drv.put(a), drv.put(b)
    assert ops.differs(pa, pb, 1000) and not ops.differs(pa, pb, 997) and ops.count_differing_bytes(pa, pb, 1000) == 1
    assert ops.count_differing_bytes(pa, pb, 0) == 0


def test_the_host_argmax_counts_a_non_finite_pair_as_no_error_only_in_the_full_accounting():
    """host_argmax, the device argmax's NumPy twin: the fast path finds the first |out - ref| equal to
    the target as computed; the full accounting (finite pairs only) reads a non-finite pair as 0."""
    out, ref = np.array([np.inf, 1, 1], np.float32), np.array([1, 1, 3], np.float32)
    assert gpu_ops.host_argmax(out, ref, "float32", gpu_ops.FULL, 0.0) == 0
    assert gpu_ops.host_argmax(out, ref, "float32", gpu_ops.FAST, 0.0) == 1
    assert gpu_ops.host_argmax(out, ref, "float32", gpu_ops.FULL, 2.0) == 2
    assert gpu_ops.host_argmax(out, ref, "float32", gpu_ops.FAST, float("inf")) == 0
