"""After the GPU: fill a candidate's :class:`Evaluation` from its GPU job's result (a time under
the speed of light is verified and timed again first), and attach a profile with its diagnosis."""
from __future__ import annotations

from dataclasses import replace

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


def judge(prep: Preparer, ev: Evaluation, job: HarnessJob, hr: HarnessResult, harness: Harness) -> None:
    """Fill ``ev`` from the GPU job's result; a time under the speed of light is verified and
    timed again on ``harness`` on new inputs, and counts only if that passes too."""
    ev.stage_s["gpu"] = ev.stage_s.get("gpu", 0.0) + hr.wall_s
    for k, v in hr.phases.items():      # inside the GPU child: verify, time, check_timed, python_reference
        ev.stage_s[k] = ev.stage_s.get(k, 0.0) + v
    work = counts(prep.spec, job.candidate)
    peaks = peaks_for(hr.device_name or "")
    bound = speed_of_light_ms(work, hr.device_name, peaks)
    if bound is not None and hr.status == Status.OK and hr.timing is not None and hr.timing.median_ms < bound:
        hr = _recheck(prep, ev, job, hr, bound, harness, peaks.source)
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


def _recheck(prep: Preparer, ev: Evaluation, job: HarnessJob, first: HarnessResult, bound_ms: float,
             harness: Harness, source: str = "datasheet") -> HarnessResult:
    again_job, seed = prep.again(job)
    again = harness.run(again_job)
    ev.stage_s["gpu"] += again.wall_s
    ev.speed_of_light = {"bound_ms": bound_ms, "peaks": source, "first_ms": first.timing.median_ms, "recheck_seed": seed,
                         "recheck_status": again.status,
                         "recheck_ms": again.timing.median_ms if again.timing is not None else None}
    logger.warning("{:.4g} ms is under the speed-of-light bound of {:.4g} ms ({} peaks); verified again on new "
                   "inputs: {}", first.timing.median_ms, bound_ms, source, again.status)
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
