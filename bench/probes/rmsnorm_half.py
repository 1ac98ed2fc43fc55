"""A probe of the fp16 row gap (GPU, one call): the fp16 RMSNorm
(bench/templates/operations/rmsnorm_half, 16384 rows of 4096 halves, a weight) as row_reduce points
and hand-written variants against torch.compile, each verified first against a float64 reference,
then timed alternately in one process (CUDA events around each launch, medians, inputs alternating
between two fresh buffers); with --ncu each runs once for Nsight Compute.

    python3 bench/probes/rmsnorm_half.py            # on the GPU machine
    ncu --csv --metrics ... python3 bench/probes/rmsnorm_half.py --ncu
"""
import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # bench/: common.py
from common import BENCH  # noqa: E402
T, H, EPS = 16384, 4096, 1e-6

HAND = r"""
#include <cuda_fp16.h>
// one row a block of NT threads, IT 16-byte vectors (8 halves) a thread; hidden == NT * IT * 8
// W_EARLY: the weight loaded with the row, before the reduction; else after it
// H2: conversions and products as half2 pairs -> float2; else one half at a time
template <int NT, int IT, bool W_EARLY, bool H2>
__device__ __forceinline__ void rms(const __half *__restrict__ x, const __half *__restrict__ w, __half *__restrict__ y,
                                    int hidden, float eps) {
    const size_t row = blockIdx.x;
    const uint4 *xr = reinterpret_cast<const uint4 *>(x + row * hidden);
    const uint4 *wr = reinterpret_cast<const uint4 *>(w);
    uint4 *yr = reinterpret_cast<uint4 *>(y + row * hidden);
    uint4 v[IT], wv[IT];
#pragma unroll
    for (int i = 0; i < IT; i++) v[i] = xr[i * NT + threadIdx.x];
    if (W_EARLY) {
#pragma unroll
        for (int i = 0; i < IT; i++) wv[i] = wr[i * NT + threadIdx.x];
    }
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < IT; i++) {
        const __half2 *h = reinterpret_cast<const __half2 *>(&v[i]);
#pragma unroll
        for (int q = 0; q < 4; q++) {
            if (H2) { float2 f = __half22float2(h[q]); ss += f.x * f.x + f.y * f.y; }
            else { float a = __low2float(h[q]), b = __high2float(h[q]); ss += a * a; ss += b * b; }
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    __shared__ float part[NT / 32];
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = ss;
    __syncthreads();
    ss = 0.f;
#pragma unroll
    for (int k = 0; k < NT / 32; k++) ss += part[k];
    const float r = rsqrtf(ss / hidden + eps);
    if (!W_EARLY) {
#pragma unroll
        for (int i = 0; i < IT; i++) wv[i] = wr[i * NT + threadIdx.x];
    }
#pragma unroll
    for (int i = 0; i < IT; i++) {
        const __half2 *h = reinterpret_cast<const __half2 *>(&v[i]);
        const __half2 *g = reinterpret_cast<const __half2 *>(&wv[i]);
        uint4 o;
        __half2 *oh = reinterpret_cast<__half2 *>(&o);
#pragma unroll
        for (int q = 0; q < 4; q++) {
            float2 f = __half22float2(h[q]), gw = __half22float2(g[q]);
            oh[q] = __floats2half2_rn(f.x * r * gw.x, f.y * r * gw.y);
        }
        yr[i * NT + threadIdx.x] = o;
    }
}
extern "C" __global__ void __launch_bounds__(256) h256_late(const __half *x, const __half *w, __half *y, int t, int h, float e) { rms<256, 2, false, true>(x, w, y, h, e); }
extern "C" __global__ void __launch_bounds__(256) h256_early(const __half *x, const __half *w, __half *y, int t, int h, float e) { rms<256, 2, true, true>(x, w, y, h, e); }
extern "C" __global__ void __launch_bounds__(256) h256_late_scalar(const __half *x, const __half *w, __half *y, int t, int h, float e) { rms<256, 2, false, false>(x, w, y, h, e); }
extern "C" __global__ void __launch_bounds__(512) h512_late(const __half *x, const __half *w, __half *y, int t, int h, float e) { rms<512, 1, false, true>(x, w, y, h, e); }
extern "C" __global__ void __launch_bounds__(128) h128_late(const __half *x, const __half *w, __half *y, int t, int h, float e) { rms<128, 4, false, true>(x, w, y, h, e); }
"""
HAND_THREADS = {"h256_late": 256, "h256_early": 256, "h256_late_scalar": 256, "h512_late": 512, "h128_late": 128}
POINTS = {   # name -> row_reduce point
    "t256_v1_i16": dict(OPTIML_THREADS=256, OPTIML_ROWS=1, OPTIML_VEC=1, OPTIML_ITEMS=16),
    "t256_v8_i2": dict(OPTIML_THREADS=256, OPTIML_ROWS=1, OPTIML_VEC=8, OPTIML_ITEMS=2),
    "t512_v8_i1": dict(OPTIML_THREADS=512, OPTIML_ROWS=1, OPTIML_VEC=8, OPTIML_ITEMS=1),
    "t128_v8_i4": dict(OPTIML_THREADS=128, OPTIML_ROWS=1, OPTIML_VEC=8, OPTIML_ITEMS=4),
}


def template_sources():
    from optiml.edits.templates.rowwise import ROW_TEMPLATES, instantiate_rowwise, recognize_rowwise
    from optiml.spec import load_spec
    kernel = BENCH / "templates" / "operations" / "rmsnorm_half.cu"
    src = kernel.read_text()
    spec = load_spec(kernel.with_suffix(".toml"), kernel, kernel_source=src)
    op, why = recognize_rowwise(src, spec.entry, spec)
    assert op is not None, why
    t = next(t for t in ROW_TEMPLATES if not t.strided)
    out = {}
    for name, p in POINTS.items():
        code = instantiate_rowwise(src, op, dict(t.start_for(op), **p), t.name)
        code = code.replace("__global__ void __launch_bounds__", 'extern "C" __global__ void __launch_bounds__', 1)
        out[name] = (code.replace("rmsnorm_half(", f"{name}(", 1), p["OPTIML_THREADS"] * p["OPTIML_ROWS"], p["OPTIML_ROWS"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ncu", action="store_true", help="run each variant once (for ncu) instead of timing them")
    ap.add_argument("--summarize", metavar="CSV", help="print ncu's CSV (--csv --page details) a column a kernel")
    args = ap.parse_args()
    if args.summarize:
        return summarize(args.summarize)
    import cupy as cp
    import torch
    torch.manual_seed(0)
    comp = torch.compile(lambda x, w, eps: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
                                            * w.float()).half(), dynamic=False)
    hand = cp.RawModule(code=HAND, options=("-std=c++17",))
    fns = {}
    y = torch.empty(T, H, device="cuda", dtype=torch.half)
    w = (1 + 0.2 * torch.randn(H, device="cuda")).half()

    def launcher(k, threads, rows):
        def go(x):
            k(((T + rows - 1) // rows,), (threads,), (cp.from_dlpack(x), cp.from_dlpack(w), cp.from_dlpack(y), cp.int32(T),
                                                       cp.int32(H), cp.float32(EPS)))
        return go
    for n, threads in HAND_THREADS.items():
        fns[n] = launcher(hand.get_function(n), threads, 1)
    for n, (code, threads, rows) in template_sources().items():
        m = cp.RawModule(code=code, options=("-std=c++17",))
        fns[n] = launcher(m.get_function(n), threads, rows)
    fns["torch.compile"] = lambda x: comp(x, w, EPS)
    for n, f in ([] if args.ncu else fns.items()):            # verify on fresh inputs
        x = torch.randn(T, H, device="cuda").half()
        ref = (x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + EPS) * w.double())
        y.fill_(float("nan"))
        out = f(x)
        torch.cuda.synchronize()
        got = out if out is not None else y
        err = (got.double() - ref).abs().max().item()
        print(f"verify {n}: max abs err {err:.2e}", flush=True)
        assert err < 2e-2, n
    xs = [torch.randn(T, H, device="cuda").half() for _ in range(2)]
    if args.ncu:
        for f in fns.values():
            f(xs[0])
        torch.cuda.synchronize()
        return
    times = {n: [] for n in fns}
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    for f in fns.values():
        for _ in range(5):
            f(xs[0])
    for rnd in range(60):
        for n, f in fns.items():
            ev[0].record()
            f(xs[rnd % 2])
            ev[1].record()
            ev[1].synchronize()
            times[n].append(ev[0].elapsed_time(ev[1]))
    byts = 2 * 2 * T * H
    base = statistics.median(times["torch.compile"])
    print(f"{'variant':18} {'median ms':>10} {'GB/s':>8} {'vs torch.compile':>17}")
    for n, t in sorted(times.items(), key=lambda kv: statistics.median(kv[1])):
        m = statistics.median(t)
        print(f"{n:18} {m:10.4f} {byts / m / 1e6:8.0f} {base / m:16.3f}x")
    import glob
    for p in glob.glob("/tmp/torchinductor_*/**/*.py", recursive=True):
        t = open(p).read()
        if "@triton.jit" in t and "rsqrt" in t:
            print("=== inductor kernel", p)
            print(t[t.find("@triton"):][:4000])
            break


def summarize(path):
    """The last profile of each kernel, a column each, the metrics ncu printed as rows."""
    import io

    import pandas as pd
    text = Path(path).read_text()
    df = pd.read_csv(io.StringIO(text[text.index('"ID"'):]))
    df = df[df["Metric Name"].notna()]
    last = df.groupby("Kernel Name")["ID"].max()
    df = df[df["ID"].isin(set(last))]
    df["kernel"] = df["Kernel Name"].str.slice(0, 22)
    table = df.pivot_table(index=["Section Name", "Metric Name", "Metric Unit"], columns="kernel", values="Metric Value",
                           aggfunc="last")
    with pd.option_context("display.max_rows", 400, "display.max_columns", 20, "display.width", 250):
        print(table.to_string())


if __name__ == "__main__":
    main()
