// Drawing inputs and comparing outputs on the GPU (optiml/verify/gpu_ops.py loads this).
//
// Every floating-point step that the NumPy mirror in gpu_ops.py reproduces is written with a
// round-to-nearest intrinsic (__fmul_rn, __dadd_rn, ...), which the compiler never fuses into an
// FMA, and the file is built with -fmad=false besides: element i of a fill is then bit-identical
// to gpu_ops.host_fill, whatever the launch shape.
//
// Randomness: a counter-based generator. The host folds (seed, stream) into a 64-bit key; the
// bits for element i, draw j are splitmix64's finaliser applied to key + (2i + j + 1) * GAMMA.
#include <cuda_fp16.h>

typedef unsigned long long u64;
typedef long long i64;

// The constants shared with gpu_ops.py, as IEEE double bit patterns (a test checks they agree).
#define OPTIML_GAMMA 0x9E3779B97F4A7C15ULL
#define OPTIML_LOG_COEFFS 0x3FF0000000000000ULL, 0x3FD5555555555555ULL, 0x3FC999999999999AULL, 0x3FC2492492492492ULL, 0x3FBC71C71C71C71CULL, 0x3FB745D1745D1746ULL, 0x3FB3B13B13B13B14ULL, 0x3FB1111111111111ULL, 0x3FAE1E1E1E1E1E1EULL, 0x3FAAF286BCA1AF28ULL, 0x3FA8618618618618ULL, 0x3FA642C8590B2164ULL
#define OPTIML_SIN_COEFFS 0x3FF0000000000000ULL, 0xBFC5555555555555ULL, 0x3F81111111111111ULL, 0xBF2A01A01A01A01AULL, 0x3EC71DE3A556C734ULL, 0xBE5AE64567F544E4ULL, 0x3DE6124613A86D09ULL, 0xBD6AE7F3E733B81FULL, 0x3CE952C77030AD4AULL
#define OPTIML_COS_COEFFS 0x3FF0000000000000ULL, 0xBFE0000000000000ULL, 0x3FA5555555555555ULL, 0xBF56C16C16C16C17ULL, 0x3EFA01A01A01A01AULL, 0xBE927E4FB7789F5CULL, 0x3E21EED8EFF8D898ULL, 0xBDA93974A8C07C9DULL, 0x3D2AE7F3E733B81FULL, 0xBCA6827863B97D97ULL
#define OPTIML_LN2 0x3FE62E42FEFA39EFULL
#define OPTIML_PIO2 0x3FF921FB54442D18ULL
#define OPTIML_SQRT2 0x3FF6A09E667F3BCDULL

#define BLOCK 256
#define F64(bits) __longlong_as_double((i64)(bits))

// The result block of compare / argmax / count_diff_bytes: 16 words (gpu_ops.py reads it back).
enum {
    R_UNWRITTEN, R_NAN, R_INF, R_MISMATCHED, R_FAST_FAIL, R_FINITE_PAIRS, R_FIRST_BAD, R_ARGMAX,
    R_MAX_ABS, R_MAX_REL, R_MAX_ABS_W, R_MAX_REL_W, R_SUM_SQ_DIFF, R_SUM_SQ_REF, R_DIFF_BYTES, R_GROSS_REF, R_WORDS = 16
};

// ------------------------------------------------------------------------------------ random bits

__device__ __forceinline__ u64 mix64(u64 z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

__device__ __forceinline__ u64 draw_bits(u64 key, u64 i, u64 j) {
    return mix64(key + (2 * i + j + 1) * OPTIML_GAMMA);
}

// A standard normal from two 64-bit draws (Box-Muller, cosine branch), with log, sin and cos
// written out as polynomials in correctly rounded operations so that NumPy can repeat them.
__device__ double std_normal(u64 h1, u64 h2) {
    // radius: u in (0, 1], ln u = e ln 2 + 2 atanh((m - 1) / (m + 1)), m in [sqrt(2)/2, sqrt(2)]
    double u = __dmul_rn(__ull2double_rn((h1 >> 11) + 1), 1.1102230246251565e-16);   // 2^-53
    u64 b = (u64)__double_as_longlong(u);
    int e = (int)((b >> 52) & 0x7FF) - 1023;
    double m = F64((b & 0x000FFFFFFFFFFFFFULL) | 0x3FF0000000000000ULL);
    if (m > F64(OPTIML_SQRT2)) { m = __dmul_rn(m, 0.5); e += 1; }
    double s = __ddiv_rn(__dsub_rn(m, 1.0), __dadd_rn(m, 1.0));
    double z = __dmul_rn(s, s);
    const u64 lc[] = {OPTIML_LOG_COEFFS};
    double p = F64(lc[11]);
#pragma unroll
    for (int k = 10; k >= 0; --k) p = __dadd_rn(__dmul_rn(p, z), F64(lc[k]));
    double ln = __dadd_rn(__dmul_rn((double)e, F64(OPTIML_LN2)), __dmul_rn(__dmul_rn(2.0, s), p));
    double r = __dsqrt_rn(__dmul_rn(-2.0, ln));
    // angle: 2 pi v = q pi/2 + f pi/2, f in [-1/2, 1/2)
    u64 t = h2 >> 11;
    int q = (int)(t >> 51);
    double f = __dmul_rn(__ull2double_rn(t & ((1ULL << 51) - 1)), 4.4408920985006262e-16);  // 2^-51
    if (f >= 0.5) { f = __dsub_rn(f, 1.0); q = (q + 1) & 3; }
    double th = __dmul_rn(f, F64(OPTIML_PIO2));
    double x2 = __dmul_rn(th, th);
    const u64 sc[] = {OPTIML_SIN_COEFFS};
    const u64 cc[] = {OPTIML_COS_COEFFS};
    double ps = F64(sc[8]);
#pragma unroll
    for (int k = 7; k >= 0; --k) ps = __dadd_rn(__dmul_rn(ps, x2), F64(sc[k]));
    double pc = F64(cc[9]);
#pragma unroll
    for (int k = 8; k >= 0; --k) pc = __dadd_rn(__dmul_rn(pc, x2), F64(cc[k]));
    double sn = __dmul_rn(th, ps);
    double c = q == 0 ? pc : q == 1 ? -sn : q == 2 ? -pc : sn;
    return __dmul_rn(r, c);
}

// ------------------------------------------------------------------------------------ arithmetic
// overloads so that one template serves float and double work types

__device__ __forceinline__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double sub_rn(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double div_rn(double a, double b) { return __ddiv_rn(a, b); }

__device__ __forceinline__ unsigned short f2bf(float f) {
    // dtypes.float32_to_bf16_bits: round to nearest even, NaN -> 0x7FC0
    if (isnan(f)) return 0x7FC0;
    u64 u = __float_as_uint(f);
    return (unsigned short)((u + 0x7FFFULL + ((u >> 16) & 1ULL)) >> 16);
}

// An integral value to an integer type, saturating at its range (NaN -> 0).
template <class T>
__device__ __forceinline__ T saturate(double d, double lo, double hi_plus_1, T tmin, T tmax) {
    if (isnan(d)) return (T)0;
    if (d < lo) return tmin;
    if (d >= hi_plus_1) return tmax;
    return (T)d;
}

// ------------------------------------------------------------------------------------ dtypes
// S: the storage type; FW: the type values are drawn in (inputs.draw: float64 for float64 arrays,
// float32 otherwise); CW: the type check_output's fast path compares in (float32 for float32,
// float16 and bfloat16, float64 otherwise). KIND: 0 float, 1 int, 2 bool.

struct T_float64 {
    typedef double S; typedef double FW; typedef double CW; enum { KIND = 0 };
    static __device__ double val(S s) { return s; }
    static __device__ CW cw(S s) { return s; }
    static __device__ u64 bits(S s) { return (u64)__double_as_longlong(s); }
    static __device__ S from_i64(i64 v) { return __ll2double_rn(v); }
    static __device__ S from_w(FW v) { return v; }
};
struct T_float32 {
    typedef float S; typedef float FW; typedef float CW; enum { KIND = 0 };
    static __device__ double val(S s) { return (double)s; }
    static __device__ CW cw(S s) { return s; }
    static __device__ u64 bits(S s) { return __float_as_uint(s); }
    static __device__ S from_i64(i64 v) { return __ll2float_rn(v); }
    static __device__ S from_w(FW v) { return v; }
};
struct T_float16 {
    typedef unsigned short S; typedef float FW; typedef float CW; enum { KIND = 0 };
    static __device__ float f(S s) { return __half2float(__ushort_as_half(s)); }
    static __device__ double val(S s) { return (double)f(s); }
    static __device__ CW cw(S s) { return f(s); }
    static __device__ u64 bits(S s) { return s; }
    static __device__ S from_i64(i64 v) { return __half_as_ushort(__float2half_rn(__ll2float_rn(v))); }
    static __device__ S from_w(FW v) { return __half_as_ushort(__float2half_rn(v)); }
};
struct T_bfloat16 {
    typedef unsigned short S; typedef float FW; typedef float CW; enum { KIND = 0 };
    static __device__ float f(S s) { return __uint_as_float(((unsigned)s) << 16); }
    static __device__ double val(S s) { return (double)f(s); }
    static __device__ CW cw(S s) { return f(s); }
    static __device__ u64 bits(S s) { return s; }
    static __device__ S from_i64(i64 v) { return f2bf(__ll2float_rn(v)); }
    static __device__ S from_w(FW v) { return f2bf(v); }
};

#define INT_TRAITS(NAME, T, U, TO_DOUBLE, LO, HIP1, TMIN, TMAX)                                   \
    struct NAME {                                                                                 \
        typedef T S; typedef float FW; typedef double CW; enum { KIND = 1 };                      \
        static __device__ double val(S s) { return TO_DOUBLE(s); }                                \
        static __device__ CW cw(S s) { return TO_DOUBLE(s); }                                     \
        static __device__ u64 bits(S s) { return (u64)(U)s; }                                     \
        static __device__ S from_i64(i64 v) { return (S)(U)(u64)v; }                              \
        static __device__ S from_w(FW v) { return saturate<S>((double)v, LO, HIP1, TMIN, TMAX); } \
    };

__device__ __forceinline__ double i2d(i64 v) { return __ll2double_rn(v); }
__device__ __forceinline__ double u2d(u64 v) { return __ull2double_rn(v); }

INT_TRAITS(T_int64, i64, u64, i2d, -9223372036854775808.0, 9223372036854775808.0, (i64)0x8000000000000000ULL, 0x7FFFFFFFFFFFFFFFLL)
INT_TRAITS(T_int32, int, unsigned, i2d, -2147483648.0, 2147483648.0, (int)0x80000000u, 0x7FFFFFFF)
INT_TRAITS(T_int16, short, unsigned short, i2d, -32768.0, 32768.0, (short)-32768, (short)32767)
INT_TRAITS(T_int8, signed char, unsigned char, i2d, -128.0, 128.0, (signed char)-128, (signed char)127)
INT_TRAITS(T_uint64, u64, u64, u2d, 0.0, 18446744073709551616.0, 0ULL, 0xFFFFFFFFFFFFFFFFULL)
INT_TRAITS(T_uint32, unsigned, unsigned, u2d, 0.0, 4294967296.0, 0u, 0xFFFFFFFFu)
INT_TRAITS(T_uint16, unsigned short, unsigned short, u2d, 0.0, 65536.0, (unsigned short)0, (unsigned short)65535)
INT_TRAITS(T_uint8, unsigned char, unsigned char, u2d, 0.0, 256.0, (unsigned char)0, (unsigned char)255)

struct T_bool {
    typedef unsigned char S; typedef float FW; typedef double CW; enum { KIND = 2 };
    static __device__ double val(S s) { return s != 0 ? 1.0 : 0.0; }
    static __device__ CW cw(S s) { return s != 0 ? 1.0 : 0.0; }
    static __device__ u64 bits(S s) { return s; }
    static __device__ S from_i64(i64 v) { return v != 0; }
    static __device__ S from_w(FW v) { return v != 0.0f; }
};

// ------------------------------------------------------------------------------------ fill

enum { D_UNIFORM, D_NORMAL, D_INTEGERS };

__device__ __forceinline__ float uniform_fw(u64 h, float a, float b) {
    float u = __fmul_rn(__ull2float_rn(h >> 40), 5.9604644775390625e-08f);                 // 2^-24
    return __fadd_rn(__fmul_rn(u, a), b);
}
__device__ __forceinline__ double uniform_fw(u64 h, double a, double b) {
    double u = __dmul_rn(__ull2double_rn(h >> 11), 1.1102230246251565e-16);               // 2^-53
    return __dadd_rn(__dmul_rn(u, a), b);
}
__device__ __forceinline__ float scale_normal(double z, float a, float b) {
    return __fadd_rn(__fmul_rn(__double2float_rn(z), a), b);
}
__device__ __forceinline__ double scale_normal(double z, double a, double b) {
    return __dadd_rn(__dmul_rn(z, a), b);
}
__device__ __forceinline__ float round_for_int(float v, int dist) { return dist == D_UNIFORM ? floorf(v) : rintf(v); }
__device__ __forceinline__ double round_for_int(double v, int dist) { return dist == D_UNIFORM ? floor(v) : rint(v); }

// a, b: uniform scale and offset, or normal std and mean (already rounded to FW by the host);
// lo, range: integers [lo, lo + range) (range 0: all 2^64 values).
template <class D, int DIST>
__device__ void fill_body(typename D::S* out, u64 n, u64 key, double a, double b, i64 lo, u64 range) {
    typedef typename D::FW FW;
    const FW fa = (FW)a, fb = (FW)b;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        u64 h = draw_bits(key, i, 0);
        if (DIST == D_INTEGERS) {
            out[i] = D::from_i64((i64)((u64)lo + (range ? h % range : h)));
            continue;
        }
        FW v = DIST == D_UNIFORM ? uniform_fw(h, fa, fb) : scale_normal(std_normal(h, draw_bits(key, i, 1)), fa, fb);
        if (D::KIND != 0) v = round_for_int(v, DIST);
        out[i] = D::from_w(v);
    }
}

template <class W>
__device__ void fill_pattern_body(W* out, u64 n, u64 pattern) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        out[i] = (W)pattern;
}

// ------------------------------------------------------------------------------------ reductions

__device__ __forceinline__ u64 warp_sum(u64 v) {
    for (int o = 16; o; o >>= 1) v += __shfl_down_sync(0xFFFFFFFFu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o; o >>= 1) v = __dadd_rn(v, __shfl_down_sync(0xFFFFFFFFu, v, o));
    return v;
}
__device__ __forceinline__ u64 warp_min(u64 v) {
    for (int o = 16; o; o >>= 1) v = min(v, (u64)__shfl_down_sync(0xFFFFFFFFu, v, o));
    return v;
}
__device__ __forceinline__ double warp_max(double v) {     // v >= 0, never NaN
    for (int o = 16; o; o >>= 1) v = fmax(v, __shfl_down_sync(0xFFFFFFFFu, v, o));
    return v;
}
// non-negative doubles order like their bit patterns
__device__ __forceinline__ void atomic_max_pos(u64* slot, double v) {
    if (v > 0.0) atomicMax(slot, (u64)__double_as_longlong(v));
}
__device__ __forceinline__ void add_count(u64* slot, u64 v) {
    if (v) atomicAdd(slot, v);
}

// ------------------------------------------------------------------------------------ compare
// check_output of compare.py, element by element, for both of its paths (and the relative check's
// sums and its largest grossly wrong reference value, gross):
//  the fast path (_all_close, in CW): fast_fail counts elements with a non-finite |ref| or not
//    |out - ref| <= atol + rtol |ref|; max_abs_w / max_rel_w are its error figures;
//  the full accounting (in double): unwritten, nan, inf, mismatched, the first bad index and
//    the error figures over pairs finite on both sides.
// gpu_ops.py picks the path check_output would have taken.

template <class D>
__device__ void compare_body(const typename D::S* out, const typename D::S* ref, u64* res, u64 n,
                             double atol, double rtol, u64 poison, float atol32, float rtol32, int poisonable) {
    typedef typename D::CW CW;
    const CW atol_w = sizeof(CW) == 4 ? (CW)atol32 : (CW)atol;
    const CW rtol_w = sizeof(CW) == 4 ? (CW)rtol32 : (CW)rtol;
    u64 c_unw = 0, c_nan = 0, c_inf = 0, c_mis = 0, c_ff = 0, c_fin = 0, first = ~0ULL;
    double mabs = 0.0, mrel = 0.0, mabs_w = 0.0, mrel_w = 0.0, ssd = 0.0, ssr = 0.0, gross = 0.0;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const typename D::S os = out[i], rs = ref[i];
        const bool unw = poisonable && D::bits(os) == poison && D::bits(rs) != poison;
        // fast path
        const CW ow = D::cw(os), rw = D::cw(rs);
        const CW dw = fabs(sub_rn(ow, rw)), aw = fabs(rw);
        const CW bw = add_rn(atol_w, mul_rn(rtol_w, aw));
        c_ff += (!isfinite(aw) || !(dw <= bw)) ? 1 : 0;
        if (!isnan(dw)) {
            mabs_w = fmax(mabs_w, (double)dw);
            const CW rl = div_rn(dw, aw);          // x/0 = inf, 0/0 = NaN (skipped, as np.fmax does)
            if (!isnan(rl)) mrel_w = fmax(mrel_w, (double)rl);
        }
        // full accounting
        const double o = D::val(os), r = D::val(rs);
        const bool on = isnan(o), rn = isnan(r), oi = isinf(o), ri = isinf(r);
        const bool same_sign = (signbit(o) != 0) == (signbit(r) != 0);
        c_unw += unw;
        c_nan += on && !rn && !unw;
        c_inf += oi && !(ri && same_sign);
        const bool both_finite = isfinite(o) && isfinite(r);
        bool ok_raw;
        if (both_finite) {
            const double diff = fabs(__dsub_rn(o, r)), ar = fabs(r);
            ok_raw = diff <= __dadd_rn(atol, __dmul_rn(rtol, ar));
            c_fin += 1;
            mabs = fmax(mabs, diff);
            const double rel = ar > 0.0 ? __ddiv_rn(diff, fmax(ar, 2.2250738585072014e-308)) : (diff > 0.0 ? F64(0x7FF0000000000000ULL) : 0.0);
            mrel = fmax(mrel, rel);
            ssd = __dadd_rn(ssd, __dmul_rn(diff, diff));
            ssr = __dadd_rn(ssr, __dmul_rn(r, r));
            if (diff > __dmul_rn(0.5, ar)) gross = fmax(gross, ar);     // compare.GROSS_REL
        } else {
            ok_raw = (rn && on) || (ri && oi && same_sign);     // NaN/Inf in the reference: matched exactly
        }
        c_mis += !(ok_raw || unw) && !(on && !rn) && !(oi && !ri);
        if ((unw || !ok_raw) && i < first) first = i;
    }
    c_unw = warp_sum(c_unw); c_nan = warp_sum(c_nan); c_inf = warp_sum(c_inf); c_mis = warp_sum(c_mis);
    c_ff = warp_sum(c_ff); c_fin = warp_sum(c_fin); first = warp_min(first);
    mabs = warp_max(mabs); mrel = warp_max(mrel); mabs_w = warp_max(mabs_w); mrel_w = warp_max(mrel_w);
    ssd = warp_sum(ssd); ssr = warp_sum(ssr); gross = warp_max(gross);
    if ((threadIdx.x & 31) == 0) {
        add_count(res + R_UNWRITTEN, c_unw); add_count(res + R_NAN, c_nan); add_count(res + R_INF, c_inf);
        add_count(res + R_MISMATCHED, c_mis); add_count(res + R_FAST_FAIL, c_ff); add_count(res + R_FINITE_PAIRS, c_fin);
        if (first != ~0ULL) atomicMin(res + R_FIRST_BAD, first);
        atomic_max_pos(res + R_MAX_ABS, mabs); atomic_max_pos(res + R_MAX_REL, mrel);
        atomic_max_pos(res + R_MAX_ABS_W, mabs_w); atomic_max_pos(res + R_MAX_REL_W, mrel_w);
        if (ssd != 0.0) atomicAdd((double*)(res + R_SUM_SQ_DIFF), ssd);
        if (ssr != 0.0) atomicAdd((double*)(res + R_SUM_SQ_REF), ssr);
        atomic_max_pos(res + R_GROSS_REF, gross);
    }
}

// The first index whose error equals target: mode 0 the fast path's |out - ref| (in CW),
// mode 1 the full accounting's (in double, 0 where either side is not finite).
template <class D>
__device__ void argmax_body(const typename D::S* out, const typename D::S* ref, u64* res, u64 n, double target, int mode) {
    u64 best = ~0ULL;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        double d;
        if (mode == 0) {
            d = (double)fabs(sub_rn(D::cw(out[i]), D::cw(ref[i])));
        } else {
            const double o = D::val(out[i]), r = D::val(ref[i]);
            d = isfinite(o) && isfinite(r) ? fabs(__dsub_rn(o, r)) : 0.0;
        }
        if (d == target) { best = i; break; }
    }
    best = warp_min(best);
    if ((threadIdx.x & 31) == 0 && best != ~0ULL) atomicMin(res + R_ARGMAX, best);
}

// ------------------------------------------------------------------------------------ entry points

extern "C" __global__ void __launch_bounds__(BLOCK) reset_result(u64* res) {
    if (threadIdx.x < R_WORDS)
        res[threadIdx.x] = (threadIdx.x == R_FIRST_BAD || threadIdx.x == R_ARGMAX) ? ~0ULL : 0ULL;
}

// how many bytes differ between a and b
extern "C" __global__ void __launch_bounds__(BLOCK) count_diff_bytes(const unsigned char* a, const unsigned char* b, u64* res, u64 nbytes) {
    const u64 tid = blockIdx.x * (u64)blockDim.x + threadIdx.x, stride = (u64)gridDim.x * blockDim.x;
    u64 count = 0, start = 0;
    if ((((u64)a | (u64)b) & 7) == 0) {
        const u64 words = nbytes >> 3;
        const u64 *aw = (const u64*)a, *bw = (const u64*)b;
        for (u64 i = tid; i < words; i += stride) {
            const u64 x = aw[i] ^ bw[i];
            if (x) count += __popcll((((x & 0x7F7F7F7F7F7F7F7FULL) + 0x7F7F7F7F7F7F7F7FULL) | x) & 0x8080808080808080ULL);
        }
        start = words << 3;
    }
    for (u64 i = start + tid; i < nbytes; i += stride) count += a[i] != b[i];
    count = warp_sum(count);
    if ((threadIdx.x & 31) == 0) add_count(res + R_DIFF_BYTES, count);
}

#define PATTERN_KERNEL(W, T)                                                                            \
    extern "C" __global__ void __launch_bounds__(BLOCK) fill_pattern_##W(T* out, u64 n, u64 pattern) { \
        fill_pattern_body<T>(out, n, pattern);                                                          \
    }
PATTERN_KERNEL(1, unsigned char)
PATTERN_KERNEL(2, unsigned short)
PATTERN_KERNEL(4, unsigned)
PATTERN_KERNEL(8, u64)

#define DTYPE_KERNELS(NAME, D)                                                                              \
    extern "C" __global__ void __launch_bounds__(BLOCK) fill_uniform_##NAME(D::S* out, u64 n, u64 key, double a, double b, i64 lo, u64 range) { \
        fill_body<D, D_UNIFORM>(out, n, key, a, b, lo, range);                                              \
    }                                                                                                       \
    extern "C" __global__ void __launch_bounds__(BLOCK) fill_normal_##NAME(D::S* out, u64 n, u64 key, double a, double b, i64 lo, u64 range) { \
        fill_body<D, D_NORMAL>(out, n, key, a, b, lo, range);                                               \
    }                                                                                                       \
    extern "C" __global__ void __launch_bounds__(BLOCK) fill_integers_##NAME(D::S* out, u64 n, u64 key, double a, double b, i64 lo, u64 range) { \
        fill_body<D, D_INTEGERS>(out, n, key, a, b, lo, range);                                             \
    }                                                                                                       \
    extern "C" __global__ void __launch_bounds__(BLOCK) compare_##NAME(const D::S* out, const D::S* ref, u64* res, u64 n, \
            double atol, double rtol, u64 poison, float atol32, float rtol32, int poisonable) {             \
        compare_body<D>(out, ref, res, n, atol, rtol, poison, atol32, rtol32, poisonable);                  \
    }                                                                                                       \
    extern "C" __global__ void __launch_bounds__(BLOCK) argmax_##NAME(const D::S* out, const D::S* ref, u64* res, u64 n, \
            double target, int mode) {                                                                      \
        argmax_body<D>(out, ref, res, n, target, mode);                                                     \
    }

DTYPE_KERNELS(float64, T_float64)
DTYPE_KERNELS(float32, T_float32)
DTYPE_KERNELS(float16, T_float16)
DTYPE_KERNELS(bfloat16, T_bfloat16)
DTYPE_KERNELS(int64, T_int64)
DTYPE_KERNELS(int32, T_int32)
DTYPE_KERNELS(int16, T_int16)
DTYPE_KERNELS(int8, T_int8)
DTYPE_KERNELS(uint64, T_uint64)
DTYPE_KERNELS(uint32, T_uint32)
DTYPE_KERNELS(uint16, T_uint16)
DTYPE_KERNELS(uint8, T_uint8)
DTYPE_KERNELS(bool, T_bool)
