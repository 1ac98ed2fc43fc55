"""The evaluation pipeline: source -> build -> verify -> time, every failure a status.

The search (and the CLI) talk to :class:`Evaluator` only; it wires a builder and a harness
given to it, and never raises for a bad candidate.
"""
from __future__ import annotations

import math
import secrets
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from loguru import logger

from .build import Builder, BuildResult, Resources
from .errors import OptimlError, UserError
from .source import SourceInfo, parse_source
from .spec import Launch, TaskSpec
from .verify.harness import Case, Harness, HarnessJob, HarnessResult, KernelBinary

MAX_THREADS_PER_BLOCK = 1024

# statuses, in the order a candidate moves through the pipeline
STATUSES = ("ok", "source_error", "launch_config_error", "compile_error", "build_timeout", "build_lost",
            "launch_error", "runtime_error", "timeout", "wrong_output", "reference_error", "harness_error")


@dataclass(frozen=True)
class Candidate:
    source: str
    flags: tuple[str, ...] = ()        # extra nvcc flags on top of the spec's
    name: str = "kernel.cu"            # file name shown in compiler messages


@dataclass
class Evaluation:
    status: str
    message: str = ""
    build: BuildResult | None = None
    harness: HarnessResult | None = None
    launch: Launch | None = None       # at the timing size
    resources: Resources | None = None
    seed: int | None = None
    median_ms: float | None = None
    baseline_ms: float | None = None   # the baseline's median, timed interleaved (evaluate(baseline=...))
    gflops: float | None = None
    gbps: float | None = None
    wall_s: float = 0.0
    stage_s: dict[str, float] = field(default_factory=dict)
    profile: object | None = None      # a profiler.ProfileResult for verified candidates
    speed_of_light: dict | None = None # set when the first timing beat the device's physical bound

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["build"] = self.build.to_dict() if self.build else None
        d["harness"] = self.harness.to_dict() if self.harness else None
        if self.profile is not None:
            p = self.profile
            d["profile"] = {"status": p.status.value, "message": p.message, "metrics": p.metrics,
                            "diagnosis": p.diagnosis, "wall_s": p.wall_s, "dropped_metrics": p.dropped_metrics}
        return d


class Evaluator:
    def __init__(self, spec: TaskSpec, seed_source: str, builder: Builder, harness: Harness, *,
                 include_dir: Path | None = None, seed: int | None = None, device: int = 0,
                 kernel_name: str = "kernel.cu", profiler=None):
        self.spec = spec
        self.seed_source = seed_source
        self.builder = builder
        self.harness = harness
        self.include_dir = include_dir
        self.seed = seed if seed is not None else spec.verify.seed
        self.device = device
        self.kernel_name = kernel_name
        self._reference: KernelBinary | None = None
        self._reference_lock = threading.Lock()
        self._ops: str | None = None
        self.profiler = profiler           # profiles verified candidates only; None: runtime alone
        self._profile_warned = False

    # ------------------------------------------------------------------ helpers
    def _flags(self, candidate: Candidate) -> tuple[str, ...]:
        return tuple(self.spec.nvcc_flags) + tuple(candidate.flags)

    def _launches(self, info: SourceInfo) -> tuple[Launch, ...]:
        from .spec import check_expressions

        check_expressions(self.spec, dict(info.constants))   # shapes and scalars with this candidate's constants
        launches = tuple(self.spec.resolve_launch(s, info) for s in self.spec.all_size_sets)
        for launch, sizes in zip(launches, self.spec.all_size_sets):
            threads = math.prod(launch.block)
            if threads > MAX_THREADS_PER_BLOCK:
                raise UserError(f"the block has {threads} threads at sizes {sizes}; CUDA allows at most {MAX_THREADS_PER_BLOCK}.")
        return launches

    def _binary(self, candidate: Candidate) -> tuple[KernelBinary | None, Evaluation | None]:
        """Build a candidate and describe how to launch it, or the failed Evaluation."""
        t0 = time.perf_counter()
        try:
            info = parse_source(candidate.source)
        except OptimlError as e:
            return None, Evaluation("source_error", str(e))
        if info.kernel(self.spec.entry) is None:
            found = ", ".join(k.name for k in info.kernels) or "none"
            return None, Evaluation("source_error", f"the entry kernel {self.spec.entry!r} is not in the source (found: {found}).")
        try:
            launches = self._launches(info)
        except OptimlError as e:
            return None, Evaluation("launch_config_error", str(e))
        parse_s = time.perf_counter() - t0
        build = self.builder.build(candidate.source, self._flags(candidate), include_dir=self.include_dir,
                                   name=candidate.name)
        ev = Evaluation("ok", build=build, launch=launches[0], stage_s={"parse": parse_s, "build": build.wall_s})
        if build.status == "timeout":
            ev.status, ev.message = "build_timeout", build.log.strip().splitlines()[-1]
            return None, ev
        if build.status == "worker_lost":
            # the dask workers building it died (distributed retries first, so a compile that
            # exhausts a machine's memory ends here): a build failure, but not nvcc's message
            last = build.log.strip().splitlines()[-1] if build.log.strip() else "no log"
            ev.status, ev.message = "build_lost", f"the build was lost with the workers running it ({last.removeprefix('error: ')})"
            return None, ev
        if not build.ok:
            errs = build.errors
            ev.status, ev.message = "compile_error", (errs[0] if errs else "nvcc failed") + (
                f" (and {len(errs) - 1} more)" if len(errs) > 1 else "")
            return None, ev
        symbol = build.symbols.get(self.spec.entry)
        if symbol is None:
            ev.status = "compile_error"
            ev.message = (f"the cubin has no entry {self.spec.entry!r} (a template kernel needs an explicit "
                          f"instantiation or extern \"C\"); it has: {', '.join(build.symbols) or 'none'}.")
            return None, ev
        ev.resources = build.resources.get(symbol)
        return KernelBinary(build.cubin_path, symbol, launches, dict(info.constants)), ev

    def reference_binary(self) -> KernelBinary | None:
        """The seed's binary when the spec's reference is the seed (built once)."""
        if self.spec.reference.kind != "seed":
            return None
        with self._reference_lock:
            return self._reference_locked()

    def _reference_locked(self) -> KernelBinary:
        if self._reference is None:
            kb, ev = self._binary(Candidate(self.seed_source, name=self.kernel_name))
            if kb is None:
                raise _ReferenceUnavailable(f"the seed kernel, which is the reference, does not build: {ev.status}: {ev.message}")
            self._reference = kb
        return self._reference

    def cases(self, base_seed: int) -> tuple[Case, ...]:
        out = []
        n = 0
        for idx in range(1, len(self.spec.all_size_sets)):
            for _ in range(self.spec.verify.trials):
                out.append(Case(idx, (base_seed + 1_000_003 * n) % 2**31))
                n += 1
        if self.spec.verify.timing_size:
            out.append(Case(0, (base_seed + 1_000_003 * n) % 2**31))
        return tuple(out)

    # ------------------------------------------------------------------ the pipeline
    def evaluate(self, candidate: Candidate, *, time_it: bool = True, baseline: Candidate | None = None,
                 profile: bool = True) -> Evaluation:
        """Build, verify on fresh inputs, time and (when a profiler is set and ``profile``) profile
        ``candidate``. With ``baseline``, the two kernels are timed interleaved in one process on
        the same inputs (``median_ms`` and ``baseline_ms``): the figure a final speedup is.
        :class:`optiml.pool.EvaluationPool` runs the same stages concurrently."""
        t0 = time.perf_counter()
        kb, ev = self._binary(candidate)
        base_kb = None
        if kb is not None and baseline is not None:
            base_kb, base_ev = self._binary(baseline)
            if base_kb is None:
                kb, ev.status, ev.message = None, "reference_error", f"the baseline does not build: {base_ev.status}: {base_ev.message}"
        job = self.job(kb, ev, time_it=time_it, baseline=base_kb) if kb is not None else None
        if job is None:
            ev.wall_s = time.perf_counter() - t0
            return ev
        counts = self.judge(ev, job, self.harness.run(job), self.harness)
        if self.profiler is not None and profile and ev.status == "ok":
            self.add_profile(ev, self.profiler.profile(job, ev.harness.device_name if ev.harness else ""), counts)
        ev.wall_s = time.perf_counter() - t0
        logger.info("evaluated {}: {} {}", candidate.name, ev.status, f"{ev.median_ms:.4f} ms" if ev.median_ms else "")
        return ev

    def build(self, candidate: Candidate) -> tuple[KernelBinary | None, Evaluation]:
        """The build stage: a launchable binary, or the failed Evaluation (status set)."""
        return self._binary(candidate)

    def job(self, kb: KernelBinary, ev: Evaluation, *, time_it: bool = True, baseline: KernelBinary | None = None,
            device: int | None = None) -> HarnessJob | None:
        """The GPU job for a built candidate on fresh inputs; None (and ``ev`` a reference_error)
        when the seed reference does not build."""
        try:
            reference = self.reference_binary()
        except _ReferenceUnavailable as e:
            ev.status, ev.message = "reference_error", str(e)
            return None
        base_seed = self.seed if self.seed is not None else secrets.randbelow(2**31)
        ev.seed = base_seed
        return HarnessJob(spec=self.spec, candidate=kb, reference=reference, cases=self.cases(base_seed),
                          time_it=time_it, device=self.device if device is None else device, baseline=baseline,
                          ops_cubin=self.ops_cubin())

    def ops_cubin(self) -> str | None:
        """The gpu_ops kernels for this builder's architecture (built once); None: the GPU child
        draws and compares on the host."""
        with self._reference_lock:
            if self._ops is None:
                from .verify.gpu_ops import cubin_for

                arch = getattr(self.builder, "arch", None)
                try:
                    self._ops = str(cubin_for(arch)) if arch else ""
                except Exception as e:   # no nvcc for it, or it failed: the host path still works
                    logger.warning("the gpu_ops kernels did not build ({}); inputs are drawn on the host", e)
                    self._ops = ""
            return self._ops or None

    def judge(self, ev: Evaluation, job: HarnessJob, hr: HarnessResult, harness: Harness) -> tuple:
        """Fill ``ev`` from the GPU job's result (a time under the speed of light is verified and
        timed again on ``harness`` first); returns the spec's counts for :meth:`add_profile`."""
        ev.stage_s["gpu"] = ev.stage_s.get("gpu", 0.0) + hr.wall_s
        for k, v in hr.phases.items():      # inside the GPU child: verify, time, check_timed, python_reference
            ev.stage_s[k] = ev.stage_s.get(k, 0.0) + v
        counts = self._counts(job.candidate)
        bound = self._speed_of_light_ms(counts, hr)
        if bound is not None and hr.status == "ok" and hr.timing is not None and hr.timing.median_ms < bound:
            hr = self._recheck(ev, job, hr, bound, harness)
        ev.harness = hr
        ev.status, ev.message = hr.status, hr.message
        if hr.timing is not None and hr.status == "ok":
            ev.median_ms = hr.timing.median_ms
            flops, nbytes = counts
            secs = hr.timing.median_ms * 1e-3
            ev.gflops = flops / secs / 1e9 if flops else None
            ev.gbps = nbytes / secs / 1e9 if nbytes else None
            if hr.baseline_timing is not None:
                ev.baseline_ms = hr.baseline_timing.median_ms
        return counts

    def _counts(self, kb: KernelBinary) -> tuple[float | None, float | None]:
        """The spec's FLOPs and bytes at the timing size, with this candidate's constants."""
        sizes = self.spec.timing_sizes
        return self.spec.count("flops", sizes, kb.constants), self.spec.count("bytes", sizes, kb.constants)

    def _speed_of_light_ms(self, counts: tuple, hr: HarnessResult) -> float | None:
        """The least time the spec's counts allow on this GPU: FLOPs at the dense tensor peak (the
        most generous rate), bytes at the DRAM peak; None without counts or known peaks."""
        from .profiler.diagnosis import peaks_for_device

        peaks = peaks_for_device(hr.device_name or "")
        if peaks is None:
            return None
        flops, nbytes = (c or 0.0 for c in counts)
        gflops = max(peaks.fp32_gflops, peaks.fp16_tensor_gflops or 0.0)
        bound_s = max(flops / (gflops * 1e9), nbytes / (peaks.dram_gbps * 1e9))
        return bound_s * 1e3 if bound_s > 0 else None

    def _recheck(self, ev: Evaluation, job: HarnessJob, first: HarnessResult, bound_ms: float,
                 harness: Harness) -> HarnessResult:
        """A timing under the speed of light is suspect: verify and time again on new inputs; the
        candidate counts only if that passes too (and then with the second timing)."""
        seed = secrets.randbelow(2**31)
        again = harness.run(replace(job, cases=self.cases(seed)))
        ev.stage_s["gpu"] += again.wall_s
        ev.speed_of_light = {"bound_ms": bound_ms, "first_ms": first.timing.median_ms, "recheck_seed": seed,
                             "recheck_status": again.status,
                             "recheck_ms": again.timing.median_ms if again.timing is not None else None}
        logger.warning("{:.4g} ms is under the speed-of-light bound of {:.4g} ms; verified again on new inputs: {}",
                       first.timing.median_ms, bound_ms, again.status)
        if again.status != "ok":
            again.message = (f"timed under the speed of light ({first.timing.median_ms:.4g} ms < {bound_ms:.4g} ms), "
                             f"then failed on new inputs: {again.message}")
        return again

    def add_profile(self, ev: Evaluation, prof, counts: tuple) -> None:
        """Attach a profiler result to a verified candidate's Evaluation, with the diagnosis."""
        from .profiler.diagnosis import diagnose, peaks_for_device

        device = ev.harness.device_name if ev.harness else ""
        ev.stage_s["profile"] = prof.wall_s or 0.0
        if not prof.ok:
            if not self._profile_warned:
                logger.warning("profiling failed ({}: {}); going on with runtime alone", prof.status.value, prof.message)
                self._profile_warned = True
            ev.profile = prof
            return
        half = any(a.dtype in ("float16", "bfloat16") for a in self.spec.args if a.role == "input")
        flops, nbytes = counts
        matmul_like = half and bool(flops and nbytes and flops / nbytes > 16)
        sentences = diagnose(prof.metrics, flops=flops, bytes_moved=nbytes, peaks=peaks_for_device(device),
                             is_half_matmul=matmul_like)
        ev.profile = replace(prof, diagnosis=sentences)


class _ReferenceUnavailable(Exception):
    pass
