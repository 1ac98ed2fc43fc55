"""RMSNorm parity probe (GPU, one call): column-wise RMSNorm variants over x[B][F][S]
(reduce over F) against torch.compile, timed alternately in one process, each verified first against
a float64 reference on fresh normal inputs; the Triton kernel inductor generated is printed.

    python3 bench/probes/rmsnorm_columns.py [--ncu]      # on the GPU machine
"""
import argparse
import glob
import statistics
import sys

B, F, S, EPS = 16, 64, 65536, 1e-5

SRC = r"""
template <int N> struct VecT { typedef float2 T; };
template <> struct VecT<4> { typedef float4 T; };
// one thread per column, the F values kept in registers
template <int FM>
__device__ void col1(const float *__restrict__ x, float *__restrict__ y, int B, int F, int S, float eps) {
    long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= (long long)B * S) return;
    int b = c / S, s = c % S;
    const float *xc = x + (size_t)b * F * S + s;
    float *yc = y + (size_t)b * F * S + s;
    float v[FM];
    float ss = 0.f;
#pragma unroll
    for (int f = 0; f < FM; f++) { v[f] = f < F ? xc[(size_t)f * S] : 0.f; ss += v[f] * v[f]; }
    float r = rsqrtf(ss / F + eps);
#pragma unroll
    for (int f = 0; f < FM; f++) if (f < F) yc[(size_t)f * S] = v[f] * r;
}
extern "C" __global__ void col1_64(const float *x, float *y, int B, int F, int S, float eps) { col1<64>(x, y, B, F, S, eps); }

// VEC adjacent columns a thread (float4 / float2), F split over FS threads of the block (block: 32*W lanes
// over column groups x FS), partial sums combined through shared memory; values kept in registers
template <int VEC, int FS, int FM, int CG>
__device__ void colv(const float *__restrict__ x, float *__restrict__ y, int B, int F, int S, float eps) {
    typedef typename VecT<VEC>::T V;
    __shared__ float part[FS][CG * VEC];
    int g = threadIdx.x % CG, fs = threadIdx.x / CG;
    long long col0 = ((long long)blockIdx.x * CG + g) * VEC;      // first column (flattened b*S + s)
    bool ok = col0 < (long long)B * S;
    int b = ok ? col0 / S : 0, s = ok ? col0 % S : 0;
    const float *xc = x + (size_t)b * F * S + s;
    float *yc = y + (size_t)b * F * S + s;
    V v[FM];
    float acc[VEC];
#pragma unroll
    for (int i = 0; i < VEC; i++) acc[i] = 0.f;
#pragma unroll
    for (int i = 0; i < FM; i++) {
        int f = fs * FM + i;
        if (ok && f < F) v[i] = *(const V *)(xc + (size_t)f * S);
        else { float *p = (float *)&v[i]; for (int q = 0; q < VEC; q++) p[q] = 0.f; }
        const float *p = (const float *)&v[i];
#pragma unroll
        for (int q = 0; q < VEC; q++) acc[q] += p[q] * p[q];
    }
#pragma unroll
    for (int q = 0; q < VEC; q++) part[fs][g * VEC + q] = acc[q];
    __syncthreads();
    float r[VEC];
#pragma unroll
    for (int q = 0; q < VEC; q++) {
        float t = 0.f;
#pragma unroll
        for (int k = 0; k < FS; k++) t += part[k][g * VEC + q];
        r[q] = rsqrtf(t / F + eps);
    }
    if (!ok) return;
#pragma unroll
    for (int i = 0; i < FM; i++) {
        int f = fs * FM + i;
        if (f < F) {
            V o; float *po = (float *)&o; const float *p = (const float *)&v[i];
#pragma unroll
            for (int q = 0; q < VEC; q++) po[q] = p[q] * r[q];
            *(V *)(yc + (size_t)f * S) = o;
        }
    }
}
extern "C" __global__ void __launch_bounds__(256) v4_fs4(const float *x, float *y, int B, int F, int S, float eps) { colv<4, 4, 16, 64>(x, y, B, F, S, eps); }
extern "C" __global__ void __launch_bounds__(256) v4_fs8(const float *x, float *y, int B, int F, int S, float eps) { colv<4, 8, 8, 32>(x, y, B, F, S, eps); }
extern "C" __global__ void __launch_bounds__(256) v4_fs2(const float *x, float *y, int B, int F, int S, float eps) { colv<4, 2, 32, 128>(x, y, B, F, S, eps); }
extern "C" __global__ void __launch_bounds__(512) v4_fs8_512(const float *x, float *y, int B, int F, int S, float eps) { colv<4, 8, 8, 64>(x, y, B, F, S, eps); }
extern "C" __global__ void __launch_bounds__(256) v2_fs4(const float *x, float *y, int B, int F, int S, float eps) { colv<2, 4, 16, 64>(x, y, B, F, S, eps); }
extern "C" __global__ void __launch_bounds__(256) v2_fs2(const float *x, float *y, int B, int F, int S, float eps) { colv<2, 2, 32, 128>(x, y, B, F, S, eps); }
extern "C" __global__ void __launch_bounds__(128) v4_fs4_128(const float *x, float *y, int B, int F, int S, float eps) { colv<4, 4, 16, 32>(x, y, B, F, S, eps); }
"""
# name -> (threads, columns a block)
VARIANTS = {"col1_64@256": ("col1_64", 256, 256), "col1_64@128": ("col1_64", 128, 128), "col1_64@512": ("col1_64", 512, 512),
            "v4_fs4": ("v4_fs4", 256, 256), "v4_fs8": ("v4_fs8", 256, 128), "v4_fs2": ("v4_fs2", 256, 512),
            "v4_fs8_512": ("v4_fs8_512", 512, 256), "v2_fs4": ("v2_fs4", 256, 128), "v2_fs2": ("v2_fs2", 256, 256),
            "v4_fs4_128": ("v4_fs4_128", 128, 128)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ncu", action="store_true", help="run each variant once (for ncu) instead of timing them")
    ap.parse_args()
    import cupy as cp
    import torch
    torch.manual_seed(0)
    mod = cp.RawModule(code=SRC, options=("-std=c++17", "--use_fast_math"), name_expressions=None)
    comp = torch.compile(lambda x, eps: x / torch.sqrt(x.pow(2).mean(dim=1, keepdim=True) + eps), dynamic=False)
    xs = [torch.randn(B, F, S, device="cuda") for _ in range(2)]
    y = torch.empty_like(xs[0])

    def launcher(kname, threads, cols):  # noqa: the variants take (x, y, B, F, S, eps)
        k = mod.get_function(kname)
        grid = ((B * S + cols - 1) // cols,)

        def go(x):
            k(grid, (threads,), (cp.from_dlpack(x), cp.from_dlpack(y), cp.int32(B), cp.int32(F), cp.int32(S), cp.float32(EPS)))
        return go

    fns = {n: launcher(*v) for n, v in VARIANTS.items()}
    fns["torch.compile"] = lambda x: comp(x, EPS)
    for n, f in fns.items():            # verify on fresh inputs
        x = torch.randn(B, F, S, device="cuda")
        ref = (x.double() / torch.sqrt(x.double().pow(2).mean(dim=1, keepdim=True) + EPS))
        y.fill_(float("nan"))
        out = f(x)
        torch.cuda.synchronize()
        got = out if out is not None else y
        err = ((got.double() - ref).norm() / ref.norm()).item()
        print(f"verify {n}: rel err {err:.2e}", flush=True)
        assert err < 1e-5, n
    if "--ncu" in sys.argv:
        for f in fns.values():
            f(xs[0])
        torch.cuda.synchronize()
        return
    times = {n: [] for n in fns}
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    for f in fns.values():
        for _ in range(5):
            f(xs[0])
    for rnd in range(30):
        for n, f in fns.items():
            x = xs[rnd % 2]
            ev[0].record()
            f(x)
            ev[1].record()
            ev[1].synchronize()
            times[n].append(ev[0].elapsed_time(ev[1]))
    byts = 8 * B * F * S
    base = statistics.median(times["torch.compile"])
    print(f"{'variant':16} {'median ms':>10} {'GB/s':>8} {'vs torch.compile':>17}")
    for n, t in sorted(times.items(), key=lambda kv: statistics.median(kv[1])):
        m = statistics.median(t)
        print(f"{n:16} {m:10.4f} {byts / m / 1e6:8.0f} {base / m:16.3f}x")
    for p in glob.glob("/tmp/torchinductor_*/**/*.py", recursive=True):
        t = open(p).read()
        if "@triton.jit" in t and "rsqrt" in t or ("sqrt" in t and "@triton.jit" in t and "tmp" in t):
            print("=== inductor kernel", p)
            print(t[t.find("@triton"):][:3500])
            break


if __name__ == "__main__":
    main()
