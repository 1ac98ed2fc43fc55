"""The child side of the GPU harness: ``python -m optiml.verify.worker JOBDIR``.

Reads ``JOBDIR/job.pkl`` (a :class:`HarnessJob`), writes its current stage to
``JOBDIR/stage.txt`` as it goes, and its :class:`HarnessResult` to ``JOBDIR/result.json``.
``--serve`` keeps one context for many jobs (:func:`serve`); ``--profile-batch`` is the mode ncu
runs (:mod:`.profiled`). Verification is here; the context and buffers are in :mod:`.gpu`, timing
in :mod:`.gpu_timing`.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import pickle
import sys
from dataclasses import replace
from pathlib import Path
from typing import Callable, Protocol

import numpy as np

from .. import dtypes as _dt
from ..spec import Launch, TaskSpec
from .compare import CaseCheck, check_output, summarize
from .frameworks import DeviceFunction, FrameworkMissing, returned_values
from .gpu import DeviceCase, Gpu, KernelFault, Stage, baseline_faults, _free, _launch, _new_case, _open_gpu
from .harness import HarnessJob, HarnessResult, RivalResult
from .inputs import CaseData, make_case
from .profiled import profile_batch
from .gpu_timing import time_kernels
from ..status import GPU_FAULTS, Status


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
    out = {}
    for a, v in zip(outs, returned_values(result, [a.name for a in outs])):
        shape = data.arrays[a.name].shape
        v = np.asarray(v)
        if v.size != math.prod(shape):
            raise ValueError(f"the reference's {a.name} has {v.size} elements, the spec's shape {shape} has {math.prod(shape)}")
        out[a.name] = _dt.to_storage(v.reshape(shape), a.dtype)
    return out


def _reference_fn(gpu: Gpu, job: HarnessJob):
    """The seed reference kernel, the user's Python reference function, or (torch, cupy) the
    user's function on GPU arrays (:class:`.frameworks.DeviceFunction`), loaded once per child."""
    if job.reference is not None:
        gpu.keep.add(job.reference.cubin_path)
        return gpu.load(job.reference, job.spec)[1]
    ref = job.spec.reference
    if ref.on_gpu:
        return _device_function(gpu, ref.kind, ref.path, ref.function)
    return _python_reference(job.spec)


def _device_function(gpu: Gpu, kind: str, path, name: str):
    """The user's function on GPU arrays, loaded once per child."""
    key = (kind, str(path), name)
    if key not in gpu.device_functions:
        gpu.device_functions[key] = DeviceFunction(kind, Path(path), name, gpu)
    return gpu.device_functions[key]


def _is_device_function(ref) -> bool:
    return isinstance(ref, DeviceFunction)


def _reference_outputs(gpu: Gpu, job: HarnessJob, ref, size_index: int, data: CaseData,
                       stage: Stage) -> dict[str, np.ndarray]:
    if job.reference is not None:
        return _run_once(gpu, ref, job.reference.launches[size_index], job.spec, data)
    if _is_device_function(ref):            # the host path (no gpu_ops): its inputs go up, its outputs down
        dc = DeviceCase(gpu, job.spec, data)
        try:
            with stage.phase("gpu_reference"):
                ref(job.spec, dc)
            outs = dc.download()
            return {a.name: outs[a.name] for a in job.spec.args if a.role in ("output", "inout")}
        finally:
            dc.free()
    with stage.off_gpu(), stage.phase("python_reference"):
        return _python_outputs(ref, job.spec, data)


def _check_case(spec: TaskSpec, size_index: int, sizes: dict, seed: int, data: CaseData,
                out: dict[str, np.ndarray], ref_out: dict[str, np.ndarray]):
    checks = []
    for a in spec.args:
        if a.role in ("output", "inout"):
            tol = spec.tolerance(a.dtype)
            checks.append(check_output(a.name, out[a.name], ref_out[a.name], a.dtype, tol.atol, tol.rtol,
                                       poisonable=a.role == "output", rel_rms=tol.rel_rms))
    # the host arrays are never written (launches upload copies), so they are the "before"
    modified = [a.name for a in spec.args if a.role == "input" and not np.array_equal(
        data.arrays[a.name].view(np.uint8), out[a.name].view(np.uint8))]
    return summarize(size_index, sizes, seed, checks, modified)


def _reference_into(gpu: Gpu, job: HarnessJob, ref, size_index: int, case, stage: Stage) -> None:
    """Run the reference on a FilledCase: the seed kernel in place, or the Python function on
    the case's inputs brought to the host, its outputs written back."""
    if job.reference is not None:
        try:
            _launch(gpu, ref, job.reference.launches[size_index], case.args())
            gpu.stream.synchronize()
        except gpu.drv.Error as e:
            raise KernelFault(str(e)) from None
    elif _is_device_function(ref):          # on the case's own buffers: nothing leaves the device
        with stage.phase("gpu_reference"):
            ref(job.spec, case)
    else:
        data = case.host_data()
        with stage.off_gpu(), stage.phase("python_reference"):
            outs = _python_outputs(ref, job.spec, data)
        case.upload(outs)


def _reference_failure(result: HarnessResult, sizes: dict, e: Exception) -> None:
    """The seed reference kernel faulted (KernelFault), or the user's Python reference raised."""
    result.status = Status.REFERENCE_ERROR
    if isinstance(e, KernelFault):
        result.message = f"the reference kernel failed at sizes {sizes}: {e}"
    else:
        result.message = f"the Python reference failed at sizes {sizes}: {type(e).__name__}: {e}"


class _Unloadable(Exception):
    """A baseline function that could not be loaded (its cause is why)."""


def _missing(e: Exception) -> bool:
    return isinstance(e, FrameworkMissing)


def _launch_failure(result: HarnessResult, sizes: dict, msg: str) -> None:
    launch_problem = any(s in msg.lower() for s in ("invalid argument", "out of resources", "too many resources", "invalid value"))
    result.status = Status.LAUNCH_ERROR if launch_problem else Status.RUNTIME_ERROR
    result.message = f"at sizes {sizes}: {msg}"


class CaseBuffers(Protocol):
    """One verification case's buffers, the reference's and the candidate's: what the loop in
    :func:`verify` needs, on the host (:class:`HostCase`) or on the device (:class:`DeviceCasePair`)."""

    def reference_case(self) -> None:
        """Make the reference's buffers (before the reference runs; a failure here is not the reference's)."""

    def run_reference(self, ref, stage: Stage) -> None:
        """Run the reference (the seed kernel, or the Python function); it may raise anything."""

    def candidate_case(self) -> None:
        """Make the candidate's buffers."""

    def run_candidate(self, fn) -> None:
        """Launch the candidate; a launch or kernel failure is a KernelFault."""

    def judge(self) -> CaseCheck:
        """The candidate's outputs against the reference's, and its inputs against what they held."""

    def keep_reference(self, keep: dict) -> None:
        """Keep the reference's outputs at the timing size for the timed launches' check (in ``keep``)."""

    def free(self) -> None:
        """Free what it holds (a kept reference stays)."""


class HostCase:
    """Inputs drawn on the host; each run uploads copies, so the host arrays are the "before"."""

    def __init__(self, gpu: Gpu, job: HarnessJob, case, sizes: dict):
        self.gpu, self.job, self.case, self.sizes = gpu, job, case, sizes
        self.data = make_case(job.spec, sizes, case.seed, job.candidate.constants)
        self.ref_out = self.out = None

    def reference_case(self) -> None:
        pass

    def run_reference(self, ref, stage: Stage) -> None:
        self.ref_out = _reference_outputs(self.gpu, self.job, ref, self.case.size_index, self.data, stage)

    def candidate_case(self) -> None:
        pass

    def run_candidate(self, fn) -> None:
        if _is_device_function(fn):          # a baseline function: on the case's data uploaded
            dc = DeviceCase(self.gpu, self.job.spec, self.data)
            try:
                _call_function(fn, self.job.spec, dc)
                self.out = dc.download()
            finally:
                dc.free()
            return
        self.out = _run_once(self.gpu, fn, self.job.candidate.launches[self.case.size_index], self.job.spec, self.data)

    def judge(self) -> CaseCheck:
        return _check_case(self.job.spec, self.case.size_index, self.sizes, self.case.seed, self.data, self.out,
                           self.ref_out)

    def keep_reference(self, keep: dict) -> None:
        pass      # the timed launches' check runs the reference again on the host path

    def free(self) -> None:
        pass


class DeviceCasePair:
    """Inputs drawn on the device (gpu_ops), the reference's and the candidate's case each of
    their own, compared on the device. The reference's case at the timing size can be kept:
    timing input set 0 is drawn from the same seed, so the timed launches are checked against it
    without running the reference again."""

    def __init__(self, gpu: Gpu, job: HarnessJob, case, sizes: dict):
        self.gpu, self.job, self.case, self.sizes = gpu, job, case, sizes
        self.ref_case = self.cand_case = None

    def _new(self):
        return _new_case(self.gpu, self.job.spec, self.sizes, self.case.seed, self.job.candidate.constants)

    def reference_case(self) -> None:
        self.ref_case = self._new()

    def run_reference(self, ref, stage: Stage) -> None:
        _reference_into(self.gpu, self.job, ref, self.case.size_index, self.ref_case, stage)

    def candidate_case(self) -> None:
        self.cand_case = self._new()

    def run_candidate(self, fn) -> None:
        if _is_device_function(fn):
            _call_function(fn, self.job.spec, self.cand_case)
            return
        try:
            _launch(self.gpu, fn, self.job.candidate.launches[self.case.size_index], self.cand_case.args())
            self.gpu.stream.synchronize()
        except self.gpu.drv.Error as e:
            raise KernelFault(str(e)) from None


    def judge(self) -> CaseCheck:
        from .device_case import judge

        return judge(self.gpu, self.job.spec, self.case.size_index, self.sizes, self.cand_case, self.ref_case)

    def keep_reference(self, keep: dict) -> None:
        if keep.get("timing_ref") is not None:
            _free(self.gpu, keep["timing_ref"])
        keep["timing_ref"], self.ref_case = self.ref_case, None

    def free(self) -> None:
        for c in (self.ref_case, self.cand_case):
            if c is not None:
                _free(self.gpu, c)
        self.ref_case = self.cand_case = None


def _call_function(fn, spec, case) -> None:
    """A baseline function in a candidate's place: anything it raises is its failure (a KernelFault)."""
    with baseline_faults():
        fn(spec, case)


def verify(gpu: Gpu, job: HarnessJob, stage: Stage, result: HarnessResult, ref, keep: dict | None = None) -> bool:
    """Run the reference and the candidate on every case and judge each, stopping at the first
    failure (a status on ``result``). ``ref``: :func:`_reference_fn`'s result, loaded once per
    child. With the gpu_ops kernels the data is drawn and compared on the device, and the
    reference's outputs at the timing size stay in ``keep["timing_ref"]``."""
    if job.function is not None:           # a [baseline]: its function in the candidate's place
        f = job.function
        try:
            cand = _device_function(gpu, f.framework, f.path, f.name)
        except Exception as e:             # its framework or its file: the baseline's failure, said as such
            raise _Unloadable(e) from e
    else:
        _, cand = gpu.load(job.candidate, job.spec)
    buffers = DeviceCasePair if gpu.ops is not None else HostCase
    return verify_cases(job, stage, result, lambda case, sizes: buffers(gpu, job, case, sizes), ref, cand,
                        {} if keep is None else keep)


def verify_cases(job: HarnessJob, stage: Stage, result: HarnessResult, buffers: Callable[..., CaseBuffers],
                 ref, cand, keep: dict) -> bool:
    """:func:`verify`'s loop over the job's cases, each in the buffers ``buffers(case, sizes)`` makes."""
    for case in job.cases:
        sizes = job.spec.all_size_sets[case.size_index]
        pair = buffers(case, sizes)
        try:
            stage(f"reference at sizes {sizes} (seed {case.seed})")
            pair.reference_case()
            try:
                pair.run_reference(ref, stage)
            except Exception as e:
                _reference_failure(result, sizes, e)
                return False
            stage(f"candidate at sizes {sizes} (seed {case.seed})")
            pair.candidate_case()
            try:
                pair.run_candidate(cand)
            except KernelFault as e:
                _launch_failure(result, sizes, str(e))
                return False
            check = pair.judge()
            if case.size_index == 0 and check.passed:
                pair.keep_reference(keep)
        finally:
            pair.free()
        result.checks.append(check)
        if not check.passed:
            result.status, result.message = Status.WRONG_OUTPUT, check.message
            return False
    return True


def run_job(gpu: Gpu, job: HarnessJob, stage: Stage) -> HarnessResult:
    """Verify, then time (and check the timed launches): one job in an open context (profiling runs
    under ncu in :func:`optiml.verify.profiled.profile_batch`)."""
    result = HarnessResult(status=Status.OK, device_name=gpu.name, device_pci=gpu.pci)
    gpu.enable_ops(job.ops_cubin)
    keep: dict = {}
    stage.phases = {}
    try:
        try:
            with stage.phase("verify"):
                try:
                    ref = _reference_fn(gpu, job)
                except gpu.drv.Error:
                    raise
                except Exception as e:        # torch or CuPy missing, the user's file does not load
                    result.status = Status.REFERENCE_ERROR
                    result.message = f"could not load the reference: {e}" if not _missing(e) else f"{e}."
                    return result
                try:
                    ok = verify(gpu, job, stage, result, ref, keep)
                except _Unloadable as u:    # the baseline's function does not load (its framework, its file)
                    e = u.__cause__
                    result.status = Status.RUNTIME_ERROR
                    result.message = f"could not load the baseline: {e}" if not _missing(e) else f"{e}."
                    return result
        except gpu.drv.Error as e:  # loading the module or function
            result.status, result.message = Status.LAUNCH_ERROR, f"could not load the kernel: {e}"
            return result
        if ok and job.time_it and job.function is not None:
            _time_the_function(gpu, job, stage, result, ref, keep)
        elif ok and job.time_it:
            try:
                based = job.baseline is not None
                binaries = [job.candidate] + ([job.baseline] if based else []) + list(job.rivals)
                ref0 = keep.get("timing_ref")
                vendor = []
                if job.vendor is not None:      # a vendor that does not load leaves the timing as it was
                    try:
                        vendor = [_device_function(gpu, job.vendor.framework, job.vendor.path, job.vendor.name)]
                    except Exception as e:
                        result.vendor_message = f"the baseline function could not be loaded: {type(e).__name__}: {e}"
                with stage.phase("time"):
                    timings, set0, result.clocks = time_kernels(gpu, job, stage, binaries,
                                                                seed0=ref0.seed if ref0 is not None else None,
                                                                functions=vendor)
                if vendor:
                    result.vendor_timing = timings.pop()
                result.timing = timings[0]
                result.baseline_timing = timings[1] if based else None
                _check_timed_set(gpu, job, stage, result, ref, set0, ref0)
            except KernelFault as e:
                result.status, result.message = Status.RUNTIME_ERROR, f"while timing: {e}"
            if result.status == Status.OK and job.rivals:
                with stage.phase("verify_rivals"):
                    _verify_rivals(gpu, job, stage, result, ref, timings[1 + based:])
        stage("done")
        return result
    finally:
        if keep.get("timing_ref") is not None:
            _free(gpu, keep["timing_ref"])
        result.phases = {k: round(v, 6) for k, v in stage.phases.items()}


def _time_the_function(gpu: Gpu, job: HarnessJob, stage: Stage, result: HarnessResult, ref, keep: dict) -> None:
    """Time a baseline function as a kernel alone is timed, and check what its last call wrote."""
    from .gpu_timing import time_function

    fn = _device_function(gpu, job.function.framework, job.function.path, job.function.name)
    ref0 = keep.get("timing_ref")
    try:
        with stage.phase("time"):
            result.timing, set0 = time_function(gpu, job, stage, fn, seed0=ref0.seed if ref0 is not None else None)
        _check_timed_set(gpu, job, stage, result, ref, set0, ref0)
    except KernelFault as e:
        result.status, result.message = Status.RUNTIME_ERROR, f"while timing: {e}"
    except Exception as e:            # the function raised while timed
        result.status = Status.RUNTIME_ERROR
        result.message = f"while timing: the baseline function raised {type(e).__name__}: {e}"


def _verify_rivals(gpu: Gpu, job: HarnessJob, stage: Stage, result: HarnessResult, ref, timings) -> None:
    """Verify each of the job's rivals on the job's cases after the timing (so a rival idle
    while timed is caught as the candidate is), keeping its timing only if it passes
    (``result.rivals``). A rival that faults ends the job with its status (the context may be
    broken: the persistent worker exits after such a job)."""
    for n, (kb, timing) in enumerate(zip(job.rivals, timings), 1):
        own = HarnessResult(status=Status.OK)
        keep: dict = {}
        try:
            ok = verify(gpu, replace(job, candidate=kb), stage, own, ref, keep)
        except gpu.drv.Error as e:
            own.status, own.message, ok = Status.LAUNCH_ERROR, f"could not load the kernel: {e}", False
        finally:
            if keep.get("timing_ref") is not None:
                _free(gpu, keep["timing_ref"])
        result.rivals.append(RivalResult(own.status, own.message, timing if ok else None))
        if own.status in GPU_FAULTS:
            result.status, result.message = own.status, f"rival {n} of the candidate: {own.message}"
            return


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
                result = HarnessResult(Status.HARNESS_ERROR, f"this worker holds GPU {device}, the job asks for {job.device}")
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
FAULTS = GPU_FAULTS


def _check_timed_set(gpu: Gpu, job: HarnessJob, stage: Stage, result: HarnessResult, ref, set0, ref0) -> None:
    """:func:`_check_after_timing` of the timed input set 0, which is freed afterwards."""
    try:
        with stage.phase("check_timed"):
            _check_after_timing(gpu, job, stage, result, ref, set0, ref0)
    finally:
        _free(gpu, set0)


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
        result.status = Status.WRONG_OUTPUT
        result.message = f"the outputs of the timed launches are wrong (verified launches were right): {check.message}"


def _timing_reference_failure(result: HarnessResult, e: Exception) -> None:
    # the reference passed on these sizes during verification: this is unexpected
    result.status, result.message = Status.REFERENCE_ERROR, f"the reference failed on the timing inputs: {e}"


def _write(path: Path, result: HarnessResult) -> int:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result.to_dict()))
    os.replace(tmp, path)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--serve":        # --serve WORKDIR CTRL_FD DEVICE
        sys.exit(serve(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
    if sys.argv[1] == "--sanitize":         # --sanitize JOBDIR (run under compute-sanitizer)
        from .sanitize_child import sanitize_once

        sys.exit(sanitize_once(sys.argv[2]))
    if sys.argv[1] == "--profile-batch":     # --profile-batch WORKDIR DEVICE OUTER PPID (run under ncu)
        sys.exit(profile_batch(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])))
    sys.exit(main(sys.argv[1]))
