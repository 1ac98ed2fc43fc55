"""optimize's final step on the CPU: the block plan and the speedup's interval of an interleaved
timing (pure functions), the runner's job with rivals (real nvcc, fake GPU worker), and the final
choice among the candidates in the noise band (a real search over fakes; a fake runner whose
"measurements" are scripted: none of it is GPU behaviour)."""
import dataclasses
import json
import re

import numpy as np
import pytest

from optiml.app.optimize import FINAL_CONTENDERS, OptimizeResult, contenders, final_timing, sanitized_final
from optiml.edits.types import Proposal
from optiml.runner import Candidate, Evaluation
from optiml.search import MCTS, SearchConfig
from optiml.verify.harness import HarnessResult, RivalResult, TimingResult
from optiml.verify.timing_stats import (MIN_ROUNDS, PLAN_MS, ROUNDS, block_order, block_plan, ratio_interval,
                                        timing_stats)
from tests.conftest import RUNNER_DEADLINE

pytestmark = RUNNER_DEADLINE


# -- the block plan and the interval ------------------------------------------------------------------
def test_each_kernel_gets_repetitions_from_its_own_time():
    """The measured pair: a 33 ms seed and a 0.124 ms histogram kernel. Sized from the slowest,
    the fast one had 12 samples; now each round runs a block of each, the fast one's of 300."""
    plan = block_plan([33.0, 0.124])            # the spec defaults: min 10, max 300, target 400 ms
    assert plan.rounds == ROUNDS == 10
    assert plan.reps == (2, 300) and plan.warmup == (0, 9)
    assert all(plan.rounds * r >= 10 for r in plan.reps)            # min_reps in all
    assert 300 * 0.124 > 25                                         # a fast block is tens of ms
    assert plan.own_ms([33.0, 0.124]) < 1500
    # like kernels: about target_ms each; tiny ones: max_reps a block
    assert block_plan([1.0, 1.0]).reps == (40, 40) and block_plan([1.0, 1.0]).warmup == (1, 1)
    assert block_plan([0.005, 0.004]).reps == (300, 300) and block_plan([0.005, 0.004]).warmup == (20, 20)
    # a 2 s and a 1.5 s kernel: fewer rounds, the plan within PLAN_MS where it can be
    slow = block_plan([2000.0, 1500.0])
    assert slow.rounds < ROUNDS and slow.reps == (2, 2) and slow.warmup == (0, 0)
    assert slow.own_ms([2000.0, 1500.0]) <= PLAN_MS or slow.rounds == MIN_ROUNDS
    assert block_plan([9000.0, 9000.0]).rounds == MIN_ROUNDS


def test_the_order_rotates_every_round():
    assert [block_order(r, 2) for r in range(4)] == [[0, 1], [1, 0], [0, 1], [1, 0]]
    three = [block_order(r, 3) for r in range(3)]
    assert all(sorted(col) == [0, 1, 2] for col in zip(*three))   # each kernel in each place once


def test_the_speedup_interval_comes_from_the_ratios_of_paired_blocks():
    assert ratio_interval([10.0 * r for r in range(1, 11)], [10.0] * 10) == (5.5, 2.0, 9.0)
    assert ratio_interval([], [1.0]) is None and ratio_interval(None, None) is None
    rng = np.random.default_rng(0)
    drift = rng.permutation(np.linspace(1.0, 1.2, 10))           # the GPU's clock wanders over the timing
    seed = 33.0 * drift * rng.normal(1, 0.003, 10)
    fast = 0.124 * drift * rng.normal(1, 0.003, 10)
    fast[3] *= 1.5                                              # one disturbed block
    med, lo, hi = ratio_interval(seed, fast)
    assert lo <= 33.0 / 0.124 <= hi and abs(med / (33.0 / 0.124) - 1) < 0.01 and hi / lo < 1.03


def test_block_medians_are_kept_round_by_round():
    t = timing_stats([1.0, 1.1, 5.0, 2.0, 2.0, 2.1], 3, 1, True, blocks=[[1.0, 1.1, 5.0], [2.0, 2.0, 2.1]])
    assert t.blocks_ms == [1.1, 2.0] and t.reps == 6
    assert timing_stats([1.0, 2.0], 1, 1, True).blocks_ms == []


def test_a_job_result_with_rivals_and_clocks_goes_through_json():
    t = timing_stats([1.0, 1.1, 1.2], 3, 1, True, blocks=[[1.0, 1.1, 1.2]])
    hr = HarnessResult("ok", timing=t, baseline_timing=t, rivals=[RivalResult("ok", "", t),
                                                                  RivalResult("wrong_output", "max abs error 3")],
                       clocks={"start": {"sm_mhz": 1980}, "end": None})
    back = HarnessResult.from_dict(json.loads(json.dumps(hr.to_dict())))
    assert back == hr and back.rivals[0].timing.blocks_ms == [1.1]


# -- the runner's job with rivals -------------------------------------------------------------------------
def test_a_tuple_baseline_makes_one_job_with_the_baseline_and_rivals(tmp_path):
    from optiml.build import NvccBuilder
    from optiml.runner import Preparer, Runner, standard_stages
    from tests.fakes import FakeHarness
    from tests.test_spec import KERNEL, load

    class Capture(FakeHarness):
        jobs: list = []

        def run(self, job, lend=None):
            self.jobs.append(job)
            t = TimingResult(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 10, 3, 1, True)
            return HarnessResult("ok", timing=t, baseline_timing=t, rivals=[RivalResult("ok", "", t)] * len(job.rivals))

    prep = Preparer(load(tmp_path), KERNEL, NvccBuilder("sm_90", cache_dir=tmp_path / "c"))
    harness = Capture()
    other = [Candidate(KERNEL.replace("BLOCK 128", f"BLOCK {b}")) for b in (64, 256)]
    with Runner(standard_stages(prep), [0], harness_factory=lambda d: harness, build_workers=1,
                workers_per_gpu=1) as runner:
        ev = runner.evaluate(Candidate(KERNEL), profile=False, baseline=(Candidate(KERNEL), *other))
        assert ev.ok and ev.baseline_ms == 1.0 and len(ev.harness.rivals) == 2
        job = harness.jobs[-1]
        assert job.baseline is not None and [kb.constants["BLOCK"] for kb in job.rivals] == [64, 256]
        one = runner.evaluate(Candidate(KERNEL), profile=False, baseline=Candidate(KERNEL))
        assert one.ok and harness.jobs[-1].rivals == () and harness.jobs[-1].baseline is not None
        bad = runner.evaluate(Candidate(KERNEL), profile=False, baseline=(Candidate(KERNEL), Candidate("nonsense")))
        assert bad.status == "reference_error" and bad.message.startswith("rival 1 does not build")
        assert len(harness.jobs) == 2


# -- the final choice ------------------------------------------------------------------------------------
ROOT = "// seed\n#define V seed\n__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n"
# the search's own timings: b is fastest (spread 1 %: a 2 % band), a and c are in its band
SEARCH_MS = {"seed": 10.0, "a": 1.000, "b": 0.986, "c": 0.990, "d": 2.0, "e": 1.3}
CHILDREN = {"seed": ("a", "d"), "a": ("b", "c"), "d": ("e",)}


def variant(source: str) -> str:
    return re.search(r"#define V (\w+)", source).group(1)


class TableEvaluator:
    def evaluate(self, source, flags):
        return {"status": "ok", "median_ms": SEARCH_MS[variant(source)], "spread": 0.01}


class TreeProposer:
    name = "tree"

    def propose(self, node, k, rng):
        v = variant(node.source)
        tried = {a.edit for a in node.attempts}
        return [Proposal(node.source.replace(f"V {v}", f"V {c}"), node.flags, f"-> {c}", "")
                for c in CHILDREN.get(v, ()) if f"-> {c}" not in tried][:k]


@pytest.fixture
def search():
    s = MCTS(ROOT, TableEvaluator(), TreeProposer(), config=SearchConfig(budget=len(SEARCH_MS) - 1))
    s.run()
    assert sorted(variant(n.source) for n in s.nodes) == sorted(SEARCH_MS)
    return s


def node(search, v):
    return next(n for n in search.nodes if variant(n.source) == v)


def timing(ms, spread=0.002, rounds=10):
    return TimingResult(ms, ms, ms, ms, ms, ms, spread * ms, 20 * rounds, 3, 1, True,
                        blocks_ms=[ms * (1 + 0.001 * ((r % 3) - 1)) for r in range(rounds)])


class MeasuringRunner:
    """A fake runner for the final step: a job's candidate, baseline and rivals timed at the
    ``measured`` medians (variant -> ms; a variant in ``wrong`` fails its verification as a rival)."""

    def __init__(self, measured, wrong=(), fail_with_rivals=False, fail_with_vendor=False):
        self.measured, self.wrong, self.fail_with_rivals = measured, set(wrong), fail_with_rivals
        self.fail_with_vendor = fail_with_vendor
        self.jobs: list = []
        self.vendors: list = []

    def submit(self, candidate, **kw):
        from concurrent.futures import Future

        fut = Future()
        fut.set_result(self.evaluate(candidate, **kw))
        return fut

    def evaluate(self, candidate, *, profile=True, time_it=True, baseline=None, sanitize=None, vendor=None):
        others = baseline if isinstance(baseline, tuple) else (baseline,) if baseline is not None else ()
        self.jobs.append([variant(candidate.source)] + [variant(o.source) for o in others])
        self.vendors.append(vendor)
        if len(others) > 1 and self.fail_with_rivals:
            return Evaluation("runtime_error", "rival 2 of the candidate: an illegal memory access")
        if vendor is not None and self.fail_with_vendor:
            return Evaluation("runtime_error", "while timing: the baseline function raised RuntimeError: no")
        t = timing(self.measured[variant(candidate.source)])
        rivals = [RivalResult("wrong_output", "max abs error 3") if variant(o.source) in self.wrong else
                  RivalResult("ok", "", timing(self.measured[variant(o.source)])) for o in others[1:]]
        base = timing(self.measured[variant(others[0].source)]) if others else None
        hr = HarnessResult("ok", timing=t, baseline_timing=base, rivals=rivals, clocks={"start": {"sm_mhz": 1980}},
                           vendor_timing=timing(self.measured["vendor"]) if vendor is not None else None)
        return Evaluation("ok", harness=hr, median_ms=t.median_ms, baseline_ms=base.median_ms if base else None, seed=7)


def test_the_contenders_are_the_band_by_the_search_timings(search):
    best = search.best()
    assert variant(best.source) == "a"                                 # fewest edits in b's 2 % band
    assert [variant(n.source) for n in contenders(search, best)] == ["a", "b", "c"]
    assert FINAL_CONTENDERS == 4


def test_the_candidates_in_the_band_are_timed_together_and_the_measurement_chooses(search):
    """b measured 5 % faster than a beside it: b wins, though the search picked a; one job."""
    runner = MeasuringRunner({"seed": 10.0, "a": 1.0, "b": 0.95, "c": 0.99})
    chosen, final = sanitized_final(runner, search, search.best())
    assert runner.jobs == [["a", "seed", "b", "c"]]                    # one job: candidate, seed, rivals
    assert chosen is node(search, "b") and final["best_edits"] == list(chosen.path())
    assert final["status"] == "ok" and final["seed_ms"] == 10.0 and final["best_ms"] == 0.95
    assert final["speedup"] == pytest.approx(10.0 / 0.95)
    assert final["speedup_low"] <= final["speedup"] <= final["speedup_high"] and final["speedup_rounds"] == 10
    rows = {r["node"]: r for r in final["compared"]}
    assert set(rows) == {node(search, v).id for v in "abc"}
    assert rows[node(search, "c").id]["median_ms"] == 0.99 and rows[node(search, "c").id]["spread"] == 0.002
    assert rows[chosen.id]["search_ms"] == 0.986 and rows[chosen.id]["edits"] == 2
    assert final["clocks"] == {"start": {"sm_mhz": 1980}}
    json.dumps(final)                                                  # the store keeps it as JSON


def test_a_tie_in_the_measurement_goes_to_the_fewest_edits(search):
    """b and c within 1 % of a beside it (the band's floor, their spread being 0.2 %): a wins."""
    chosen, final = final_timing(MeasuringRunner({"seed": 10.0, "a": 0.99, "b": 0.986, "c": 0.985}),
                                 search.root, search.best(), rivals=contenders(search, search.best()))
    assert chosen is node(search, "a") and final["best_ms"] == 0.99
    assert "3 candidates within the noise band timed together" in final["message"]


def test_the_figure_names_the_nodes_as_the_store_does(search):
    """The store numbers nodes from 1, the search from 0: the message and the compared rows use
    the store's ids when given them (a real H100 run said "node 4 chosen" of the store's node 5)."""
    ids = {n.id: n.id + 1 for n in search.nodes}
    runner = MeasuringRunner({"seed": 10.0, "a": 1.0, "b": 0.95, "c": 0.99})
    chosen, final = sanitized_final(runner, search, search.best(), ids=ids)
    assert chosen is node(search, "b")
    assert f"node {chosen.id + 1} ({chosen.depth} edits) chosen" in final["message"]
    assert {r["node"] for r in final["compared"]} == {node(search, v).id + 1 for v in "abc"}


def test_a_rival_that_fails_verification_is_left_out(search):
    runner = MeasuringRunner({"seed": 10.0, "a": 1.0, "b": 0.95, "c": 0.93}, wrong={"c"})
    chosen, final = sanitized_final(runner, search, search.best())
    assert chosen is node(search, "b")
    left = next(r for r in final["compared"] if r["node"] == node(search, "c").id)
    assert left["status"] == "wrong_output" and "median_ms" not in left


def test_a_job_broken_by_a_rival_is_run_again_with_the_best_alone(search):
    runner = MeasuringRunner({"seed": 10.0, "a": 1.0, "b": 0.95, "c": 0.99}, fail_with_rivals=True)
    chosen, final = sanitized_final(runner, search, search.best())
    assert runner.jobs == [["a", "seed", "b", "c"], ["a", "seed"]]
    assert chosen is node(search, "a") and final["status"] == "ok" and final["speedup"] == pytest.approx(10.0)
    assert [r["node"] for r in final["compared"]] == [chosen.id]


def test_an_unsafe_choice_gives_way_and_the_choice_is_made_again(search):
    from optiml.verify.sanitizer import SanitizeResult

    class Sanitizing(MeasuringRunner):
        def evaluate(self, candidate, *, profile=True, time_it=True, baseline=None, sanitize=None):
            if not time_it:
                bad = variant(candidate.source) == "b"
                self.jobs.append(["sanitize", variant(candidate.source)])
                return Evaluation("ok", sanitize=SanitizeResult("unsafe" if bad else "clean",
                                                                "racecheck: race" if bad else "", tools=()))
            return super().evaluate(candidate, profile=profile, time_it=time_it, baseline=baseline)

    runner = Sanitizing({"seed": 10.0, "a": 1.0, "b": 0.95, "c": 0.995})
    chosen, final = sanitized_final(runner, search, search.best(), sanitize=True)
    assert node(search, "b").status == "unsafe"
    assert chosen is node(search, "a") and final["sanitize"]["status"] == "clean"
    assert ["a", "seed", "b", "c"] in runner.jobs and runner.jobs[-1] != ["a", "seed", "b", "c"]


def test_the_final_line_shows_the_interval():
    final = {"status": "ok", "speedup": 265.12, "speedup_low": 262.0, "speedup_high": 268.31, "speedup_rounds": 10,
             "seed_ms": 33.0, "best_ms": 0.1245,
             "compared": [{"node": 4, "median_ms": 0.1245}, {"node": 7, "median_ms": 0.1247}]}
    r = OptimizeResult(run_id=3, evaluations=50, best_source="", best_path=("tile",), final=final, output="o.cu")
    assert r.line() == ("run 3: 50 candidates; best 265.12x (95 % 262.00-268.31x over 10 rounds; 33.0000 -> "
                        "0.1245 ms, re-verified and timed interleaved with the seed, chosen among 2 timed "
                        "together); path: tile; written to o.cu")
    r = OptimizeResult(run_id=3, evaluations=5, best_source="", best_path=(), output="o.cu",
                       final={"status": "timeout", "message": "killed", "search_seed_ms": 4.0, "search_best_ms": 1.0})
    assert "4.00x during the search; the final interleaved re-timing failed (timeout: killed)" in r.line()


# -- start to end: the store keeps the comparison ----------------------------------------------------
def test_optimize_stores_what_the_final_step_compared(tmp_path, monkeypatch):
    """run_optimize with fakes (tests/test_optimize_fakes.py's, a worker timing every BLOCK but the
    seed's at 1 ms, so that they all tie): the candidates compared at the end are stored by their
    store node ids, and the one written is the one the comparison chose."""
    from optiml.app.optimize import OptimizeOptions, run_optimize
    from optiml.traces.store import TraceStore
    from tests.fakes import fake_gpu_machine
    from tests.test_optimize_fakes import FakeBlockWorker
    from tests.test_spec import KERNEL, SPEC, write

    class TieWorker(FakeBlockWorker):
        def run(self, job, lend=None):
            def t(kb):
                return timing(2.0 if kb.constants["BLOCK"] == 128 else 1.0)
            return HarnessResult("ok", timing=t(job.candidate),
                                 baseline_timing=t(job.baseline) if job.baseline is not None else None,
                                 rivals=[RivalResult("ok", "", t(kb)) for kb in job.rivals])

    fake_gpu_machine(monkeypatch, TieWorker, settle=True)
    kernel, _ = write(tmp_path, SPEC.replace("timing = { N = 1048576 }", "timing = { N = 4096 }"), KERNEL)
    for budget in (2, 8):         # the second run's store ids are not its search's
        result = run_optimize(OptimizeOptions(kernel=kernel, budget=budget, profile=False, db=tmp_path / "t.db",
                                              arch="sm_90", parallel=2, build_jobs=1, sanitize="off"))
    with TraceStore(tmp_path / "t.db", create=False) as store:
        final = store.run(result.run_id)["result"]
        ids = {n.id: n for n in store.nodes(result.run_id)}
        timed = [r for r in final["compared"] if r.get("median_ms")]
        assert len(timed) >= 2 and all(r["node"] in ids for r in final["compared"])
        assert all(len(store.path_to(r["node"])) - 1 == r["edits"] for r in final["compared"])
        assert final["best_node"] in {r["node"] for r in timed}
        assert min(r["edits"] for r in timed) == next(r["edits"] for r in timed if r["node"] == final["best_node"])
    assert final["speedup"] == pytest.approx(2.0) and final["speedup_low"] <= 2.0 <= final["speedup_high"]
    assert "chosen among" in result.line()


# -- the worker's timing loop over a FAKE driver (a clock that launches advance: wiring only) ---------
class FakeDriver:
    """Stands in for pycuda.driver: device memory is host bytes, a launch advances a clock by its
    kernel's time, events read the clock. Nothing here is GPU behaviour."""

    class Error(Exception):
        pass

    def __init__(self):
        self.clock, self.log = 0.0, []
        drv = self

        class Event:
            t = 0.0

            def record(self, stream=None):
                self.t = drv.clock

            def synchronize(self):
                pass

            def time_since(self, start):
                return self.t - start.t

        self.Event = Event

    class Mem:
        def __init__(self, n):
            self.n = n

        def free(self):
            pass

        def __int__(self):
            return id(self)

    def mem_alloc(self, n):
        return self.Mem(n)

    def memcpy_htod(self, dst, src):
        pass

    def memcpy_dtod(self, dst, src, n):
        pass

    def memcpy_dtod_async(self, dst, src, n, stream=None):
        self.log.append("reset")

    def memset_d32_async(self, dst, value, n, stream=None):
        self.log.append("flush")


class FakeKernel:
    def __init__(self, drv, name, ms):
        self.drv, self.name, self.ms = drv, name, ms

    def prepared_async_call(self, grid, block, stream, *args, shared_size=0):
        self.drv.clock += self.ms
        self.drv.log.append(self.name)


class FakeGpu:
    def __init__(self, kernels):
        self.drv = FakeDriver()
        self.fns = {path: FakeKernel(self.drv, path, ms) for path, ms in kernels.items()}
        self.l2_bytes, self.pci, self.ops = 1 << 10, "0000:00:00.0", None

        class Stream:
            def synchronize(self):
                pass

        self.stream = Stream()

    def load(self, kb, spec):
        return None, self.fns[kb.cubin_path]


def test_the_timing_loop_runs_the_planned_blocks(tmp_path):
    from optiml.spec import Launch
    from optiml.verify.gpu_timing import time_kernels
    from optiml.verify.harness import Case, HarnessJob, KernelBinary
    from tests.test_spec import load

    spec = load(tmp_path)
    spec = dataclasses.replace(spec, timing=dataclasses.replace(spec.timing, warmup_ms=0.0))   # 3 launches each
    launch = Launch((1, 1, 1), (128, 1, 1), 0)
    slow, fast = (KernelBinary(name, "k", (launch,) * 3) for name in ("slow", "fast"))
    gpu = FakeGpu({"slow": 33.0, "fast": 0.124})
    job = HarnessJob(spec=spec, candidate=fast, reference=None, cases=(Case(0, 5),), baseline=slow)
    (t_fast, t_slow), set0, clocks = time_kernels(gpu, job, lambda text: None, [fast, slow])
    assert clocks["plan"]["reps"] == [300, 2] and clocks["plan"]["warmup"] == [9, 0] and clocks["start"] is None
    assert t_fast.reps == 3000 and t_slow.reps == 20 and len(t_fast.blocks_ms) == len(t_slow.blocks_ms) == 10
    assert t_fast.median_ms == pytest.approx(0.124) and t_slow.median_ms == pytest.approx(33.0)
    assert t_fast.warmup_launches == 3 + 90 and t_slow.warmup_launches == 3
    runs = [name for name in gpu.drv.log if name in ("slow", "fast")]
    block = {"fast": ["fast"] * 309, "slow": ["slow"] * 2}          # 9 untimed + 300 timed; 2 timed
    expected = ["fast", "slow"] * 3 + [name for r in range(10) for name in
                                       (["fast", "slow"] if r % 2 == 0 else ["slow", "fast"]) for name in block[name]]
    assert runs == expected + ["fast"]                               # rotated rounds; then set 0 once more
    launched = [i for i, x in enumerate(gpu.drv.log) if x in ("slow", "fast")]
    timed = launched[6:-1]
    assert all(gpu.drv.log[i - 1] == "flush" and gpu.drv.log[i - 2] == "reset" for i in timed)
    # one kernel alone: as before (repetitions from its time, stopping early once precise)
    (t,), _, clocks = time_kernels(gpu, job, lambda text: None, [fast])
    assert clocks is None and t.blocks_ms == [] and t.reps == spec.timing.min_reps


def test_the_vendor_is_timed_in_the_final_job_and_a_job_it_breaks_runs_again_without_it(search):
    """final_timing(vendor=...): the spec's [baseline] function rides in the one final job (the same
    clocks as the best), its median in final["vendor"]; where that job fails with it, the same job
    runs again without it and the choice is made as before."""
    from optiml.verify.harness import FunctionRef
    f = FunctionRef("torch", "ref.py", "softmax_compiled")
    runner = MeasuringRunner({"seed": 10.0, "a": 1.0, "b": 0.95, "c": 0.99, "vendor": 1.2})
    chosen, final = sanitized_final(runner, search, search.best(), vendor=f)
    assert runner.jobs == [["a", "seed", "b", "c"]] and runner.vendors == [f]
    assert final["vendor"] == {"median_ms": 1.2, "spread": 0.002, "reps": 200} and final["best_ms"] == 0.95
    broken = MeasuringRunner({"seed": 10.0, "a": 1.0, "b": 0.95, "c": 0.99}, fail_with_vendor=True)
    chosen2, final2 = sanitized_final(broken, search, search.best(), vendor=f)
    assert broken.vendors == [f, None] and broken.jobs == [["a", "seed", "b", "c"]] * 2
    assert chosen2 is chosen and "vendor" not in final2 and final2["best_ms"] == 0.95
