"""Plain sentences about a profiled kernel, for a person or an LLM to act on.

:func:`diagnose` reads the plain keys of :func:`optiml.profiler.model.extract_metrics` and
says what bounds the kernel (memory, compute or latency), how bad its shared-memory bank
conflicts are, what limits its occupancy, whether it spills, whether a half-precision matrix
product leaves the tensor cores idle, and, given the work done and the device's peaks, how
close it runs to the speed of light. A missing metric means no sentence, never a guess.
"""
from __future__ import annotations

from dataclasses import dataclass

from optiml.profiler.metrics import STALL_REASONS
from optiml.profiler.types import MetricValue

BOUND_PCT = 60.0
"""Throughput (% of peak) above which a unit counts as the bottleneck."""

TENSOR_IDLE_PCT = 0.5
"""Tensor pipe activity (% of peak) under which the tensor cores count as unused."""

TENSOR_LIGHT_PCT = 20.0
"""Tensor pipe activity (% of peak) under which the tensor cores count as lightly used."""


@dataclass(frozen=True)
class DevicePeaks:
    """A device's peak rates. Tensor rates are dense (no sparsity), None if unknown. ``source`` is
    "datasheet" (the vendor's figures) or "measured" (``optiml calibrate``,
    :mod:`optiml.profiler.calibration`)."""

    name: str
    dram_gbps: float
    fp32_gflops: float
    source: str
    fp16_tensor_gflops: float | None = None
    bf16_tensor_gflops: float | None = None
    tf32_tensor_gflops: float | None = None
    l2_gbps: float | None = None

    @property
    def said(self) -> str:
        """Where the figures come from, in words for a sentence."""
        if self.source == "measured":
            return "measured by optiml calibrate"
        return f"{self.source}; run optiml calibrate to measure this GPU"

    def compute_peak(self, dtype: str | None, matmul_like: bool) -> tuple[float, str]:
        """The rate a task's FLOPs are held to, and its name: the dense tensor-core rate of a
        half-precision matrix product (``dtype`` float16/bfloat16 and ``matmul_like``); for an fp32
        matrix product the faster of FP32 FMA and a third of the TF32 tensor rate (three TF32
        products make one as accurate as fp32: the gemm_f32_3xtf32 template), so that a kernel using
        the tensor cores is never above its speed of light; else FP32 FMA."""
        tensor = {"float16": (self.fp16_tensor_gflops, "dense fp16 tensor-core"),
                  "bfloat16": (self.bf16_tensor_gflops or self.fp16_tensor_gflops, "dense bf16 tensor-core")}
        if matmul_like and dtype in tensor and tensor[dtype][0]:
            return tensor[dtype]
        if matmul_like and dtype == "float32" and self.tf32_tensor_gflops and self.tf32_tensor_gflops / 3 > self.fp32_gflops:
            return self.tf32_tensor_gflops / 3, "fp32-accurate tensor-core (a third of TF32)"
        return self.fp32_gflops, "fp32 (non-tensor)"

    def fastest_gflops(self) -> float:
        """The most generous compute rate it knows (the physical-bound check's)."""
        return max(r for r in (self.fp32_gflops, self.fp16_tensor_gflops, self.bf16_tensor_gflops,
                               self.tf32_tensor_gflops, 0.0) if r is not None)


# NVIDIA H100 and H200 datasheets: FP32 67 TFLOP/s (non-tensor), FP16 tensor 1,979 TFLOP/s
# with sparsity (989.5 dense); memory bandwidth 3.35 TB/s (H100 SXM) and 4.8 TB/s (H200).
# BF16 tensor as FP16; TF32 tensor 989 TFLOP/s with sparsity (494.7 dense).
H100_SXM = DevicePeaks("H100 SXM", 3350.0, 67_000.0, "datasheet", 989_500.0, 989_500.0, 494_700.0)
H200 = DevicePeaks("H200", 4800.0, 67_000.0, "datasheet", 989_500.0, 989_500.0, 494_700.0)


def peaks_for_device(display_name: str) -> DevicePeaks | None:
    """Datasheet peaks for a device name as ncu prints it, e.g. "NVIDIA H100 80GB HBM3"."""
    name = display_name.upper()
    if "H200" in name:
        return H200
    if "H100" in name and ("SXM" in name or "HBM3" in name) and "NVL" not in name:
        return H100_SXM
    return None


def sci(value: float) -> str:
    """A count in short engineering form: 1879048192 → "1.9e9"; below 10,000 as an integer."""
    if abs(value) < 1e4:
        return f"{value:.0f}"
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _num(metrics: dict[str, MetricValue], key: str) -> float | None:
    value = metrics.get(key)
    return value if isinstance(value, float | int) and not isinstance(value, bool) else None


_STALL_HINTS = {
    "long_scoreboard": "waiting on global or local memory",
    "lg_throttle": "the global/local memory queue is full",
    "mio_throttle": "the shared-memory/special-instruction queue is full",
    "short_scoreboard": "waiting on shared memory or special-function results",
    "barrier": "waiting at __syncthreads",
    "math_pipe_throttle": "a math pipe is saturated",
    "wait": "fixed-latency dependencies",
    "not_selected": "eligible but another warp issued",
    "dispatch_stall": "the dispatcher could not issue",
    "branch_resolving": "resolving branches",
    "membar": "memory barriers",
    "tex_throttle": "the texture queue is full",
    "no_instruction": "instruction cache misses",
    "imc_miss": "constant cache misses",
    "gmma": "waiting on wgmma",
    "drain": "draining memory at exit",
    "sleeping": "sleeping",
    "misc": "miscellaneous reasons",
}


def _stalls_sentence(metrics: dict[str, MetricValue]) -> str | None:
    ranked = sorted(
        ((r, v) for r in STALL_REASONS if (v := _num(metrics, f"stall_{r}")) is not None and v > 0),
        key=lambda rv: -rv[1],
    )[:3]
    if ranked:
        parts = [f"{r} ({v:.1f}, {_STALL_HINTS.get(r, r)})" for r, v in ranked]
        return "Top warp stall reasons (warps stalled per issue cycle): " + "; ".join(parts) + "."
    names = metrics.get("top_stall_reasons")
    if isinstance(names, str) and names:
        parts = [f"{r} ({_STALL_HINTS.get(r, r)})" for r in names.split(",")]
        return "Top warp stall reasons: " + "; ".join(parts) + "."
    return None


def _bound_sentence(metrics: dict[str, MetricValue]) -> str | None:
    sm = _num(metrics, "sm_throughput_pct")
    units = {
        "DRAM": _num(metrics, "dram_throughput_pct"),
        "L2": _num(metrics, "l2_throughput_pct"),
        "L1/shared memory": _num(metrics, "l1_throughput_pct"),
    }
    named = {k: v for k, v in units.items() if v is not None}
    overall = _num(metrics, "memory_throughput_pct")
    mem_values = list(named.values()) + ([overall] if overall is not None else [])
    if sm is None and not mem_values:
        return None
    mem = max(mem_values) if mem_values else 0.0
    sm_value = sm if sm is not None else 0.0
    sm_text = f"{sm:.0f}%" if sm is not None else "unknown"
    busiest = max(named, key=named.get) if named else None
    if busiest is None or (overall is not None and overall > named[busiest] + 10):
        label = "the busiest memory unit"  # only the overall figure says which is high
    else:
        label = f"{busiest} throughput"
    if mem >= BOUND_PCT and mem >= sm_value:
        text = f"Memory-bound: {label} is at {mem:.0f}% of peak while the SM is at {sm_text}"
        dram = units["DRAM"]
        if dram is not None and dram < BOUND_PCT:  # then the busy unit is not DRAM
            return text + (f"; DRAM is only at {dram:.1f}%, so the pressure is on-chip "
                           "(shared memory or cache traffic), not DRAM bandwidth.")
        return text + "; reduce or reuse memory traffic (tiling, coalescing, wider loads)."
    if sm_value >= BOUND_PCT:
        return (f"Compute-bound: the SM is at {sm_value:.0f}% of peak (memory {mem:.0f}%); "
                "cut instructions per result or move the math to faster pipes such as tensor cores.")
    if sm is None or not mem_values:
        return None  # one side unknown: "neither is busy" cannot be claimed
    return (f"Latency-bound: neither the SM ({sm_text}) nor memory ({mem:.0f}%) reaches "
            f"{BOUND_PCT:.0f}% of peak, so warps mostly wait; expose more parallelism "
            "(more warps, more independent work per thread) or hide latency (prefetching).")


def _conflict_sentence(metrics: dict[str, MetricValue], op: str, what: str) -> str | None:
    conflicts = _num(metrics, f"smem_{op}_bank_conflicts")
    wavefronts = _num(metrics, f"smem_{op}_wavefronts")
    if not conflicts:
        return None
    fix = "pad or swizzle the shared array so the threads of a warp hit distinct banks."
    if not wavefronts:
        return f"Shared-memory bank conflicts on {what}: {sci(conflicts)} conflicts; {fix}"
    ratio = conflicts / wavefronts
    if ratio < 0.02:
        return None
    severity = "Severe" if ratio >= 0.5 else "Moderate" if ratio >= 0.1 else "Minor"
    ways = f", about {wavefronts / (wavefronts - conflicts):.1f}-way on average" if ratio < 1 else ""
    return (f"{severity} shared-memory bank conflicts on {what}: {sci(conflicts)} conflicts over "
            f"{sci(wavefronts)} wavefronts ({ratio:.0%} of the wavefronts are conflict replays"
            f"{ways}); {fix}")


_LIMITER_NAMES = {
    "registers": "registers", "shared_mem": "shared memory", "warps": "warps per SM",
    "blocks": "block slots per SM", "barriers": "barriers",
}
_LIMITER_FIX = {
    "registers": "fewer registers per thread (__launch_bounds__, less unrolling)",
    "shared_mem": "less shared memory per block",
    "warps": "smaller blocks",
    "blocks": "larger blocks",
    "barriers": "fewer barriers per block",
}


def _occupancy_sentence(metrics: dict[str, MetricValue]) -> str | None:
    achieved = _num(metrics, "achieved_occupancy_pct")
    theoretical = _num(metrics, "theoretical_occupancy_pct")
    limiters = metrics.get("occupancy_limiters")
    names = limiters.split(",") if isinstance(limiters, str) and limiters else []
    if achieved is None:
        return None
    limited = theoretical < 100 if theoretical is not None else achieved < BOUND_PCT
    if limited and names:
        per_sm = _num(metrics, f"occ_limit_{names[0]}")
        plural = "" if per_sm == 1 else "s"
        blocks = f" ({per_sm:.0f} block{plural} per SM)" if per_sm is not None else ""
        theory = f" (theoretical {theoretical:.0f}%)" if theoretical is not None else ""
        joined = " and ".join(_LIMITER_NAMES.get(n, n) for n in names)
        fixes = " or ".join(_LIMITER_FIX.get(n, n) for n in names)
        return (f"Achieved occupancy is {achieved:.0f}% of peak{theory}, limited by {joined}"
                f"{blocks}; use {fixes} to fit more warps per SM.")
    if theoretical is not None and achieved < 0.8 * theoretical:
        return (f"Achieved occupancy is {achieved:.0f}% of peak against a theoretical "
                f"{theoretical:.0f}%: the grid is too small for the GPU or blocks finish unevenly.")
    return None


def _spill_sentence(metrics: dict[str, MetricValue]) -> str | None:
    loads = _num(metrics, "local_load_bytes")
    stores = _num(metrics, "local_store_bytes")
    if not loads and not stores:
        return None
    load_text = sci(loads) if loads is not None else "unknown"
    store_text = sci(stores) if stores is not None else "unknown"
    return (f"Local-memory traffic ({load_text} bytes loaded, {store_text} stored): registers "
            "spill or a local array lives in memory; reduce register pressure or index arrays "
            "with compile-time constants.")


def _tensor_sentence(metrics: dict[str, MetricValue]) -> str | None:
    pct = _num(metrics, "tensor_pipe_active_pct")
    if pct is None:
        pct = _num(metrics, "hmma_pipe_active_pct")
    if pct is None:
        return None
    if pct < TENSOR_IDLE_PCT:
        return (f"Tensor cores are unused (tensor pipe active {pct:.2f}% of peak) on this "
                "half-precision matrix product: use WMMA or mma.sync (wgmma on sm_90) so the "
                "multiply-adds run on tensor cores.")
    if pct < TENSOR_LIGHT_PCT:
        return (f"Tensor cores are used but lightly (tensor pipe active {pct:.1f}% of peak): "
                "feed them faster (shared-memory staging, larger tiles, asynchronous copies).")
    return None


def _speed_of_light(metrics, flops, bytes_moved, peaks, is_half_matmul, half_dtype=None) -> list[str]:
    duration = _num(metrics, "duration_ns")
    if not duration:
        return []
    out = []
    if flops:
        gflops = flops / duration  # FLOP per ns is GFLOP/s
        text = f"Speed of light: {gflops / 1000:.3g} TFLOP/s"
        if peaks is not None:
            peak, kind = peaks.compute_peak(half_dtype or "float16", is_half_matmul)
            text += (f" is {gflops / peak:.1%} of the {peaks.name} {kind} peak of "
                     f"{peak / 1000:.4g} TFLOP/s ({peaks.said})")
        out.append(text + ".")
    if bytes_moved:
        gbps = bytes_moved / duration  # bytes per ns is GB/s
        text = f"Memory speed of light: {gbps:.4g} GB/s"
        if peaks is not None:
            kind = "DRAM copy bandwidth" if peaks.source == "measured" else "DRAM peak"
            text += (f" is {gbps / peaks.dram_gbps:.1%} of the {peaks.name} {kind} of "
                     f"{peaks.dram_gbps:.0f} GB/s ({peaks.said})")
        out.append(text + ".")
    return out


def diagnose(
    metrics: dict[str, MetricValue],
    *,
    flops: float | None = None,
    bytes_moved: float | None = None,
    peaks: DevicePeaks | None = None,
    is_half_matmul: bool = False,
    half_dtype: str | None = None,
) -> list[str]:
    """A few plain sentences on what limits the kernel, most important first.

    ``flops`` and ``bytes_moved`` are the work the task does (e.g. 2·M·N·K and the bytes of
    its inputs and outputs); with ``peaks`` the speed-of-light sentences give the fraction of
    the device's peak, measured (``optiml calibrate``) or from the datasheet, and say which.
    ``is_half_matmul`` asks whether the tensor cores are used (``half_dtype``: float16 or
    bfloat16, whose tensor peak applies; float16 when not given).
    """
    sentences = [
        _bound_sentence(metrics),
        _conflict_sentence(metrics, "ld", "loads"),
        _conflict_sentence(metrics, "st", "stores"),
        _occupancy_sentence(metrics),
        _spill_sentence(metrics),
        _tensor_sentence(metrics) if is_half_matmul else None,
        _stalls_sentence(metrics),
    ]
    found = [s for s in sentences if s]
    return found + _speed_of_light(metrics, flops, bytes_moved, peaks, is_half_matmul, half_dtype)
