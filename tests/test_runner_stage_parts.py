"""Parts of the runner's stages on fakes (no ncu, no nvcc, no GPU): the profile stage with a FAKE
profiler (a candidate whose kernel replay failed inside a batch of two or more is profiled again alone,
and the alone result is what its evaluation keeps; one profiled alone is not retried), and the
Preparer's gpu_ops cubin with a FAKE build of it."""
from dataclasses import dataclass
from types import SimpleNamespace

import optiml.runner.stages as stages
from optiml.profiler.types import ProfileStatus
from optiml.runner.stages import Device, ProfileStage, Slot
from tests.conftest import RUNNER_DEADLINE

pytestmark = RUNNER_DEADLINE


@dataclass(frozen=True)
class FakeJob:
    name: str
    device: int = 0


class FakeBatchProfiler:
    """Profiles a batch: the job named ``breaks`` fails its replay whenever it shares the batch (or
    always, with ``always``)."""

    def __init__(self, breaks: str, always=False):
        self.breaks, self.always, self.batches = breaks, always, []

    def profile_batch(self, jobs, gpu_name, gpu_lock=None, on_gpu_done=None, prestart=False):
        self.batches.append([j.name for j in jobs])
        return [SimpleNamespace(status=ProfileStatus.REPLAY_FAILED if j.name == self.breaks and (len(jobs) > 1 or self.always)
                                else ProfileStatus.OK, ok=True, wall_s=0.1, message=f"{j.name} in {len(jobs)}")
                for j in jobs]


def run_stage(monkeypatch, names, always=False):
    monkeypatch.setattr(stages, "with_diagnosis", lambda spec, ev, job, prof: prof)
    profiler = FakeBatchProfiler(breaks="b", always=always)
    items = [SimpleNamespace(job=FakeJob(n), ev=SimpleNamespace(stage_s={}, profile=None)) for n in names]
    ProfileStage(SimpleNamespace(spec=None), profiler, prestart=False).run(items, Slot(Device(0)))
    return profiler.batches, {i.job.name: (i.ev.profile.status.value, i.ev.profile.message) for i in items}


def test_a_replay_failed_in_a_batch_of_two_is_profiled_again_alone(monkeypatch):
    batches, kept = run_stage(monkeypatch, ["a", "b"])
    assert batches == [["a", "b"], ["b"]]
    assert kept == {"a": ("ok", "a in 2"), "b": ("ok", "b in 1")}


def test_a_candidate_profiled_alone_is_not_retried(monkeypatch):
    batches, kept = run_stage(monkeypatch, ["b"], always=True)
    assert batches == [["b"]] and kept == {"b": ("replay_failed", "b in 1")}


def test_the_gpu_ops_kernels_reach_the_child_only_where_they_built(monkeypatch):
    """The Preparer hands the GPU child the gpu_ops cubin (inputs drawn and compared on the GPU) once it
    built, and None (drawn on the host) where there is no architecture or the build failed; each once."""
    import optiml.verify.gpu_ops as gpu_ops
    from optiml.runner.prepare import Preparer

    built = []

    def fake_cubin_for(arch):
        built.append(arch)
        if arch == "sm_bad":
            raise RuntimeError("nvcc failed")
        return f"/cache/gpu_ops_{arch}.cubin"

    monkeypatch.setattr(gpu_ops, "cubin_for", fake_cubin_for)
    spec = SimpleNamespace(verify=SimpleNamespace(seed=1))
    for arch, want in (("sm_90", "/cache/gpu_ops_sm_90.cubin"), ("", None), ("sm_bad", None)):
        prep = Preparer(spec, "", SimpleNamespace(arch=arch))
        assert prep.ops_cubin() == want and prep.ops_cubin() == want, arch
    assert built == ["sm_90", "sm_bad"]


def test_a_runner_for_one_candidate_at_a_time_uses_gpu_0_unless_told(tmp_path):
    """``optiml profile`` and ``optiml eval`` build a Runner.sequential; without a device it is GPU 0 (a
    one-GPU machine has no other), with one it is that GPU."""
    from optiml.runner import Runner
    from tests.fakes import FakeHarness
    from tests.test_spec import KERNEL, load

    spec = load(tmp_path)
    for kw, want in (({}, [0]), ({"device": 2}, [2])):
        with Runner.sequential(spec, KERNEL, FakeHarness(), FakeHarness(), **kw) as runner:
            assert [d.index for d in runner.devices] == want


def test_a_failed_evaluation_is_the_same_object_with_its_status_and_message():
    from optiml.runner.types import Evaluation
    from optiml.status import Status
    ev = Evaluation("ok")
    assert ev.fail(Status.COMPILE_ERROR, "nvcc failed") is ev
    assert (ev.status, ev.message, ev.ok) == (Status.COMPILE_ERROR, "nvcc failed", False)


def test_a_prepared_job_runs_on_gpu_0_until_a_gpu_stage_places_it(tmp_path):
    """The Preparer's job leaves the device to the GPU stage that takes it (HarnessJob's default, 0)."""
    from optiml.build import NvccBuilder
    from optiml.runner import Preparer
    from optiml.runner.types import Evaluation
    from optiml.verify.harness import KernelBinary
    from tests.test_spec import KERNEL, load
    prep = Preparer(load(tmp_path), KERNEL, NvccBuilder("sm_90", cache_dir=tmp_path / "cache"))
    job = prep.job(KernelBinary("/k.cubin", "scale", ()), Evaluation("ok"))
    assert job.device == 0 and "scale" in job.reference.symbol and job.time_it


def test_the_fair_lock_lets_its_waiters_in_one_after_another_in_the_order_they_asked():
    """A broken ticket count (two tickets a request, a first ticket not served) would leave a thread
    waiting for ever: the holder and every waiter run in threads here and must all finish within
    seconds, the waiters in the order they asked."""
    import threading
    import time

    from optiml.runner import FairLock
    lock, order = FairLock(), []

    def waiter(i):
        with lock:
            order.append(i)

    def holder():
        with lock:                                 # held while three threads line up behind it
            order.append("holder")
            for i in range(3):
                asked = lock._next                 # the tickets handed out so far
                threading.Thread(target=waiter, args=(i,), daemon=True).start()
                until = time.monotonic() + 2       # each waiter has its ticket before the next starts
                while lock._next == asked and time.monotonic() < until:
                    time.sleep(0.001)
                time.sleep(0.02)
        with lock:
            order.append("again")

    t = threading.Thread(target=holder, daemon=True)
    t.start()
    deadline = time.monotonic() + 5
    while len(order) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert order == ["holder", 0, 1, 2, "again"], order
    assert lock.held_s >= 0.06                      # the holder alone held it 3 x 0.02 s


def test_a_failed_profile_is_warned_about_once_and_a_good_one_not_at_all(monkeypatch):
    from loguru import logger
    monkeypatch.setattr(stages, "with_diagnosis", lambda spec, ev, job, prof: prof)
    seen = []
    sink = logger.add(lambda m: seen.append(str(m)), level="WARNING")
    logger.enable("optiml")
    try:
        stage = ProfileStage(SimpleNamespace(spec=None), None, prestart=False)
        ok = SimpleNamespace(status=ProfileStatus.OK, ok=True, wall_s=0.1, message="")
        bad = SimpleNamespace(status=ProfileStatus.ERROR, ok=False, wall_s=0.1, message="ncu is not installed")
        for prof in (ok, ok, bad, bad, ok):
            stage._attach(SimpleNamespace(stage_s={}, profile=None), FakeJob("a"), prof)
    finally:
        logger.remove(sink)
        logger.disable("optiml")
    assert len(seen) == 1 and "profiling failed (error: ncu is not installed); going on with runtime alone" in seen[0]
