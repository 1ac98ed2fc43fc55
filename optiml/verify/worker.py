"""The child side of the GPU harness: ``python -m optiml.verify.worker JOBDIR``.

Reads ``JOBDIR/job.pkl`` (a :class:`HarnessJob`), writes its current stage to
``JOBDIR/stage.txt`` as it goes, and its :class:`HarnessResult` to ``JOBDIR/result.json``.
Only this module imports pycuda.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import pickle
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from .. import dtypes as _dt
from ..spec import Launch, TaskSpec
from .compare import check_output, summarize
from .harness import HarnessJob, HarnessResult, KernelBinary, TimingResult
from .inputs import CaseData, make_case, scalar_numpy
from .timing import median_ci_rel, timing_stats

# pycuda packs arguments with its own struct module: half and bfloat16 scalars go as their bits
_STRUCT = {"float64": "d", "float32": "f", "float16": "H", "bfloat16": "H", "int64": "q", "int32": "i",
           "int16": "h", "int8": "b", "uint64": "Q", "uint32": "I", "uint16": "H", "uint8": "B", "bool": "B"}


class KernelFault(Exception):
    """A CUDA error raised by a launch or the synchronisation after it."""


class Stage:
    """What the child is doing (``stage.txt``, read by the parent after a timeout), how long each
    phase of a job took (``phases``: seconds by name; a phase may hold others, as verify holds
    the host's Python reference), and, in the persistent worker, when the job does not need the
    GPU (:meth:`off_gpu`)."""

    def __init__(self, path: Path, ctrl=None, stdin=None):
        self.path = path
        self.phases: dict[str, float] = {}
        self._ctrl, self._stdin = ctrl, stdin

    def __call__(self, text: str) -> None:
        self.path.write_text(text)

    @contextlib.contextmanager
    def phase(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - t0

    @contextlib.contextmanager
    def off_gpu(self):
        """Host-only work (the spec's Python reference): the persistent worker says ``host`` on
        its control pipe, so the parent may lend the GPU meanwhile (to a profiled batch), and
        ``gpu`` after, then waits for the parent's ``go`` on stdin before it touches the GPU
        again. Elsewhere (a one-job child) this does nothing."""
        if self._ctrl is None:
            yield
            return
        self._ctrl.write("host\n")
        try:
            yield
        finally:
            self._ctrl.write("gpu\n")
            with self.phase("waiting_for_gpu"):
                answer = self._stdin.readline()
            if answer.strip() != "go":          # the parent is gone or closing: stop here
                raise SystemExit(0)


class Gpu:
    """A CUDA context on one device, and the kernels loaded into it."""

    def __init__(self, device: int):
        import pycuda.driver as drv

        self.drv = drv
        drv.init()
        self.dev = drv.Device(device)
        self.ctx = self.dev.make_context()
        self.name = self.dev.name()
        self.pci = self.dev.pci_bus_id()
        self.l2_bytes = self.dev.get_attribute(drv.device_attribute.L2_CACHE_SIZE)
        self.stream = drv.Stream()
        self.ops = None                           # gpu_ops.GpuOps once a job brings its cubin
        self._modules: dict[str, object] = {}     # cubin path -> module, for the life of a job
        self.keep: set[str] = set()               # cubins kept across jobs (the seed reference)

    def load(self, kb: KernelBinary, spec: TaskSpec):
        mod = self._modules.get(kb.cubin_path)
        if mod is None:
            mod = self._modules[kb.cubin_path] = self.drv.module_from_file(kb.cubin_path)
        fn = mod.get_function(kb.symbol)
        fn.prepare("".join("P" if a.is_array else _STRUCT[a.dtype] for a in spec.args))
        return mod, fn

    def enable_ops(self, cubin_path: str | None) -> None:
        """Load the gpu_ops kernels (inputs drawn and outputs compared on the device); without
        them everything is drawn and compared on the host, as before."""
        if self.ops is not None or not cubin_path:
            return
        from .gpu_ops import GpuOps

        try:
            self.ops = GpuOps(self.drv, cubin_path)
        except Exception as e:      # a bad cubin: the host path still works
            print(f"optiml: gpu_ops unavailable ({e}); drawing and comparing on the host", flush=True)

    def unload_candidates(self) -> None:
        """Drop every module but the kept ones (a persistent worker between jobs)."""
        self._modules = {k: m for k, m in self._modules.items() if k in self.keep}

    def close(self):
        try:
            self.ctx.pop()
        except Exception:
            pass


def _launch(gpu: Gpu, fn, launch: Launch, args: list) -> None:
    drv = gpu.drv
    if launch.shared_mem > 48 * 1024:
        fn.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, launch.shared_mem)
    fn.prepared_async_call(launch.grid, launch.block, gpu.stream, *args, shared_size=launch.shared_mem)


class DeviceCase:
    """Device buffers for one case's data."""

    def __init__(self, gpu: Gpu, spec: TaskSpec, data: CaseData, seed: int = 0):
        self.gpu, self.spec, self.data, self.seed = gpu, spec, data, seed
        self.bufs = {}
        for name, arr in data.arrays.items():
            self.bufs[name] = gpu.drv.mem_alloc(max(arr.nbytes, 1))
        self.upload()

    def nbytes(self, name: str) -> int:
        return self.data.arrays[name].nbytes

    def upload(self):
        for name, arr in self.data.arrays.items():
            if arr.nbytes:
                self.gpu.drv.memcpy_htod(self.bufs[name], np.ascontiguousarray(arr))

    def args(self) -> list:
        out = []
        for a in self.spec.args:
            out.append(int(self.bufs[a.name]) if a.is_array else scalar_numpy(a, self.data.scalars[a.name]))
        return out

    def download(self) -> dict[str, np.ndarray]:
        out = {}
        for name, arr in self.data.arrays.items():
            host = np.empty_like(arr)
            if arr.nbytes:
                self.gpu.drv.memcpy_dtoh(host, self.bufs[name])
            out[name] = host
        return out

    def free(self):
        for b in self.bufs.values():
            b.free()
        self.bufs = {}


def _run_once(gpu: Gpu, fn, launch: Launch, spec: TaskSpec, data: CaseData) -> dict[str, np.ndarray]:
    dc = DeviceCase(gpu, spec, data)
    try:
        try:
            _launch(gpu, fn, launch, dc.args())
            gpu.stream.synchronize()
        except gpu.drv.Error as e:
            raise KernelFault(str(e)) from None
        return dc.download()
    finally:
        try:
            dc.free()
        except gpu.drv.Error:
            pass


def _python_reference(spec: TaskSpec):
    ref = spec.reference
    modspec = importlib.util.spec_from_file_location("optiml_user_reference", ref.path)
    mod = importlib.util.module_from_spec(modspec)
    modspec.loader.exec_module(mod)
    fn = getattr(mod, ref.function, None)
    if fn is None:
        raise AttributeError(f"{ref.path.name} has no function {ref.function!r}")
    return fn


def _python_outputs(fn, spec: TaskSpec, data: CaseData) -> dict[str, np.ndarray]:
    kwargs = {}
    for a in spec.args:
        if a.role == "scalar":
            kwargs[a.name] = data.scalars[a.name]
        elif a.role in ("input", "inout"):
            kwargs[a.name] = _dt.to_values(data.arrays[a.name].copy(), a.dtype)
    result = fn(**kwargs)
    outs = [a for a in spec.args if a.role in ("output", "inout")]
    if isinstance(result, dict):
        missing = [a.name for a in outs if a.name not in result]
        if missing:
            raise ValueError(f"the reference returned no value for {', '.join(missing)}")
        values = [result[a.name] for a in outs]
    elif isinstance(result, (tuple, list)):
        values = list(result)
    else:
        values = [result]
    if len(values) != len(outs):
        raise ValueError(f"the reference returned {len(values)} outputs, the spec has {len(outs)}")
    out = {}
    for a, v in zip(outs, values):
        shape = data.arrays[a.name].shape
        v = np.asarray(v)
        if v.size != math.prod(shape):
            raise ValueError(f"the reference's {a.name} has {v.size} elements, the spec's shape {shape} has {math.prod(shape)}")
        out[a.name] = _dt.to_storage(v.reshape(shape), a.dtype)
    return out


def _reference_fn(gpu: Gpu, job: HarnessJob):
    """The seed reference kernel, or the user's Python reference function."""
    if job.reference is not None:
        gpu.keep.add(job.reference.cubin_path)
        return gpu.load(job.reference, job.spec)[1]
    return _python_reference(job.spec)


def _reference_outputs(gpu: Gpu, job: HarnessJob, ref, size_index: int, data: CaseData,
                       stage: Stage) -> dict[str, np.ndarray]:
    if job.reference is not None:
        return _run_once(gpu, ref, job.reference.launches[size_index], job.spec, data)
    with stage.off_gpu(), stage.phase("python_reference"):
        return _python_outputs(ref, job.spec, data)


def _check_case(spec: TaskSpec, size_index: int, sizes: dict, seed: int, data: CaseData,
                out: dict[str, np.ndarray], ref_out: dict[str, np.ndarray]):
    checks = []
    for a in spec.args:
        if a.role in ("output", "inout"):
            tol = spec.tolerance(a.dtype)
            checks.append(check_output(a.name, out[a.name], ref_out[a.name], a.dtype, tol.atol, tol.rtol,
                                       poisonable=a.role == "output"))
    # the host arrays are never written (launches upload copies), so they are the "before"
    modified = [a.name for a in spec.args if a.role == "input" and not np.array_equal(
        data.arrays[a.name].view(np.uint8), out[a.name].view(np.uint8))]
    return summarize(size_index, sizes, seed, checks, modified)


def _new_case(gpu: Gpu, spec: TaskSpec, sizes: dict, seed: int, constants: dict):
    """A case's device buffers: drawn on the GPU when gpu_ops is loaded, else drawn on the host and uploaded."""
    if gpu.ops is not None:
        from .device_case import FilledCase

        return FilledCase(gpu, spec, sizes, seed, constants)
    return DeviceCase(gpu, spec, make_case(spec, sizes, seed, constants), seed)


def _reference_into(gpu: Gpu, job: HarnessJob, ref, size_index: int, case, stage: Stage) -> None:
    """Run the reference on a FilledCase: the seed kernel in place, or the Python function on
    the case's inputs brought to the host, its outputs written back."""
    if job.reference is not None:
        try:
            _launch(gpu, ref, job.reference.launches[size_index], case.args())
            gpu.stream.synchronize()
        except gpu.drv.Error as e:
            raise KernelFault(str(e)) from None
    else:
        data = case.host_data()
        with stage.off_gpu(), stage.phase("python_reference"):
            outs = _python_outputs(ref, job.spec, data)
        case.upload(outs)


def _verify_on_device(gpu: Gpu, job: HarnessJob, stage: Stage, result: HarnessResult, ref, cand,
                      keep: dict) -> bool:
    """As :func:`verify`, on the device. The reference's case at the timing size stays in
    ``keep["timing_ref"]``: timing input set 0 is drawn from the same seed, so the timed launches
    are checked against it without running the reference again."""
    from .device_case import judge

    spec = job.spec
    for case in job.cases:
        sizes = spec.all_size_sets[case.size_index]
        stage(f"reference at sizes {sizes} (seed {case.seed})")
        ref_case = _new_case(gpu, spec, sizes, case.seed, job.candidate.constants)
        cand_case = None
        try:
            try:
                _reference_into(gpu, job, ref, case.size_index, ref_case, stage)
            except Exception as e:
                _reference_failure(result, sizes, e)
                return False
            stage(f"candidate at sizes {sizes} (seed {case.seed})")
            cand_case = _new_case(gpu, spec, sizes, case.seed, job.candidate.constants)
            try:
                _launch(gpu, cand, job.candidate.launches[case.size_index], cand_case.args())
                gpu.stream.synchronize()
            except gpu.drv.Error as e:
                _launch_failure(result, sizes, str(e))
                return False
            check = judge(gpu, spec, case.size_index, sizes, cand_case, ref_case)
            if case.size_index == 0 and check.passed:
                if keep.get("timing_ref") is not None:
                    _free(gpu, keep["timing_ref"])
                keep["timing_ref"], ref_case = ref_case, None
        finally:
            for c in (ref_case, cand_case):
                if c is not None:
                    _free(gpu, c)
        result.checks.append(check)
        if not check.passed:
            result.status, result.message = "wrong_output", check.message
            return False
    return True


def _reference_failure(result: HarnessResult, sizes: dict, e: Exception) -> None:
    """The seed reference kernel faulted (KernelFault), or the user's Python reference raised."""
    result.status = "reference_error"
    if isinstance(e, KernelFault):
        result.message = f"the reference kernel failed at sizes {sizes}: {e}"
    else:
        result.message = f"the Python reference failed at sizes {sizes}: {type(e).__name__}: {e}"


def _launch_failure(result: HarnessResult, sizes: dict, msg: str) -> None:
    launch_problem = any(s in msg.lower() for s in ("invalid argument", "out of resources", "too many resources", "invalid value"))
    result.status = "launch_error" if launch_problem else "runtime_error"
    result.message = f"at sizes {sizes}: {msg}"


def verify(gpu: Gpu, job: HarnessJob, stage: Stage, result: HarnessResult, ref, keep: dict | None = None) -> bool:
    """``ref``: :func:`_reference_fn`'s result, loaded once per child."""
    spec = job.spec
    sizes_all = spec.all_size_sets
    _, cand = gpu.load(job.candidate, spec)
    if gpu.ops is not None:
        return _verify_on_device(gpu, job, stage, result, ref, cand, {} if keep is None else keep)
    for case in job.cases:
        sizes = sizes_all[case.size_index]
        data = make_case(spec, sizes, case.seed, job.candidate.constants)
        stage(f"reference at sizes {sizes} (seed {case.seed})")
        try:
            ref_out = _reference_outputs(gpu, job, ref, case.size_index, data, stage)
        except Exception as e:
            _reference_failure(result, sizes, e)
            return False
        stage(f"candidate at sizes {sizes} (seed {case.seed})")
        try:
            out = _run_once(gpu, cand, job.candidate.launches[case.size_index], spec, data)
        except KernelFault as e:
            _launch_failure(result, sizes, str(e))
            return False
        check = _check_case(spec, case.size_index, sizes, case.seed, data, out, ref_out)
        result.checks.append(check)
        if not check.passed:
            result.status, result.message = "wrong_output", check.message
            return False
    return True


def time_kernels(gpu: Gpu, job: HarnessJob, stage: Stage, binaries: list[KernelBinary],
                 seed0: int | None = None) -> tuple[list[TimingResult], object]:
    """Time one kernel, or several interleaved (round r launches each once, the order rotating
    every round) on the same input sets, so that clocks, temperature and neighbours affect
    them alike: that is how a final speedup is measured.

    Outputs are poisoned again before every launch (outside the timed region), and the first
    kernel's input set 0 is returned, still on the device (the caller frees it): alone, its
    outputs are what the last timed launch on that set wrote; interleaved, what one more launch
    after timing writes. The caller checks them against the reference, so a kernel that is right
    while verified and idle while timed (it counts its launches) does not pass."""
    spec, drv = job.spec, gpu.drv
    tcfg = spec.timing
    sizes = spec.timing_sizes
    kernels = [(gpu.load(kb, spec)[1], kb.launches[0]) for kb in binaries]
    base_seed = (job.cases[0].seed if job.cases else 0) + 7919
    stage(f"timing: preparing input sets at sizes {sizes}")
    sets = [_new_case(gpu, spec, sizes, base_seed if seed0 is None else seed0, job.candidate.constants)]
    set_bytes = sum(sets[0].nbytes(n) for n in sets[0].bufs)
    n_sets = 1
    if set_bytes < gpu.l2_bytes:  # inputs fit in L2: rotate among several sets
        n_sets = int(min(8, max(2, math.ceil(2 * gpu.l2_bytes / max(set_bytes, 1)))))
    sets += [_new_case(gpu, spec, sizes, base_seed + i, job.candidate.constants) for i in range(1, n_sets)]
    restored = [a.name for a in spec.args if a.role in ("inout", "output")]   # before each launch: inputs, poison
    pristine = [{n: _copy_on_device(gpu, s.bufs[n], s.nbytes(n)) for n in restored} for s in sets]
    args = [s.args() for s in sets]
    flush = None
    flush_words = 0
    if tcfg.flush_l2:
        flush_words = max(1, (2 * gpu.l2_bytes) // 4)
        flush = drv.mem_alloc(flush_words * 4)

    def reset(i):
        for n in restored:
            drv.memcpy_dtod_async(sets[i].bufs[n], pristine[i][n], sets[i].nbytes(n), gpu.stream)

    try:
        stage(f"timing: warm-up at sizes {sizes}")
        start, end = drv.Event(), drv.Event()
        warm = 0
        t_begin = time.perf_counter()
        est = [1e-3] * len(kernels)
        while warm < 3 * len(kernels) or (time.perf_counter() - t_begin) * 1e3 < tcfg.warmup_ms:
            i, k = (warm // len(kernels)) % n_sets, warm % len(kernels)
            reset(i)
            start.record(gpu.stream)
            _launch(gpu, kernels[k][0], kernels[k][1], args[i])
            end.record(gpu.stream)
            end.synchronize()
            est[k] = end.time_since(start)
            warm += 1
            if warm >= 1000 * len(kernels):
                break
        reps = int(min(tcfg.max_reps, max(tcfg.min_reps, math.ceil(tcfg.target_ms / max(max(est), 1e-3)))))
        # One kernel alone stops early once its median is precise (tcfg.precision), checked after
        # min_reps and then every chunk; interleaved kernels (a final speedup) always run all reps.
        early = tcfg.precision > 0 and len(kernels) == 1
        chunk = max(tcfg.min_reps, 10)
        stage(f"timing: up to {reps} repetitions at sizes {sizes}" + (f", {len(kernels)} kernels interleaved" if len(kernels) > 1 else ""))
        events = [[(drv.Event(), drv.Event()) for _ in range(reps)] for _ in kernels]
        samples: list[list[float]] = [[] for _ in kernels]
        r = 0
        while r < reps:
            i = r % n_sets
            for j in range(len(kernels)):
                k = (r + j) % len(kernels)
                fn, launch = kernels[k]
                s_ev, e_ev = events[k][r]
                reset(i)
                if flush is not None:        # after the reset: the timed launch starts with a cold L2
                    drv.memset_d32_async(flush, (r * len(kernels) + j) & 0xFFFF, flush_words, gpu.stream)
                s_ev.record(gpu.stream)
                _launch(gpu, fn, launch, args[i])
                e_ev.record(gpu.stream)
            r += 1
            if len(kernels) > 1:
                gpu.stream.synchronize()          # keep the rounds from piling up on the queue
            elif early and r >= tcfg.min_reps and (r % chunk == 0 or r == reps):
                gpu.stream.synchronize()
                samples[0] += [e.time_since(s) for s, e in events[0][len(samples[0]):r]]
                if median_ci_rel(samples[0]) <= tcfg.precision:
                    break
        gpu.stream.synchronize()
        for k, evs in enumerate(events):
            samples[k] += [e.time_since(s) for s, e in evs[len(samples[k]):r]]
        if len(kernels) > 1:                  # set 0 holds whichever kernel ran last: once more
            reset(0)
            _launch(gpu, kernels[0][0], kernels[0][1], args[0])
            gpu.stream.synchronize()
    except drv.Error as e:
        raise KernelFault(str(e)) from None
    finally:
        for s in sets[1:]:
            _free(gpu, s)
        for p in pristine:
            for b in p.values():
                _free(gpu, b)
        if flush is not None:
            _free(gpu, flush)
    return [timing_stats(sm, warm, n_sets, flush is not None) for sm in samples], sets[0]


def _free(gpu: Gpu, thing) -> None:
    try:
        thing.free()
    except gpu.drv.Error:
        pass


def profile_once(gpu: Gpu, job: HarnessJob, stage: Stage, outer: str | None = None) -> None:
    """One warm-up launch, then one launch inside the NVTX range ncu is told to profile
    (``optiml.profile.<tag>``, itself inside ``optiml.profile.<outer>`` when given)."""
    import nvtx

    spec = job.spec
    _, fn = gpu.load(job.candidate, spec)
    base_seed = (job.cases[0].seed if job.cases else 0) + 7919
    dc = _new_case(gpu, spec, spec.timing_sizes, base_seed, job.candidate.constants)
    launch = job.candidate.launches[0]
    stage("profiling: warm-up launch")
    _launch(gpu, fn, launch, dc.args())
    gpu.stream.synchronize()
    if gpu.ops is not None:     # the inputs again and poisoned outputs
        dc.refill()
        gpu.drv.Context.synchronize()
    else:
        dc.upload()
    stage("profiling: profiled launch")
    with (nvtx.annotate(f"optiml.profile.{outer}", domain="optiml") if outer else contextlib.nullcontext()):
        with nvtx.annotate(f"optiml.profile.{job.profile_tag}", domain="optiml"):
            _launch(gpu, fn, launch, dc.args())
            gpu.stream.synchronize()
    dc.free()


def _wait_for_file(d: Path, name: str, ppid: int) -> bool:
    """Until ``d/name`` exists (True), or ``d/quit`` does or process ``ppid`` (optiml) is gone (False)."""
    n = 0
    while not (d / name).exists():
        if (d / "quit").exists():
            return False
        n += 1
        if n % 500 == 0:                  # about once a second
            try:
                os.kill(ppid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                pass
        time.sleep(0.002)
    return True


def profile_batch(workdir: str, device: int, outer: str, ppid: int) -> int:
    """Profile mode for several candidates under one ncu process, started ahead of its jobs: the
    child opens its context on ``device`` first, then waits for ``WORKDIR/jobs.pkl``
    (``[(tag, HarnessJob), ...]``; ``WORKDIR/quit``, or optiml's process ``ppid`` gone, ends it),
    loads every kernel, writes ``WORKDIR/ready`` and waits for ``WORKDIR/go`` (the parent holds
    the GPU from then on), then launches each candidate once to warm up and once inside NVTX
    range ``optiml.profile.<tag>`` within ``optiml.profile.<outer>`` (ncu's filter, fixed when it
    started), appending the tag to ``WORKDIR/done.txt`` as each one is through;
    ``WORKDIR/finished`` says it is over. A fault stops the batch (the rest are not profiled)."""
    d = Path(workdir)
    stage = Stage(d / "stage.txt")
    gpu, failed = _open_gpu(device)
    if gpu is None:
        (d / "error.txt").write_text(failed.message)
        (d / "ready").write_text("")
        return 1
    try:
        if not _wait_for_file(d, "jobs.pkl", ppid):
            return 0
        jobs = pickle.loads((d / "jobs.pkl").read_bytes())
        gpu.enable_ops(jobs[0][1].ops_cubin)
        for _, job in jobs:
            gpu.load(job.candidate, job.spec)
        (d / "ready").write_text("")
        if not _wait_for_file(d, "go", ppid):
            return 0
        with open(d / "done.txt", "a") as done:
            for tag, job in jobs:
                try:
                    profile_once(gpu, replace(job, profile_tag=tag), stage, outer=outer)
                except (KernelFault, gpu.drv.Error) as e:
                    (d / "error.txt").write_text(f"{tag}: {e}")
                    break
                done.write(tag + "\n")
                done.flush()
        return 0
    finally:
        (d / "finished").write_text("")
        gpu.close()


def _copy_on_device(gpu: Gpu, src, nbytes: int):
    dst = gpu.drv.mem_alloc(max(nbytes, 1))
    if nbytes:
        gpu.drv.memcpy_dtod(dst, src, nbytes)
    return dst


def run_job(gpu: Gpu, job: HarnessJob, stage: Stage) -> HarnessResult:
    """Verify, then time (and check the timed launches), or profile: one job in an open context."""
    result = HarnessResult(status="ok", device_name=gpu.name, device_pci=gpu.pci)
    gpu.enable_ops(job.ops_cubin)
    if job.profile_tag:
        try:
            profile_once(gpu, job, stage)
        except (KernelFault, gpu.drv.Error) as e:
            result.status, result.message = "runtime_error", f"while profiling: {e}"
        return result
    keep: dict = {}
    stage.phases = {}
    try:
        try:
            with stage.phase("verify"):
                ref = _reference_fn(gpu, job)
                ok = verify(gpu, job, stage, result, ref, keep)
        except gpu.drv.Error as e:  # loading the module or function
            result.status, result.message = "launch_error", f"could not load the kernel: {e}"
            return result
        if ok and job.time_it:
            try:
                binaries = [job.candidate] + ([job.baseline] if job.baseline is not None else [])
                ref0 = keep.get("timing_ref")
                with stage.phase("time"):
                    timings, set0 = time_kernels(gpu, job, stage, binaries, seed0=ref0.seed if ref0 is not None else None)
                result.timing = timings[0]
                result.baseline_timing = timings[1] if len(timings) > 1 else None
                try:
                    with stage.phase("check_timed"):
                        _check_after_timing(gpu, job, stage, result, ref, set0, ref0)
                finally:
                    _free(gpu, set0)
            except KernelFault as e:
                result.status, result.message = "runtime_error", f"while timing: {e}"
        stage("done")
        return result
    finally:
        if keep.get("timing_ref") is not None:
            _free(gpu, keep["timing_ref"])
        result.phases = {k: round(v, 6) for k, v in stage.phases.items()}


def _open_gpu(device: int) -> tuple[Gpu | None, HarnessResult | None]:
    try:
        return Gpu(device), None
    except ImportError:
        return None, HarnessResult("harness_error", "pycuda is not installed; install optiml with the gpu extra "
                                   "(pip install 'optiml-kernels[gpu]')")
    except Exception as e:
        return None, HarnessResult("harness_error", f"could not open GPU {device}: {e}")


def main(jobdir: str) -> int:
    """One job in a fresh process: ``JOBDIR/job.pkl`` in, ``JOBDIR/result.json`` out."""
    d = Path(jobdir)
    stage = Stage(d / "stage.txt")
    job: HarnessJob = pickle.loads((d / "job.pkl").read_bytes())
    stage("initialising CUDA")
    gpu, failed = _open_gpu(job.device)
    if gpu is None:
        return _write(d / "result.json", failed)
    try:
        return _write(d / "result.json", run_job(gpu, job, stage))
    finally:
        gpu.close()


def serve(workdir: str, ctrl_fd: int, device: int) -> int:
    """The persistent worker: one CUDA context for many jobs. Reads job numbers from stdin, runs
    ``WORKDIR/job-N.pkl``, writes ``WORKDIR/result-N.json`` and answers ``done N`` on ``ctrl_fd``.
    A job that faulted (its context may be unusable) is the last: the worker exits after it and
    the parent starts a fresh one."""
    d = Path(workdir)
    ctrl = os.fdopen(ctrl_fd, "w", buffering=1)
    stage = Stage(d / "stage.txt", ctrl=ctrl, stdin=sys.stdin)
    stage("initialising CUDA")
    gpu, failed = _open_gpu(device)
    try:
        while line := sys.stdin.readline():
            n = line.strip()
            if not n:
                continue
            job: HarnessJob = pickle.loads((d / f"job-{n}.pkl").read_bytes())
            if gpu is None:
                result = failed
            elif job.device != device:
                result = HarnessResult("harness_error", f"this worker holds GPU {device}, the job asks for {job.device}")
            else:
                result = run_job(gpu, job, stage)
            _write(d / f"result-{n}.json", result)
            fault = gpu is None or result.status in FAULTS
            ctrl.write(f"done {n}{' exit' if fault else ''}\n")
            if fault:
                break
            gpu.unload_candidates()
    finally:
        if gpu is not None:
            gpu.close()
    return 0


# after these the context may be broken (a sticky CUDA error): the persistent worker exits
FAULTS = frozenset({"runtime_error", "launch_error", "timeout", "harness_error", "reference_error"})


def _check_after_timing(gpu: Gpu, job: HarnessJob, stage: Stage, result: HarnessResult, ref, set0,
                        ref0=None) -> None:
    """The timed launches must be right too: compare what the candidate wrote on input set 0
    while timed with the reference on that set (``ref0``: the reference's outputs on it, kept
    from verification)."""
    spec = job.spec
    stage(f"checking the timed launches at sizes {spec.timing_sizes}")
    if gpu.ops is not None:
        from .device_case import judge

        if ref0 is not None and ref0.seed == set0.seed:
            check = judge(gpu, spec, 0, spec.timing_sizes, set0, ref0)
        else:
            ref_case = _new_case(gpu, spec, spec.timing_sizes, set0.seed, job.candidate.constants)
            try:
                try:
                    _reference_into(gpu, job, ref, 0, ref_case, stage)
                except Exception as e:
                    _timing_reference_failure(result, e)
                    return
                check = judge(gpu, spec, 0, spec.timing_sizes, set0, ref_case)
            finally:
                _free(gpu, ref_case)
    else:
        data, out = set0.data, set0.download()
        try:
            ref_out = _reference_outputs(gpu, job, ref, 0, data, stage)
        except Exception as e:
            _timing_reference_failure(result, e)
            return
        check = _check_case(spec, 0, spec.timing_sizes, set0.seed, data, out, ref_out)
    result.checks.append(check)
    if not check.passed:
        result.status = "wrong_output"
        result.message = f"the outputs of the timed launches are wrong (verified launches were right): {check.message}"


def _timing_reference_failure(result: HarnessResult, e: Exception) -> None:
    # the reference passed on these sizes during verification: this is unexpected
    result.status, result.message = "reference_error", f"the reference failed on the timing inputs: {e}"


def _write(path: Path, result: HarnessResult) -> int:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result.to_dict()))
    os.replace(tmp, path)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--serve":        # --serve WORKDIR CTRL_FD DEVICE
        sys.exit(serve(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
    if sys.argv[1] == "--profile-batch":     # --profile-batch WORKDIR DEVICE OUTER PPID (run under ncu)
        sys.exit(profile_batch(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])))
    sys.exit(main(sys.argv[1]))
