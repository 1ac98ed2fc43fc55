"""The search's focus after a big win (SearchConfig.focus), on fakes: a FAKE landscape where one
child of the seed (a template, say) is 100 times faster than the seed's own lineage, each lineage a
line of points whose neighbours the FAKE proposer offers."""
import re

import pytest

from optiml.edits.types import Proposal
from optiml.search import MCTS, SearchConfig

ROOT = "// seed\n#define LINE slow\n#define AT 0\n"
FAST_POINTS = 100         # the fast lineage's points: AT 0 .. 99


def ms_of(source: str) -> float:
    line = re.search(r"LINE (\w+)", source).group(1)
    at = int(re.search(r"AT (-?\d+)", source).group(1))
    if line == "slow":
        return 100.0 * (1 + 0.01 * abs(at - 7))          # the seed's own moves: 93-100+ ms
    return 1.0 * (1 + 0.02 * abs(at - 6))                # the template's space: 1.0-1.12 ms


class FakeLandscape:
    """A FAKE evaluator: every source verifies, in the time ``ms_of`` gives it."""

    def __init__(self):
        self.calls = []

    def evaluate(self, source, flags):
        self.calls.append(source)
        return {"status": "ok", "message": "", "median_ms": ms_of(source), "spread": 0.01}


class FakeLineProposer:
    """A FAKE proposer: the seed offers the fast lineage's first point once, then, like every node,
    the neighbours of its own point along its line (the slow line unbounded, the fast one bounded)."""
    name = "fake"

    def __init__(self, fast_points: int = FAST_POINTS, template_at: int = 0):
        self.fast_points, self.template_at = fast_points, template_at

    def propose(self, node, k, rng):
        line = re.search(r"LINE (\w+)", node.source).group(1)
        at = int(re.search(r"AT (-?\d+)", node.source).group(1))
        out = []
        if node.source == ROOT:
            out.append(Proposal(source=f"// template\n#define LINE fast\n#define AT {self.template_at}\n", flags=(),
                                edit="template", rationale="a fake template"))
        for step in (1, -1, 2, -2, 3, -3):
            nxt = at + step
            if line == "fast" and not 0 <= nxt < self.fast_points:
                continue
            out.append(Proposal(source=f"// {line}\n#define LINE {line}\n#define AT {nxt}\n", flags=(), edit=f"AT {at} -> {nxt}", rationale="a fake move"))
        return out[:max(k, 1)] if node.source != ROOT else out[:max(k, 2)]


def test_the_slow_siblings_already_proposed_wait_behind_the_fast_lineage():
    """The seed's first expansion proposes the template and five of its own moves together; once
    the template's time is known, those five wait while the template's neighbourhood has moves."""
    ev = FakeLandscape()
    m = MCTS(ROOT, ev, FakeLineProposer(), config=SearchConfig(budget=12, seed=0, k_w=6.0))
    m.run()
    lines = [re.search(r"LINE (\w+)", s).group(1) for s in ev.calls[1:]]
    assert lines[0] == "fast" and lines[1:] == ["fast"] * 11, lines
    assert sum(n.status == "pending" for n in m.nodes) >= 5      # the seed's own moves, never evaluated


def share_below_half(m: MCTS, calls: list) -> tuple[float, int]:
    """Of the evaluations after the first within 5 % of the best, the share more than twice as slow."""
    times = [ms_of(s) for s in calls]
    best = min(times)
    found = next(i for i, t in enumerate(times) if t <= best * 1.05)
    after = times[found + 1:]
    return sum(t > 2 * best for t in after) / max(1, len(after)), len(after)


@pytest.mark.parametrize("parallel", [1, 4])
def test_after_a_big_win_the_budget_goes_to_the_fast_lineage(parallel):
    from tests.test_search_parallel import FakeOutOfOrderEvaluator
    got = {}
    for focus in (0.0, SearchConfig.focus):
        ev = FakeLandscape()
        evaluator = ev if parallel == 1 else FakeOutOfOrderEvaluator(ev, 2)
        m = MCTS(ROOT, evaluator, FakeLineProposer(), config=SearchConfig(budget=40, seed=1, parallel=parallel, focus=focus))
        m.run()
        got[focus] = share_below_half(m, ev.calls[1:]), m.best().median_ms, m.evaluations
    (without, _), best_without, _ = got[0.0]
    (with_focus, after), best_with, n = got[SearchConfig.focus]
    if parallel > 1:                           # unfocused, the slow line fills the evaluations in flight
        assert without > 0.4, got
    assert with_focus <= 0.25 and after >= 20, got
    assert best_with <= best_without and n == 40


def test_once_the_fast_lineage_runs_out_the_slow_one_takes_the_rest_of_the_budget():
    ev = FakeLandscape()
    m = MCTS(ROOT, ev, FakeLineProposer(fast_points=12), config=SearchConfig(budget=60, seed=3, focus=SearchConfig.focus))
    m.run()
    fast = [s for s in ev.calls if "LINE fast" in s]
    assert len(set(fast)) == 12                      # every fast point was tried first ...
    assert m.evaluations == 60 and m.stopped == "budget"      # ... then the slow line used the budget
    last_fast = max(i for i, s in enumerate(ev.calls) if "LINE fast" in s)
    assert sum("LINE slow" in s for s in ev.calls[last_fast + 1:]) >= 60 - len(ev.calls[:last_fast + 1]) - 1


def test_the_focus_is_off_until_some_node_is_that_much_slower():
    ev = FakeLandscape()
    m = MCTS(ROOT, ev, FakeLineProposer(), config=SearchConfig(budget=3, seed=0, focus=SearchConfig.focus))
    m.run()
    assert m._focus() == pytest.approx(SearchConfig.focus * min(ms_of(s) for s in ev.calls))
    slow = MCTS("// seed\n#define LINE slow\n#define AT 7\n", FakeLandscape(), FakeLineProposer(fast_points=0),
                config=SearchConfig(budget=5, seed=0, focus=SearchConfig.focus))
    slow.run()                                   # times within 3x of each other: no focus, nothing waits
    assert slow._focus() is None and slow.evaluations == 5


def test_the_allocation_bench_reads_the_share_from_a_stored_run(tmp_path):
    """bench/search_quality/allocation.py on a real trajectory database of a FAKE search: the
    evaluations after the best and the share below half its speed, as the evaluator saw them."""
    import importlib.util
    from pathlib import Path

    from optiml.app.records import StoreObserver
    from optiml.traces.store import TraceStore
    path = Path(__file__).resolve().parents[1] / "bench" / "search_quality" / "allocation.py"
    spec = importlib.util.spec_from_file_location("allocation", path)
    allocation = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(allocation)
    store = TraceStore(tmp_path / "run.db")
    run = store.start_run("fake", seed=0, budget=20)
    from tests.test_search_parallel import FakeOutOfOrderEvaluator
    ev = FakeLandscape()
    evaluator = FakeOutOfOrderEvaluator(ev, 2)
    MCTS(ROOT, evaluator, FakeLineProposer(), config=SearchConfig(budget=20, seed=0, focus=0.0, parallel=4),
         observer=StoreObserver(store, run, evaluator)).run()
    times = [ms_of(s) for s in ev.calls]
    best = min(times)
    found = next(i for i, t in enumerate(times) if t <= best * 1.05)
    want_slow = sum(t > 2 * best for t in times[found + 1:])
    (row,) = allocation.allocation(tmp_path / "run.db")
    assert row["evaluations"] == len(times) == 21 and row["best_ms"] == pytest.approx(best)
    assert row["found_at"] == found + 1 and row["after"] == len(times) - found - 1
    assert row["below_half"] == want_slow > 0
    # every slow candidate here is a move of the slow line, whose nodes are all below half the best's speed
    assert row["from_slow_parents"] == want_slow


class FakeQueuedGPU:
    """A FAKE asynchronous evaluator with one GPU behind builds: a candidate is ready ``build``
    ticks after it is submitted (the template's build is long), and each tick the GPU runs the
    oldest ready one. ``withdraw`` takes back a candidate the GPU has not run yet (the runner's
    contract); :class:`FakeQueuedGPUNoWithdraw` is the same without it."""

    def __init__(self, landscape, template_build: int = 10):
        self.landscape, self.template_build = landscape, template_build
        self.t, self.queue, self.withdrawn = 0, [], []

    def submit(self, token, source, flags):
        build = self.template_build if source.startswith("// template") else 1
        self.queue.append((self.t + build, token, source, flags))

    def wait(self):
        while True:
            self.t += 1
            ready = [q for q in self.queue if q[0] <= self.t]
            if ready:
                self.queue.remove(ready[0])
                _, token, source, flags = ready[0]
                return [(token, self.landscape.evaluate(source, flags))]

    def withdraw(self, token):
        q = next((q for q in self.queue if q[1] == token), None)
        if q is None:
            return False
        self.queue.remove(q)
        self.withdrawn.append(token)
        return True


class FakeQueuedGPUNoWithdraw:
    """:class:`FakeQueuedGPU` for an evaluator that cannot take anything back."""

    def __init__(self, landscape):
        self.gpu = FakeQueuedGPU(landscape)
        self.submit, self.wait = self.gpu.submit, self.gpu.wait


def test_evaluations_in_flight_when_the_big_win_arrives_are_withdrawn_and_wait():
    """The live case: the template builds slowly, so the seed's own moves fill the evaluations in
    flight before its result comes. With withdrawal, those not yet on the GPU go back to pending and
    the template's neighbourhood takes their places; without it they all run after the best."""
    from optiml.search.mcts import Withdraws
    got = {}
    for can in (False, True):
        ev = FakeLandscape()
        gpu = FakeQueuedGPU(ev) if can else FakeQueuedGPUNoWithdraw(ev)
        assert isinstance(gpu, Withdraws) == can
        m = MCTS(ROOT, gpu, FakeLineProposer(template_at=5), config=SearchConfig(budget=40, seed=2, parallel=8, k_w=6.0))
        m.run()
        got[can] = share_below_half(m, ev.calls[1:]), gpu, m
    (without, after_without), _, _ = got[False]
    (share, after), gpu, m = got[True]
    assert without * after_without >= 5, got      # the queued slow moves ran after the win
    assert share == 0 and after >= 25, got
    assert gpu.withdrawn and all(m.nodes[t].status in ("pending", "ok") for t in gpu.withdrawn)
    assert m.evaluations == 40 and m.best().median_ms <= 1.02
    assert not any(n.inflight for n in m.nodes)   # every virtual visit was taken back


class FakeQueuedGPURefusing(FakeQueuedGPU):
    """:class:`FakeQueuedGPU` whose ``withdraw`` refuses every time, as the runner does for a
    candidate already on the GPU."""

    def withdraw(self, token):
        self.refused = getattr(self, "refused", 0) + 1
        return False


def test_a_node_the_evaluator_will_not_give_back_stays_in_flight_and_its_result_counts():
    ev = FakeLandscape()
    gpu = FakeQueuedGPURefusing(ev)
    m = MCTS(ROOT, gpu, FakeLineProposer(template_at=5), config=SearchConfig(budget=40, seed=2, parallel=8, k_w=6.0))
    m.run()
    assert gpu.refused                                  # withdrawals were tried, and refused
    assert m.evaluations == 40 and len(ev.calls) == 41                 # the seed, then the budget
    assert not any(n.inflight for n in m.nodes) and not any(n.status == "running" for n in m.nodes)
    assert sum(n.status not in ("pending",) for n in m.nodes[1:]) == 40


def test_a_withdrawn_node_is_pending_again_in_the_store(tmp_path):
    from optiml.app.records import StoreObserver
    from optiml.traces.store import TraceStore
    store = TraceStore(tmp_path / "run.db")
    run = store.start_run("fake", seed=2, budget=40)
    gpu = FakeQueuedGPU(FakeLandscape())
    obs = StoreObserver(store, run)
    m = MCTS(ROOT, gpu, FakeLineProposer(template_at=5), observer=obs,
             config=SearchConfig(budget=40, seed=2, parallel=8, k_w=6.0))
    m.run()
    assert gpu.withdrawn
    for token in gpu.withdrawn:
        assert store.node(obs.ids[token]).status == ("pending" if m.nodes[token].status == "pending" else "done")
    assert not any(store.node(obs.ids[n.id]).status == "running" for n in m.nodes)


class FakeTwoTemplates(FakeLineProposer):
    """A FAKE proposer whose seed offers two templates: the first builds fast and wins big, the
    second builds slowly and is faster still; then the seed's own moves."""

    def propose(self, node, k, rng):
        out = super().propose(node, k, rng)
        if node.source == ROOT:
            out[0] = Proposal(source="// template\n#define LINE fast\n#define AT 9\n", flags=(),
                              edit="template quick (AT 9)", rationale="a fake template")
            out.insert(1, Proposal(source="// template\n#define LINE best\n#define AT 0\n", flags=(),
                                   edit="template slow (AT 0)", rationale="a fake template"))
        return out


def test_a_slow_parents_other_template_is_not_held_back_by_the_focus():
    """After the first template's win the seed is over the focus, but its other template is a new
    implementation, not a move of the seed: it is neither withdrawn nor held back, and wins."""
    ev = FakeLandscape()
    base = ev.evaluate
    ev.evaluate = lambda s, f: dict(base(s, f), median_ms=0.5) if "LINE best" in s else base(s, f)
    gpu = FakeQueuedGPU(ev)
    gpu.submit = lambda t, s, f, submit=gpu.submit: (submit(t, s, f), "LINE fast" in s and gpu.queue.append(
        (gpu.queue.pop()[0] - 9, t, s, f)))             # the quick template builds in 1 tick
    m = MCTS(ROOT, gpu, FakeTwoTemplates(), config=SearchConfig(budget=12, seed=2, parallel=8, k_w=6.0))
    m.run()
    assert m.best().median_ms == 0.5 and m.best().edit == "template slow (AT 0)"
    slow = next(n for n in m.nodes if n.edit == "template slow (AT 0)")
    assert slow.id not in gpu.withdrawn
