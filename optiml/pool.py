"""The evaluation pipeline's stages run concurrently: :class:`EvaluationPool`.

:meth:`EvaluationPool.submit` returns a future of the same :class:`~optiml.pipeline.Evaluation`
that :meth:`Evaluator.evaluate` gives, but many candidates move at once:

* **builds** (parse, launch checks, nvcc) run on a thread pool, one nvcc per CPU core, ahead of
  the GPUs;
* **one persistent GPU worker per device** (:class:`~optiml.verify.server.WorkerHarness`)
  verifies and times; a built candidate goes to whichever device is free;
* **verified candidates are profiled in batches**, several under one ncu process
  (:meth:`~optiml.profiler.ncu.NcuProfiler.profile_batch`), on the device's profile thread;
  the next batch's ncu process starts while one runs, so its start-up is off the critical path.

On each device one :class:`FairLock` orders everything that must have the GPU to itself:
timing, and the candidates' launches under ncu (whose start-up, before it takes the lock,
overlaps the other work). So no timing ever shares the GPU with a profiled or timed launch.
A job lends the lock while it computes on the host only (the spec's Python reference); for
such specs each device has a second worker, which takes the GPU meanwhile.
Profiling does not scale across the GPUs of one host: measured on two H200s, two batches on two
GPUs at once each take ~1.85x as long as one alone, whatever ncu's lock files or the GPUs each
ncu sees (the driver's share of the work grows to match), so ncu is close to a host-wide serial
resource (``bench/ncu_two_gpus.sh``).
Failures are statuses, as in the sequential pipeline; an exception in a stage is a bug in
optiml and is set on the candidate's future.
"""
from __future__ import annotations

import collections
import os
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from loguru import logger

from .pipeline import Candidate, Evaluation, Evaluator

DEFAULT_MAX_BATCH = 16
DEFAULT_MIN_BATCH = 8   # a batch under ncu costs ~1 s of GPU time of its own (measured on an H100) besides ~0.35 s a candidate
BATCH_WAIT_S = 3.0      # a profile batch waits at most this long for company while candidates are still on their way


class FairLock:
    """A lock granted in the order it was asked for (a plain Lock lets a thread that releases
    and re-acquires in a loop starve the others)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._next = 0          # tickets handed out
        self._serving = 0       # ticket now allowed in
        self.held_s = 0.0       # total time held
        self._since = 0.0

    def __enter__(self):
        with self._cond:
            ticket = self._next
            self._next += 1
            while ticket != self._serving:
                self._cond.wait()
        self._since = time.perf_counter()
        return self

    def __exit__(self, *exc):
        with self._cond:
            self.held_s += time.perf_counter() - self._since
            self._serving += 1
            self._cond.notify_all()


@dataclass
class _Item:
    candidate: Candidate
    future: Future
    t0: float
    kb: object = None
    ev: Evaluation | None = None
    job: object = None
    counts: tuple = ()
    profile: bool = True
    profiling: bool = False      # in a batch under ncu
    queued_at: float = field(default_factory=time.perf_counter)


class _Device:
    def __init__(self, index: int, harnesses: list):
        self.index = index
        self.harnesses = harnesses       # one GPU worker, or two when jobs lend the GPU
        self.lock = FairLock()
        self.name = ""
        self.jobs = 0
        self.batches: list[int] = []


class EvaluationPool:
    """Concurrent evaluation over ``devices`` (CUDA ordinals). ``harness_factory(device)`` makes
    each device's harness (default: a persistent :class:`WorkerHarness`); the profiler is the
    evaluator's (None: runtime alone)."""

    def __init__(self, evaluator: Evaluator, devices=(0,), *, build_workers: int | None = None,
                 harness_factory=None, timeout_s: float | None = None, max_batch: int = DEFAULT_MAX_BATCH,
                 min_batch: int = DEFAULT_MIN_BATCH, workers_per_gpu: int = 2):
        from .verify.harness import DEFAULT_TIMEOUT_S
        from .verify.server import WorkerHarness

        if not devices:
            raise ValueError("an EvaluationPool needs at least one device")
        self.evaluator = evaluator
        self.profiler = evaluator.profiler
        self.max_batch = max(1, max_batch)
        self.min_batch = max(1, min(min_batch, self.max_batch))
        self._profiling = 0                      # candidates in batches under ncu now
        timeout_s = timeout_s or getattr(evaluator.harness, "timeout_s", DEFAULT_TIMEOUT_S)
        factory = harness_factory or (lambda d: WorkerHarness(d, timeout_s=timeout_s))
        # A job with a Python reference lends the GPU while it computes it on the host: a second
        # worker on the device takes the GPU meanwhile (the device lock still orders every use).
        lending = evaluator.spec.reference.kind != "seed"
        self.devices = []
        for d in devices:
            first = factory(d)
            more = workers_per_gpu - 1 if lending and getattr(first, "lends_gpu", False) else 0
            self.devices.append(_Device(d, [first] + [factory(d) for _ in range(more)]))
        for dev in self.devices:                 # open the contexts while the first builds run
            for h in dev.harnesses:
                start = getattr(h, "start", None)
                if start is not None:
                    start()
        self._builds = ThreadPoolExecutor(build_workers or max(1, (os.cpu_count() or 2) - 1),
                                          thread_name_prefix="optiml-build")
        self._gpu_q: queue.Queue = queue.Queue()
        self._prof: collections.deque[_Item] = collections.deque()
        self._prof_cond = threading.Condition()
        self._outstanding = 0                    # submitted, not finished
        self._count_lock = threading.Lock()
        self._closed = False
        self._threads = []
        for dev in self.devices:
            for w, h in enumerate(dev.harnesses):
                self._threads.append(threading.Thread(target=self._gpu_loop, args=(dev, h), daemon=True,
                                                      name=f"optiml-gpu{dev.index}-{w}"))
            if self.profiler is not None:
                self._threads.append(threading.Thread(target=self._profile_loop, args=(dev,), daemon=True,
                                                      name=f"optiml-ncu{dev.index}"))
        for t in self._threads:
            t.start()

    # -- the caller's side -------------------------------------------------------------------------
    def submit(self, candidate: Candidate, *, profile: bool = True) -> Future:
        if self._closed:
            raise RuntimeError("the EvaluationPool is closed")
        fut: Future = Future()
        item = _Item(candidate, fut, time.perf_counter(), profile=profile and self.profiler is not None)
        with self._count_lock:
            self._outstanding += 1
        self._builds.submit(self._guard, self._build, item)
        return fut

    def evaluate(self, candidate: Candidate, **kw) -> Evaluation:
        """One candidate, start to end (the sequential protocol, through the pool)."""
        return self.submit(candidate, **kw).result()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._builds.shutdown(wait=True)
        for dev in self.devices:
            for _ in dev.harnesses:
                self._gpu_q.put(None)
        with self._prof_cond:
            self._prof_cond.notify_all()
        for t in self._threads:
            t.join(timeout=600)
        for dev in self.devices:
            for h in dev.harnesses:
                close = getattr(h, "close", None)
                if close is not None:
                    close()
        close = getattr(self.profiler, "close", None)      # ncu processes started ahead
        if close is not None:
            close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def stats(self) -> dict:
        """Per device: jobs run, time the GPU was held (timing and profiled launches), batch sizes."""
        return {dev.index: {"jobs": dev.jobs, "gpu_held_s": dev.lock.held_s, "profile_batches": list(dev.batches),
                            "worker_starts": sum(getattr(h, "starts", 0) or 0 for h in dev.harnesses)}
                for dev in self.devices}

    # -- the stages ----------------------------------------------------------------------------------
    def _guard(self, stage, *args) -> None:
        try:
            stage(*args)
        except BaseException as e:            # a bug in optiml: the caller sees it on the future
            items = args[0] if isinstance(args[0], list) else [args[0]]
            logger.exception("stage {} failed", getattr(stage, "__name__", stage))
            for item in items:
                if not item.future.done():
                    self._done(item, exc=e)

    def _done(self, item: _Item, exc: BaseException | None = None) -> None:
        with self._count_lock:
            self._outstanding -= 1
            if item.profiling:
                self._profiling -= 1
        if exc is not None:
            item.future.set_exception(exc)
            return
        item.ev.wall_s = time.perf_counter() - item.t0
        item.future.set_result(item.ev)

    def _build(self, item: _Item) -> None:
        item.kb, item.ev = self.evaluator.build(item.candidate)
        if item.kb is None:
            self._done(item)
            return
        item.queued_at = time.perf_counter()
        self._gpu_q.put(item)

    def _gpu_loop(self, dev: _Device, harness) -> None:
        while True:
            item = self._gpu_q.get()
            if item is None:
                return
            self._guard(self._gpu_stage, item, dev, harness)

    def _gpu_stage(self, item: _Item, dev: _Device, harness) -> None:
        ev = item.ev
        ev.stage_s["gpu_queue"] = time.perf_counter() - item.queued_at
        item.job = self.evaluator.job(item.kb, ev, device=dev.index)
        if item.job is None:
            self._done(item)
            return
        with dev.lock:
            if getattr(harness, "lends_gpu", False):   # the GPU goes to another worker or a batch while the job is on the host
                hr = harness.run(item.job, lend=dev.lock)
            else:
                hr = harness.run(item.job)
            item.counts = self.evaluator.judge(ev, item.job, hr, harness)
        dev.jobs += 1
        dev.name = dev.name or (hr.device_name or "")
        if ev.status != "ok" or not item.profile:
            self._done(item)
            return
        item.queued_at = time.perf_counter()
        with self._prof_cond:
            self._prof.append(item)
            self._prof_cond.notify_all()

    def _take_batch(self) -> list[_Item] | None:
        """The next batch to profile: as many as are waiting (up to max_batch) once there are
        min_batch of them, or no other candidate is on its way (building, verifying, timing),
        or the device has been ready for a batch for BATCH_WAIT_S; None when the pool closes. Each batch costs the
        GPU about a second of its own under ncu, so a batch gathers company while the rest of
        the pipeline still has candidates coming."""
        called = time.perf_counter()
        with self._prof_cond:
            while True:
                if self._prof:
                    # waiting starts now, when the device can take a batch (a candidate that queued
                    # while the last batch was on the GPU has not held anything up)
                    waited = time.perf_counter() - max(self._prof[0].queued_at, called)
                    with self._count_lock:
                        upstream = self._outstanding - len(self._prof) - self._profiling
                    if (len(self._prof) >= self.min_batch or upstream <= 0 or waited >= BATCH_WAIT_S
                            or self._closed):
                        batch = [self._prof.popleft() for _ in range(min(self.max_batch, len(self._prof)))]
                        for item in batch:
                            item.profiling = True
                        with self._count_lock:
                            self._profiling += len(batch)
                        return batch
                    self._prof_cond.wait(timeout=min(0.05, BATCH_WAIT_S - waited))
                elif self._closed:
                    return None
                else:
                    self._prof_cond.wait(timeout=0.5)

    def _profile_loop(self, dev: _Device) -> None:
        """Start a batch, and the next one as soon as this one is off the GPU: the second ncu
        starts up while the first writes and imports its report."""
        with ThreadPoolExecutor(2, thread_name_prefix=f"optiml-ncu{dev.index}-batch") as batches:
            while True:
                batch = self._take_batch()
                if batch is None:
                    return
                off_gpu = threading.Event()
                batches.submit(self._guard, self._profile_stage, batch, dev, off_gpu)
                off_gpu.wait()

    def _profile_stage(self, batch: list[_Item], dev: _Device, off_gpu: threading.Event) -> None:
        """Profile ``batch`` on ``dev``; ``off_gpu`` is set once its launches are off the GPU (or it failed)."""
        from .profiler.types import ProfileStatus

        now = time.perf_counter()
        for item in batch:
            item.ev.stage_s["profile_queue"] = now - item.queued_at
        jobs = [replace(item.job, device=dev.index) for item in batch]
        try:
            results = self.profiler.profile_batch(jobs, dev.name, gpu_lock=dev.lock, on_gpu_done=off_gpu.set,
                                                  prestart=not self._closed)
        finally:
            off_gpu.set()
        dev.batches.append(len(batch))
        for item, job, prof in zip(batch, jobs, results):
            if len(batch) > 1 and prof.status is ProfileStatus.REPLAY_FAILED:
                prof = self.profiler.profile_batch([job], dev.name, gpu_lock=dev.lock)[0]  # alone
            self.evaluator.add_profile(item.ev, prof, item.counts)
            self._done(item)
