"""Draw inputs and compare outputs on the GPU (the kernels are in gpu_ops.cu).

At the timing size, drawing inputs with numpy and comparing outputs on the host cost far more
than the kernels under test; here both happen on the device and only a few numbers come back.

* :func:`host_fill` is the NumPy mirror of the device fill, bit for bit: element ``i`` of
  stream ``(seed, stream)`` depends on nothing else (not on ``n``, nor on the launch shape).
  The distributions are those of :func:`optiml.verify.inputs.draw` (values drawn in float32,
  float64 for float64 arrays; floored (uniform) or rounded (normal) for integer types; stored as
  :func:`optiml.dtypes.to_storage` stores them), from a counter-based generator instead of
  numpy's: the values differ from ``inputs.draw``'s, their distribution does not. One
  difference with ``to_storage``: a uniform or normal draw outside an integer type's range
  saturates at the range (numpy's float to int cast is undefined there); ``integers`` wrap into
  narrow types as numpy's casts do. host_fill is slow for normal draws (the polynomial log and
  cos, about 0.2 us an element): at large sizes, downloading the device's fill is faster.
* :class:`GpuOps` runs the kernels in a pycuda context: ``fill``, ``poison``, ``compare`` (an
  :class:`~optiml.verify.compare.OutputCheck` as :func:`~optiml.verify.compare.check_output`
  fills it) and ``differs``.
* :func:`host_compare` is the NumPy mirror of ``compare`` (tests hold it against check_output).

Nothing here imports pycuda: :class:`GpuOps` receives ``pycuda.driver``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .. import dtypes as _dt
from ..spec import Init
from .compare import GROSS_REL, OutputCheck
from .inputs import draw

SOURCE = Path(__file__).with_name("gpu_ops.cu")
NVCC_FLAGS = ("-O3", "-fmad=false")       # no FMA contraction: the mirror rounds every step
BLOCK = 256
_CHUNK = 1 << 20                          # host_fill works through this many elements at a time
_M64 = (1 << 64) - 1

# ------------------------------------------------------------------------ constants (as in gpu_ops.cu)

GAMMA = 0x9E3779B97F4A7C15
LOG_COEFFS = (0x3FF0000000000000, 0x3FD5555555555555, 0x3FC999999999999A, 0x3FC2492492492492,
              0x3FBC71C71C71C71C, 0x3FB745D1745D1746, 0x3FB3B13B13B13B14, 0x3FB1111111111111,
              0x3FAE1E1E1E1E1E1E, 0x3FAAF286BCA1AF28, 0x3FA8618618618618, 0x3FA642C8590B2164)
SIN_COEFFS = (0x3FF0000000000000, 0xBFC5555555555555, 0x3F81111111111111, 0xBF2A01A01A01A01A,
              0x3EC71DE3A556C734, 0xBE5AE64567F544E4, 0x3DE6124613A86D09, 0xBD6AE7F3E733B81F,
              0x3CE952C77030AD4A)
COS_COEFFS = (0x3FF0000000000000, 0xBFE0000000000000, 0x3FA5555555555555, 0xBF56C16C16C16C17,
              0x3EFA01A01A01A01A, 0xBE927E4FB7789F5C, 0x3E21EED8EFF8D898, 0xBDA93974A8C07C9D,
              0x3D2AE7F3E733B81F, 0xBCA6827863B97D97)
LN2, PIO2, SQRT2 = 0x3FE62E42FEFA39EF, 0x3FF921FB54442D18, 0x3FF6A09E667F3BCD


def _f64(bits: int) -> float:
    return float(np.array([bits], np.uint64).view(np.float64)[0])


_LOG_C = [_f64(b) for b in LOG_COEFFS]
_SIN_C = [_f64(b) for b in SIN_COEFFS]
_COS_C = [_f64(b) for b in COS_COEFFS]
_LN2, _PIO2, _SQRT2 = _f64(LN2), _f64(PIO2), _f64(SQRT2)

# ------------------------------------------------------------------------ the generator


def _mix64_int(z: int) -> int:
    z &= _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def stream_key(seed: int, stream: int) -> int:
    """The 64-bit key of one stream (one argument's values) of one seed."""
    return _mix64_int(_mix64_int(seed + GAMMA) ^ ((stream * 0xD1B54A32D192ED03) & _M64))


def _mix64(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def draw_bits(key: int, index: np.ndarray, j: int) -> np.ndarray:
    """The random bits of draw ``j`` (0 or 1) of the elements ``index`` (uint64)."""
    return _mix64((np.uint64(2) * index + np.uint64(j + 1)) * np.uint64(GAMMA) + np.uint64(key))


def ln_unit(h: np.ndarray) -> np.ndarray:
    """ln(u) for u = ((h >> 11) + 1) 2^-53 in (0, 1], as the device computes it."""
    u = ((h >> np.uint64(11)) + np.uint64(1)).astype(np.float64)
    u *= 2.0 ** -53
    b = u.view(np.uint64)
    e = ((b >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64) - 1023
    m = ((b & np.uint64(0x000FFFFFFFFFFFFF)) | np.uint64(0x3FF0000000000000)).view(np.float64)
    big = m > _SQRT2
    m[big] *= 0.5
    e += big
    s = (m - 1.0) / (m + 1.0)
    z = s * s
    p = np.full_like(z, _LOG_C[11])
    for c in _LOG_C[10::-1]:
        p *= z
        p += c
    s *= 2.0
    p *= s
    ln = e.astype(np.float64)
    ln *= _LN2
    ln += p
    return ln


def cos_turn(h: np.ndarray) -> np.ndarray:
    """cos(2 pi v) for v = (h >> 11) 2^-53 in [0, 1), as the device computes it."""
    t = h >> np.uint64(11)
    q = (t >> np.uint64(51)).astype(np.int64)
    f = (t & np.uint64((1 << 51) - 1)).astype(np.float64)
    f *= 2.0 ** -51
    wrap = f >= 0.5
    f[wrap] -= 1.0
    q += wrap
    q &= 3
    th = f
    th *= _PIO2
    x2 = th * th
    ps = np.full_like(x2, _SIN_C[8])
    for c in _SIN_C[7::-1]:
        ps *= x2
        ps += c
    pc = np.full_like(x2, _COS_C[9])
    for c in _COS_C[8::-1]:
        pc *= x2
        pc += c
    ps *= th                                   # sin
    out = pc
    out[q == 1] = -ps[q == 1]
    out[q == 2] *= -1.0
    out[q == 3] = ps[q == 3]
    return out


def std_normal(h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
    """Box-Muller (cosine branch) in float64; |z| < 8.58."""
    r = ln_unit(h1)
    r *= -2.0
    np.sqrt(r, out=r)
    r *= cos_turn(h2)
    return r


def _draw_type(dtype: str):
    return np.float64 if dtype == "float64" else np.float32


def fill_params(init: Init, dtype: str) -> tuple[str, float, float, int, int]:
    """(kernel distribution, a, b, lo, range) for a non-constant ``init``: uniform scale and
    offset or normal std and mean, rounded to the draw type as inputs.draw rounds them;
    integers [lo, lo + range) with range 0 meaning all 2^64 values."""
    g = _draw_type(dtype)
    if init.dist == "uniform":
        return "uniform", float(g(init.high - init.low)), float(g(init.low)), 0, 0
    if init.dist == "normal":
        return "normal", float(g(init.std)), float(g(init.mean)), 0, 0
    if init.dist == "integers":
        lo, hi = int(init.low), int(init.high)
        return "integers", 0.0, 0.0, lo, (hi - lo) & _M64
    raise ValueError(init.dist)


def constant_value(init: Init, dtype: str) -> np.ndarray:
    """The one element a constant init stores (inputs.draw's conversion), in storage layout."""
    return draw(init, (1,), dtype, None)


def saturate(values: np.ndarray, dtype: str) -> np.ndarray:
    """Integral float values to an integer storage type, saturating at its range (NaN: 0)."""
    storage = np.dtype(_dt.get(dtype).storage)
    info = np.iinfo(storage)
    d = np.asarray(values, dtype=np.float64)
    lo, hi = d < float(info.min), d >= float(info.max) + 1.0     # both bounds are powers of two
    mid = np.where(lo | hi | np.isnan(d), 0.0, d)
    out = mid.astype(np.int64 if info.min < 0 else np.uint64).astype(storage)
    out[lo] = info.min
    out[hi] = info.max
    return out


def store_drawn(values: np.ndarray, dtype: str, dist: str) -> np.ndarray:
    """Drawn float values (float32, float64 for float64) to storage: inputs.draw's conversion,
    saturating for integer types."""
    kind = _dt.get(dtype).kind
    if kind == "float":
        with np.errstate(over="ignore"):           # float32 beyond float16's range: inf, as on the device
            return _dt.to_storage(values, dtype)
    values = np.floor(values) if dist == "uniform" else np.rint(values)
    if kind == "bool":
        return values != 0
    return saturate(values, dtype)


def _fill_chunk(index: np.ndarray, key: int, dtype: str, params) -> np.ndarray:
    dist, a, b, lo, rng = params
    h = draw_bits(key, index, 0)
    if dist == "integers":
        v = (np.uint64(lo & _M64) + (h % np.uint64(rng) if rng else h)).view(np.int64)
        with np.errstate(over="ignore"):          # int64 beyond float16's range: inf, as on the device
            return v != 0 if dtype == "bool" else _dt.to_storage(v, dtype)
    g = _draw_type(dtype)
    if dist == "uniform":
        if g is np.float64:
            u = (h >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
        else:
            u = (h >> np.uint64(40)).astype(np.float32) * np.float32(2.0 ** -24)
        values = u * g(a) + g(b)
    else:
        values = std_normal(h, draw_bits(key, index, 1)).astype(g) * g(a) + g(b)
    return store_drawn(values, dtype, dist)


def host_fill(n: int, dtype: str, init: Init, seed: int, stream: int) -> np.ndarray:
    """``n`` elements (flat, storage layout) of ``init`` for argument ``stream`` of ``seed``:
    what :meth:`GpuOps.fill` writes, bit for bit."""
    if init.dist == "constant":
        one = constant_value(init, dtype)
        return np.full(n, one[0], dtype=one.dtype)
    params, key = fill_params(init, dtype), stream_key(seed, stream)
    out = np.empty(n, dtype=_dt.get(dtype).storage)
    for start in range(0, n, _CHUNK):
        stop = min(n, start + _CHUNK)
        out[start:stop] = _fill_chunk(np.arange(start, stop, dtype=np.uint64), key, dtype, params)
    return out


# ------------------------------------------------------------------------ compare: the shared finish


@dataclass
class CompareStats:
    """What the compare kernel accumulates (see gpu_ops.cu) for one output."""
    unwritten: int = 0
    nan: int = 0
    inf: int = 0
    mismatched: int = 0
    fast_fail: int = 0            # elements failing check_output's fast path (in its work type)
    finite_pairs: int = 0
    first_bad: int | None = None
    max_abs: float = 0.0          # the full accounting's figures (float64)
    max_rel: float = 0.0
    max_abs_w: float = 0.0        # the fast path's (float32 for float32, float16, bfloat16)
    max_rel_w: float = 0.0
    sum_sq_diff: float = 0.0      # over pairs finite on both sides
    sum_sq_ref: float = 0.0
    gross_ref: float = 0.0        # the largest |ref| among finite pairs off by more than GROSS_REL |ref|

    @property
    def fast_path(self) -> bool:
        """check_output's fast path decides: nothing unwritten, everything close in the work type."""
        return self.unwritten == 0 and self.fast_fail == 0


FAST, FULL = 0, 1                 # argmax modes: the fast path's |out - ref|, the full accounting's


def finish(name: str, n: int, dtype: str, stats: CompareStats, poisonable: bool,
           argmax: Callable[[int, float], int], element: Callable[[int], tuple[np.ndarray, np.ndarray]],
           atol: float = 0.0, rel_rms: float | None = None) -> OutputCheck:
    """The OutputCheck check_output returns, from the accumulated ``stats``; ``argmax(mode,
    target)`` finds the first index whose error is ``target``, ``element(i)`` reads element ``i``
    of out and ref (1-element storage arrays)."""
    res = OutputCheck(name=name, elements=n, unwritten=stats.unwritten, atol=float(atol),
                      rel_rms_bound=None if rel_rms is None or _dt.get(dtype).kind != "float" else float(rel_rms))
    if n == 0:
        return res
    if stats.fast_path:
        res.max_abs_err, res.max_rel_err = stats.max_abs_w, stats.max_rel_w
        i = argmax(FAST, stats.max_abs_w)
    else:
        res.nan, res.inf, res.mismatched = stats.nan, stats.inf, stats.mismatched
        if stats.finite_pairs:
            res.max_abs_err, res.max_rel_err = stats.max_abs, stats.max_rel
        i = stats.first_bad if stats.first_bad is not None else (
            argmax(FULL, stats.max_abs) if stats.finite_pairs else None)
    if stats.fast_path or stats.finite_pairs:
        denom, err = math.sqrt(stats.sum_sq_ref), math.sqrt(stats.sum_sq_diff)
        res.rel_l2_err = err / denom if denom > 0 else err
        if stats.finite_pairs:
            res.ref_rms = math.sqrt(stats.sum_sq_ref / stats.finite_pairs)
            res.gross_ref = stats.gross_ref
    if i is not None:
        o, r = element(i)
        unwritten = poisonable and _bits(o) == _bits(_dt.poison_pattern(dtype)) != _bits(r)
        res.worst_index = [int(i)]
        res.worst_value = None if unwritten else float(_dt.to_values(o, dtype)[0])
        res.worst_expected = float(_dt.to_values(r, dtype)[0])
    return res


def _bits(one: np.ndarray) -> int:
    a = np.ascontiguousarray(one).reshape(-1)[:1]
    return int(a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])[0])


_FAST_TYPE = {"float32": np.float32, "float16": np.float32, "bfloat16": np.float32}


def _work(buf: np.ndarray, dtype: str, work) -> np.ndarray:
    return np.asarray(_dt.to_values(buf, dtype)).astype(work)


def host_compare_stats(out: np.ndarray, ref: np.ndarray, dtype: str, atol: float, rtol: float,
                       poisonable: bool = True) -> CompareStats:
    """The compare kernel's accumulation in NumPy (sums in another order, the rest exact)."""
    out, ref = np.ascontiguousarray(out).reshape(-1), np.ascontiguousarray(ref).reshape(-1)
    st = CompareStats()
    work = _FAST_TYPE.get(dtype, np.float64)
    view = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[out.dtype.itemsize]
    poison = np.uint64(_bits(_dt.poison_pattern(dtype)))
    ob, rb = out.view(view).astype(np.uint64), ref.view(view).astype(np.uint64)
    unw = (ob == poison) & (rb != poison) if poisonable else np.zeros(out.shape, bool)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        ow, rw = _work(out, dtype, work), _work(ref, dtype, work)
        dw, aw = np.abs(ow - rw), np.abs(rw)
        st.fast_fail = int((~np.isfinite(aw) | ~(dw <= work(atol) + work(rtol) * aw)).sum())
        dwn = dw[~np.isnan(dw)]
        st.max_abs_w = float(dwn.max()) if dwn.size else 0.0
        rel_w = dw / aw
        rel_w = rel_w[~np.isnan(rel_w)]
        st.max_rel_w = float(rel_w.max()) if rel_w.size else 0.0
        o, r = _work(out, dtype, np.float64), _work(ref, dtype, np.float64)
        on, rn, oi, ri = np.isnan(o), np.isnan(r), np.isinf(o), np.isinf(r)
        same = np.signbit(o) == np.signbit(r)
        st.unwritten = int(unw.sum())
        st.nan = int((on & ~rn & ~unw).sum())
        st.inf = int((oi & ~(ri & same)).sum())
        fin = np.isfinite(o) & np.isfinite(r)
        diff = np.where(fin, np.abs(o - r), 0.0)
        ar = np.abs(r)
        ok_raw = np.where(fin, diff <= atol + rtol * ar, (rn & on) | (ri & oi & same))
        st.mismatched = int((~(ok_raw | unw) & ~(on & ~rn) & ~(oi & ~ri)).sum())
        bad = np.flatnonzero(unw | ~ok_raw)
        st.first_bad = int(bad[0]) if bad.size else None
        st.finite_pairs = int(fin.sum())
        if st.finite_pairs:
            st.max_abs = float(diff.max())
            rel = np.where(ar > 0, diff / np.maximum(ar, np.finfo(np.float64).tiny), np.where(diff > 0, np.inf, 0.0))
            st.max_rel = float(np.where(fin, rel, 0.0).max())
            st.sum_sq_diff = float(np.sum(diff[fin] ** 2))
            st.sum_sq_ref = float(np.sum(r[fin] ** 2))
            gross = fin & (diff > GROSS_REL * ar)
            st.gross_ref = float(ar[gross].max()) if gross.any() else 0.0
    return st


def host_argmax(out: np.ndarray, ref: np.ndarray, dtype: str, mode: int, target: float) -> int:
    """The argmax kernel in NumPy: the first index whose error (``mode``) equals ``target``."""
    work = _FAST_TYPE.get(dtype, np.float64) if mode == FAST else np.float64
    with np.errstate(invalid="ignore", over="ignore"):
        o, r = _work(out.reshape(-1), dtype, work), _work(ref.reshape(-1), dtype, work)
        d = np.abs(o - r).astype(np.float64)
        if mode == FULL:
            d = np.where(np.isfinite(o) & np.isfinite(r), d, 0.0)
    return int(np.flatnonzero(d == target)[0])


def host_compare(name: str, out: np.ndarray, ref: np.ndarray, dtype: str, atol: float, rtol: float,
                 poisonable: bool = True, rel_rms: float | None = None) -> OutputCheck:
    """GpuOps.compare in NumPy."""
    out, ref = np.ascontiguousarray(out).reshape(-1), np.ascontiguousarray(ref).reshape(-1)
    st = host_compare_stats(out, ref, dtype, atol, rtol, poisonable)
    return finish(name, int(out.size), dtype, st, poisonable,
                  lambda mode, target: host_argmax(out, ref, dtype, mode, target),
                  lambda i: (out[i:i + 1], ref[i:i + 1]), atol=atol, rel_rms=rel_rms)


# ------------------------------------------------------------------------ build


def source_text() -> str:
    return SOURCE.read_text()


def cubin_for(arch: str, cache_dir: Path | None = None) -> Path:
    """gpu_ops.cu built for ``arch`` (cached by the build cache under its source, flags, arch and
    nvcc version), so that the GPU child only loads a cubin. A compile error is a bug in optiml."""
    from ..build import NvccBuilder

    result = NvccBuilder(arch, cache_dir=cache_dir).build(source_text(), NVCC_FLAGS, name="gpu_ops.cu")
    if not result.ok:
        raise RuntimeError(f"optiml's {SOURCE.name} did not build for {arch} ({result.status}):\n{result.log[-4000:]}")
    return Path(result.cubin_path)


# ------------------------------------------------------------------------ on the device

_R_WORDS = 16
(_R_UNWRITTEN, _R_NAN, _R_INF, _R_MISMATCHED, _R_FAST_FAIL, _R_FINITE_PAIRS, _R_FIRST_BAD, _R_ARGMAX,
 _R_MAX_ABS, _R_MAX_REL, _R_MAX_ABS_W, _R_MAX_REL_W, _R_SUM_SQ_DIFF, _R_SUM_SQ_REF, _R_DIFF_BYTES, _R_GROSS_REF) = range(16)
_NONE = (1 << 64) - 1


class GpuOps:
    """The gpu_ops kernels, loaded into the current pycuda context (``drv`` is pycuda.driver).
    Pointers are device addresses (ints or DeviceAllocations); ``cuda_stream`` a pycuda Stream
    or None for the default stream. Fills are asynchronous; compare and differs wait for their
    results."""

    def __init__(self, drv, cubin_path: str | Path):
        self.drv = drv
        self.module = drv.module_from_file(str(cubin_path))
        self._fns: dict[str, object] = {}
        dev = drv.Context.get_device()
        self.max_blocks = dev.get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT) * 8
        self.result = drv.mem_alloc(_R_WORDS * 8)
        self.host = drv.pagelocked_zeros(_R_WORDS, np.uint64)
        self.last_stats: CompareStats | None = None      # the last compare's accumulation (for tests)

    # -------------------------------------------------------------- plumbing

    def _fn(self, name: str, fmt: str):
        fn = self._fns.get(name)
        if fn is None:
            fn = self.module.get_function(name)
            fn.prepare(fmt)
            self._fns[name] = fn
        return fn

    def _launch(self, name: str, fmt: str, n: int, stream, *args) -> None:
        blocks = max(1, min(-(-n // BLOCK), self.max_blocks))
        self._fn(name, fmt).prepared_async_call((blocks, 1, 1), (BLOCK, 1, 1), stream, *args)

    def _sync(self, stream) -> None:
        if stream is None:
            self.drv.Context.synchronize()
        else:
            stream.synchronize()

    def _read_result(self, stream) -> np.ndarray:
        self.drv.memcpy_dtoh_async(self.host, self.result, stream)
        self._sync(stream)
        return self.host.copy()

    def _reset(self, stream) -> None:
        self._fn("reset_result", "P").prepared_async_call((1, 1, 1), (BLOCK, 1, 1), stream, int(self.result))

    # -------------------------------------------------------------- the operations

    def pattern(self, ptr, n: int, element: np.ndarray, cuda_stream=None) -> None:
        """Every one of ``n`` elements set to the 1-element array ``element``'s bytes."""
        if n:
            width = np.asarray(element).dtype.itemsize
            self._launch(f"fill_pattern_{width}", "PQQ", n, cuda_stream, int(ptr), n, _bits(element))

    def poison(self, ptr, n: int, dtype: str, cuda_stream=None) -> None:
        self.pattern(ptr, n, _dt.poison_pattern(dtype), cuda_stream)

    def fill(self, ptr, n: int, dtype: str, init: Init, seed: int, stream_id: int, cuda_stream=None) -> None:
        """What host_fill(n, dtype, init, seed, stream_id) returns, written at ``ptr``."""
        if init.dist == "constant":
            self.pattern(ptr, n, constant_value(init, dtype), cuda_stream)
            return
        if n:
            dist, a, b, lo, rng = fill_params(init, dtype)
            self._launch(f"fill_{dist}_{dtype}", "PQQddqQ", n, cuda_stream,
                         int(ptr), n, stream_key(seed, stream_id), a, b, lo, rng)

    def compare(self, out_ptr, ref_ptr, n: int, dtype: str, atol: float, rtol: float, poisonable: bool = True,
                cuda_stream=None, name: str = "", rel_rms: float | None = None) -> OutputCheck:
        """check_output on two device buffers of ``n`` elements of ``dtype``."""
        if n == 0:
            return OutputCheck(name=name, elements=0, atol=float(atol))
        storage = np.dtype(_dt.get(dtype).storage)
        self._reset(cuda_stream)
        self._launch(f"compare_{dtype}", "PPPQddQffi", n, cuda_stream, int(out_ptr), int(ref_ptr), int(self.result), n,
                     float(atol), float(rtol), _bits(_dt.poison_pattern(dtype)),
                     float(np.float32(atol)), float(np.float32(rtol)), int(bool(poisonable)))
        w = self._read_result(cuda_stream)
        f = w.view(np.float64)
        st = CompareStats(unwritten=int(w[_R_UNWRITTEN]), nan=int(w[_R_NAN]), inf=int(w[_R_INF]),
                          mismatched=int(w[_R_MISMATCHED]), fast_fail=int(w[_R_FAST_FAIL]),
                          finite_pairs=int(w[_R_FINITE_PAIRS]),
                          first_bad=None if int(w[_R_FIRST_BAD]) == _NONE else int(w[_R_FIRST_BAD]),
                          max_abs=float(f[_R_MAX_ABS]), max_rel=float(f[_R_MAX_REL]),
                          max_abs_w=float(f[_R_MAX_ABS_W]), max_rel_w=float(f[_R_MAX_REL_W]),
                          sum_sq_diff=float(f[_R_SUM_SQ_DIFF]), sum_sq_ref=float(f[_R_SUM_SQ_REF]),
                          gross_ref=float(f[_R_GROSS_REF]))
        self.last_stats = st

        def argmax(mode: int, target: float) -> int:
            self._reset(cuda_stream)
            self._launch(f"argmax_{dtype}", "PPPQdi", n, cuda_stream, int(out_ptr), int(ref_ptr), int(self.result),
                         n, float(target), mode)
            i = int(self._read_result(cuda_stream)[_R_ARGMAX])
            if i == _NONE:       # cannot happen: target is one of the errors
                raise RuntimeError(f"gpu_ops: no element of {name or 'the output'} has the error {target!r}")
            return i

        def element(i: int) -> tuple[np.ndarray, np.ndarray]:
            o, r = np.empty(1, storage), np.empty(1, storage)
            self.drv.memcpy_dtoh(o, int(out_ptr) + i * storage.itemsize)
            self.drv.memcpy_dtoh(r, int(ref_ptr) + i * storage.itemsize)
            return o, r

        return finish(name, n, dtype, st, poisonable, argmax, element, atol=atol, rel_rms=rel_rms)

    def count_differing_bytes(self, a_ptr, b_ptr, nbytes: int, cuda_stream=None) -> int:
        if nbytes == 0:
            return 0
        self._reset(cuda_stream)
        self._launch("count_diff_bytes", "PPPQ", -(-nbytes // 8), cuda_stream, int(a_ptr), int(b_ptr),
                     int(self.result), nbytes)
        return int(self._read_result(cuda_stream)[_R_DIFF_BYTES])

    def differs(self, a_ptr, b_ptr, nbytes: int, cuda_stream=None) -> bool:
        """Whether two device buffers of ``nbytes`` bytes differ anywhere (an input the kernel changed)."""
        return self.count_differing_bytes(a_ptr, b_ptr, nbytes, cuda_stream) > 0

    def free(self) -> None:
        self.result.free()
