"""Before the GPU: parse a candidate, check its launch at every size, build it with the builder
it is given, and make its GPU job (fresh input seeds, the seed kernel as the reference when the
spec says so). Every failure is a status on the :class:`Evaluation`."""
from __future__ import annotations

import math
import secrets
import threading
import time
from dataclasses import replace
from pathlib import Path

from loguru import logger

from ..build import Builder, entry_problem, own_log
from ..errors import OptimlError, UserError
from ..source import SourceInfo
from ..spec import Launch, TaskSpec, check_expressions
from ..status import Status
from ..verify.harness import Case, HarnessJob, KernelBinary
from .types import Candidate, Evaluation

MAX_THREADS_PER_BLOCK = 1024
REGISTERS_PER_BLOCK = 65536      # every architecture since sm_50 (the register file of an SM)


class Preparer:
    """Builds candidates of one task and makes their GPU jobs (thread-safe: the build stage runs
    it on several threads). ``seed`` fixes the input draws (None: fresh ones every job)."""

    def __init__(self, spec: TaskSpec, seed_source: str, builder: Builder, *, include_dir: Path | None = None,
                 seed: int | None = None, kernel_name: str = "kernel.cu"):
        self.spec = spec
        self.seed_source = seed_source
        self.builder = builder
        self.include_dir = include_dir
        self.seed = seed if seed is not None else spec.verify.seed
        self.kernel_name = kernel_name
        self._reference: KernelBinary | None = None
        self._lock = threading.Lock()
        self._ops: str | None = None
        self._noted: set[str] = set()        # what the run has said once (first_time)

    @property
    def lends_gpu(self) -> bool:
        """Whether its jobs compute a Python reference on the host (the GPU can be lent meanwhile)."""
        return self.spec.reference.kind != "seed"

    def _launches(self, info: SourceInfo) -> tuple[Launch, ...]:
        check_expressions(self.spec, dict(info.constants))   # shapes and scalars with this candidate's constants
        launches = tuple(self.spec.resolve_launch(s, info) for s in self.spec.all_size_sets)
        for launch, sizes in zip(launches, self.spec.all_size_sets):
            threads = math.prod(launch.block)
            if threads > MAX_THREADS_PER_BLOCK:
                raise UserError(f"the block has {threads} threads at sizes {sizes}; CUDA allows at most {MAX_THREADS_PER_BLOCK}.")
        return launches

    def build(self, candidate: Candidate) -> tuple[KernelBinary | None, Evaluation]:
        """A launchable binary and its Evaluation so far, or None and the failed Evaluation."""
        t0 = time.perf_counter()
        try:
            info = self.spec.source_info(candidate.source)
        except OptimlError as e:
            return None, Evaluation(Status.SOURCE_ERROR, str(e))
        if info.kernel(self.spec.entry) is None:
            found = ", ".join(k.name for k in info.kernels) or "none"
            return None, Evaluation(Status.SOURCE_ERROR, f"the entry kernel {self.spec.entry!r} is not in the source (found: {found}).")
        try:
            launches = self._launches(info)
            broken = self.spec.tune_problem(candidate.source, info.constants)
        except OptimlError as e:
            return None, Evaluation(Status.LAUNCH_CONFIG_ERROR, str(e))
        if broken:
            return None, Evaluation(Status.LAUNCH_CONFIG_ERROR, f"outside the declared tuning space: {broken}.")
        parse_s = time.perf_counter() - t0
        build = self.builder.build(candidate.source, tuple(self.spec.nvcc_flags) + tuple(candidate.flags),
                                   include_dir=self.include_dir, name=candidate.name)
        # the log is stored and shown to the model: only what nvcc said about the candidate's file
        build = replace(build, log=own_log(build.log, candidate.name))
        ev = Evaluation(Status.OK, build=build, launch=launches[0], stage_s={"parse": parse_s, "build": build.wall_s})
        if build.status == "timeout":
            return None, ev.fail(Status.BUILD_TIMEOUT, build.log.strip().splitlines()[-1])
        if build.status == "worker_lost":
            # the dask workers building it died (distributed retries first, so a compile that
            # exhausts a machine's memory ends here): a build failure, but not nvcc's message
            last = build.log.strip().splitlines()[-1] if build.log.strip() else "no log"
            return None, ev.fail(Status.BUILD_LOST, f"the build was lost with the workers running it ({last.removeprefix('error: ')})")
        if not build.ok:
            errs = build.errors
            return None, ev.fail(Status.COMPILE_ERROR, (errs[0] if errs else "nvcc failed") + (
                f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""))
        symbol = build.symbols.get(self.spec.entry)
        problem = entry_problem(build, self.spec.entry, info.kernel(self.spec.entry))
        if symbol is None or problem:
            return None, ev.fail(Status.COMPILE_ERROR, problem or f"the cubin has no entry {self.spec.entry!r}.")
        ev.resources = build.resources.get(symbol)
        problem = register_problem(getattr(ev.resources, "registers", 0), launches, self.spec.all_size_sets)
        if problem:
            return None, ev.fail(Status.LAUNCH_CONFIG_ERROR, problem)
        return KernelBinary(build.cubin_path, symbol, launches, dict(info.constants)), ev

    def reference_binary(self) -> KernelBinary | None:
        """The seed's binary when the spec's reference is the seed (built once); raises
        :class:`ReferenceUnavailable` when the seed does not build."""
        if self.spec.reference.kind != "seed":
            return None
        with self._lock:
            if self._reference is None:
                kb, ev = self.build(Candidate(self.seed_source, name=self.kernel_name))
                if kb is None:
                    raise ReferenceUnavailable(f"the seed kernel, which is the reference, does not build: {ev.status}: {ev.message}")
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

    def job(self, kb: KernelBinary, ev: Evaluation, *, time_it: bool = True,
            baseline: KernelBinary | None = None) -> HarnessJob | None:
        """The GPU job for a built candidate on fresh inputs (its device is set by the GPU stage that
        takes it); None (and ``ev`` a reference_error) when the seed reference does not build."""
        try:
            reference = self.reference_binary()
        except ReferenceUnavailable as e:
            ev.fail(Status.REFERENCE_ERROR, str(e))
            return None
        base_seed = self.seed if self.seed is not None else secrets.randbelow(2**31)
        ev.seed = base_seed
        return HarnessJob(spec=self.spec, candidate=kb, reference=reference, cases=self.cases(base_seed),
                          time_it=time_it, baseline=baseline, ops_cubin=self.ops_cubin())

    def first_time(self, key: str) -> bool:
        """True the first time ``key`` is asked of this run, then False: to say a thing once."""
        with self._lock:
            if key in self._noted:
                return False
            self._noted.add(key)
            return True

    def again(self, job: HarnessJob) -> tuple[HarnessJob, int]:
        """The same job on new inputs (a fresh seed), and that seed."""
        seed = secrets.randbelow(2**31)
        return replace(job, cases=self.cases(seed)), seed

    def ops_cubin(self) -> str | None:
        """The gpu_ops kernels for this builder's architecture (built once); None: the GPU child
        draws and compares on the host."""
        with self._lock:
            if self._ops is None:
                from ..verify.gpu_ops import cubin_for

                try:
                    self._ops = str(cubin_for(self.builder.arch)) if self.builder.arch else ""
                except Exception as e:   # no nvcc for it, or it failed: the host path still works
                    logger.warning("the gpu_ops kernels did not build ({}); inputs are drawn on the host", e)
                    self._ops = ""
            return self._ops or None


def register_problem(registers: int, launches, size_sets=()) -> str | None:
    """Why a launch would fail for want of registers (one sentence), or None: a warp's registers are
    allocated in units of 256, and a block's must fit in the SM's 65536, or CUDA refuses the launch
    ("too many resources requested"); said here, before any GPU time is spent on it."""
    if not registers:
        return None
    per_warp = -(-registers * 32 // 256) * 256
    for launch, sizes in zip(launches, list(size_sets) or [None] * len(launches)):
        threads = math.prod(launch.block)
        need = -(-threads // 32) * per_warp
        if need > REGISTERS_PER_BLOCK:
            return (f"the kernel uses {registers} registers a thread, so a block of {threads} threads needs {need}, "
                    f"more than the {REGISTERS_PER_BLOCK} of an SM" + (f" (at sizes {sizes})" if sizes else "")
                    + "; CUDA would refuse the launch.")
    return None


class ReferenceUnavailable(Exception):
    pass
