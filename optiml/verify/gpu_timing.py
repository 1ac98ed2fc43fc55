"""Timing on the GPU (worker side): one kernel, or several interleaved in blocks for a final speedup."""
from __future__ import annotations

import ctypes
import math
import time

from .gpu import Gpu, KernelFault, Stage, baseline_faults, _copy_on_device, _free, _launch, _new_case, timing_seed
from .harness import HarnessJob, KernelBinary, TimingResult
from .timing_stats import block_order, block_plan, median_ci_rel, timing_stats


def time_kernels(gpu: Gpu, job: HarnessJob, stage: Stage, binaries: list[KernelBinary],
                 seed0: int | None = None, functions=()) -> tuple[list[TimingResult], object, dict | None]:
    """Time one kernel, or several interleaved on the same input sets so that clocks,
    temperature and neighbours affect them alike: that is how a final speedup is measured.
    Several run in blocks of consecutive repetitions, the blocks alternating between the
    kernels, the order rotating every round (:func:`~optiml.verify.timing_stats.block_plan`
    says how many of each, from each kernel's own time).

    Outputs are poisoned again before every launch (outside the timed region), and the first
    kernel's input set 0 is returned, still on the device (the caller frees it): alone, its
    outputs are what the last timed launch on that set wrote; interleaved, what one more launch
    after timing writes. The caller checks them against the reference, so a kernel that is right
    while verified and idle while timed (it counts its launches) does not pass. The third value:
    interleaved, the GPU's SM clock, temperature and clock-limiting reasons at the start and the
    end, the clock's range over the blocks and the plan (:class:`_Nvml`; the readings None without
    NVML), else None.

    ``functions`` (:class:`.frameworks.DeviceFunction`: a spec's [baseline]) are timed in the same
    rounds after the kernels, each call as :func:`time_function` times one, on the same input sets;
    their timings come last."""
    spec, drv = job.spec, gpu.drv
    tcfg = spec.timing
    sizes = spec.timing_sizes
    kernels = [(gpu.load(kb, spec)[1], kb.launches[0]) for kb in binaries]
    stage(f"timing: preparing input sets at sizes {sizes}")
    ins = _InputSets(gpu, job, seed0)
    sets, n_sets, reset, prepare = ins.sets, ins.n, ins.reset, ins.prepare
    args = [s.args() for s in sets]
    runs = [(lambda i, fn=fn, launch=launch: _launch(gpu, fn, launch, args[i])) for fn, launch in kernels]
    for f in functions:
        calls = [f.arguments(spec, s)[0] for s in sets]

        def call(i, f=f, calls=calls):
            with baseline_faults((drv.Error,)), f._on_stream():     # the user's function: its failure, said as such
                f.fn(**calls[i])
        runs.append(call)
    clocks = None
    done = False
    try:
        stage(f"timing: warm-up at sizes {sizes}")
        start, end = drv.Event(), drv.Event()
        warm = 0
        t_begin = time.perf_counter()
        est = [1e-3] * len(runs)
        while warm < 3 * len(runs) or (time.perf_counter() - t_begin) * 1e3 < tcfg.warmup_ms:
            i, k = (warm // len(runs)) % n_sets, warm % len(runs)
            reset(i)
            start.record(gpu.stream)
            runs[k](i)
            end.record(gpu.stream)
            end.synchronize()
            est[k] = end.time_since(start)
            warm += 1
            if warm >= 1000 * len(runs):
                break
        if len(runs) == 1:
            samples = [_time_alone(gpu, runs[0], tcfg, est[0], n_sets, prepare, stage, sizes)]
            blocks = [None]
            warmups = [warm]
        else:
            probe = _Nvml.open(gpu.pci)
            clocks = {"start": probe.read() if probe else None}
            samples, blocks, warmups = _time_blocks(gpu, runs, tcfg, est, n_sets, prepare, stage, sizes,
                                                    probe, clocks)
            clocks["end"] = probe.read() if probe else None
            if probe:
                probe.close()
            warmups = [warm // len(runs) + w for w in warmups]
            reset(0)                          # set 0 holds whichever ran last: the first kernel once more
            runs[0](0)
            gpu.stream.synchronize()
        done = True
    except drv.Error as e:
        raise KernelFault(str(e)) from None
    finally:
        ins.free(keep_first=done)                    # set 0 goes to the caller only with the timings
    return ([timing_stats(sm, w, n_sets, ins.flushed, blocks=bl) for sm, w, bl in zip(samples, warmups, blocks)],
            sets[0], clocks)


class _InputSets:
    """The timing's input sets at the timing size: set 0 drawn from ``seed0`` (the verified case's
    seed, so its reference is known) or the timing seed, and more when one fits in L2 (rotated, so
    a timed launch never finds its inputs cached); a pristine copy of each set's outputs and inouts
    to restore before every launch (inputs as they were, outputs poisoned); and the buffer whose
    clearing flushes L2."""

    def __init__(self, gpu: Gpu, job: HarnessJob, seed0: int | None):
        spec, self.gpu = job.spec, gpu
        sizes, base_seed = spec.timing_sizes, timing_seed(job)
        self.sets = [_new_case(gpu, spec, sizes, base_seed if seed0 is None else seed0, job.candidate.constants)]
        set_bytes = sum(self.sets[0].nbytes(n) for n in self.sets[0].bufs)
        self.n = 1
        if set_bytes < gpu.l2_bytes:  # inputs fit in L2: rotate among several sets
            self.n = int(min(8, max(2, math.ceil(2 * gpu.l2_bytes / max(set_bytes, 1)))))
        self.sets += [_new_case(gpu, spec, sizes, base_seed + i, job.candidate.constants) for i in range(1, self.n)]
        self.restored = [a.name for a in spec.args if a.role in ("inout", "output")]
        self.pristine = [{n: _copy_on_device(gpu, s.bufs[n], s.nbytes(n)) for n in self.restored} for s in self.sets]
        self.flush, self.flush_words = None, 0
        if spec.timing.flush_l2:
            self.flush_words = max(1, (2 * gpu.l2_bytes) // 4)
            self.flush = gpu.drv.mem_alloc(self.flush_words * 4)

    @property
    def flushed(self) -> bool:
        return self.flush is not None

    def reset(self, i: int) -> None:
        s = self.sets[i]
        for n in self.restored:
            self.gpu.drv.memcpy_dtod_async(s.bufs[n], self.pristine[i][n], s.nbytes(n), self.gpu.stream)

    def prepare(self, i: int, pattern: int) -> None:
        """Input set ``i`` as it was, and (after the reset) a cold L2 for the next launch."""
        self.reset(i)
        if self.flush is not None:
            self.gpu.drv.memset_d32_async(self.flush, pattern & 0xFFFF, self.flush_words, self.gpu.stream)

    def free(self, keep_first: bool) -> None:
        """Free everything but, with ``keep_first``, set 0 (the caller's, to check and free)."""
        for s in (self.sets[1:] if keep_first else self.sets):
            _free(self.gpu, s)
        for p in self.pristine:
            for b in p.values():
                _free(self.gpu, b)
        if self.flush is not None:
            _free(self.gpu, self.flush)


def _time_alone(gpu: Gpu, run, tcfg, est: float, n_sets: int, prepare, stage: Stage, sizes) -> list[float]:
    """One kernel (``run(i)`` launches it on input set ``i``, on the worker's stream): repetitions
    sized from its time; it stops early once its median is precise (tcfg.precision), checked
    after min_reps and then every chunk."""
    drv = gpu.drv
    reps = int(min(tcfg.max_reps, max(tcfg.min_reps, math.ceil(tcfg.target_ms / max(est, 1e-3)))))
    early = tcfg.precision > 0
    chunk = max(tcfg.min_reps, 10)
    stage(f"timing: up to {reps} repetitions at sizes {sizes}")
    events = [(drv.Event(), drv.Event()) for _ in range(reps)]
    samples: list[float] = []
    r = 0
    while r < reps:
        i = r % n_sets
        s_ev, e_ev = events[r]
        prepare(i, r)                        # after the reset: the timed launch starts with a cold L2
        s_ev.record(gpu.stream)
        run(i)
        e_ev.record(gpu.stream)
        r += 1
        if early and r >= tcfg.min_reps and (r % chunk == 0 or r == reps):
            gpu.stream.synchronize()
            samples += [e.time_since(s) for s, e in events[len(samples):r]]
            if median_ci_rel(samples) <= tcfg.precision:
                break
    gpu.stream.synchronize()
    samples += [e.time_since(s) for s, e in events[len(samples):r]]
    return samples


def _time_blocks(gpu: Gpu, runs, tcfg, est: list[float], n_sets: int, prepare, stage: Stage, sizes,
                 probe, clocks: dict) -> tuple[list[list[float]], list[list[list[float]]], list[int]]:
    """Several kernels (``runs``: each launches one on input set i) in blocks (:func:`block_plan`):
    per kernel its samples, its samples block by block (round by round), and its untimed launches.
    The stream is synchronised after every block (the next one's launches do not pile up behind
    it), and the SM clock read there too."""
    drv = gpu.drv
    plan = block_plan(est, tcfg.min_reps, tcfg.max_reps, tcfg.target_ms)
    stage(f"timing: {len(runs)} kernels interleaved at sizes {sizes}, {plan.rounds} rounds of blocks of "
          f"{', '.join(map(str, plan.reps))} repetitions")
    events = [(drv.Event(), drv.Event()) for _ in range(max(plan.reps))]
    samples: list[list[float]] = [[] for _ in runs]
    blocks: list[list[list[float]]] = [[] for _ in runs]
    launches = 0
    mhz = []
    for r in range(plan.rounds):
        for k in block_order(r, len(runs)):
            for _ in range(plan.warmup[k]):       # untimed: the previous block's after-effects end here
                i = launches % n_sets
                prepare(i, launches)
                runs[k](i)
                launches += 1
            for b in range(plan.reps[k]):
                i = launches % n_sets
                s_ev, e_ev = events[b]
                prepare(i, launches)
                s_ev.record(gpu.stream)
                runs[k](i)
                e_ev.record(gpu.stream)
                launches += 1
            gpu.stream.synchronize()
            block = [e.time_since(s) for s, e in events[:plan.reps[k]]]
            samples[k] += block
            blocks[k].append(block)
            if probe:
                mhz.append((probe.read() or {}).get("sm_mhz"))
    mhz = [m for m in mhz if m]
    if mhz:
        clocks["sm_mhz_min"], clocks["sm_mhz_max"] = min(mhz), max(mhz)
    clocks["plan"] = {"rounds": plan.rounds, "reps": list(plan.reps), "warmup": list(plan.warmup),
                      "est_ms": [round(float(e), 6) for e in est]}
    return samples, blocks, [plan.rounds * w for w in plan.warmup]


class _Nvml:
    """The GPU's SM clock, temperature and clock-limiting reasons, read through NVML
    (libnvidia-ml.so.1, the driver's library) with ctypes; absent (``open`` gives None) where
    the library or the device is not found. Informational: nothing depends on it."""
    SM_CLOCK, GPU_TEMP = 1, 0        # NVML_CLOCK_SM, NVML_TEMPERATURE_GPU

    def __init__(self, lib, handle):
        self.lib, self.handle = lib, handle

    @classmethod
    def open(cls, pci: str) -> "_Nvml | None":
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() != 0:
                return None
            handle = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByPciBusId_v2(pci.encode(), ctypes.byref(handle)) != 0:
                lib.nvmlShutdown()
                return None
            return cls(lib, handle)
        except (OSError, AttributeError):
            return None

    def read(self) -> dict | None:
        try:
            clock, temp, reasons = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong()
            out = {}
            if self.lib.nvmlDeviceGetClockInfo(self.handle, self.SM_CLOCK, ctypes.byref(clock)) == 0:
                out["sm_mhz"] = int(clock.value)
            if self.lib.nvmlDeviceGetTemperature(self.handle, self.GPU_TEMP, ctypes.byref(temp)) == 0:
                out["temp_c"] = int(temp.value)
            if self.lib.nvmlDeviceGetCurrentClocksThrottleReasons(self.handle, ctypes.byref(reasons)) == 0:
                out["clock_limits"] = hex(reasons.value)     # NVML's clocks event reasons bit mask
            return out or None
        except (OSError, AttributeError):
            return None

    def close(self) -> None:
        try:
            self.lib.nvmlShutdown()
        except (OSError, AttributeError):
            pass


def time_function(gpu: Gpu, job: HarnessJob, stage: Stage, fn, seed0: int | None = None) -> tuple[TimingResult, object]:
    """A Python function on GPU arrays (a ``[baseline]``: :class:`.frameworks.DeviceFunction`) timed
    as a kernel alone is: the same input sets (fresh, rotated when they fit in L2), outputs
    poisoned and L2 flushed before every call, warm-up, CUDA events on the worker's stream around
    each call (the framework's launches go on that stream: whatever it launches, and any gap its
    Python leaves, is in the time), repetitions until the median is precise. Returns the timing
    and input set 0 as the last call left it (the caller checks it against the reference and
    frees it)."""
    spec, drv = job.spec, gpu.drv
    tcfg, sizes = spec.timing, spec.timing_sizes
    stage(f"timing the baseline: preparing input sets at sizes {sizes}")
    ins = _InputSets(gpu, job, seed0)
    sets, n_sets, prepare = ins.sets, ins.n, ins.prepare
    calls = [fn.arguments(spec, s) for s in sets]

    def run(i, check: bool = False):
        """The function once on set ``i``: timed, only the call (what a user's code pays; the copy of a
        returned result into the harness's buffer is not); for the check, its result written in."""
        kwargs, outs = calls[i]
        with fn._on_stream():
            result = fn.fn(**kwargs)
            if check:
                fn.write(spec, result, outs)

    done = False
    try:
        stage(f"timing the baseline: warm-up at sizes {sizes}")
        start, end = drv.Event(), drv.Event()
        warm, est, t_begin = 0, 1e-3, time.perf_counter()
        while warm < 3 or (time.perf_counter() - t_begin) * 1e3 < tcfg.warmup_ms:
            prepare(warm % n_sets, warm)
            start.record(gpu.stream)
            run(warm % n_sets)
            end.record(gpu.stream)
            end.synchronize()
            est = end.time_since(start)
            warm += 1
            if warm >= 1000:
                break
        samples = _time_alone(gpu, run, tcfg, est, n_sets, prepare, stage, sizes)
        prepare(0, 0)                 # set 0 as one more call leaves it: what the check compares
        run(0, check=True)
        gpu.stream.synchronize()
        done = True
    except drv.Error as e:
        raise KernelFault(str(e)) from None
    finally:
        ins.free(keep_first=done)                    # set 0 goes to the caller only with the timing
    return timing_stats(samples, warm, n_sets, ins.flushed), sets[0]
