"""Timing on the GPU (worker side): one kernel, or several interleaved for a final speedup."""
from __future__ import annotations

import math
import time

from .gpu import Gpu, KernelFault, Stage, _copy_on_device, _free, _launch, _new_case, timing_seed
from .harness import HarnessJob, KernelBinary, TimingResult
from .timing_stats import median_ci_rel, timing_stats


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
    base_seed = timing_seed(job)
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
