"""The search on fakes: a replay evaluator over a table of recorded timings, a scripted proposer."""
import math
import re

import pytest

from optiml.edits.types import NodeView, Proposal
from optiml.search import MCTS, RecordingObserver, SearchConfig, normalize_source

ROOT = """// toy kernel
#define BLOCK 16
#define UNROLL 1
__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }
"""

BLOCKS = (8, 16, 32, 64, 128, 256, 512, 1024)
UNROLLS = (1, 2, 4, 8)


def table_ms(block: int, unroll: int) -> float:
    """Recorded medians: fastest at BLOCK 128, UNROLL 4."""
    return 10.0 * (1 + 0.3 * abs(math.log2(block / 128))) * (1 + 0.2 * abs(math.log2(unroll / 4)))


BEST_MS = table_ms(128, 4)


class ReplayEvaluator:
    """A fake evaluator: results looked up from a table keyed by the BLOCK/UNROLL markers in the
    source; sources with FASTWRONG verify wrong (but time fast); anything else does not compile."""

    def __init__(self):
        self.calls: list[tuple[str, tuple]] = []

    def evaluate(self, source, flags):
        self.calls.append((source, tuple(flags)))
        b, u = re.search(r"BLOCK (\d+)", source), re.search(r"UNROLL (\d+)", source)
        if "FASTWRONG" in source:
            return {"status": "wrong_output", "message": "max abs error 3.0", "median_ms": 0.001, "spread": 0.01}
        if not b or not u or int(b.group(1)) not in BLOCKS or int(u.group(1)) not in UNROLLS:
            return {"status": "compile_error", "message": "error: block too large", "median_ms": None}
        block, unroll = int(b.group(1)), int(u.group(1))
        return {"status": "ok", "message": "", "median_ms": table_ms(block, unroll), "spread": 0.01,
                "metrics": {"achieved_occupancy_pct": min(100.0, block / 4)},
                "diagnosis": [f"block {block}"]}


class ScriptedProposer:
    """A fake proposer: neighbouring BLOCK/UNROLL values, a fast-but-wrong edit, a reformatted
    duplicate and an edit that does not apply; skips edits the node already tried; order from rng."""
    name = "scripted"

    def __init__(self):
        self.views: list[NodeView] = []

    def propose(self, node, k, rng):
        self.views.append(node)
        src = node.source
        b = int(re.search(r"BLOCK (\d+)", src).group(1))
        u = int(re.search(r"UNROLL (\d+)", src).group(1))
        cands = []
        for nb in (b * 2, b // 2):
            cands.append(Proposal(src.replace(f"BLOCK {b}", f"BLOCK {nb}"), node.flags, f"BLOCK {b} -> {nb}",
                                  "block size", prior=2.0))
        for nu in (u * 2, max(1, u // 2)):
            if nu != u:
                cands.append(Proposal(src.replace(f"UNROLL {u}", f"UNROLL {nu}"), node.flags,
                                      f"UNROLL {u} -> {nu}", "unroll", prior=1.0))
        if "FASTWRONG" not in src:
            cands.append(Proposal(src + "#define FASTWRONG 1\n", node.flags, "fast wrong", "skip work", prior=3.0))
        cands.append(Proposal("/* reformatted */\n" + src.replace(" ", "  "), node.flags, "reformat", "style", 0.5))
        cands.append(Proposal(src, node.flags, "pad smem", "no smem array", error="no shared array to pad"))
        tried = {a.edit for a in node.attempts}
        cands = [c for c in cands if c.edit not in tried]
        rng.shuffle(cands)
        return cands[:k]


def search(budget, seed=0, records=None, observer=None, **kw):
    ev, prop = ReplayEvaluator(), ScriptedProposer()
    cfg = SearchConfig(budget=budget, seed=seed, **kw)
    if records is None:
        m = MCTS(ROOT, ev, prop, config=cfg, observer=observer)
    else:
        m = MCTS.from_records(records, ev, prop, config=cfg, observer=observer)
    m.run()
    return m, ev, prop


def test_finds_the_best_block_size_in_the_table():
    for seed in range(3):
        m, _, _ = search(60, seed=seed)
        best = m.best()
        assert best.median_ms == pytest.approx(BEST_MS), (seed, best.path())
        assert "#define BLOCK 128" in best.source and "#define UNROLL 4" in best.source


def test_budget_counts_evaluated_candidates_exactly():
    for budget in (1, 7, 25):
        m, ev, _ = search(budget)
        assert m.evaluations == budget
        assert len(ev.calls) == budget + 1          # the root is evaluated too, outside the budget
        assert sum(n.status != "pending" for n in m.nodes) == budget + 1


def test_duplicates_after_normalisation_are_not_evaluated_again():
    m, ev, _ = search(60)
    keys = [(normalize_source(s), f) for s, f in ev.calls]
    assert len(keys) == len(set(keys))
    dups = [a for n in m.nodes for a in n.attempts() if a.status == "duplicate"]
    assert any(a.edit == "reformat" for a in dups)
    assert all("reformat" not in n.edit for n in m.nodes)
    failed = [a for n in m.nodes for a in n.attempts() if a.status == "edit_failed"]
    assert failed and all(a.message == "no shared array to pad" for a in failed)


def test_fast_but_wrong_never_wins_and_earns_no_positive_reward():
    m, _, _ = search(60)
    wrong = [n for n in m.nodes if "FASTWRONG" in n.source]
    assert wrong and all(n.status == "wrong_output" for n in wrong)
    assert all(n.reward <= 0 for n in wrong)
    assert all(not n.children for n in wrong)       # a failed node is never expanded
    assert m.best().status == "ok" and "FASTWRONG" not in m.best().source


def test_proposer_sees_metrics_diagnosis_and_what_children_tried():
    m, _, prop = search(30)
    root_views = [v for v in prop.views if v.source == ROOT]
    assert root_views[0].attempts == () and root_views[0].diagnosis == ("block 16",)
    assert root_views[0].metrics == {"achieved_occupancy_pct": 4.0} and root_views[0].median_ms == table_ms(16, 1)
    later = root_views[-1].attempts
    assert later and {a.status for a in later} <= {"ok", "wrong_output", "compile_error", "duplicate", "edit_failed"}
    ok = [a for a in later if a.status == "ok"]
    assert ok and all(a.speedup == pytest.approx(table_ms(16, 1) / m.find(ROOT).children[0].median_ms)
                      for a in ok[:1])


class _Trace:
    def __init__(self, m_ref):
        self.m_ref, self.rows = m_ref, []

    def on_node_added(self, node):
        pass

    def on_node_started(self, node):
        pass

    def on_node_evaluated(self, node):
        root = self.m_ref[0].root if self.m_ref else node
        self.rows.append((root.visits, len(root.children)))

    def on_attempt(self, parent, record):
        pass


def test_progressive_widening_bounds_the_root_and_grows_it():
    ref = []
    trace = _Trace(ref)
    ev, prop = ReplayEvaluator(), ScriptedProposer()
    m = MCTS(ROOT, ev, prop, config=SearchConfig(budget=60, k_w=1.0, alpha=0.5), observer=trace)
    ref.append(m)
    m.run()
    counts = [c for _, c in trace.rows]
    assert counts == sorted(counts)                 # children only ever join
    assert counts[1] == 1 and counts[-1] > 1        # one child at first, more as the root is visited
    for visits, children in trace.rows:
        # a child joins only while below ceil(k_w * visits ** alpha) at the time it was proposed
        assert children <= max(1, math.ceil(1.0 * max(visits, 1) ** 0.5)) + 1
    assert len(m.root.children) <= m.root.widening_limit(1.0, 0.5)


def test_selection_prefers_the_better_subtree():
    m, _, _ = search(60)
    kids = [c for c in m.root.children if c.status == "ok"]
    most = max(kids, key=lambda c: c.visits)
    assert most.q == max(c.q for c in kids if c.visits >= 2)


def test_same_seed_same_run_and_seed_matters():
    a, ev_a, _ = search(40, seed=7)
    b, ev_b, _ = search(40, seed=7)
    c, ev_c, _ = search(40, seed=8)
    assert ev_a.calls == ev_b.calls and a.signature() == b.signature()
    assert ev_a.calls != ev_c.calls and a.signature() != c.signature()
    assert len(a.signature()) == len(a.nodes) and (a.root.path(), a.root.status) in {(p, st) for p, _, st in a.signature()}


@pytest.mark.parametrize("focus", [0.0, SearchConfig.focus])
def test_resume_30_then_60_equals_60_at_once(focus):
    for seed in (0, 3):
        once, ev_once, _ = search(60, seed=seed, focus=focus)
        rec = RecordingObserver()
        first, _, _ = search(30, seed=seed, observer=rec, focus=focus)
        records = rec.records
        assert sum(r["id"] is not None and r["status"] != "pending" for r in records) == 31
        rec2 = RecordingObserver()
        resumed, ev_resumed, _ = search(60, seed=seed, records=records, observer=rec2, focus=focus)
        assert len(ev_resumed.calls) == 30          # the 30 stored candidates are not evaluated again
        assert resumed.evaluations == 60
        assert resumed.signature() == once.signature()
        assert resumed.best().path() == once.best().path()
        assert [(n.visits, n.value_sum) for n in resumed.nodes] == [(n.visits, n.value_sum) for n in once.nodes]


def test_resume_from_a_kill_mid_evaluation_evaluates_the_pending_node():
    rec = RecordingObserver()
    search(10, observer=rec)
    records = rec.records
    last = max(i for i, r in enumerate(records) if r["id"] is not None and r["status"] != "pending")
    records[last] = dict(records[last], status="running", result={})     # killed while evaluating
    resumed, ev, _ = search(10, records=records)
    assert ev.calls[0][0] == records[last]["source"] and resumed.evaluations == 10


def test_seed_kernels_join_the_root_and_can_win():
    seed_src = ROOT.replace("BLOCK 16", "BLOCK 128").replace("UNROLL 1", "UNROLL 4")
    ev, prop = ReplayEvaluator(), ScriptedProposer()
    m = MCTS(ROOT, ev, prop, seed_sources=[seed_src, ROOT + "// same as root\n"], config=SearchConfig(budget=1))
    m.run()
    assert [n.edit for n in m.root.children] == ["seed kernel 1"]
    assert [a.status for a in m.root.attempts()][1:] == ["duplicate"]
    assert m.best().edit == "seed kernel 1" and m.best().median_ms == pytest.approx(BEST_MS)


def test_time_limit_stops_the_search():
    ticks = iter(range(1000))
    ev, prop = ReplayEvaluator(), ScriptedProposer()
    m = MCTS(ROOT, ev, prop, config=SearchConfig(budget=100, time_limit_s=5), clock=lambda: next(ticks))
    m.run()
    assert 0 < m.evaluations < 10


def test_search_ends_when_nothing_new_is_proposed():
    class Nothing:
        name = "nothing"

        def propose(self, node, k, rng):
            return []
    m = MCTS(ROOT, ReplayEvaluator(), Nothing(), config=SearchConfig(budget=50))
    assert m.run() is m.root and m.evaluations == 0 and m.root.exhausted


def test_a_failing_root_stops_the_search_without_a_best():
    m = MCTS("no markers", ReplayEvaluator(), ScriptedProposer(), config=SearchConfig(budget=5))
    assert m.run() is None and m.root.status == "compile_error" and m.evaluations == 0


def test_best_prefers_fewer_edits_within_timing_noise():
    from optiml.edits.types import Proposal
    from optiml.search.mcts import MCTS, SearchConfig

    class TwoStepFakeProposer:
        """A fake: the root gets one edit, that child another that is only noise-level faster."""
        name = "fake"

        def propose(self, node, k, rng):
            if "STEP2" in node.source:
                return []
            step = "STEP1" if "STEP1" not in node.source else "STEP2"
            return [Proposal(node.source + f"\n// {step}\nint {step.lower()};", (), step, "fake", 1.0, "fake")]

    class NoisyFakeEvaluator:
        """A fake: the seed 10 ms, STEP1 5.00 ms, STEP2 4.99 ms, each with a 1% spread."""

        def evaluate(self, source, flags):
            ms = 4.99 if "STEP2" in source else 5.0 if "STEP1" in source else 10.0
            return {"status": "ok", "median_ms": ms, "spread": 0.01, "metrics": {}, "diagnosis": []}

    search = MCTS("int root;", NoisyFakeEvaluator(), TwoStepFakeProposer(), config=SearchConfig(budget=5, seed=0))
    best = search.run()
    assert any(n.edit == "STEP2" and n.status == "ok" for n in search.nodes)
    assert best.path() == ("STEP1",)


def test_a_proposer_sees_what_was_tried_above_the_node():
    """NodeView.inherited: the attempts of the node's ancestors (root first), so a proposer can
    learn from failures on the path; the edit that made the node is among them."""
    prop = ScriptedProposer()
    m = MCTS(ROOT, ReplayEvaluator(), prop, config=SearchConfig(budget=25))
    m.run()
    by_source = {n.source: n for n in m.nodes}
    deep = [v for v in prop.views if by_source[v.source].parent is not None]
    assert deep and all(any(a.edit == by_source[v.source].edit for a in v.inherited) for v in deep)
    assert all(v.inherited == () for v in prop.views if by_source[v.source].parent is None)


class _RootWidening:
    """Records, as each child joins the root, its children against its widening limit then, and
    whether some earlier child was still alive (in flight, or verified and not exhausted)."""

    def __init__(self, m_ref, k_w, alpha):
        self.m_ref, self.k_w, self.alpha, self.rows = m_ref, k_w, alpha, []

    def on_node_added(self, node):
        m = self.m_ref[0] if self.m_ref else None
        if m is None or node.parent is not m.root:
            return
        root = m.root
        alive = any(c.status in ("pending", "running") or (c.status == "ok" and not c.exhausted)
                    for c in root.children[:-1])
        self.rows.append((len(root.children), root.widening_limit(self.k_w, self.alpha), alive))

    def on_node_started(self, node):
        pass

    def on_node_evaluated(self, node):
        pass

    def on_attempt(self, parent, record):
        pass


@pytest.mark.parametrize("parallel", [1, 4])
def test_the_root_never_takes_a_child_past_its_widening_limit_while_a_child_lives(parallel):
    from tests.test_search_parallel import FakeOutOfOrderEvaluator
    ref = []
    obs = _RootWidening(ref, 1.0, 0.5)
    ev = ReplayEvaluator() if parallel == 1 else FakeOutOfOrderEvaluator(ReplayEvaluator(), seed=1, most=1)
    m = MCTS(ROOT, ev, ScriptedProposer(), config=SearchConfig(budget=40, k_w=1.0, alpha=0.5, parallel=parallel),
             observer=obs)
    ref.append(m)
    m.run()
    assert len(obs.rows) >= 3
    over = [r for r in obs.rows if r[2] and r[0] > r[1]]
    assert not over, over


def test_a_root_found_unsafe_is_never_the_best():
    """The root stays ``ok`` when amended as unsafe (every reward's reference), yet best() passes it over."""
    m, _, _ = search(3, seed=0)
    fastest = min((n for n in m.nodes if n.status == "ok"), key=lambda n: n.median_ms)
    m.amend(m.root, dict(status="unsafe", median_ms=0.001, spread=0.01, message="racecheck: a hazard",
                         sanitize={"status": "unsafe", "message": "racecheck: a hazard"}))
    assert m.root.status == "ok" and m.root.unsafe
    assert m.best() is not m.root and m.best() is fastest


def test_records_that_cannot_be_a_tree_and_amending_an_unfinished_node_are_refused():
    """Resuming needs one root among the records (and some records); a node still pending or
    running has no result to amend."""
    rec = RecordingObserver()
    search(3, observer=rec)
    records = rec.records
    roots = [r for r in records if r.get("parent") is None and r.get("id") is not None]
    assert len(roots) == 1
    second_root = dict(roots[0], id=max(r["id"] for r in records if r.get("id") is not None) + 1)
    with pytest.raises(ValueError, match=r"has no parent but the tree already has a root"):
        MCTS.from_records(records + [second_root], ReplayEvaluator(), ScriptedProposer(), config=SearchConfig(budget=5))
    with pytest.raises(ValueError, match=r"^no node records to resume from$"):
        MCTS.from_records([], ReplayEvaluator(), ScriptedProposer(), config=SearchConfig(budget=5))
    m = MCTS(ROOT, ReplayEvaluator(), ScriptedProposer(), config=SearchConfig(budget=5))
    with pytest.raises(ValueError, match=r"is not finished: there is nothing to amend"):
        m.amend(m.root, {"status": "ok", "median_ms": 1.0})
