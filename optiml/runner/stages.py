"""A candidate's stages, each a small object the :class:`~optiml.runner.runner.Runner` drives.

A stage says where it runs (:class:`Where`: on the CPU thread pool, on a device with one of its GPU
workers, or on a device in batches), whether it has work for a candidate (``wants``), and does that
work (``run``), leaving its outcome on the candidate's :class:`Evaluation`. The order of the stages
is :func:`standard_stages`; a new stage (a sanitizer, a baseline) is one more object in that list.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Callable, Protocol

from loguru import logger

from ..best import MIN_BAND
from ..profiler.types import Profiler, ProfileResult, ProfileStatus
from ..status import Category, Status, category
from ..verify.harness import Harness, HarnessJob, KernelBinary
from .judge import judge, with_diagnosis
from .prepare import Preparer
from .types import Candidate, Evaluation


class Where(Enum):
    CPU = "cpu"              # a thread of the build pool
    GPU = "gpu"              # one candidate at a time on a device, with one of its GPU workers
    GPU_BATCH = "gpu_batch"  # several candidates at once on a device
    BACKGROUND = "background"  # after the candidate's result is given out, one at a time (Evaluation.later)


class FairLock:
    """A lock granted in the order it was asked for (a plain Lock lets a thread that releases
    and re-acquires in a loop starve the others). ``held_s`` is the total time it was held."""

    def __init__(self):
        self._cond = threading.Condition()
        self._next = 0          # tickets handed out
        self._serving = 0       # ticket now allowed in
        self.held_s = 0.0
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


class Device:
    """One GPU of the runner: its lock orders everything that must have the GPU to itself
    (timing, the launches under a profiler), and what ran on it."""

    def __init__(self, index: int):
        self.index = index
        self.lock = FairLock()
        self.name = ""
        self.jobs = 0
        self.batches: list[int] = []


@dataclass
class Slot:
    """Where a stage runs this time: the device (None on the CPU), the GPU worker (GPU stages),
    ``on_gpu_done`` (batch stages: call it once the batch is off the GPU) and whether more work
    may follow (False once the runner is closing)."""
    device: Device | None = None
    harness: Harness | None = None
    on_gpu_done: Callable[[], None] = lambda: None
    more_coming: bool = True


@dataclass
class Item:
    """One candidate on its way through the stages."""
    candidate: Candidate
    future: Future
    t0: float
    profile: bool = True
    time_it: bool = True
    sanitize: bool | None = None      # True: sanitize it, False: never, None: as the sanitize stage's mode says
    baseline: Candidate | tuple[Candidate, ...] | None = None   # a tuple: the baseline, then rivals (baselines())
    vendor: object = None             # a FunctionRef timed interleaved with them (HarnessJob.vendor)
    kb: KernelBinary | None = None
    ev: Evaluation | None = None
    job: HarnessJob | None = None
    stage: int = -1                   # index of the stage it is in, or last finished
    queued_at: float = field(default_factory=time.perf_counter)
    device: Device | None = None      # the device it was checked on
    later: Future | None = None       # given out with its result when it went on to a background stage
    abandoned: bool = False           # its background stages' outcome is no longer wanted
    withdrawn: bool = False           # taken back before it reached a GPU: it is dropped where it is
    reached_gpu: bool = False         # a GPU stage has taken it (it can no longer be withdrawn)
    given_out_at: float = 0.0         # when its result was given out (before its background stages)

    @property
    def failed(self) -> bool:
        return self.ev is None or self.ev.status != Status.OK or self.job is None


def baselines(baseline: Candidate | tuple[Candidate, ...] | None) -> tuple[Candidate, ...]:
    """What a candidate is timed interleaved with, in one GPU job: ``Runner.submit``'s
    ``baseline``, one :class:`Candidate` (the seed: a final speedup, ``Evaluation.baseline_ms``)
    or a tuple, the baseline then rivals: other candidates, each also verified again after the
    timing, whose results are on ``Evaluation.harness.rivals`` (the final choice among the
    candidates that tie, :func:`optiml.app.optimize.final_timing`)."""
    if baseline is None:
        return ()
    return tuple(baseline) if isinstance(baseline, (tuple, list)) else (baseline,)


class Stage(Protocol):
    name: str
    where: Where
    lends_gpu: bool          # GPU stages: its jobs leave the GPU idle a while (a second worker per device helps)

    def wants(self, item: Item) -> bool:
        """Whether this stage has work for ``item`` (which has passed every stage before it)."""

    def run(self, items: list[Item], slot: Slot) -> None:
        """Do the work for ``items`` (one, except for GPU_BATCH stages), leaving the outcome on each
        item's Evaluation; a failure is a status there, never an exception."""

    def close(self) -> None:
        """Free what the stage holds (processes started ahead)."""


class BackgroundStage(Stage, Protocol):
    """A stage that runs after the candidate's result is given out (:attr:`Where.BACKGROUND`)."""

    def abandon(self, item: Item) -> None:
        """Nobody waits for ``item``'s outcome any more: stop the work on it if it is running
        (its Evaluation is then left as it was)."""

    def hurry(self) -> None:
        """Somebody waits for the outcomes now (the search is over, or the runner closes): no
        more waiting for company or for a later candidate to overtake one."""


class BuildStage:
    """Parse, check the launch, build (and the baseline's build), and make the GPU job.

    A search candidate whose compiled code and launches are those of an earlier one
    (:func:`optiml.cubin.code_digest`: an added ``const``, a comment, a flag that changed nothing)
    takes that one's finished evaluation instead of a GPU's time, when it ended ``ok`` or wrong
    (not for a failure of the machinery, nor for a job with a baseline or asked to be sanitized, nor
    for the very same build asked again: that is a request to measure it again)."""
    name, where, lends_gpu = "build", Where.CPU, False

    def __init__(self, prep: Preparer):
        self.prep = prep
        self._by_code: dict[tuple, Item] = {}
        self._lock = threading.Lock()

    def wants(self, item: Item) -> bool:
        return True

    def _reused(self, item: Item) -> bool:
        """Give ``item`` the evaluation of an earlier finished item with the same code, if any."""
        from ..cubin import code_digest

        if (item.baseline is not None or item.vendor is not None or not item.time_it or item.sanitize is not None
                or item.candidate.function):
            return False
        digest = code_digest(item.kb.cubin_path)
        if digest is None:
            return False
        key = (digest, item.kb.symbol, repr(item.kb.launches), repr(sorted(item.kb.constants.items())))
        with self._lock:
            prev = self._by_code.setdefault(key, item)
            if prev.future.cancelled():          # withdrawn before its result (Runner.withdraw): this one stands in
                self._by_code[key] = prev = item
        if prev is item or not prev.future.done() or prev.future.exception() is not None:
            return False
        done = prev.future.result()
        if done.build is not None and item.ev.build is not None and done.build.key == item.ev.build.key:
            return False                 # the very same build asked again: measured again, as asked
        if category(done.status) not in (Category.OK, Category.WRONG):
            return False
        own = item.ev
        ev = done.snapshot()
        ev.build, ev.resources, ev.launch = own.build, own.resources, own.launch
        ev.stage_s = {k: v for k, v in own.stage_s.items()} | {"reused": 1.0}
        note = "the same compiled code and launch as an earlier candidate: its evaluation is reused"
        ev.message = f"{done.message} ({note})" if done.message else note
        item.ev, item.job = ev, None
        return True

    def run(self, items: list[Item], slot: Slot) -> None:
        for item in items:
            item.kb, item.ev = self.prep.build(item.candidate)
            if item.kb is None or self._reused(item):
                continue
            built = []        # the baseline, then the rivals (a tuple baseline: see Item.baseline)
            for n, other in enumerate(baselines(item.baseline)):
                kb, ev = self.prep.build(other)
                if kb is None:
                    what = "the baseline" if n == 0 else f"rival {n}"
                    item.ev.fail(Status.REFERENCE_ERROR, f"{what} does not build: {ev.status}: {ev.message}")
                    break
                built.append(kb)
            if item.ev.status != Status.OK:
                continue
            item.job = self.prep.job(item.kb, item.ev, time_it=item.time_it, baseline=built[0] if built else None)
            if item.job is not None and len(built) > 1:
                item.job = replace(item.job, rivals=tuple(built[1:]))
            if item.job is not None and item.candidate.function is not None:
                item.job = replace(item.job, function=item.candidate.function)
            if item.job is not None and item.vendor is not None and item.time_it:
                item.job = replace(item.job, vendor=item.vendor)

    def close(self) -> None:
        pass


class CheckStage:
    """Verify on fresh inputs and time, on one of the device's GPU workers, holding the device
    (lent while the job computes a Python reference on the host)."""
    name, where = "gpu", Where.GPU

    def __init__(self, prep: Preparer):
        self.prep = prep
        self.lends_gpu = prep.lends_gpu

    def wants(self, item: Item) -> bool:
        return True

    def run(self, items: list[Item], slot: Slot) -> None:
        dev, harness = slot.device, slot.harness
        for item in items:
            item.job = replace(item.job, device=dev.index)
            with dev.lock:
                hr = harness.run(item.job, lend=dev.lock) if harness.lends_gpu else harness.run(item.job)
                judge(self.prep, item.ev, item.job, hr, harness)
            dev.jobs += 1
            dev.name = dev.name or (hr.device_name or "")
            item.device = dev

    def close(self) -> None:
        pass


SETTLE_S = 2.0      # a new best waits this long for a faster one before it is sanitized (``best`` mode)
SHARE = 0.05        # the background sanitizer is busy at most this share of the time (``best`` mode)
EXPECT_S = 2.5      # a sanitization's wall time before one is measured (the four tools at once, H100)


class SanitizeStage:
    """Run a verified candidate under compute-sanitizer (the four tools at once, the candidate alone
    at a small size): an error is the status ``unsafe`` with the tool's first report; a sanitizer
    that cannot run leaves the status as it is and says so on ``Evaluation.sanitize``.

    ``mode``:

    * ``best``: a candidate faster (by more than the 1 % run-to-run noise, ``best.MIN_BAND``)
      than every one sanitized clean or waiting to be, in the background
      (:attr:`Where.BACKGROUND`): its result goes to the search at once, and the verdict comes
      later on ``Evaluation.later``. A candidate waits :data:`SETTLE_S` after its result before
      its turn (a search finds several bests in a row), and the background sanitizer is busy at
      most :data:`SHARE` of the time, counting the one it would start (so a short search
      sanitizes only its final best): each sanitization costs the search more than its own
      time, since compute-sanitizer's processes slow ncu down beside them
      (``bench/sanitizer/sanitize_interference.py``: +44 % for the four tools at once on an H100).
      One that a faster one has overtaken by its turn is not sanitized (its ``sanitize`` stays
      None): the best is what must be sanitized, and whoever picks a final best (:meth:`hurry`
      first) sanitizes it if it was not.
    * ``all``: every verified candidate, before its result is given out (on the CPU pool).
    * ``asked``: only those submitted with ``sanitize=True``. In every mode, ``sanitize=True``
      is always sanitized (in the background in ``best`` mode: :meth:`Runner.evaluate` waits for
      it) and ``sanitize=False`` never.

    The device is held only for the candidate's launch, not for each tool's start-up (seconds),
    so timing does not wait."""
    name, lends_gpu = "sanitize", False

    def __init__(self, sanitizer, mode: str = "best"):
        if mode not in ("asked", "best", "all"):
            raise ValueError(f"sanitize mode {mode!r}")
        self.sanitizer, self.mode = sanitizer, mode
        self.where = Where.BACKGROUND if mode == "best" else Where.CPU
        self._clean: float | None = None          # the fastest median sanitized clean
        self._waiting: list[float] = []           # medians of candidates sent to be sanitized, not done yet
        self._lock = threading.Lock()
        self._cancel: dict[int, threading.Event] = {}   # id(item) -> set to stop its sanitizer
        self._hurry = threading.Event()
        self._began, self._busy = time.perf_counter(), 0.0   # background sanitizing: since, and how long
        self._expect = EXPECT_S                               # how long the next one will take

    def _bar(self) -> float | None:
        """A candidate must be faster than this to be sanitized in ``best`` mode."""
        meds = [m for m in [self._clean, *self._waiting] if m is not None]
        return min(meds) if meds else None

    def wants(self, item: Item) -> bool:
        if item.sanitize is not None:
            return item.sanitize
        if self.mode == "all":
            return True
        if self.mode == "asked":
            return False
        median = item.ev.median_ms if item.ev is not None else None
        with self._lock:
            bar = self._bar()
            if median is None or (bar is not None and median >= bar / (1 + MIN_BAND)):
                return False
            self._waiting.append(median)
            return True

    def run(self, items: list[Item], slot: Slot) -> None:
        for item in items:
            median = item.ev.median_ms
            background = self.where is Where.BACKGROUND and not item.sanitize
            if background:
                self._hurry.wait(max(0.0, self._turn(item) - time.perf_counter()))
                with self._lock:
                    self._waiting.remove(median)
                    overtaken = self._bar() is not None and self._bar() < median
                    if overtaken:
                        continue
                    self._waiting.append(median)
            dev = item.device or slot.device
            job = replace(item.job, device=dev.index) if dev is not None else item.job
            cancel = threading.Event()
            with self._lock:
                self._cancel[id(item)] = cancel
                if item.abandoned:
                    cancel.set()
            try:
                res = None if cancel.is_set() else self.sanitizer.sanitize(
                    job, gpu_lock=dev.lock if dev is not None else None, cancel=cancel)
            finally:
                with self._lock:
                    self._cancel.pop(id(item), None)
                    if background:
                        self._waiting.remove(median)
            if background and res is not None:
                self._busy += res.wall_s
                self._expect = res.wall_s or self._expect
            if cancel.is_set():
                continue                          # abandoned: not sanitized
            item.ev.sanitize = res
            item.ev.stage_s["sanitize"] = res.wall_s
            if res.status == "unsafe":
                item.ev.fail(Status.UNSAFE, res.message)
            elif res.status == "clean" and median is not None:
                with self._lock:
                    self._clean = median if self._clean is None else min(self._clean, median)

    def _turn(self, item: Item) -> float:
        """When a waiting candidate's sanitization may start: SETTLE_S after its result, and once
        the background sanitizer's busy time, this one's included (as long as the last took),
        is within SHARE of the time since it began."""
        return max(item.given_out_at + SETTLE_S, self._began + (self._busy + self._expect) / SHARE)

    def abandon(self, item: Item) -> None:
        with self._lock:
            if id(item) in self._cancel:
                self._cancel[id(item)].set()

    def hurry(self) -> None:
        self._hurry.set()

    def close(self) -> None:
        pass


class ProfileStage:
    """Profile verified candidates in batches (several under one profiler process) and diagnose
    their metrics. The profiler takes the device's lock only for the candidates' launches."""
    name, where, lends_gpu = "profile", Where.GPU_BATCH, False

    def __init__(self, prep: Preparer, profiler: Profiler, *, prestart: bool = True):
        self.prep, self.profiler, self.prestart = prep, profiler, prestart
        self._warned = False

    def wants(self, item: Item) -> bool:
        return item.profile

    def run(self, items: list[Item], slot: Slot) -> None:
        dev = slot.device
        jobs = [replace(item.job, device=dev.index) for item in items]
        try:
            results = self.profiler.profile_batch(jobs, dev.name, gpu_lock=dev.lock, on_gpu_done=slot.on_gpu_done,
                                                  prestart=self.prestart and slot.more_coming)
        finally:
            slot.on_gpu_done()
        dev.batches.append(len(items))
        for item, job, prof in zip(items, jobs, results):
            if len(items) > 1 and prof.status is ProfileStatus.REPLAY_FAILED:
                prof = self.profiler.profile_batch([job], dev.name, gpu_lock=dev.lock)[0]  # alone
            self._attach(item.ev, job, prof)

    def _attach(self, ev: Evaluation, job: HarnessJob, prof: ProfileResult) -> None:
        ev.stage_s["profile"] = prof.wall_s or 0.0
        if not prof.ok and not self._warned:
            logger.warning("profiling failed ({}: {}); going on with runtime alone", prof.status.value, prof.message)
            self._warned = True
        ev.profile = with_diagnosis(self.prep.spec, ev, job, prof)

    def close(self) -> None:
        self.profiler.close()


def standard_stages(prep: Preparer, profiler: Profiler | None = None, *, prestart: bool = True,
                    sanitizer=None, sanitize: str = "best") -> list[Stage]:
    """The order of a candidate's evaluation: build, verify and time on the GPU, (with a profiler)
    profile the verified ones, then (with a sanitizer, by its mode) sanitize: last, so that the
    profiler's batches never wait for a sanitizer's few seconds."""
    stages: list[Stage] = [BuildStage(prep), CheckStage(prep)]
    if profiler is not None:
        stages.append(ProfileStage(prep, profiler, prestart=prestart))
    if sanitizer is not None:
        stages.append(SanitizeStage(sanitizer, sanitize))
    return stages
