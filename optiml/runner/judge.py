"""After the GPU: fill a candidate's :class:`Evaluation` from its GPU job's result (a time under
the speed of light is verified and timed again first, with the strict tolerances; one still past it
by more than SOL_MARGIN is ``beyond_bound``, never a result), and attach a profile with its diagnosis."""
from __future__ import annotations

from dataclasses import replace

from .. import dtypes as _dt
from ..spec import Tolerance

from loguru import logger

from ..profiler.calibration import peaks_for, physical_bound_ms
from ..profiler.diagnosis import diagnose
from ..profiler.types import ProfileResult
from ..spec import TaskSpec
from ..status import Status
from ..verify.harness import Harness, HarnessJob, HarnessResult, KernelBinary
from .prepare import Preparer
from .types import Evaluation


def counts(spec: TaskSpec, kb: KernelBinary) -> tuple[float | None, float | None]:
    """The spec's FLOPs and bytes at the timing size, with this candidate's constants."""
    sizes = spec.timing_sizes
    return spec.count("flops", sizes, kb.constants), spec.count("bytes", sizes, kb.constants)


def speed_of_light_ms(work: tuple, device_name: str, peaks=None) -> float | None:
    """The least time the spec's counts allow on this GPU: FLOPs at the fastest compute rate (any
    tensor core: the most generous), bytes at the DRAM bandwidth; the peaks measured by
    ``optiml calibrate`` when cached for this GPU, else the datasheet's (``peaks`` given: those);
    None without counts or known peaks."""
    return physical_bound_ms(*work, peaks if peaks is not None else peaks_for(device_name or ""))


SOL_MARGIN = 1.15
"""How far past the speed of light a verified time may be before it is a finding, not a result: honest
memory-bound kernels read up to 105-107 % of the copy bandwidth ``optiml calibrate`` measures (reads
are cheaper than the copy's read-and-write), so 115 % is past any of them; a kernel that skips work
reaches 190 % (docs/spec.md, "Faster than physics")."""


def strict_tolerances(spec: TaskSpec) -> TaskSpec:
    """``spec`` with no tolerance looser than the dtype's default (atol, rtol and rel_rms each the
    smaller of the spec's and the default): what a time past the speed of light is verified with."""
    tols = {}
    for a in spec.args:
        if a.role in ("output", "inout") and a.dtype not in tols:
            t = spec.tolerance(a.dtype)
            d_atol, d_rtol = _dt.DEFAULT_TOLERANCES.get(a.dtype, (0.0, 0.0))
            d_rel = _dt.DEFAULT_REL_RMS.get(a.dtype)
            rel = t.rel_rms if d_rel is None or t.rel_rms is None else min(t.rel_rms, d_rel)
            tols[a.dtype] = Tolerance(min(t.atol, d_atol), min(t.rtol, d_rtol), rel)
    return replace(spec, tolerances={**spec.tolerances, **tols})


def judge(prep: Preparer, ev: Evaluation, job: HarnessJob, hr: HarnessResult, harness: Harness) -> None:
    """Fill ``ev`` from the GPU job's result; a time under the speed of light is verified and
    timed again on ``harness`` on new inputs with the strict tolerances, and counts only if that
    passes too and its time is within SOL_MARGIN of the bound (else ``beyond_bound``)."""
    ev.stage_s["gpu"] = ev.stage_s.get("gpu", 0.0) + hr.wall_s
    for k, v in hr.phases.items():      # inside the GPU child: verify, time, check_timed, python_reference
        ev.stage_s[k] = ev.stage_s.get(k, 0.0) + v
    work = counts(prep.spec, job.candidate)
    peaks = peaks_for(hr.device_name or "")
    bound = speed_of_light_ms(work, hr.device_name, peaks)
    if bound is not None and hr.status == Status.OK and hr.timing is not None and hr.timing.median_ms < bound:
        hr = _recheck(prep, ev, job, hr, bound, harness, peaks.source)
        if hr.status == Status.OK and hr.timing is not None and hr.timing.median_ms * SOL_MARGIN < bound:
            hr = replace(hr, status=Status.BEYOND_BOUND, message=_beyond_sentence(hr.timing.median_ms, bound, work,
                                                                                 peaks))
            ev.speed_of_light["recheck_status"] = hr.status
    _say_vacuous_atol(prep, hr)
    ev.harness = hr
    ev.status, ev.message = hr.status, hr.message
    if hr.timing is not None and hr.status == Status.OK:
        ev.median_ms = hr.timing.median_ms
        flops, nbytes = work
        secs = hr.timing.median_ms * 1e-3
        ev.gflops = flops / secs / 1e9 if flops else None
        ev.gbps = nbytes / secs / 1e9 if nbytes else None
        if hr.baseline_timing is not None:
            ev.baseline_ms = hr.baseline_timing.median_ms
        if hr.vendor_timing is not None:
            ev.vendor_ms = hr.vendor_timing.median_ms


def _say_vacuous_atol(prep: Preparer, hr: HarnessResult) -> None:
    """Log, once a run for each output, where the spec's atol is vacuous (the relative check decides there)."""
    for name, note in hr.vacuous_atol().items():
        if prep.first_time("vacuous atol " + name):
            logger.warning("{}", note)


def _beyond_sentence(ms: float, bound_ms: float, work: tuple, peaks) -> str:
    flops, nbytes = work
    said = []
    if nbytes:
        said.append(f"{nbytes / 1e9:.4g} GB at {peaks.dram_gbps:.0f} GB/s")
    if flops:
        said.append(f"{flops / 1e9:.4g} GFLOP at {peaks.fastest_gflops() / 1e3:.4g} TFLOP/s")
    return (f"verified twice, yet timed at {ms:.4g} ms, {bound_ms / ms:.0%} of the speed of light on this GPU "
            f"(no kernel can beat {bound_ms:.4g} ms: the spec's [counts], {' and '.join(said)}, {peaks.source} "
            f"peaks): either the kernel skips work its verification does not see, or [counts] overstate the work; "
            f"check both before trusting it")


def _recheck(prep: Preparer, ev: Evaluation, job: HarnessJob, first: HarnessResult, bound_ms: float,
             harness: Harness, source: str = "datasheet") -> HarnessResult:
    again_job, seed = prep.again(job)
    again_job = replace(again_job, spec=strict_tolerances(again_job.spec))
    again = harness.run(again_job)
    ev.stage_s["gpu"] += again.wall_s
    ev.speed_of_light = {"bound_ms": bound_ms, "peaks": source, "first_ms": first.timing.median_ms, "recheck_seed": seed,
                         "recheck_status": again.status,
                         "recheck_ms": again.timing.median_ms if again.timing is not None else None}
    logger.warning("{:.4g} ms is under the speed-of-light bound of {:.4g} ms ({} peaks); verified again on new "
                   "inputs with the strict tolerances: {}", first.timing.median_ms, bound_ms, source, again.status)
    if again.status != Status.OK:
        again.message = (f"timed under the speed of light ({first.timing.median_ms:.4g} ms < {bound_ms:.4g} ms at "
                         f"{source} peaks), then failed on new inputs: {again.message}")
    return again


def with_diagnosis(spec: TaskSpec, ev: Evaluation, job: HarnessJob, prof: ProfileResult) -> ProfileResult:
    """``prof`` with the diagnosis sentences of its metrics (as it is when profiling failed)."""
    if not prof.ok:
        return prof
    device = ev.harness.device_name if ev.harness else ""
    half = next((a.dtype for a in spec.args if a.role == "input" and a.dtype in ("float16", "bfloat16")), None)
    flops, nbytes = counts(spec, job.candidate)
    matmul_like = bool(half and flops and nbytes and flops / nbytes > 16)
    return replace(prof, diagnosis=diagnose(prof.metrics, flops=flops, bytes_moved=nbytes, peaks=peaks_for(device),
                                            is_half_matmul=matmul_like, half_dtype=half))
