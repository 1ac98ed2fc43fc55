"""The spec's [baseline] run: a job that verifies and times a Python function on GPU
arrays in a kernel's place. What the CPU can check: the runner makes that job from the seed's
build and never hands it an earlier kernel's evaluation; optimize's record of the baseline from
the runner's answer; and the worker's timing loop for a function over a FAKE driver (a clock
that calls advance: wiring only, no GPU behaviour). tests/gpu/test_gpu_baseline.py runs it for real."""
import dataclasses

import pytest

from optiml.app.optimize import time_baseline
from optiml.build import NvccBuilder
from optiml.runner import Candidate, Evaluation, Preparer, Runner, standard_stages
from optiml.verify.harness import Case, FunctionRef, HarnessJob, HarnessResult, KernelBinary
from tests.conftest import RUNNER_DEADLINE
from tests.fakes import FakeHarness
from tests.test_final_choice import FakeGpu
from tests.test_runner import timing
from tests.test_spec import KERNEL, SPEC, load

pytestmark = RUNNER_DEADLINE

REF = "def scale(x, n, alpha):\n    return alpha * x\n"


class JobsHarness(FakeHarness):
    """A fake GPU worker: ok at 1 ms (2 ms for a function job); keeps the jobs."""

    def __init__(self):
        self.jobs = []

    def run(self, job, lend=None):
        self.jobs.append(job)
        return HarnessResult("ok", timing=timing(2.0 if job.function else 1.0))


def test_a_function_job_is_made_from_the_seeds_build_and_never_reuses(tmp_path):
    harness = JobsHarness()
    prep = Preparer(load(tmp_path), KERNEL, NvccBuilder("sm_90", cache_dir=tmp_path / "c"))
    f = FunctionRef("torch", str(tmp_path / "ref.py"), "scale")
    with Runner(standard_stages(prep), [0], harness_factory=lambda d: harness, build_workers=1,
                workers_per_gpu=1) as runner:
        seed = runner.evaluate(Candidate(KERNEL))
        # the same compiled code as the seed (a comment apart), which a kernel candidate would reuse
        base = runner.evaluate(Candidate("// the baseline\n" + KERNEL, name="baseline.cu", function=f), profile=False)
    assert [j.function for j in harness.jobs] == [None, f]          # its own GPU job, same code or not
    assert seed.median_ms == 1.0 and base.median_ms == 2.0 and "reused" not in base.stage_s
    assert harness.jobs[1].candidate.constants == harness.jobs[0].candidate.constants   # the seed's sizes


class AnsweringRunner:
    def __init__(self, ev):
        self.ev, self.asked = ev, []

    def evaluate(self, candidate, **kw):
        self.asked.append((candidate, kw))
        return self.ev


def test_optimize_records_the_baseline(tmp_path):
    (tmp_path / "vendor.py").write_text(REF)
    spec = load(tmp_path, SPEC + '\n[baseline]\ntorch = "vendor.py:scale"\nname = "torch (eager)"\n')
    ok = Evaluation("ok", median_ms=0.41, harness=HarnessResult("ok", timing=timing(0.41)))
    runner = AnsweringRunner(ok)
    rec = time_baseline(runner, spec, KERNEL)
    cand, kw = runner.asked[0]
    assert cand.function == FunctionRef("torch", str(tmp_path / "vendor.py"), "scale") and cand.source == KERNEL
    assert kw == {"profile": False, "sanitize": False}
    assert rec["label"] == "torch (eager)" and rec["status"] == "ok" and rec["median_ms"] == 0.41
    assert rec["reps"] == 10 and rec["flushed_l2"] and "message" not in rec
    wrong = time_baseline(AnsweringRunner(Evaluation("wrong_output", "max abs error 3 at y[7]")), spec, KERNEL)
    assert wrong == {"label": "torch (eager)", "framework": "torch", "status": "wrong_output",
                     "message": "max abs error 3 at y[7]"}


class FakeFunction:
    """Stands in for frameworks.DeviceFunction over the fake driver: a call advances the clock."""

    def __init__(self, drv, ms):
        self.drv, self.ms, self.calls = drv, ms, 0

    def arguments(self, spec, case):
        return {"x": case}, {"y": case}

    def _on_stream(self):
        import contextlib

        return contextlib.nullcontext()

    def fn(self, **kwargs):
        self.drv.clock += self.ms
        self.drv.log.append("function")
        self.calls += 1
        return "y"

    def write(self, spec, result, outs):
        assert result == "y" and set(outs) == {"y"}
        self.drv.log.append("write")


def test_the_function_is_timed_as_a_kernel_alone_is(tmp_path):
    from optiml.spec import Launch
    from optiml.verify.gpu_timing import time_function

    spec = load(tmp_path)
    spec = dataclasses.replace(spec, timing=dataclasses.replace(spec.timing, warmup_ms=0.0))
    launch = Launch((1, 1, 1), (128, 1, 1), 0)
    kb = KernelBinary("seed", "k", (launch,) * 3)
    gpu = FakeGpu({"seed": 1.0})
    fn = FakeFunction(gpu.drv, 0.25)
    job = HarnessJob(spec=spec, candidate=kb, reference=None, cases=(Case(0, 5),),
                     function=FunctionRef("torch", "f.py", "f"))
    t, set0 = time_function(gpu, job, lambda text: None, fn)
    assert t.median_ms == pytest.approx(0.25) and t.reps == spec.timing.min_reps and t.flushed_l2
    assert t.warmup_launches == 3 and fn.calls == 3 + t.reps + 1           # warm-up, timed, set 0 once more
    log = gpu.drv.log
    calls = [i for i, x in enumerate(log) if x == "function"]
    timed = calls[3:-1]
    assert all(log[i - 1] == "flush" and log[i - 2] == "reset" for i in timed)   # cold L2, outputs poisoned
    assert log.count("write") == 1 and log[-1] == "write"      # only the checked call's result is copied in


def test_a_fault_while_timing_frees_every_input_set(tmp_path, monkeypatch):
    """A launch error in the timed calls is a KernelFault, and no input set is left allocated (set 0
    goes to the caller only with a timing)."""
    import optiml.verify.gpu_timing as gt
    from optiml.spec import Launch
    from optiml.verify.gpu import KernelFault

    made, freed = [], []
    real_new = gt._new_case
    monkeypatch.setattr(gt, "_new_case", lambda *a, **k: made.append(real_new(*a, **k)) or made[-1])
    monkeypatch.setattr(gt, "_free", lambda gpu, thing: freed.append(thing))
    spec = load(tmp_path)
    spec = dataclasses.replace(spec, timing=dataclasses.replace(spec.timing, warmup_ms=0.0))
    kb = KernelBinary("seed", "k", (Launch((1, 1, 1), (128, 1, 1), 0),) * 3)
    gpu = FakeGpu({"seed": 1.0})
    fn = FakeFunction(gpu.drv, 0.25)
    calls = {"n": 0}
    real_fn = fn.fn

    def faulty(**kw):
        calls["n"] += 1
        if calls["n"] == 5:
            raise gpu.drv.Error("an illegal memory access")
        return real_fn(**kw)
    fn.fn = faulty
    job = HarnessJob(spec=spec, candidate=kb, reference=None, cases=(Case(0, 5),),
                     function=FunctionRef("torch", "f.py", "f"))
    with pytest.raises(KernelFault):
        gt.time_function(gpu, job, lambda text: None, fn)
    assert made and all(any(c is f for f in freed) for c in made)


class VendorHarness(FakeHarness):
    """A fake GPU worker that answers a job with a vendor with a vendor timing of 0.8 ms."""

    def __init__(self):
        self.jobs = []

    def run(self, job, lend=None):
        self.jobs.append(job)
        return HarnessResult("ok", timing=timing(1.0), baseline_timing=timing(3.0) if job.baseline else None,
                             vendor_timing=timing(0.8) if job.vendor else None)


def test_the_vendor_function_rides_in_the_final_job_and_its_median_comes_back(tmp_path):
    """runner.submit(vendor=...) puts the [baseline]'s function in the job beside the baseline kernel
    (HarnessJob.vendor; Evaluation.vendor_ms from its timing), and such a job never reuses an earlier
    kernel's evaluation; the harness result keeps the vendor timing through to_dict/from_dict."""
    harness = VendorHarness()
    prep = Preparer(load(tmp_path), KERNEL, NvccBuilder("sm_90", cache_dir=tmp_path / "c"))
    f = FunctionRef("torch", str(tmp_path / "ref.py"), "scale")
    with Runner(standard_stages(prep), [0], harness_factory=lambda d: harness, build_workers=1,
                workers_per_gpu=1) as runner:
        runner.evaluate(Candidate(KERNEL))
        ev = runner.evaluate(Candidate(KERNEL, name="best.cu"), profile=False, baseline=Candidate(KERNEL), vendor=f)
    assert [j.vendor for j in harness.jobs] == [None, f] and "reused" not in ev.stage_s
    assert ev.median_ms == 1.0 and ev.baseline_ms == 3.0 and ev.vendor_ms == 0.8
    back = HarnessResult.from_dict(ev.harness.to_dict())
    assert back.vendor_timing.median_ms == 0.8


def test_the_vendor_is_timed_in_the_same_rounds_as_the_kernels(tmp_path):
    """time_kernels(functions=...) over a FAKE driver (wiring only): the function takes its turn in
    each round's rotation like a kernel, its timing comes last, and set 0 is the first kernel's."""
    from optiml.spec import Launch
    from optiml.verify.gpu_timing import time_kernels

    spec = load(tmp_path)
    spec = dataclasses.replace(spec, timing=dataclasses.replace(spec.timing, warmup_ms=0.0))
    launch = Launch((1, 1, 1), (128, 1, 1), 0)
    fast, slow = (KernelBinary(n, "k", (launch,) * 3) for n in ("fast", "slow"))
    gpu = FakeGpu({"fast": 1.0, "slow": 4.0})
    fn = FakeFunction(gpu.drv, 0.5)
    job = HarnessJob(spec=spec, candidate=fast, reference=None, cases=(Case(0, 5),), baseline=slow)
    (t_fast, t_slow, t_fn), _, clocks = time_kernels(gpu, job, lambda text: None, [fast, slow], functions=[fn])
    assert t_fast.median_ms == pytest.approx(1.0) and t_slow.median_ms == pytest.approx(4.0)
    assert t_fn.median_ms == pytest.approx(0.5) and len(t_fn.blocks_ms) == len(t_fast.blocks_ms) > 1
    assert len(clocks["plan"]["reps"]) == 3
    order = [x for x in gpu.drv.log if x in ("fast", "slow", "function")]
    assert order[-1] == "fast" and order[:3] == ["fast", "slow", "function"]
    firsts = []                                  # the order of the blocks: each round starts with another
    for x in order[9:-1]:
        if not firsts or firsts[-1] != x:
            firsts.append(x)
    assert firsts[:3] != firsts[3:6] and set(firsts) == {"fast", "slow", "function"}


def test_the_baseline_figure_is_the_interleaved_median_where_the_final_job_timed_it():
    from optiml.app.optimize import merge_interleaved
    alone = {"label": "torch.compile", "framework": "torch", "status": "ok", "median_ms": 0.50, "reps": 10}
    merged = merge_interleaved(alone, {"median_ms": 0.46, "spread": 0.01, "reps": 40})
    assert merged["median_ms"] == 0.46 and merged["alone_ms"] == 0.50 and "interleaved" in merged["timed"]
    assert merge_interleaved(alone, None) == alone and merge_interleaved(alone, {"message": "no"}) == alone
    wrong = {"label": "x", "framework": "torch", "status": "wrong_output", "message": "max abs error 3"}
    assert merge_interleaved(wrong, {"median_ms": 0.46}) == wrong        # a baseline that is wrong has no figure
