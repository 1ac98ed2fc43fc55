"""gpu_ops on the GPU: the device fill is host_fill bit for bit, the device compare is
check_output's verdict, differs() sees one changed byte. Run on a GPU machine (see README):

    python3 -m pytest -m gpu tests/gpu/test_gpu_ops_device.py -v -s
"""
import sys
import time

import numpy as np
import pytest

from optiml import dtypes as _dt
from optiml.build import detect_arch
from optiml.spec import Init
from optiml.verify import gpu_ops
from optiml.verify.compare import check_output
from optiml.verify.gpu_ops import GpuOps, cubin_for, host_compare_stats, host_fill
from optiml.verify.inputs import draw
from tests.test_gpu_ops import (ALL, INJECTIONS_FLOAT, INJECTIONS_INT, TOL, _boundary_pairs, assert_agrees,
                                make_pair)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    import pycuda.driver as drv

    drv.init()
    ctx = drv.Device(0).make_context()
    try:
        ops = GpuOps(drv, cubin_for(detect_arch(), cache_dir=tmp_path_factory.mktemp("gpu-ops-cache")))
        yield drv, ops, drv.Stream()
        ops.free()
    finally:
        ctx.pop()


def upload(drv, arr: np.ndarray):
    buf = drv.mem_alloc(max(arr.nbytes, 1))
    if arr.nbytes:
        drv.memcpy_htod(buf, np.ascontiguousarray(arr))
    return buf


def download(drv, buf, n: int, dtype: str) -> np.ndarray:
    host = np.empty(n, _dt.get(dtype).storage)
    if n:
        drv.memcpy_dtoh(host, buf)
    return host


def first_differences(got: np.ndarray, want: np.ndarray, k: int = 5):
    view = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
    idx = np.flatnonzero(got.view(view) != want.view(view))[:k]
    return [(int(i), got[i], want[i]) for i in idx]


# ----------------------------------------------------------------------------- fill

INITS = [Init("uniform", low=-2.0, high=3.0), Init("uniform", low=-1e10, high=1e10), Init("normal", mean=0.5, std=2.0),
         Init("normal", mean=100.0, std=50.0), Init("normal", mean=0.0, std=1e30), Init("integers", low=-5, high=7),
         Init("integers", low=0, high=256), Init("integers", low=-2 ** 63, high=2 ** 63), Init("constant", value=3.0),
         Init("constant", value=0.0)]


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("init", INITS, ids=lambda i: f"{i.dist}-{i.low}-{i.high}-{i.mean}-{i.std}-{i.value}")
def test_device_fill_is_host_fill_bit_for_bit(dev, dtype, init):
    drv, ops, stream = dev
    for n in (0, 1, 255, 257, 100_003):
        buf = drv.mem_alloc(max(1, n * _dt.get(dtype).itemsize))
        try:
            ops.fill(buf, n, dtype, init, seed=1234, stream_id=3, cuda_stream=stream)
            stream.synchronize()
            got, want = download(drv, buf, n, dtype), host_fill(n, dtype, init, 1234, 3)
            assert got.tobytes() == want.tobytes(), (n, first_differences(got, want))
        finally:
            buf.free()


@pytest.mark.parametrize("dtype,init", [("float32", Init("normal")), ("float64", Init("normal", mean=1.0, std=3.0)),
                                        ("bfloat16", Init("uniform", low=-1.0, high=1.0)),
                                        ("int8", Init("integers", low=0, high=256))])
def test_device_fill_is_host_fill_past_one_grid_and_on_the_default_stream(dev, dtype, init):
    drv, ops, _ = dev
    n = ops.max_blocks * gpu_ops.BLOCK * 3 + 17          # every thread loops
    buf = drv.mem_alloc(n * _dt.get(dtype).itemsize)
    try:
        ops.fill(buf, n, dtype, init, seed=99, stream_id=0)
        drv.Context.synchronize()
        got, want = download(drv, buf, n, dtype), host_fill(n, dtype, init, 99, 0)
        assert got.tobytes() == want.tobytes(), first_differences(got, want)
    finally:
        buf.free()


@pytest.mark.parametrize("dtype", ALL)
def test_poison_writes_the_poison_pattern(dev, dtype):
    drv, ops, stream = dev
    n = 1001
    buf = drv.mem_alloc(n * _dt.get(dtype).itemsize)
    try:
        ops.poison(buf, n, dtype, stream)
        stream.synchronize()
        # the pattern's bytes, as inputs.poisoned holds them on the host
        assert download(drv, buf, n, dtype).tobytes() == _dt.poison_pattern(dtype).tobytes() * n
    finally:
        buf.free()


# ----------------------------------------------------------------------------- compare


def device_compare(dev, out, ref, dtype, poisonable=True):
    drv, ops, stream = dev
    atol, rtol = TOL.get(dtype, (0.0, 0.0))
    o, r = upload(drv, out), upload(drv, ref)
    try:
        res = ops.compare(o, r, out.size, dtype, atol, rtol, poisonable, stream, name="c",
                          rel_rms=_dt.DEFAULT_REL_RMS.get(dtype))
        return res, ops.last_stats
    finally:
        o.free()
        r.free()


def assert_device_agrees(dev, out, ref, dtype, poisonable=True):
    """The device's OutputCheck is check_output's: counts, verdict and worst element exactly, the
    error figures within 1e-6 (rel_l2: 2e-5 where check_output's fast path sums in float32)."""
    atol, rtol = TOL.get(dtype, (0.0, 0.0))
    got, stats = device_compare(dev, out, ref, dtype, poisonable)
    want = check_output("c", out, ref, dtype, atol, rtol, poisonable, rel_rms=_dt.DEFAULT_REL_RMS.get(dtype))
    fast32 = stats.fast_path and dtype in ("float32", "float16", "bfloat16")
    assert_agrees(got, want, rel_l2_tol=2e-5 if fast32 else 1e-6, err_tol=1e-6)
    return got


def assert_device_accumulates_the_mirror(dev, out, ref, dtype, poisonable=True):
    """Stricter: the kernel's accumulation is the NumPy mirror's, counts and maxima bit for bit."""
    atol, rtol = TOL.get(dtype, (0.0, 0.0))
    _, stats = device_compare(dev, out, ref, dtype, poisonable)
    host = host_compare_stats(out, ref, dtype, atol, rtol, poisonable)
    for f in ("unwritten", "nan", "inf", "mismatched", "fast_fail", "finite_pairs", "first_bad",
              "max_abs", "max_rel", "max_abs_w", "max_rel_w", "gross_ref"):
        assert getattr(stats, f) == getattr(host, f), (f, getattr(stats, f), getattr(host, f))
    for f in ("sum_sq_diff", "sum_sq_ref"):
        assert getattr(stats, f) == pytest.approx(getattr(host, f), rel=1e-9, abs=1e-300), f


def scenarios(dtype):
    injections = INJECTIONS_FLOAT if _dt.get(dtype).kind == "float" else INJECTIONS_INT
    for k, what in enumerate([None] + injections + ["all"]):
        inj = injections if what == "all" else [] if what is None else [what]
        for n in (1, 1000, 100_003):
            out, ref = make_pair(dtype, n, 7 * k + n, inj if n >= 3 * len(inj) else [])
            yield what, out, ref


COMPARED = ["float32", "float16", "bfloat16", "float64", "int32", "int8", "uint64", "bool"]


@pytest.mark.parametrize("dtype", COMPARED)
@pytest.mark.parametrize("poisonable", [True, False])
def test_device_compare_agrees_with_check_output(dev, dtype, poisonable):
    for what, out, ref in scenarios(dtype):
        got = assert_device_agrees(dev, out, ref, dtype, poisonable)
        if what is None:
            assert got.failed_check is None


@pytest.mark.parametrize("dtype", COMPARED)
def test_device_compare_accumulates_what_the_numpy_mirror_does(dev, dtype):
    for _, out, ref in scenarios(dtype):
        assert_device_accumulates_the_mirror(dev, out, ref, dtype)


@pytest.mark.parametrize("fast_passes", [True, False])
def test_device_compare_at_the_float32_tolerance_bound(dev, fast_passes):
    out, ref = _boundary_pairs(fast_passes)
    got = assert_device_agrees(dev, out, ref, "float32")
    # every element sits on the elementwise bound: that check passes (the relative one may not: every
    # element is off by atol + rtol |ref|, far more than rounding)
    assert (got.unwritten, got.nan, got.inf, got.mismatched) == (0, 0, 0, 0)
    assert_device_accumulates_the_mirror(dev, out, ref, "float32")


def test_device_compare_finds_the_first_bad_and_the_worst_index_across_the_grid(dev):
    drv, ops, _ = dev
    n = ops.max_blocks * gpu_ops.BLOCK * 4 + 5
    out, ref = make_pair("float32", n, 1)
    got = assert_device_agrees(dev, out, ref, "float32")
    assert got.failed_check is None and got.worst_index is not None
    out[[n - 1, n - 3, n // 2 + 123]] = np.float32(1e6)
    got = assert_device_agrees(dev, out, ref, "float32")
    assert got.failed_check == "tolerance" and got.mismatched == 3 and got.worst_index == [n // 2 + 123]
    out[n - 2] = np.float32(np.nan)
    got = assert_device_agrees(dev, out, ref, "float32")
    assert got.failed_check == "nan"


def test_device_compare_of_an_untouched_output_counts_every_element_unwritten(dev):
    drv, ops, stream = dev
    n = 4099
    out, ref = drv.mem_alloc(n * 2), upload(drv, np.ones(n, np.float16))
    try:
        ops.poison(out, n, "float16", stream)
        got = ops.compare(out, ref, n, "float16", 1e-2, 1e-2, True, stream, name="y")
        assert (got.failed_check, got.unwritten, got.worst_index, got.worst_value, got.worst_expected) == ("unwritten", n, [0], None, 1.0)
        assert ops.compare(out, ref, 0, "float16", 1e-2, 1e-2, True, stream).elements == 0
    finally:
        out.free()
        ref.free()


# ----------------------------------------------------------------------------- differs


def test_differs_sees_one_changed_byte_anywhere(dev):
    drv, ops, stream = dev
    nbytes = (1 << 20) + 13
    data = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)
    a, b = upload(drv, data), upload(drv, data)
    try:
        assert not ops.differs(a, b, nbytes, stream) and ops.count_differing_bytes(a, b, nbytes) == 0
        for at in (0, 7, 8, 12345, nbytes - 9, nbytes - 1):
            changed = data.copy()
            changed[at] ^= 0x10
            drv.memcpy_htod(b, changed)
            assert ops.differs(a, b, nbytes, stream), at
            assert ops.count_differing_bytes(a, b, nbytes, stream) == 1
            assert ops.count_differing_bytes(int(a) + 1, int(b) + 1, nbytes - 1, stream) == (at >= 1)   # unaligned
            if at >= 3:
                assert ops.differs(int(a) + 3, int(b) + 3, at - 3, stream) is False                   # stops short
        changed = data.copy()
        changed[::1000] ^= 0xFF
        drv.memcpy_htod(b, changed)
        assert ops.count_differing_bytes(a, b, nbytes, stream) == len(range(0, nbytes, 1000))
    finally:
        a.free()
        b.free()


# ----------------------------------------------------------------------------- timing (printed)


def test_fill_and_compare_of_64m_float32_elements_timing(dev):
    drv, ops, stream = dev
    n = 64 << 20
    out, ref = drv.mem_alloc(n * 4), drv.mem_alloc(n * 4)
    try:
        init = Init("normal")
        ops.fill(ref, n, "float32", init, 1, 0, stream)          # warm-up: loads the functions
        ops.compare(ref, ref, n, "float32", 1e-4, 1e-4, True, stream)
        stream.synchronize()
        t0 = time.perf_counter()
        ops.fill(ref, n, "float32", init, 2, 0, stream)
        ops.fill(out, n, "float32", init, 2, 0, stream)
        stream.synchronize()
        t1 = time.perf_counter()
        res = ops.compare(out, ref, n, "float32", 1e-4, 1e-4, True, stream)
        t2 = time.perf_counter()
        assert res.failed_check is None and res.max_abs_err == 0.0
        ops.fill(ref, n, "float32", Init("uniform", low=-1.0, high=1.0), 3, 0, stream)
        stream.synchronize()
        t3 = time.perf_counter()
        host_ref = draw(init, (n,), "float32", np.random.default_rng(2))      # what the host does today
        t4 = time.perf_counter()
        check_output("x", host_ref, host_ref, "float32", 1e-4, 1e-4)
        t5 = time.perf_counter()
        print(f"\ngpu_ops, {n} float32 elements: 2 normal fills {1e3 * (t1 - t0):.2f} ms, compare {1e3 * (t2 - t1):.2f} ms, "
              f"1 uniform fill {1e3 * (t3 - t2):.2f} ms; on the host: 1 normal draw {1e3 * (t4 - t3):.0f} ms, "
              f"check_output {1e3 * (t5 - t4):.0f} ms", file=sys.stderr)
    finally:
        out.free()
        ref.free()
