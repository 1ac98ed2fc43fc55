"""One test for each bug that was planted by hand and let through by the CPU suite.
Each was seen failing against its planted bug (bench/mutants/mutants.py plants them again)."""
import math
import random
from types import SimpleNamespace

import numpy as np
import pytest

from optiml.edits.blocks import apply_edits, parse_answer
from optiml.edits.llm import LLMProposer
from optiml.edits.transforms import pad_shared
from optiml.edits.types import NodeView, Proposal
from optiml.errors import SpecError
from optiml.search import MCTS, SearchConfig
from optiml.search.reward import METRIC_WEIGHT, metric_terms, reward
from optiml.source import parse_source
from optiml.traces.store import TraceStore, stored_spread
from optiml.verify.inputs import CaseData
from optiml.verify.timing_stats import median_ci_rel, timing_stats
from tests.test_spec import KERNEL, SPEC, load

OK = {"status": "ok", "median_ms": 1.0, "spread": 0.01}


# -- reward ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("root_ms", [0, 0.0, None])
def test_an_untimed_root_gives_reward_zero(root_ms):
    assert reward(OK, root_ms, None) == 0.0
    assert reward(OK, root_ms, 2.0, 0.01) == 0.0


def test_a_nan_metric_contributes_nothing():
    nan = float("nan")
    assert metric_terms({"achieved_occupancy_pct": nan, "smem_ld_conflict_ratio": nan,
                         "sm_throughput_pct": nan, "tensor_pipe_active_pct": nan}) == 0.0
    assert metric_terms({"achieved_occupancy_pct": nan, "sm_throughput_pct": 50.0}) == pytest.approx(0.025)
    r = reward(dict(OK, median_ms=0.5, metrics={"achieved_occupancy_pct": nan}), 1.0, None)
    assert math.isfinite(r) and r == pytest.approx(math.log(2.0))


def test_metric_fractions_are_capped_at_one_and_zero():
    assert metric_terms({"smem_ld_conflict_ratio": 3.0}) == pytest.approx(-METRIC_WEIGHT) == pytest.approx(-0.05)
    assert metric_terms({"achieved_occupancy_pct": 150.0}) == pytest.approx(0.05)
    assert metric_terms({"sm_throughput_pct": 400.0, "memory_throughput_pct": 20.0}) == pytest.approx(0.05)
    assert metric_terms({"tensor_pipe_active_pct": 250.0}) == pytest.approx(0.05)
    assert metric_terms({"achieved_occupancy_pct": -50.0, "smem_ld_conflict_ratio": -2.0}) == 0.0
    assert metric_terms({"achieved_occupancy_pct": 50.0, "smem_ld_conflict_ratio": 0.5}) == pytest.approx(0.0)


# -- MCTS -----------------------------------------------------------------------------------------
ROOT = "#define BLOCK 16\n__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n"


class Table:
    def __init__(self):
        self.calls = []

    def evaluate(self, source, flags):
        self.calls.append((source, tuple(flags)))
        return {"status": "ok", "median_ms": 0.5 if flags else 1.0, "spread": 0.01}


class Scripted:
    name = "scripted"

    def __init__(self, answer):
        self.answer, self.calls = answer, 0

    def propose(self, node, k, rng):
        self.calls += 1
        return self.answer(node)


def test_the_same_source_with_other_flags_is_a_new_node():
    ev = Table()
    prop = Scripted(lambda n: [Proposal(n.source, ("-use_fast_math",), "fast math", "")] if not n.flags else [])
    m = MCTS(ROOT, ev, prop, flags=(), config=SearchConfig(budget=5))
    best = m.run()
    assert [n.flags for n in m.nodes] == [(), ("-use_fast_math",)]
    assert ev.calls == [(ROOT, ()), (ROOT, ("-use_fast_math",))]
    assert best.flags == ("-use_fast_math",) and m.evaluations == 1
    assert m.root.attempts()[0].status == "ok"          # asked again, the same proposal is a duplicate


@pytest.mark.parametrize("max_fruitless", [1, 2, 3, 5])
def test_a_proposer_of_duplicates_is_asked_max_fruitless_times(max_fruitless):
    prop = Scripted(lambda n: [Proposal("/* same */\n" + n.source, n.flags, "reformat", "")])
    m = MCTS(ROOT, Table(), prop, config=SearchConfig(budget=10, max_fruitless=max_fruitless))
    m.run()
    assert prop.calls == max_fruitless
    assert m.root.exhausted and m.root.calls == max_fruitless and m.evaluations == 0
    assert [a.status for a in m.root.attempts()] == ["duplicate"] * max_fruitless
# (an evaluation in flight in PUCT's exploration term: tests/test_search_parallel.py, test_puct_counts_*)


# -- verification: the worker's own check ---------------------------------------------------------
def test_a_kernel_that_changes_an_input_fails_the_workers_check(tmp_path):
    from optiml.verify.worker import _check_case

    spec = load(tmp_path)
    x = np.arange(8, dtype=np.float32)
    y = 2 * x
    data = CaseData(arrays={"x": x.copy(), "y": np.zeros(8, np.float32)}, scalars={"n": 8, "alpha": 0.5})
    good = _check_case(spec, 0, {"N": 8}, 3, data, {"x": x.copy(), "y": y.copy()}, {"y": y.copy()})
    assert good.passed and good.failed_check is None and good.modified_inputs == []
    touched = x.copy()
    touched[5] = -1.0
    bad = _check_case(spec, 0, {"N": 8}, 3, data, {"x": touched, "y": y.copy()}, {"y": y.copy()})
    assert not bad.passed and bad.failed_check == "input_modified" and bad.modified_inputs == ["x"]
    assert "changed input(s) x" in bad.message
    # -0.0 for 0.0 is a change of the bytes, though equal as numbers
    signed = x.copy()
    signed[0] = -0.0
    assert _check_case(spec, 0, {"N": 8}, 3, data, {"x": signed, "y": y.copy()}, {"y": y.copy()}).modified_inputs == ["x"]
    wrong = _check_case(spec, 0, {"N": 8}, 3, data, {"x": x.copy(), "y": y + 1}, {"y": y.copy()})
    assert wrong.failed_check == "tolerance" and wrong.modified_inputs == []


# -- timing ---------------------------------------------------------------------------------------
def test_the_iqr_is_q75_minus_q25():
    t = timing_stats([float(v) for v in range(1, 10)], 3, 1, True)     # q25 = 3, q75 = 7
    assert t.iqr_ms == pytest.approx(4.0) and t.median_ms == 5.0
    assert t.p10_ms == pytest.approx(1.8) and t.p90_ms == pytest.approx(8.2)
    skewed = timing_stats([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 10.0], 0, 1, False)
    assert skewed.iqr_ms == pytest.approx(0.0) and skewed.max_ms == 10.0
    t = timing_stats([2.0, 4.0, 6.0, 8.0, 10.0], 0, 1, False)            # q25 = 4, q75 = 8
    assert t.iqr_ms == pytest.approx(4.0) and t.spread == pytest.approx(4.0 / 6.0)


class _ScriptedGpu:
    """A fake GPU whose launches take the scripted times, in order."""

    def __init__(self, times):
        self.times, self.launches = list(times), 0
        gpu = self

        class Event:
            t = 0.0

            def record(self, stream=None):
                self.t = gpu.clock

            def time_since(self, start):
                return self.t - start.t

        self.clock = 0.0
        self.drv = SimpleNamespace(Event=Event)
        self.stream = SimpleNamespace(synchronize=lambda: None)
        self.fn = SimpleNamespace(prepared_async_call=self._launch)

    def _launch(self, grid, block, stream, *args, shared_size=0):
        self.clock += self.times[self.launches]
        self.launches += 1


def _alone(times, precision, min_reps=10, max_reps=200):
    from optiml.spec import Launch
    from optiml.verify.gpu_timing import _time_alone

    gpu = _ScriptedGpu(times)
    tcfg = SimpleNamespace(max_reps=max_reps, min_reps=min_reps, target_ms=1e9, precision=precision)
    launch = Launch((1, 1, 1), (32, 1, 1), 0)
    samples = _time_alone(gpu, lambda i: gpu.fn.prepared_async_call(launch.grid, launch.block, None), tcfg, 1.0, 1,
                          lambda i, pattern: None, lambda text: None, {"N": 1})
    return samples, gpu


def test_timing_stops_at_the_first_check_that_meets_the_precision():
    rng = np.random.default_rng(0)
    noisy = list(rng.uniform(1.0, 3.0, 30))            # 30 noisy launches, then steady ones
    times = noisy + [2.0] * 170
    checks = list(range(10, 201, 10))
    first = next(n for n in checks if median_ci_rel(times[:n]) <= 0.02)
    assert first > 30 and median_ci_rel(times[:first - 10]) > 0.02       # a later check, not the first
    samples, gpu = _alone(times, 0.02)
    assert len(samples) == first == gpu.launches
    assert samples == pytest.approx(times[:first])
    # precise from the start: stops at min_reps, not before and not after
    samples, gpu = _alone([1.0] * 200, 0.02, min_reps=12)
    assert len(samples) == 12
    # precision 0: no early stop, every repetition
    samples, _ = _alone([1.0] * 200, 0.0)
    assert len(samples) == 200
    # never precise: all repetitions
    samples, _ = _alone(list(rng.uniform(1.0, 3.0, 60)), 1e-6, max_reps=60)
    assert len(samples) == 60
# (interleaved rounds rotate: tests/test_final_choice.py, test_the_order_rotates_every_round and
#  test_the_timing_loop_runs_the_planned_blocks; seed over best: its speedup assertions)


# -- store ----------------------------------------------------------------------------------------
def test_mark_running_refuses_a_node_that_is_not_pending(tmp_path):
    with TraceStore(tmp_path / "t.db") as store:
        run = store.start_run("vadd")
        n = store.add_node(run, None, "src")
        store.mark_running(n)
        assert store.node(n).status == "running"
        with pytest.raises(ValueError, match="not pending"):
            store.mark_running(n)
        store.finish_node(n, {"status": "ok", "median_ms": 1.0})
        for _ in range(2):
            with pytest.raises(ValueError, match="not pending"):
                store.mark_running(n)
            assert store.node(n).status == "done"
        m = store.add_node(run, n, "src2")
        store.finish_node(m, {"status": "wrong_output"}, status="failed")
        with pytest.raises(ValueError, match="not pending"):
            store.mark_running(m)
        assert store.node(m).status == "failed"
        with pytest.raises(ValueError, match="done or failed"):
            store.finish_node(store.add_node(run, n, "src3"), {"status": "ok"}, status="ok")


def test_failed_candidates_are_stored_failed(tmp_path):
    from optiml.app.records import StoreObserver

    def answer(node):
        if node.source != ROOT:
            return []
        return [Proposal(ROOT.replace("16", "32"), (), "block 32", ""),
                Proposal(ROOT + "// wrong\n#define WRONG\n", (), "wrong", ""),
                Proposal(ROOT + "#define BROKEN\n", (), "broken", "")]

    class Mixed:
        def evaluate(self, source, flags):
            if "WRONG" in source:
                return {"status": "wrong_output", "message": "max abs err 3", "median_ms": 0.1}
            if "BROKEN" in source:
                return {"status": "compile_error", "message": "error"}
            return {"status": "ok", "median_ms": 0.5 if "32" in source else 1.0, "spread": 0.01}

    with TraceStore(tmp_path / "t.db") as store:
        run = store.start_run("toy")
        obs = StoreObserver(store, run)
        m = MCTS(ROOT, Mixed(), Scripted(answer), config=SearchConfig(budget=3, k_w=3.0), observer=obs)
        m.run()
        by_edit = {n.edit: n for n in store.nodes(run)}
        assert {e: n.status for e, n in by_edit.items()} == {
            "root": "done", "block 32": "done", "wrong": "failed", "broken": "failed"}
        assert store.evaluation(by_edit["wrong"].id)["status"] == "wrong_output"
        assert store.evaluation(by_edit["broken"].id)["status"] == "compile_error"


def test_a_row_from_before_m002_resumes_with_its_iqr_over_median(tmp_path):
    from optiml.app.records import stored_records

    assert stored_spread(None, {"median_ms": 2.0, "iqr_ms": 0.1}) == pytest.approx(0.05)
    assert stored_spread({"spread": 0.03}, {"median_ms": 2.0, "iqr_ms": 0.1}) == 0.03
    assert stored_spread(None, {"median_ms": 2.0}) == 0.0 and stored_spread(None, None) is None
    with TraceStore(tmp_path / "t.db") as store:
        run = store.start_run("toy")
        n = store.add_node(run, None, ROOT, flags={"extra": []}, edit="root")
        store.finish_node(n, {"status": "ok", "median_ms": 2.0,          # no "result": an m001 row
                              "timing": {"median_ms": 2.0, "iqr_ms": 0.1}})
        (rec,) = stored_records(store, run)
        assert rec["status"] == "ok" and rec["result"]["median_ms"] == 2.0
        assert rec["result"]["spread"] == pytest.approx(0.05)
        m = MCTS.from_records([rec], Table(), Scripted(lambda n: []))
        assert m.root.spread == pytest.approx(0.05)


# -- spec -----------------------------------------------------------------------------------------
def test_a_size_wins_over_a_kernel_constant_of_the_same_name(tmp_path):
    kernel = KERNEL + "#define N 64\n"
    spec = load(tmp_path, kernel=kernel)
    info = parse_source(kernel)
    assert info.constants["N"] == 64
    assert spec.env({"N": 1000}, info.constants)["N"] == 1000
    assert spec.env({"N": 1000}, info.constants)["BLOCK"] == 128
    assert spec.resolve_launch({"N": 1000}, info).grid == (8, 1, 1)
    assert spec.shape(spec.args[0], {"N": 1000}, info.constants) == (1000,)
    assert spec.count("bytes", {"N": 10}, info.constants) == 80


@pytest.mark.parametrize("tol", ["atol = -1e-3", "rtol = -0.5", "atol = -0.0001, rtol = 0.1"])
def test_negative_tolerances_are_a_spec_error(tmp_path, tol):
    with pytest.raises(SpecError, match="not negative"):
        load(tmp_path, SPEC + f"\n[tolerance]\nfloat32 = {{ {tol} }}\n")
    ok = load(tmp_path, SPEC + "\n[tolerance]\nfloat32 = { atol = 0.0, rtol = 0.0 }\n")
    assert ok.tolerance("float32").atol == 0.0 and ok.tolerance("float32").rtol == 0.0


# -- edits ----------------------------------------------------------------------------------------
SRC = "int a = 1;\nint b = 2;\nint c = 3;\nint d = 4;\n"


@pytest.mark.parametrize("ctx", [" ", ""])          # models often drop the context's lone space
def test_a_diff_hunks_context_lines_are_kept(ctx):
    a = parse_answer(f"EDIT: b\n```diff\n--- a/k.cu\n+++ b/k.cu\n@@ -1,3 +1,3 @@\n{ctx}int a = 1;\n-int b = 2;\n"
                     f"+int b = 20;\n{ctx}int c = 3;\n```\n")
    (e,) = a.edits
    assert e.search == "int a = 1;\nint b = 2;\nint c = 3;" and e.replace == "int a = 1;\nint b = 20;\nint c = 3;"
    assert apply_edits(SRC, a.edits).source == "int a = 1;\nint b = 20;\nint c = 3;\nint d = 4;\n"


PADDABLE = """#define TILE 32
#define ODD 24
__global__ void k(float* out) {
    __shared__ float A[32][%s];
    A[threadIdx.x][0] = 1.0f;
    out[threadIdx.x] = A[0][threadIdx.x];
}
"""


@pytest.mark.parametrize("cols, pads", [("32", True), ("TILE", True), ("16", True), ("24", False),
                                         ("ODD", False), ("33", False), ("1", False), ("31", False)])
def test_pad_shared_only_pads_rows_of_a_power_of_two(cols, pads):
    out = pad_shared(PADDABLE % cols)
    assert bool(out) is pads
    if pads:
        assert f"A[32][{cols} + 1]" in out[0].source


def test_a_search_block_inside_think_is_ignored():
    source = "int a = 1;\nint b = 2;\n"
    think = ("<think>first idea:\n<<<<<<< SEARCH\nint a = 1;\n=======\nint a = 100;\n>>>>>>> REPLACE\n"
             "no, better:</think>\n")
    real = "EDIT: b to 3\nWHY: because.\n<<<<<<< SEARCH\nint b = 2;\n=======\nint b = 3;\n>>>>>>> REPLACE\n"
    llm = LLMProposer("m", base_url="http://127.0.0.1:9", api_key="x")
    view = NodeView(source=source, flags=(), entry="k")
    exchange = {"tokens_in": 1, "tokens_out": 1, "latency_s": 0.0}
    p = llm._proposal(view, exchange, think + real, "stop")
    assert p.error is None and p.source == "int a = 1;\nint b = 3;\n" and p.edit == "b to 3"
    assert len(exchange["parsed_edits"]) == 1
    # two thoughts, a real block between them
    p = llm._proposal(view, dict(exchange), think + real + think.replace("first", "second"), "stop")
    assert p.error is None and p.source == "int a = 1;\nint b = 3;\n"
