"""The Runner: a candidate's stages run concurrently (real nvcc builds; fake harnesses and
a fake batch profiler stand in for the GPU and ncu, and record what they were given and when)."""
import collections
import threading
import time

import pytest

from optiml.build import NvccBuilder
from optiml.runner import Candidate, FairLock, Preparer, Runner, standard_stages
from optiml.runner.runner import BATCH_WAIT_S
from optiml.runner.stages import Item
from optiml.profiler.types import ProfileResult, ProfileStatus
from optiml.verify.harness import HarnessResult, TimingResult
from tests.conftest import RUNNER_DEADLINE
from tests.fakes import FakeHarness
from tests.test_spec import KERNEL, load

pytestmark = RUNNER_DEADLINE

BLOCKS = (32, 64, 96, 128, 160, 192, 224, 256, 288, 320)


def timing(ms):
    return TimingResult(ms, ms, ms, ms, ms, ms, 0.0, 10, 3, 1, True, [ms] * 10)


class Clock:
    """Intervals during which something held a GPU, per device, to check none overlap."""

    def __init__(self):
        self.lock = threading.Lock()
        self.intervals: dict[int, list] = {}

    def record(self, device, t0, t1, what):
        with self.lock:
            self.intervals.setdefault(device, []).append((t0, t1, what))

    def overlaps(self):
        bad = []
        for dev, iv in self.intervals.items():
            iv = sorted(iv)
            bad += [(dev, a, b) for a, b in zip(iv, iv[1:]) if b[0] < a[1]]
        return bad


class FakeGpuHarness(FakeHarness):
    """Answers ok after a short 'GPU' time; faults on the candidates the test names."""

    def __init__(self, device, clock, fault_blocks=(), boom_blocks=()):
        self.device, self.clock = device, clock
        self.fault_blocks, self.boom_blocks = fault_blocks, boom_blocks
        self.jobs = []

    def run(self, job):
        assert job.device == self.device
        block = job.candidate.constants.get("BLOCK")
        if block in self.boom_blocks:
            raise RuntimeError("a bug in the harness")
        t0 = time.monotonic()
        time.sleep(0.03)
        self.clock.record(self.device, t0, time.monotonic(), "time")
        self.jobs.append(job)
        if block in self.fault_blocks:
            return HarnessResult("runtime_error", "an illegal memory access", device_name="Fake GPU")
        return HarnessResult("ok", timing=timing(1.0 / block), device_name="Fake GPU")


class FakeBatchProfiler:
    def __init__(self, clock, delay=0.15):
        self.clock, self.delay, self.batches = clock, delay, []
        self.locks = []                              # (the batch's device, the lock it was given)

    def profile_batch(self, jobs, device_name="", gpu_lock=None, on_gpu_done=None, prestart=False):
        self.locks.append((jobs[0].device, gpu_lock))
        time.sleep(self.delay)                       # "ncu starting": not holding the GPU
        with gpu_lock:
            t0 = time.monotonic()
            time.sleep(0.01 * len(jobs))
            self.clock.record(jobs[0].device, t0, time.monotonic(), "ncu")
        on_gpu_done()
        time.sleep(self.delay)                       # "the report is written and imported"
        self.batches.append([j.candidate.constants.get("BLOCK") for j in jobs])
        return [ProfileResult(ProfileStatus.OK, "", metrics={"achieved_occupancy_pct": 50.0}, wall_s=0.01)
                for _ in jobs]

    def close(self):
        pass


class FakeSlowReportProfiler(FakeBatchProfiler):
    """A FAKE profiler whose batches start at once and write their report after the GPU until the next
    batch has started (then 0.3 s more; the last batch does not wait): it counts how many batches
    run at once."""

    def __init__(self, clock, batches: int):
        super().__init__(clock, delay=0.0)
        self.expected, self.started, self.now, self.most = batches, 0, 0, 0
        self.cond = threading.Condition()

    def profile_batch(self, jobs, device_name="", gpu_lock=None, on_gpu_done=None, prestart=False):
        with self.cond:
            self.started += 1
            mine = self.started
            self.now += 1
            self.most = max(self.most, self.now)
            self.cond.notify_all()

        def done():
            on_gpu_done()
            with self.cond:                          # the report, until the next batch is on its way
                if mine < self.expected:
                    self.cond.wait_for(lambda: self.started > mine, timeout=20)
            time.sleep(0.3)
        try:
            return super().profile_batch(jobs, device_name, gpu_lock, done, prestart)
        finally:
            with self.cond:
                self.now -= 1


def make(tmp_path, devices=(0,), fault_blocks=(), boom_blocks=(), profile=True, **kw):
    clock = Clock()
    harnesses = {}

    def factory(d):
        harnesses[d] = FakeGpuHarness(d, clock, fault_blocks, boom_blocks)
        return harnesses[d]
    spec = load(tmp_path)
    prep = Preparer(spec, KERNEL, NvccBuilder("sm_90", cache_dir=tmp_path / "cache"))
    prep.profiler = FakeBatchProfiler(clock) if profile else None       # the test's handle on it
    pool = Runner(standard_stages(prep, prep.profiler), devices, harness_factory=factory, build_workers=2, **kw)
    return pool, harnesses, clock, prep


def src(block):
    return KERNEL.replace("BLOCK 128", f"BLOCK {block}")


def test_every_candidate_is_built_verified_timed_and_profiled(tmp_path):
    pool, harnesses, clock, ev = make(tmp_path)
    with pool:
        futures = [pool.submit(Candidate(src(b))) for b in BLOCKS]
        results = [f.result(timeout=120) for f in futures]
    assert [r.status for r in results] == ["ok"] * len(BLOCKS)
    assert [r.median_ms for r in results] == pytest.approx([1.0 / b for b in BLOCKS])
    assert all(r.profile is not None and r.profile.ok for r in results)
    assert sorted(sum(ev.profiler.batches, [])) == sorted(BLOCKS)       # each profiled once
    assert max(len(b) for b in ev.profiler.batches) > 1                  # several under one "ncu"
    assert not clock.overlaps()                                           # timing and ncu never share the GPU


def test_one_batch_writes_its_report_while_the_next_is_on_the_gpu_and_no_third_starts(tmp_path):
    pool, harnesses, clock, prep = make(tmp_path, max_batch=1)
    prep.profiler = FakeSlowReportProfiler(clock, len(BLOCKS))
    pool.stages[[s.name for s in pool.stages].index("profile")].profiler = prep.profiler
    with pool:
        results = [f.result(timeout=120) for f in [pool.submit(Candidate(src(b))) for b in BLOCKS]]
    assert all(r.profile is not None and r.profile.ok for r in results)
    assert prep.profiler.most == 2


def test_failures_are_statuses_and_are_not_profiled(tmp_path):
    pool, harnesses, clock, ev = make(tmp_path, fault_blocks=(64,))
    with pool:
        ok, bad_launch, broken, fault = (pool.submit(Candidate(s)).result(timeout=120) for s in (
            src(32), src(2048), KERNEL.replace("void scale", "void scale(") , src(64)))
    assert ok.status == "ok"
    assert bad_launch.status == "launch_config_error" and "1024" in bad_launch.message
    assert broken.status in ("compile_error", "source_error")
    assert fault.status == "runtime_error" and fault.profile is None
    assert sum(ev.profiler.batches, []) == [32]


def test_two_devices_share_the_work_and_each_is_exclusive(tmp_path):
    pool, harnesses, clock, ev = make(tmp_path, devices=(0, 1))
    with pool:
        results = [f.result(timeout=120) for f in [pool.submit(Candidate(src(b))) for b in BLOCKS * 2]]
        stats = pool.stats()
    assert all(r.status == "ok" for r in results)
    assert len(harnesses[0].jobs) > 0 and len(harnesses[1].jobs) > 0
    assert stats[0]["jobs"] + stats[1]["jobs"] == len(BLOCKS) * 2
    assert not clock.overlaps()


def test_a_bug_in_a_stage_reaches_the_caller(tmp_path):
    pool, harnesses, clock, ev = make(tmp_path, boom_blocks=(96,))
    with pool:
        good, bad = pool.submit(Candidate(src(32))), pool.submit(Candidate(src(96)))
        assert good.result(timeout=120).status == "ok"
        with pytest.raises(RuntimeError, match="a bug in the harness"):
            bad.result(timeout=120)


def test_builds_run_in_parallel_ahead_of_the_gpu(tmp_path):
    pool, harnesses, clock, ev = make(tmp_path, profile=False)
    active, peak = [0], [0]
    lock = threading.Lock()
    inner = ev.build

    def counting_build(candidate):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            return inner(candidate)
        finally:
            with lock:
                active[0] -= 1
    ev.build = counting_build
    with pool:
        results = [f.result(timeout=120) for f in [pool.submit(Candidate(src(b))) for b in BLOCKS[:6]]]
    assert all(r.status == "ok" for r in results)
    assert peak[0] == 2                       # build_workers=2 nvcc at once


def test_fair_lock_serves_in_order():
    lock, order = FairLock(), []
    lock.__enter__()
    threads = []
    for i in range(5):
        t = threading.Thread(target=lambda i=i: (lock.__enter__(), order.append(i), lock.__exit__()))
        t.start()
        threads.append(t)
        time.sleep(0.05)                      # each asks after the previous one
    lock.__exit__()
    for t in threads:
        t.join(5)
    assert order == [0, 1, 2, 3, 4] and lock.held_s > 0


def test_a_batch_holds_its_own_device_lock(tmp_path):
    """A batch on GPU d holds GPU d's lock while its launches run under ncu, and no other."""
    pool, harnesses, clock, ev = make(tmp_path, devices=(0, 1))
    with pool:
        results = [f.result(timeout=120) for f in [pool.submit(Candidate(src(b))) for b in BLOCKS]]
    assert [r.status for r in results] == ["ok"] * len(BLOCKS)
    locks = {id(dev.lock): dev.index for dev in pool.devices}
    assert ev.profiler.locks and all(locks.get(id(lock)) == device for device, lock in ev.profiler.locks)
    assert not clock.overlaps()


def test_batches_gather_company_while_candidates_are_on_their_way(tmp_path):
    """A batch under ncu costs the GPU a second of its own: with candidates still building or
    verifying, a batch waits for min_batch of them; the last ones go when nothing is upstream."""
    pool, harnesses, clock, ev = make(tmp_path, min_batch=4)
    with pool:
        results = [f.result(timeout=120) for f in [pool.submit(Candidate(src(b))) for b in BLOCKS]]
    assert [r.status for r in results] == ["ok"] * len(BLOCKS)
    sizes = [len(b) for b in ev.profiler.batches]
    assert sum(sizes) == len(BLOCKS) and all(n >= 4 for n in sizes[:-1]), sizes


def test_a_lone_candidate_is_profiled_without_waiting_for_company(tmp_path):
    pool, harnesses, clock, ev = make(tmp_path, min_batch=8)
    with pool:
        pool.evaluate(Candidate(src(64)))            # builds the cache
        t0 = time.monotonic()
        r = pool.evaluate(Candidate(src(96)))
        took = time.monotonic() - t0
    assert r.status == "ok" and r.profile.ok
    assert took < BATCH_WAIT_S - 1.0, took           # nothing upstream: its batch went at once


def test_a_candidate_that_queued_while_a_batch_ran_does_not_go_alone(tmp_path):
    """The wait for company counts from when the device can take a batch: a candidate that
    queued long ago (while the last batch held the GPU) waits for the ones on their way."""
    import threading

    pool, harnesses, clock, ev = make(tmp_path, min_batch=3, profile=False)   # no batch thread of its own
    pool._batch[2] = collections.deque()           # a batch stage's queue, driven by hand
    with pool:
        def item(age):
            it = Item(Candidate(src(64)), None, time.perf_counter())
            it.queued_at = time.perf_counter() - age
            return it
        coming = [item(0.0), item(0.0)]
        for it in coming:
            it.stage = 1                            # still verifying: on their way to the batch stage
        with pool._count_lock:
            pool._outstanding += 3                  # three submitted: one waits, two still on their way
            pool._live.update({id(it): it for it in coming})
        with pool._cond:
            pool._batch[2].append(item(10.0))
        got = {}
        t = threading.Thread(target=lambda: got.update(batch=pool._take_batch(2)))
        t.start()
        time.sleep(0.5)
        assert t.is_alive()                         # not alone: the others are coming
        with pool._cond:
            with pool._count_lock:
                for it in coming:
                    pool._live.pop(id(it))
                    it.stage = 2
            pool._batch[2].extend(coming)
            pool._cond.notify_all()
        t.join(5)
        assert len(got["batch"]) == 3
        with pool._count_lock:
            pool._outstanding -= 3


class FakeLendingHarness(FakeGpuHarness):
    """As a persistent worker whose job lends the GPU while on the host: gives the lock back for
    a 'Python reference', then takes it again."""
    lends_gpu = True

    def run(self, job, lend=None):
        lend.__exit__(None, None, None)
        time.sleep(0.1)                              # the host's Python reference: no GPU
        lend.__enter__()
        return super().run(job)


@pytest.mark.parametrize("python_ref,workers", [(True, 2), (False, 1)])
def test_a_second_worker_per_gpu_when_jobs_lend_it(tmp_path, python_ref, workers):
    from tests.test_spec import SPEC

    clock = Clock()
    made = []

    def factory(d):
        made.append(FakeLendingHarness(d, clock))
        return made[-1]
    (tmp_path / "ref.py").write_text("def scale(**kw):\n    raise NotImplementedError\n")
    spec = load(tmp_path, SPEC + ('\n[reference]\npython = "ref.py:scale"\n' if python_ref else ""))
    prep = Preparer(spec, KERNEL, NvccBuilder("sm_90", cache_dir=tmp_path / "cache"))
    with Runner(standard_stages(prep, FakeBatchProfiler(clock)), [0], harness_factory=factory, build_workers=2) as pool:
        results = [f.result(timeout=120) for f in [pool.submit(Candidate(src(b))) for b in BLOCKS[:6]]]
    assert [r.status for r in results] == ["ok"] * 6
    assert len(made) == workers
    assert sum(len(h.jobs) for h in made) == 6
    assert not clock.overlaps()                      # lending never puts two on the GPU at once


def test_a_candidate_past_the_batch_stage_does_not_hold_a_batch(tmp_path):
    """One being sanitized (after profiling) is not on its way to the profiler: a lone waiting
    candidate goes at once instead of waiting BATCH_WAIT_S for it."""
    pool, harnesses, clock, ev = make(tmp_path, min_batch=3, profile=False)
    pool._batch[2] = collections.deque()
    with pool:
        waiting = Item(Candidate(src(64)), None, time.perf_counter())
        waiting.stage = 2
        past = Item(Candidate(src(96)), None, time.perf_counter())
        past.stage = 3
        with pool._count_lock:
            pool._outstanding += 2
            pool._live.update({id(waiting): waiting, id(past): past})
        with pool._cond:
            pool._batch[2].append(waiting)
        t0 = time.monotonic()
        batch = pool._take_batch(2)
        assert len(batch) == 1 and time.monotonic() - t0 < 1.0
        with pool._count_lock:
            pool._outstanding -= 2
            pool._live.clear()


class CountingHarness(FakeHarness):
    """A fake GPU worker: ok at 1 ms; counts its jobs."""

    def __init__(self):
        self.jobs = 0

    def run(self, job, lend=None):
        self.jobs += 1
        return HarnessResult("ok", timing=timing(1.0))


def test_the_same_compiled_code_reuses_the_finished_evaluation(tmp_path):
    """A comment and a __restrict__ that change nothing in the cubin: the second candidate takes the
    first one's evaluation without a GPU job; a real change (a BLOCK, a factor) runs; a job with a
    baseline never reuses."""
    harness = CountingHarness()
    prep = Preparer(load(tmp_path), KERNEL, NvccBuilder("sm_90", cache_dir=tmp_path / "c"))
    same = "// a comment that changes nothing\n" + KERNEL
    with Runner(standard_stages(prep), [0], harness_factory=lambda d: harness, build_workers=1,
                workers_per_gpu=1) as runner:
        first = runner.evaluate(Candidate(KERNEL))
        again = runner.evaluate(Candidate(same))
        assert harness.jobs == 1 and again.ok and again.median_ms == first.median_ms
        assert again.stage_s.get("reused") == 1.0 and "evaluation is reused" in again.message
        assert again.build is not None and again.build.key != first.build.key      # its own build
        other = runner.evaluate(Candidate(KERNEL.replace("BLOCK 128", "BLOCK 256")))
        assert harness.jobs == 2 and "reused" not in other.stage_s
        runner.evaluate(Candidate(same), baseline=Candidate(KERNEL))
        assert harness.jobs == 3


@pytest.mark.parametrize("how", ["unreadable cubin", "untimed", "sanitized"])
def test_no_reuse_where_the_code_cannot_be_read_or_the_job_asks_for_its_own_run(tmp_path, monkeypatch, how):
    """The same code again gets its own GPU job where the cubin's code cannot be read (no digest to
    match), where it is run without timing, or where it is to be sanitized."""
    import optiml.cubin

    if how == "unreadable cubin":
        monkeypatch.setattr(optiml.cubin, "code_digest", lambda path: None)
    kw = {"untimed": {"time_it": False}, "sanitized": {"sanitize": True}}.get(how, {})
    harness = CountingHarness()
    prep = Preparer(load(tmp_path), KERNEL, NvccBuilder("sm_90", cache_dir=tmp_path / "c"))
    with Runner(standard_stages(prep, sanitizer=ScriptedClean()), [0], harness_factory=lambda d: harness,
                build_workers=1, workers_per_gpu=1) as runner:
        runner.evaluate(Candidate(KERNEL), **kw)
        again = runner.evaluate(Candidate("// the same code\n" + KERNEL), **kw)
    assert harness.jobs == 2 and "reused" not in again.stage_s


class ScriptedClean:
    """A FAKE sanitizer: every candidate clean."""

    def sanitize(self, job, gpu_lock=None, cancel=None):
        from optiml.verify.sanitizer import SanitizeResult
        return SanitizeResult("clean", "passed", tools=("memcheck",))


class FlakyHarness(FakeHarness):
    """A fake GPU worker whose first job fails on optiml's side (harness_error), the rest ok at 1 ms."""

    def __init__(self):
        self.jobs = 0

    def run(self, job, lend=None):
        self.jobs += 1
        if self.jobs == 1:
            return HarnessResult("harness_error", "the GPU child lost its pipe")
        return HarnessResult("ok", timing=timing(1.0))


def test_a_transient_failure_of_the_machinery_is_not_reused_for_the_same_code(tmp_path):
    """The same cubin after a harness_error gets a fresh GPU job (and verifies), not the failure."""
    harness = FlakyHarness()
    prep = Preparer(load(tmp_path), KERNEL, NvccBuilder("sm_90", cache_dir=tmp_path / "c"))
    with Runner(standard_stages(prep), [0], harness_factory=lambda d: harness, build_workers=1,
                workers_per_gpu=1) as runner:
        first = runner.evaluate(Candidate(KERNEL))
        again = runner.evaluate(Candidate("// the same code\n" + KERNEL))
    assert first.status == "harness_error"
    assert again.ok and harness.jobs == 2 and "reused" not in again.stage_s


class FakeGatedHarness(FakeGpuHarness):
    """Holds its first job until the test opens the gate, so the others wait for the GPU."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.gate, self.started = threading.Event(), threading.Event()

    def run(self, job):
        self.started.set()
        self.gate.wait(timeout=60)
        return super().run(job)


def test_a_candidate_not_yet_on_a_gpu_can_be_withdrawn(tmp_path):
    clock, harnesses = Clock(), {}

    def factory(d):
        harnesses[d] = FakeGatedHarness(d, clock)
        return harnesses[d]
    spec = load(tmp_path)
    prep = Preparer(spec, KERNEL, NvccBuilder("sm_90", cache_dir=tmp_path / "cache"))
    pool = Runner(standard_stages(prep, None), (0,), harness_factory=factory, build_workers=2, workers_per_gpu=1)
    with pool:
        first = pool.submit(Candidate(src(32)))
        assert harnesses[0].started.wait(timeout=120)          # the first holds the GPU
        try:                                                    # a failed check fails now, not after the gate's wait
            queued = [pool.submit(Candidate(src(b))) for b in (64, 96, 128)]
            deadline = time.monotonic() + 120
            while pool._gpu_q.qsize() < 3 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert pool._gpu_q.qsize() == 3                     # all three built, waiting for the GPU
            assert pool.withdraw(queued[1])
            assert queued[1].cancelled()                        # at once, wherever it waits
            assert not pool.withdraw(first)                     # on the GPU already: its result will come
        finally:
            harnesses[0].gate.set()
        done = [f.result(timeout=120) for f in (first, queued[0], queued[2])]
        assert queued[1].cancelled()                            # dropped where it waited
        assert not pool.withdraw(queued[0])                     # finished
        again = pool.submit(Candidate(src(96))).result(timeout=120)   # its code again: evaluated, not lost
    assert again.status == "ok" and "reused" not in again.stage_s
    assert [d.status for d in done] == ["ok"] * 3
    assert sorted(j.candidate.constants.get("BLOCK") for j in harnesses[0].jobs) == [32, 64, 96, 128]
    assert pool._outstanding == 0 and not pool._live


def test_closing_stops_every_thread_and_closes_the_harnesses_and_stages_once(tmp_path):
    pool, harnesses, clock, prep = make(tmp_path)
    closed = collections.Counter()
    assert pool.submit(Candidate(src(64))).result(timeout=120).status == "ok"
    for h in harnesses.values():
        h.close = lambda: closed.update(["harness"])
    prep.profiler.close = lambda: closed.update(["profiler"])
    pool.close()
    assert not any(t.is_alive() for t in [*pool._threads, pool._bg_thread])
    assert closed == {"harness": 1, "profiler": 1}, closed
    pool.close()                                    # a second close does nothing more
    assert closed == {"harness": 1, "profiler": 1}
