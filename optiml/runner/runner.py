"""The runner: the one place a candidate's stages are run, in their order, for many candidates at once.

:meth:`Runner.submit` returns a future of the candidate's :class:`~optiml.runner.types.Evaluation`.
The stages (:func:`~optiml.runner.stages.standard_stages`: build, verify and time, profile) run
where each says:

* **CPU** stages (parse, launch checks, nvcc) on a thread pool, one nvcc per CPU core, ahead of
  the GPUs;
* **GPU** stages on one of the device's persistent GPU workers (``harness_factory(device)``); a
  candidate goes to whichever device is free;
* **GPU_BATCH** stages (the profiler) in batches, several candidates under one ncu process, on the
  device's batch thread; the next batch's process starts while one runs;
* **BACKGROUND** stages (the sanitizer of each new best) after the candidate's result is given
  out: its future resolves with the evaluation so far, whose ``later`` is a future of the
  evaluation once the background stage is done. One thread runs them, one candidate at a time.

On each device one :class:`~optiml.runner.stages.FairLock` orders everything that must have the
GPU to itself: timing, and the candidates' launches under ncu (whose start-up, before it takes
the lock, overlaps the other work). A job lends the lock while it computes on the host only (the
spec's Python reference); for such specs each device has a second worker, which takes the GPU
meanwhile. Profiling does not scale across the GPUs of one host: measured on two H200s, two
batches on two GPUs at once each take ~1.85x as long as one alone
(``bench/throughput/ncu_two_gpus.sh``).

Sequential evaluation is the same runner with one slot (:meth:`Runner.one_slot`: one build
thread, one device, one worker, batches of one). Failures are statuses; an exception in a stage
is a bug in optiml and is set on the candidate's future.
"""
from __future__ import annotations

import collections
import os
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Sequence

from loguru import logger

from ..profiler.types import Profiler
from ..verify.harness import Harness
from .prepare import Preparer
from .stages import BackgroundStage, Device, Item, Slot, Stage, Where, standard_stages
from .types import Candidate, Evaluation

DEFAULT_MAX_BATCH = 16
DEFAULT_MIN_BATCH = 8   # a batch under ncu costs ~1 s of GPU time of its own (measured on an H100) besides ~0.35 s a candidate
BATCH_WAIT_S = 3.0      # a batch waits at most this long for company while candidates are still on their way


class Runner:
    """Runs ``stages`` in order for every submitted candidate over ``devices`` (CUDA ordinals)."""

    def __init__(self, stages: Sequence[Stage], devices=(0,), *, harness_factory: Callable[[int], Harness],
                 build_workers: int | None = None, max_batch: int = DEFAULT_MAX_BATCH,
                 min_batch: int = DEFAULT_MIN_BATCH, workers_per_gpu: int = 2):
        if not devices:
            raise ValueError("a Runner needs at least one device")
        self.stages = list(stages)
        self.max_batch = max(1, max_batch)
        self.min_batch = max(1, min(min_batch, self.max_batch))
        lending = any(s.lends_gpu for s in self.stages if s.where is Where.GPU)
        self.devices: list[Device] = []
        self._harnesses: dict[int, list[Harness]] = {}
        for d in devices:
            first = harness_factory(d)
            more = workers_per_gpu - 1 if lending and first.lends_gpu else 0
            self.devices.append(Device(d))
            self._harnesses[d] = [first] + [harness_factory(d) for _ in range(more)]
        for hs in self._harnesses.values():       # open the contexts while the first builds run
            for h in hs:
                h.start()
        self._cpu = ThreadPoolExecutor(build_workers or max(1, (os.cpu_count() or 2) - 1),
                                       thread_name_prefix="optiml-build")
        self._gpu_q: queue.Queue = queue.Queue()
        self._batch: dict[int, collections.deque[Item]] = {i: collections.deque() for i, s in enumerate(self.stages)
                                                           if s.where is Where.GPU_BATCH}
        self._cond = threading.Condition()
        self._outstanding = 0                    # submitted, not finished
        self._live: dict[int, Item] = {}         # id -> submitted, not finished (each knows its stage)
        self._count_lock = threading.Lock()
        self._closed = False
        self._background: queue.Queue = queue.Queue()
        self._given_out: dict[Future, Item] = {}   # Evaluation.later -> its item, until it is done
        self._threads = []
        for dev in self.devices:
            for w, h in enumerate(self._harnesses[dev.index]):
                self._threads.append(threading.Thread(target=self._gpu_loop, args=(dev, h), daemon=True,
                                                      name=f"optiml-gpu{dev.index}-{w}"))
            for i in self._batch:
                self._threads.append(threading.Thread(target=self._batch_loop, args=(i, dev), daemon=True,
                                                      name=f"optiml-{self.stages[i].name}{dev.index}"))
        self._bg_thread = threading.Thread(target=self._background_loop, daemon=True, name="optiml-background")
        for t in self._threads + [self._bg_thread]:
            t.start()

    @classmethod
    def one_slot(cls, prep: Preparer, harness: Harness, *, profiler: Profiler | None = None,
                 device: int = 0, sanitizer=None) -> "Runner":
        """The standard stages for one candidate at a time: one build thread, ``harness`` on
        ``device``, profiles one by one with nothing started ahead."""
        return cls(standard_stages(prep, profiler, prestart=False, sanitizer=sanitizer, sanitize="asked"), (device,),
                   harness_factory=lambda d: harness,
                   build_workers=1, max_batch=1, min_batch=1, workers_per_gpu=1)

    @classmethod
    def sequential(cls, spec, seed_source: str, builder, harness: Harness, *, profiler: Profiler | None = None,
                   device: int = 0, sanitizer=None, **prep_kw) -> "Runner":
        """:meth:`one_slot` over a new :class:`Preparer` (``prep_kw``: include_dir, seed, kernel_name)."""
        return cls.one_slot(Preparer(spec, seed_source, builder, **prep_kw), harness, profiler=profiler, device=device,
                            sanitizer=sanitizer)

    # -- the caller's side -------------------------------------------------------------------------
    def submit(self, candidate: Candidate, *, profile: bool = True, time_it: bool = True,
               baseline: Candidate | None = None, sanitize: bool | None = None, vendor=None) -> Future:
        """Start evaluating ``candidate``: a future of its Evaluation. ``profile=False`` skips
        the batch stages; ``baseline`` is built too and timed interleaved with it (``baseline_ms``);
        ``vendor`` (a :class:`~optiml.verify.harness.FunctionRef`, the spec's [baseline]) is timed
        interleaved too (``vendor_ms``);
        ``sanitize``: True runs it under compute-sanitizer too, False never, None as the sanitize
        stage's mode says (when the runner has one)."""
        if self._closed:
            raise RuntimeError("the Runner is closed")
        fut: Future = Future()
        item = Item(candidate, fut, time.perf_counter(), profile=profile, time_it=time_it, baseline=baseline,
                    sanitize=sanitize, vendor=vendor)
        with self._count_lock:
            self._outstanding += 1
            self._live[id(item)] = item
        self._advance(item)
        return fut

    def hurry(self) -> None:
        """Somebody waits for every background outcome now: the background stages stop waiting
        for company (see :meth:`BackgroundStage.hurry`)."""
        for stage in self.stages:
            if stage.where is Where.BACKGROUND:
                stage.hurry()

    def abandon(self, later: Future) -> None:
        """Nobody waits for the background stages of the candidate whose ``Evaluation.later`` this
        is: they stop (or never start), and ``later`` resolves with the Evaluation as it is."""
        with self._count_lock:
            item = self._given_out.get(later)
            if item is None:
                return
            item.abandoned = True
        stage: BackgroundStage = self.stages[item.stage]
        if stage.where is Where.BACKGROUND:
            stage.abandon(item)

    def withdraw(self, future: Future) -> bool:
        """Take back the candidate whose :meth:`submit` future this is, if no GPU stage has taken it
        yet (it is being built, or waits for a GPU): it is dropped there, its future cancelled, and
        True is returned; False once it is on a GPU or finished (its result will come)."""
        with self._count_lock:
            item = next((it for it in self._live.values() if it.future is future), None)
            if item is None or item.reached_gpu or item.later is not None:
                return False
            item.withdrawn = True
        future.cancel()                  # now, not when a stage next looks at it (a build may still be running)
        return True

    def _take_for_gpu(self, item: Item) -> bool:
        """A GPU stage takes ``item``: False (and the item dropped) when it was withdrawn first."""
        with self._count_lock:
            if not item.withdrawn:
                item.reached_gpu = True
                return True
        self._drop(item)
        return False

    def _drop(self, item: Item) -> None:
        """Forget a withdrawn item: nobody waits for it (its future is cancelled)."""
        with self._count_lock:
            if self._live.pop(id(item), None) is None:
                return
            self._outstanding -= 1
        item.future.cancel()
        with self._cond:
            self._cond.notify_all()

    def evaluate(self, candidate: Candidate, **kw) -> Evaluation:
        """One candidate, start to end (its background stages too)."""
        ev = self.submit(candidate, **kw).result()
        if ev.later is None:
            return ev
        self.hurry()
        return ev.later.result()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._cpu.shutdown(wait=True)
        for hs in self._harnesses.values():
            for _ in hs:
                self._gpu_q.put(None)
        with self._cond:
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=600)
        self.hurry()
        self._background.put(None)          # after every stage that could send it more
        self._bg_thread.join(timeout=600)
        for hs in self._harnesses.values():
            for h in hs:
                h.close()
        for s in self.stages:
            s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def stats(self) -> dict:
        """Per device: jobs run, time the GPU was held (timing and profiled launches), batch sizes."""
        return {dev.index: {"jobs": dev.jobs, "gpu_held_s": dev.lock.held_s, "profile_batches": list(dev.batches),
                            "worker_starts": sum(h.starts for h in self._harnesses[dev.index])}
                for dev in self.devices}

    # -- moving candidates along -------------------------------------------------------------------
    def _advance(self, item: Item) -> None:
        """Send ``item`` to its next stage that wants it, or finish it (done, or failed); a
        withdrawn item (see :meth:`withdraw`) is dropped instead."""
        if item.withdrawn:
            self._drop(item)
            return
        nxt = None
        if item.stage < 0 or not item.failed:
            nxt = next((i for i in range(item.stage + 1, len(self.stages)) if self.stages[i].wants(item)), None)
        if nxt is None:
            self._finish(item)
            return
        item.stage = nxt
        item.queued_at = time.perf_counter()
        where = self.stages[nxt].where
        if where is Where.CPU:
            self._cpu.submit(self._guard, [item], nxt, Slot())
        elif where is Where.GPU:
            self._gpu_q.put(item)
        elif where is Where.BACKGROUND:
            self._give_out(item)
            self._background.put(item)
        else:
            with self._cond:
                self._batch[nxt].append(item)
                self._cond.notify_all()

    def _guard(self, items: list[Item], index: int, slot: Slot) -> None:
        """Run stage ``index`` on ``items`` and move them on; a stage that raises has a bug: its
        items' futures get the exception."""
        stage = self.stages[index]
        now = time.perf_counter()
        for item in items:
            if item.ev is not None and stage.where is not Where.CPU:
                item.ev.stage_s[f"{stage.name}_queue"] = now - item.queued_at
        try:
            stage.run(items, slot)
        except BaseException as e:
            logger.exception("stage {} failed", stage.name)
            slot.on_gpu_done()
            for item in items:
                self._finish(item, exc=e)
            return
        for item in items:
            self._advance(item)

    def _give_out(self, item: Item) -> None:
        """Resolve ``item``'s future now, before its background stages: with a copy of its
        Evaluation whose ``later`` will have the evaluation once they are done."""
        if item.later is not None:
            return
        item.later = Future()
        with self._count_lock:
            self._given_out[item.later] = item
        out = item.ev.snapshot()
        item.given_out_at = time.perf_counter()
        out.wall_s = item.ev.wall_s = item.given_out_at - item.t0
        out.later = item.later
        item.future.set_result(out)

    def _finish(self, item: Item, exc: BaseException | None = None) -> None:
        if item.withdrawn:                  # withdrawn only before it was given out (item.later is None)
            self._drop(item)
            return
        future = item.later if item.later is not None else item.future
        if future.done():
            return
        with self._count_lock:
            self._outstanding -= 1
            self._live.pop(id(item), None)
            if item.later is not None:
                self._given_out.pop(item.later, None)
        if exc is not None:
            future.set_exception(exc)
            return
        if item.later is None:
            item.ev.wall_s = time.perf_counter() - item.t0
        future.set_result(item.ev)

    # -- the loops -----------------------------------------------------------------------------------
    def _gpu_loop(self, dev: Device, harness: Harness) -> None:
        while True:
            item = self._gpu_q.get()
            if item is None:
                return
            if not self._take_for_gpu(item):
                continue
            self._guard([item], item.stage, Slot(dev, harness))

    def _background_loop(self) -> None:
        while True:
            item = self._background.get()
            if item is None:
                return
            if item.abandoned:
                self._finish(item)
                continue
            device = item.device or self.devices[0]
            self._guard([item], item.stage, Slot(device, more_coming=not self._closed))

    def _take_batch(self, index: int) -> list[Item] | None:
        """The next batch for stage ``index``: as many as are waiting (up to max_batch) once there
        are min_batch of them, or no other candidate is on its way to it (in an earlier stage), or the device has been
        ready for a batch for BATCH_WAIT_S; None when the runner closes. Each batch under ncu costs
        the GPU about a second of its own, so a batch gathers company while candidates still come."""
        called = time.perf_counter()
        waiting = self._batch[index]
        with self._cond:
            while True:
                if waiting:
                    # waiting starts now, when the device can take a batch (a candidate that queued
                    # while the last batch was on the GPU has not held anything up)
                    waited = time.perf_counter() - max(waiting[0].queued_at, called)
                    with self._count_lock:     # on their way to this stage (not past it, not in it)
                        upstream = sum(1 for it in self._live.values() if it.stage < index)
                    if len(waiting) >= self.min_batch or upstream <= 0 or waited >= BATCH_WAIT_S or self._closed:
                        return [waiting.popleft() for _ in range(min(self.max_batch, len(waiting)))]
                    self._cond.wait(timeout=min(0.05, BATCH_WAIT_S - waited))
                elif self._closed:
                    return None
                else:
                    self._cond.wait(timeout=0.5)

    def _batch_loop(self, index: int, dev: Device) -> None:
        """Start a batch, and the next one as soon as this one is off the GPU: the next profiler
        process starts up while the last one writes and imports its report."""
        with ThreadPoolExecutor(2, thread_name_prefix=f"optiml-{self.stages[index].name}{dev.index}-batch") as pool:
            while True:
                batch = self._take_batch(index)
                if batch is None:
                    return
                off_gpu = threading.Event()
                pool.submit(self._run_batch, batch, index, dev, off_gpu)
                off_gpu.wait()

    def _run_batch(self, batch: list[Item], index: int, dev: Device, off_gpu: threading.Event) -> None:
        try:
            self._guard(batch, index, Slot(dev, on_gpu_done=off_gpu.set, more_coming=not self._closed))
        finally:
            off_gpu.set()
