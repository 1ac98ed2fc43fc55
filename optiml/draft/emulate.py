"""The CPU emulation: a CUDA kernel compiled as C++ with a few definitions for CUDA's names and run on
the CPU. Never a GPU result: it tells whether a draft's launch and arguments make the kernel compute
what the task computes, at small sizes, on a machine without a GPU.

A kernel whose threads never cooperate runs every thread of the grid in turn (:data:`SHIM`). One that
cooperates (barriers, shuffles) runs each block's threads together (:data:`THREADED`): as fibers on
one OS thread in the plain build (each runs until it waits at a barrier or returns, then the next;
switched without a system call, so a launch of millions of threads takes about a second), as real
threads under AddressSanitizer. ``__syncthreads`` is a barrier of the block, each warp of 32
consecutive threads a barrier of its own, shuffles an exchange through the warp's slots between two of
its barriers, atomics under one lock; a thread that returns leaves its barriers (as a GPU's exited
threads do); blocks run one after another. Shared memory starts each block as NaN, as garbage would
on a GPU. Dynamic shared memory is a heap block of the launch's size, so AddressSanitizer sees a
launch that gives too little.

:class:`HostKernel` compiles a kernel once; each :meth:`HostKernel.run` gives the launch, the scalars
and the arrays at run time and returns the arrays afterwards, or the sentence why it did not run.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..source import dtype_of_c_type

GXX = shutil.which("g++")

_COMMON = r"""
#include <cmath>
#include <cstdint>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cfloat>
#include <climits>
#include <algorithm>
#include <mutex>
struct dim3 { unsigned x = 1, y = 1, z = 1; };
static const int warpSize = 32;
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __restrict__
#define __shared__ static
#define __constant__ static
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct float3 { float x, y, z; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) int2 { int x, y; };
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline float3 make_float3(float x, float y, float z) { return float3{x, y, z}; }
#define __align__(n) __attribute__((aligned(n)))
template <typename T> static inline T __ldg(const T *p) { return *p; }
static inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
static inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __saturatef(float a) { return a < 0.f ? 0.f : a > 1.f ? 1.f : a; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline int __float2int_rn(float a) { return (int)nearbyintf(a); }
static inline float __int_as_float(int a) { float f; memcpy(&f, &a, 4); return f; }
static inline int __float_as_int(float a) { int i; memcpy(&i, &a, 4); return i; }
static inline float __uint_as_float(unsigned a) { float f; memcpy(&f, &a, 4); return f; }
static inline unsigned __float_as_uint(float a) { unsigned i; memcpy(&i, &a, 4); return i; }
#define __expf expf
#define __logf logf
#define __log2f log2f
#define __sinf sinf
#define __cosf cosf
#define __tanf tanf
#define __powf powf
#define __exp10f exp10f
using std::max;
using std::min;
static inline void __threadfence() {}
static inline void __threadfence_block() {}
static char *optiml_host_dyn;                  // this block's dynamic shared memory
// shared memory starts each block as NaN (0xff bytes), as it holds garbage on a GPU: a kernel that reads
// what no thread of the block wrote shows it. Each __shared__ array is filled once a block, by the
// first of its threads to reach the declaration
static unsigned long long optiml_host_block_no;
static std::mutex optiml_host_poisoning;
template <typename T> static void optiml_host_poison(T &arr, unsigned long long &stamp) {
    std::lock_guard<std::mutex> g(optiml_host_poisoning);
    if (stamp != optiml_host_block_no) { memset((void *)&arr, 0xff, sizeof(arr)); stamp = optiml_host_block_no; }
}
static void optiml_host_block_start(size_t dyn) {      // a new block: its dynamic shared memory, as NaN
    optiml_host_dyn = (char *)malloc(dyn ? dyn : 1);
    memset(optiml_host_dyn, 0xff, dyn ? dyn : 1);
    optiml_host_block_no++;
}
"""

SHIM = _COMMON + r"""
static dim3 threadIdx, blockIdx, blockDim, gridDim;
static inline void __syncthreads() {}
static inline void __syncwarp(unsigned = 0xffffffffu) {}
template <typename T, typename U> static inline T atomicAdd(T *p, U v) { T o = *p; *p = o + (T)v; return o; }
template <typename T, typename U> static inline T atomicSub(T *p, U v) { T o = *p; *p = o - (T)v; return o; }
template <typename T, typename U> static inline T atomicMax(T *p, U v) { T o = *p; *p = std::max(o, (T)v); return o; }
template <typename T, typename U> static inline T atomicMin(T *p, U v) { T o = *p; *p = std::min(o, (T)v); return o; }
template <typename T, typename U> static inline T atomicExch(T *p, U v) { T o = *p; *p = (T)v; return o; }
template <typename T> static inline T atomicCAS(T *p, T c, T v) { T o = *p; if (o == c) *p = v; return o; }
template <typename F> static void optiml_host_launch(F kernel, size_t dyn) {
    for (unsigned bz = 0; bz < gridDim.z; bz++) for (unsigned by = 0; by < gridDim.y; by++)
    for (unsigned bx = 0; bx < gridDim.x; bx++) {
        optiml_host_block_start(dyn);
        for (unsigned tz = 0; tz < blockDim.z; tz++) for (unsigned ty = 0; ty < blockDim.y; ty++)
        for (unsigned tx = 0; tx < blockDim.x; tx++) {
            blockIdx.x = bx; blockIdx.y = by; blockIdx.z = bz; threadIdx.x = tx; threadIdx.y = ty; threadIdx.z = tz;
            kernel();
        }
        free(optiml_host_dyn);
    }
}
"""

THREADED = _COMMON + r"""
#include <barrier>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
#ifdef OPTIML_FIBERS
// a block's threads as fibers on one OS thread (ucontext): each runs until it waits at a barrier or
// exits, then the next; a barrier opens when every thread still running has arrived
// (made once a thread index by makecontext, then switched by _setjmp/_longjmp, no system call; a
// fiber that finished its block waits for the next one, so blocks cost no new contexts)
#include <setjmp.h>
#include <ucontext.h>
static dim3 threadIdx, blockIdx;                 // the running fiber's, set at each switch
struct optiml_barrier_t;
struct optiml_fiber { ucontext_t ctx; jmp_buf jb; bool started = false; optiml_barrier_t *bar = nullptr;
                      unsigned gen = 0; bool done = false; };
static std::vector<optiml_fiber> optiml_fibers;
static ucontext_t optiml_sched;
static jmp_buf optiml_sched_jb;
static int optiml_cur;
static void optiml_yield() { if (!_setjmp(optiml_fibers[optiml_cur].jb)) _longjmp(optiml_sched_jb, 1); }
struct optiml_barrier_t {
    int expected, arrived = 0;
    unsigned gen = 0;
    explicit optiml_barrier_t(int n) : expected(n) {}
    void arrive_and_wait() {
        if (++arrived == expected) { arrived = 0; gen++; return; }
        optiml_fiber &f = optiml_fibers[optiml_cur];
        f.bar = this; f.gen = gen;
        optiml_yield();
    }
    void arrive_and_drop() { expected--; if (arrived > 0 && arrived == expected) { arrived = 0; gen++; } }
};
#else
typedef std::barrier<> optiml_barrier_t;
static thread_local dim3 threadIdx, blockIdx;
#endif
static dim3 blockDim, gridDim;
struct optiml_host_warp { std::unique_ptr<optiml_barrier_t> bar; unsigned long long slot[32]; };
static std::unique_ptr<optiml_barrier_t> optiml_host_block;
static std::vector<optiml_host_warp> optiml_host_warps;
static std::mutex optiml_host_atomics;
static void optiml_host_barriers(int n) {              // a new block's: the block's and each warp's
    optiml_host_block = std::make_unique<optiml_barrier_t>(n);
    optiml_host_warps = std::vector<optiml_host_warp>((n + 31) / 32);
    for (int w = 0; w < (n + 31) / 32; w++)
        optiml_host_warps[w].bar = std::make_unique<optiml_barrier_t>(std::min(32, n - 32 * w));
}
static inline int optiml_host_tid() { return threadIdx.x + (threadIdx.y + threadIdx.z * blockDim.y) * blockDim.x; }
static inline void __syncthreads() { optiml_host_block->arrive_and_wait(); }
static inline int __syncthreads_or(int p) { static int acc; __syncthreads(); if (optiml_host_tid() == 0) acc = 0; __syncthreads();
    { std::lock_guard<std::mutex> g(optiml_host_atomics); acc |= p; } __syncthreads(); int r = acc; __syncthreads(); return r; }
static inline void __syncwarp(unsigned = 0xffffffffu) { optiml_host_warps[optiml_host_tid() / 32].bar->arrive_and_wait(); }
template <typename T> static T optiml_host_from(T v, int lane) {
    optiml_host_warp &w = optiml_host_warps[optiml_host_tid() / 32];
    static_assert(sizeof(T) <= 8, "a shuffle of more than 8 bytes");
    std::memcpy(&w.slot[optiml_host_tid() % 32], &v, sizeof(T));
    w.bar->arrive_and_wait();
    T out;
    std::memcpy(&out, &w.slot[lane], sizeof(T));
    w.bar->arrive_and_wait();
    return out;
}
template <typename T> static T __shfl_xor_sync(unsigned, T v, int m, int width = 32) {
    int lane = optiml_host_tid() % 32, src = lane ^ m;
    return optiml_host_from(v, (src / width == lane / width) ? src : lane);
}
template <typename T> static T __shfl_down_sync(unsigned, T v, unsigned d, int width = 32) {
    int lane = optiml_host_tid() % 32, src = lane + (int)d;
    return optiml_host_from(v, (src / width == lane / width) ? src : lane);
}
template <typename T> static T __shfl_up_sync(unsigned, T v, unsigned d, int width = 32) {
    int lane = optiml_host_tid() % 32, src = lane - (int)d;
    return optiml_host_from(v, (src >= 0 && src / width == lane / width) ? src : lane);
}
template <typename T> static T __shfl_sync(unsigned, T v, int src, int width = 32) {
    int lane = optiml_host_tid() % 32;
    return optiml_host_from(v, (lane / width) * width + src % width);
}
#define OPTIML_LOCKED(body) { std::lock_guard<std::mutex> g(optiml_host_atomics); body }
template <typename T, typename U> static T atomicAdd(T *p, U v) { T o; OPTIML_LOCKED(o = *p; *p = o + (T)v;) return o; }
template <typename T, typename U> static T atomicSub(T *p, U v) { T o; OPTIML_LOCKED(o = *p; *p = o - (T)v;) return o; }
template <typename T, typename U> static T atomicMax(T *p, U v) { T o; OPTIML_LOCKED(o = *p; *p = std::max(o, (T)v);) return o; }
template <typename T, typename U> static T atomicMin(T *p, U v) { T o; OPTIML_LOCKED(o = *p; *p = std::min(o, (T)v);) return o; }
template <typename T, typename U> static T atomicExch(T *p, U v) { T o; OPTIML_LOCKED(o = *p; *p = (T)v;) return o; }
template <typename T> static T atomicCAS(T *p, T c, T v) { T o; OPTIML_LOCKED(o = *p; if (o == c) *p = v;) return o; }
#ifdef OPTIML_FIBERS
static std::function<void()> optiml_fiber_kernel;
static void optiml_fiber_entry(int t) {
    for (;;) {                                             // one block after another
        optiml_fiber_kernel();
        optiml_host_warps[t / 32].bar->arrive_and_drop();  // an exited thread leaves its barriers
        optiml_host_block->arrive_and_drop();
        optiml_fibers[t].done = true;
        optiml_yield();
    }
}
template <typename F> static void optiml_host_launch(F kernel, size_t dyn = 0) {
    const int n = blockDim.x * blockDim.y * blockDim.z;
    const size_t stack = 256 << 10;
    static std::vector<std::unique_ptr<char[]>> stacks;
    while ((int)stacks.size() < n) stacks.emplace_back(new char[stack]);
    optiml_fiber_kernel = kernel;
    optiml_fibers = std::vector<optiml_fiber>(n);
    for (int t = 0; t < n; t++) {
        getcontext(&optiml_fibers[t].ctx);
        optiml_fibers[t].ctx.uc_stack.ss_sp = stacks[t].get();
        optiml_fibers[t].ctx.uc_stack.ss_size = stack;
        optiml_fibers[t].ctx.uc_link = &optiml_sched;
        makecontext(&optiml_fibers[t].ctx, (void (*)())optiml_fiber_entry, 1, t);
    }
    for (unsigned bz = 0; bz < gridDim.z; bz++) for (unsigned by = 0; by < gridDim.y; by++)
    for (unsigned bx = 0; bx < gridDim.x; bx++) {
        optiml_host_block_start(dyn);
        optiml_host_barriers(n);
        for (auto &f : optiml_fibers) { f.done = false; f.bar = nullptr; }
        blockIdx.x = bx; blockIdx.y = by; blockIdx.z = bz;
        for (;;) {
            bool alive = false, ran = false;
            for (int t = 0; t < n; t++) {
                optiml_fiber &f = optiml_fibers[t];
                if (f.done) continue;
                alive = true;
                if (f.bar != nullptr && f.bar->gen == f.gen) continue;         // its barrier is still closed
                f.bar = nullptr;
                optiml_cur = t;
                threadIdx.x = t % blockDim.x; threadIdx.y = (t / blockDim.x) % blockDim.y; threadIdx.z = t / (blockDim.x * blockDim.y);
                if (!_setjmp(optiml_sched_jb)) {
                    if (!f.started) { f.started = true; swapcontext(&optiml_sched, &f.ctx); }
                    else _longjmp(f.jb, 1);
                }
                ran = true;
            }
            if (!alive) break;
            if (!ran) { fprintf(stderr, "a barrier some threads of the block never reach (they wait forever)\n"); exit(5); }
        }
        free(optiml_host_dyn);
    }
}
#else
template <typename F> static void optiml_host_launch(F kernel, size_t dyn = 0) {
    const int n = blockDim.x * blockDim.y * blockDim.z;
    for (unsigned bz = 0; bz < gridDim.z; bz++) for (unsigned by = 0; by < gridDim.y; by++)
    for (unsigned bx = 0; bx < gridDim.x; bx++) {
        optiml_host_block_start(dyn);
        optiml_host_barriers(n);
        std::vector<std::thread> ts;
        for (int t = 0; t < n; t++)
            ts.emplace_back([=] {
                blockIdx.x = bx; blockIdx.y = by; blockIdx.z = bz;
                threadIdx.x = t % blockDim.x; threadIdx.y = (t / blockDim.x) % blockDim.y; threadIdx.z = t / (blockDim.x * blockDim.y);
                kernel();
                optiml_host_warps[t / 32].bar->arrive_and_drop();   // an exited thread leaves its barriers
                optiml_host_block->arrive_and_drop();
            });
        for (auto &t : ts) t.join();
        free(optiml_host_dyn);
    }
}
#endif
"""

# what needs a block's threads to run at once: barriers and shuffles (shared memory and atomics alone do not)
_COOPERATE = re.compile(r"__syncthreads|__syncwarp|__shfl|cooperative_groups")
DYN_SHARED = re.compile(r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?([A-Za-z_][\w\s]*?)\s*"
                         r"(?:__align__\s*\(\s*\d+\s*\)\s*)?\b([A-Za-z_]\w*)\s*\[\s*\]\s*;")
# what the emulation cannot run: half and bfloat16 types, tensor-core and asynchronous-copy instructions,
# inline PTX, launches from the device, textures
_UNSUPPORTED = re.compile(r"\b(__half2?|__nv_bfloat162?|half2?|nv_bfloat162?|wmma|mma|cp\.async|__pipeline|asm\s*(volatile)?\s*\(|"
                          r"cooperative_groups|tex[123]D|texture<|__ldcs|__stcs|cuda::)\b")


TOO_LARGE = "a launch too large for the CPU emulation"


@dataclass(frozen=True)
class Param:
    """One entry parameter as the emulation passes it."""
    name: str
    pointer: bool
    dtype: str              # a NumPy dtype


def unsupported(source: str) -> str | None:
    """Why the CPU emulation cannot run ``source``, or None."""
    if GXX is None:
        return "no C++ compiler (g++) on this machine"
    m = _UNSUPPORTED.search(source)
    return f"the kernel uses {m.group(0).strip()}, which the CPU emulation does not model" if m else None


def host_source(source: str) -> str:
    """``source`` as the emulation compiles it: CUDA's own headers left out (the shim stands in for
    them), host code that launches kernels left out, dynamic shared memory the block's heap block."""
    out = re.sub(r"(?m)^\s*#\s*include\s*[<\"](cuda[\w./]*|device_launch_parameters\.h|cooperative_groups\.h|"
                 r"torch/[\w./]+|ATen/[\w./]+|c10/[\w./]+)[>\"]\s*$", "", source)
    out = re.sub(r"(?m)^\s*(#\s*pragma\s+unroll.*)$", "", out)
    out = DYN_SHARED.sub(lambda m: f"{m.group(1).strip()} *{m.group(2)} = ({m.group(1).strip()} *)optiml_host_dyn;", out)
    return _poisoned(out)


_STATIC_SHARED = re.compile(r"__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?[A-Za-z_][\w\s]*?\b([A-Za-z_]\w*)\s*"
                            r"(?:\[[^\];]+\]\s*)+(?:__align__\s*\(\s*\d+\s*\)\s*)?;")


def _poisoned(source: str) -> str:
    """Each ``__shared__`` array declared inside a function followed by its filling with NaN once a block
    (``optiml_host_poison``), so that reading what no thread wrote shows, as garbage would on a GPU."""
    out, last = [], 0
    for m in _STATIC_SHARED.finditer(source):
        before = source[:m.start()]
        if before.count("{") - before.count("}") <= 0 or "extern" in source[max(0, m.start() - 12):m.start()]:
            continue                                # file scope, or dynamic: left alone
        name = m.group(1)
        out.append(source[last:m.end()])
        out.append(f" static unsigned long long optiml_stamp_{name}; optiml_host_poison({name}, optiml_stamp_{name});")
        last = m.end()
    out.append(source[last:])
    return "".join(out)


class HostKernel:
    """``entry`` of ``source`` compiled once for the CPU emulation (with AddressSanitizer where the
    compiler has it). ``params`` are the entry's parameters in order. Raises RuntimeError with the
    compiler's last words when it does not build."""

    def __init__(self, source: str, entry: str, params: list[Param], workdir: Path | None = None):
        self.entry, self.params = entry, params
        self._tmp = tempfile.TemporaryDirectory(prefix="optiml-emulate-") if workdir is None else None
        self.dir = Path(workdir or self._tmp.name)
        self.threaded = bool(_COOPERATE.search(source))
        self._src = self.dir / f"{entry}_host.cpp"
        self._src.write_text((THREADED if self.threaded else SHIM) + host_source(source) + "\n" + self._main())
        self._exe: dict[bool, Path | None] = {}
        self.exe = self._build(False)

    def _build(self, sanitize: bool) -> Path | None:
        """The program, built once each way: plain (fast, for searching) or under AddressSanitizer (for
        confirming; None where the compiler has none)."""
        if sanitize not in self._exe:
            exe = self.dir / f"{self.entry}_host{'_asan' if sanitize else ''}"
            # plain: a block's threads as fibers (fast, for searching); under AddressSanitizer as OS threads
            r = subprocess.run([GXX, "-std=c++20", "-pthread", "-O1", "-g", *(["-fsanitize=address"] if sanitize else
                                                                            ["-DOPTIML_PAD=1", "-DOPTIML_FIBERS=1", "-U_FORTIFY_SOURCE"]),
                                "-ffp-contract=off", "-w", "-x", "c++", str(self._src), "-o", str(exe)],
                               capture_output=True, text=True)
            if r.returncode != 0 and not sanitize:
                raise RuntimeError("the kernel does not build for the CPU emulation: " + " ".join(r.stderr.split())[-600:])
            self._exe[sanitize] = exe if r.returncode == 0 else None
        return self._exe[sanitize]

    def _main(self) -> str:
        lines, args = [], []
        k = 9                       # argv: in, out, grid x y z, block x y z, dynamic shared bytes, then each parameter
        for p in self.params:
            k += 1
            if p.pointer:
                ctype = _CTYPE[p.dtype]
                lines.append(f"    long long {p.name}_n = atoll(argv[{k}]);")
                # unsanitized, each array sits inside a margin of NaN (-1 for integers), so a wrong size that
                # writes past it leaves the elements it got right to be counted instead of crashing the
                # run, and one that reads past it gets NaN, not a harmless 0
                lines.append(f"    long long {p.name}_pad = OPTIML_PAD ? std::min(std::max(4 * {p.name}_n, 65536LL), 4LL << 20) : 0;")
                lines.append(f"    {ctype} *{p.name}_at = ({ctype} *)malloc(({p.name}_n + 2 * {p.name}_pad + 1) * sizeof({ctype})) + {p.name}_pad;")
                lines.append(f"    memset({p.name}_at - {p.name}_pad, 0xff, ({p.name}_n + 2 * {p.name}_pad + 1) * sizeof({ctype}));  // NaN, -1")
                lines.append(f"    if (fread({p.name}_at, sizeof({ctype}), {p.name}_n, in) != (size_t){p.name}_n) return 3;")
                args.append(f"{p.name}_at")
            else:
                conv = "strtod" if p.dtype.startswith("float") else "strtoll"
                extra = ", nullptr" if conv == "strtod" else ", nullptr, 10"
                lines.append(f"    {_CTYPE[p.dtype]} {p.name}_v = ({_CTYPE[p.dtype]}){conv}(argv[{k}]{extra});")
                args.append(f"{p.name}_v")
        dumps = [f"    fwrite({p.name}_at, sizeof(*{p.name}_at), {p.name}_n, out);" for p in self.params if p.pointer]
        return ("#ifndef OPTIML_PAD\n#define OPTIML_PAD 0\n#endif\nint main(int argc, char **argv) {\n"
                "    FILE *in = fopen(argv[1], \"rb\");\n    if (!in) return 3;\n" + "\n".join(lines) + "\n    fclose(in);\n"
                "    gridDim.x = atoi(argv[3]); gridDim.y = atoi(argv[4]); gridDim.z = atoi(argv[5]);\n"
                "    blockDim.x = atoi(argv[6]); blockDim.y = atoi(argv[7]); blockDim.z = atoi(argv[8]);\n"
                f"    optiml_host_launch([&] {{ {self.entry}({', '.join(args)}); }}, (size_t)atoll(argv[9]));\n"
                "    FILE *out = fopen(argv[2], \"wb\");\n    if (!out) return 3;\n" + "\n".join(dumps) + "\n"
                "    fclose(out);\n    return 0;\n}\n")

    def run(self, grid: tuple, block: tuple, shared_bytes: int, values: dict, timeout_s: float = 20.0,
            sanitize: bool = False):
        """Launch with ``values`` (a scalar per scalar parameter, a NumPy array per pointer): the
        arrays afterwards ({name: array}) or the sentence why it did not run (a crash, what
        AddressSanitizer saw with ``sanitize``, past ``timeout_s``, a launch a GPU refuses)."""
        exe = self._build(True) if sanitize else self.exe
        exe = exe or self.exe
        grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        block = tuple(int(b) for b in block) + (1,) * (3 - len(block))
        if min(grid) < 1 or min(block) < 1 or np.prod(block) > 1024 or grid[1] > 65535 or grid[2] > 65535:
            return f"a launch no GPU runs: grid {grid}, block {block}"
        if shared_bytes > 227 * 1024:
            return f"more dynamic shared memory than a GPU has: {shared_bytes} bytes"
        if np.prod(grid) * np.prod(block) > (100_000 if self.threaded and sanitize else 4_000_000):
            return TOO_LARGE                # under AddressSanitizer a block's threads are real threads
        fd, inp = tempfile.mkstemp(dir=self.dir, suffix=".in")
        os.close(fd)
        outp = inp[:-3] + ".out"
        argv, arrays = [], []
        try:
            with open(inp, "wb") as f:
                for p in self.params:
                    v = values[p.name]
                    if p.pointer:
                        a = np.ascontiguousarray(np.asarray(v, dtype=p.dtype).reshape(-1))
                        f.write(a.tobytes())
                        argv.append(str(a.size))
                        arrays.append((p, a))
                    elif p.dtype.startswith("float"):
                        argv.append(float(v).hex())
                    else:
                        argv.append(str(int(v)))
            try:
                r = subprocess.run([str(exe), inp, outp, *map(str, grid), *map(str, block), str(int(shared_bytes)), *argv],
                                   capture_output=True, text=True, timeout=timeout_s,
                                   env={"ASAN_OPTIONS": "detect_leaks=0", "PATH": "/usr/bin:/bin"})
            except subprocess.TimeoutExpired:
                return f"did not finish in {timeout_s:g} s (a barrier some threads never reach?)"
            if r.returncode != 0:
                said = re.search(r"ERROR: AddressSanitizer: ([\w-]+)", r.stderr)
                return (f"AddressSanitizer: {said.group(1)}" if said else
                        f"exited with {r.returncode}: " + " ".join(r.stderr.split())[-200:])
            data = Path(outp).read_bytes()
            out, at = {}, 0
            for p, a in arrays:
                n = a.size * a.itemsize
                out[p.name] = np.frombuffer(data[at:at + n], dtype=p.dtype).copy()
                at += n
            return out
        finally:
            for f in (inp, outp):
                if os.path.exists(f):
                    os.unlink(f)

    def close(self):
        if self._tmp is not None:
            self._tmp.cleanup()


# the C type each NumPy dtype the emulation passes is declared as (half and bfloat16 are not modelled)
_CTYPE = {"float32": "float", "float64": "double", "int32": "int", "uint32": "unsigned", "int64": "long long",
          "uint64": "unsigned long long", "int16": "short", "uint16": "unsigned short", "int8": "signed char",
          "uint8": "unsigned char", "bool": "bool"}


def params_of(kernel) -> list[Param] | None:
    """The emulation's parameters of a parsed kernel (``optiml.source.Kernel``), or None where one has
    a type it does not model (half and bfloat16, a type optiml does not know)."""
    out = []
    for p in kernel.params:
        dt = dtype_of_c_type(p.base_type.replace("volatile", " "))
        if dt not in _CTYPE:
            return None
        out.append(Param(p.name, p.is_pointer, dt))
    return out
