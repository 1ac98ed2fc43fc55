"""``optiml calibrate``'s measurements: the microbenchmarks of calibrate.cu, run in a GPU child.

The parent (:func:`measure`) builds calibrate.cu with the project's :class:`~optiml.build.NvccBuilder`
(cached like any build) and runs ``python -m optiml.verify.calibrate CUBIN OUT`` on GPU 0 of
what CUDA_VISIBLE_DEVICES shows; the child (:func:`run_benchmarks`) times each kernel with CUDA
events (warm-up launches first, then the median of :data:`REPS` launches, each sized to take a few
milliseconds) and writes the figures as JSON: the keys of
:data:`optiml.profiler.calibration.FIGURES` (None where not measured, e.g. tensor cores before
sm_80), and ``details`` (the plain device-to-device ``cuMemcpyDtoD`` bandwidth of the same buffers,
timed the same way, beside the copy kernel's; SM count, L2 size, clock rate, sizes).

Nothing here imports pycuda at module level: the child receives ``pycuda.driver``.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from ..errors import EnvironmentProblem

SOURCE = Path(__file__).with_name("calibrate.cu")
NVCC_FLAGS = ("-O3",)
REPS = 9
TARGET_MS = 4.0                   # the compute kernels' launches are sized to take about this long
COPY_BYTES = 1 << 29              # each of the copy's two buffers (512 MiB: far beyond any L2)
BLOCK = 256
NEVER = -1.2345e-38               # the `never` argument: no result equals it, so no sink is written


def cubin_for(arch: str, cache_dir: Path | None = None) -> Path:
    """calibrate.cu built for ``arch``; a compile error is a bug in optiml."""
    from ..build import NvccBuilder

    arch = "sm_90a" if arch == "sm_90" else arch       # Hopper: wgmma needs the arch-specific build
    result = NvccBuilder(arch, cache_dir=cache_dir).build(SOURCE.read_text(), NVCC_FLAGS, name=SOURCE.name)
    if not result.ok:
        raise RuntimeError(f"optiml's {SOURCE.name} did not build for {arch} ({result.status}):\n{result.log[-4000:]}")
    return Path(result.cubin_path)


class CalibrationFailed(EnvironmentProblem):
    """The GPU child did not give figures (a driver problem, a GPU in use by others, a timeout)."""


def measure(arch: str, timeout_s: float = 600.0, cache_dir: Path | None = None) -> dict:
    """Build and run the microbenchmarks on GPU 0; returns the child's JSON (``gpu``, ``figures``,
    ``details``). A child that fails is a one-sentence :class:`CalibrationFailed` with its last line."""
    cubin = cubin_for(arch, cache_dir)
    with tempfile.TemporaryDirectory(prefix="optiml-calibrate-") as d:
        out = Path(d) / "figures.json"
        cmd = [sys.executable, "-m", "optiml.verify.calibrate", str(cubin), str(out)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise CalibrationFailed(f"the calibration microbenchmarks did not finish in {timeout_s:.0f} s; "
                                    f"is another process using the GPU?") from None
        if proc.returncode != 0 or not out.is_file():
            last = (proc.stderr or proc.stdout or "").strip().splitlines()
            raise CalibrationFailed(f"the calibration microbenchmarks failed (exit {proc.returncode}): "
                                    f"{last[-1] if last else 'no output'}")
        return json.loads(out.read_text())


# ------------------------------------------------------------------------ in the GPU child


def _median_ms(drv, launch, reps: int = REPS, warmup: int = 2) -> tuple[float, float]:
    """The median and the spread (IQR / median) of ``reps`` launches, each between two events."""
    for _ in range(warmup):
        launch()
    drv.Context.synchronize()
    times = []
    for _ in range(reps):
        start, end = drv.Event(), drv.Event()
        start.record()
        launch()
        end.record()
        end.synchronize()
        times.append(end.time_since(start))
    q = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    med = statistics.median(times)
    return med, (q[2] - q[0]) / med if med else 0.0


def _sized(drv, launch_of, work_of, start: int) -> tuple[float, float, int]:
    """Time ``launch_of(iters)`` with ``iters`` scaled from ``start`` so one launch takes about
    :data:`TARGET_MS`; returns (work per second, spread, iters), ``work_of(iters)`` the work of one launch."""
    first, _ = _median_ms(drv, lambda: launch_of(start), reps=3, warmup=1)
    iters = max(1, int(start * TARGET_MS / max(first, 1e-3)))
    med, spread = _median_ms(drv, lambda: launch_of(iters))
    return work_of(iters) / (med * 1e-3), spread, iters


def run_benchmarks(drv, cubin_path: str | Path) -> dict:
    """Every microbenchmark on the current context's device; the JSON :func:`measure` returns."""
    dev = drv.Context.get_device()
    attr = drv.device_attribute
    sms = dev.get_attribute(attr.MULTIPROCESSOR_COUNT)
    l2_bytes = dev.get_attribute(attr.L2_CACHE_SIZE)
    major, minor = dev.compute_capability()
    mod = drv.module_from_file(str(cubin_path))
    fn = {name: mod.get_function(name) for name in
          ("copy_f4", "l2_read", "fma_f32", "mma_f16", "mma_bf16", "mma_tf32", "has_mma", "wgmma_f16", "wgmma_bf16",
           "has_wgmma")}
    sink = drv.mem_alloc(16)
    figures: dict = {}
    details: dict = {"sm_count": sms, "l2_bytes": l2_bytes, "arch": f"sm_{major}{minor}",
                     "sm_clock_khz": dev.get_attribute(attr.CLOCK_RATE), "reps": REPS}
    spreads: dict = {}

    # DRAM copy, and a plain device-to-device memcpy of the same buffers timed the same way
    free, _ = drv.mem_get_info()
    nbytes = min(COPY_BYTES, (free // 4) // 16 * 16)
    src, dst = drv.mem_alloc(nbytes), drv.mem_alloc(nbytes)
    try:
        drv.memset_d8(src, 1, nbytes)
        n4 = nbytes // 16
        grid = (-(-n4 // BLOCK), 1, 1)
        ms, spreads["dram_gbps"] = _median_ms(drv, lambda: fn["copy_f4"](src, dst, np.uint64(n4), grid=grid,
                                                                          block=(BLOCK, 1, 1)))
        figures["dram_gbps"] = 2 * nbytes / (ms * 1e-3) / 1e9
        ms_memcpy, details["memcpy_spread"] = _median_ms(drv, lambda: drv.memcpy_dtod(dst, src, nbytes))
        details["memcpy_gbps"] = 2 * nbytes / (ms_memcpy * 1e-3) / 1e9
        details["copy_bytes"] = nbytes
    finally:
        src.free()
        dst.free()

    # L2: every block reads a buffer of a quarter of the L2 (each partition holds it), through L2 only
    l2_buf = max(1 << 20, l2_bytes // 4) // 16 * 16
    buf = drv.mem_alloc(l2_buf)
    try:
        drv.memset_d8(buf, 0, l2_buf)
        blocks = sms * 4
        rate, spreads["l2_gbps"], passes = _sized(
            drv, lambda p: fn["l2_read"](buf, np.uint64(l2_buf // 16), np.int32(p), np.float32(NEVER), sink,
                                         grid=(blocks, 1, 1), block=(512, 1, 1)),
            lambda p: l2_buf * p * blocks, 1)
        figures["l2_gbps"] = rate / 1e9
        details["l2_buffer_bytes"], details["l2_passes"] = l2_buf, passes
    finally:
        buf.free()

    # FP32 FMA: one full wave of 256-thread blocks, 8 chains of 16 FMAs per iteration and thread
    blocks = sms * 8
    rate, spreads["fp32_gflops"], _ = _sized(
        drv, lambda it: fn["fma_f32"](np.int32(it), np.float32(0.9999), np.float32(1e-4), np.float32(NEVER), sink,
                                      grid=(blocks, 1, 1), block=(BLOCK, 1, 1)),
        lambda it: 2.0 * 8 * 16 * it * blocks * BLOCK, 256)
    figures["fp32_gflops"] = rate / 1e9

    # tensor cores through mma.sync: 8 mma of each of 4 accumulators per iteration and warp
    def built_with(probe: str) -> bool:     # the probe kernel writes 1 where the build holds the instructions
        flag = drv.mem_alloc(4)
        fn[probe](flag, grid=(1, 1, 1), block=(1, 1, 1))
        has = np.zeros(1, np.int32)
        drv.memcpy_dtoh(has, flag)
        flag.free()
        return bool(has[0])

    has_mma = built_with("has_mma")
    blocks, warps = sms * 4, BLOCK // 32
    for key, name, k in (("fp16_tensor_gflops", "mma_f16", 16), ("bf16_tensor_gflops", "mma_bf16", 16),
                         ("tf32_tensor_gflops", "mma_tf32", 8)):
        if not has_mma:
            figures[key] = None
            continue
        rate, spreads[key], _ = _sized(
            drv, lambda it, f=fn[name]: f(np.int32(it), np.uint32(12345), np.float32(NEVER), sink,
                                          grid=(blocks, 1, 1), block=(BLOCK, 1, 1)),
            lambda it, k=k: 2.0 * 16 * 8 * k * 8 * 4 * it * blocks * warps, 64)
        figures[key] = rate / 1e9
    # Hopper's warpgroup MMA, where the build has it: the dense fp16/bf16 peak is the faster of the two
    if built_with("has_wgmma"):
        for key, name in (("fp16_tensor_gflops", "wgmma_f16"), ("bf16_tensor_gflops", "wgmma_bf16")):
            rate, spread, _ = _sized(
                drv, lambda it, f=fn[name]: f(np.int32(it), np.uint32(12345), np.float32(NEVER), sink,
                                              grid=(sms, 1, 1), block=(256, 1, 1)),
                lambda it: 2.0 * 64 * 256 * 16 * 4 * 2 * it * sms, 64)
            details[f"mma_sync_{key}"] = figures[key]
            details[f"wgmma_{key}"] = rate / 1e9
            if figures[key] is None or rate / 1e9 > figures[key]:
                figures[key], spreads[key] = rate / 1e9, spread
    sink.free()
    details["spreads"] = {k: round(v, 4) for k, v in spreads.items()}
    return {"gpu": dev.name(), "figures": figures, "details": details}


def main(cubin: str, out: str) -> int:
    import pycuda.driver as drv

    drv.init()
    ctx = drv.Device(0).make_context()
    try:
        result = run_benchmarks(drv, cubin)
    finally:
        ctx.pop()
    Path(out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
