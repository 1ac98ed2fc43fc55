"""Resuming a search from the trace store (real SQLite), with the search fakes of
test_search_mcts (a replay evaluator over recorded timings, a scripted proposer)."""
import os
import signal
import subprocess
import sys
import textwrap

from optiml.search import MCTS, SearchConfig
from optiml.app.records import StoreObserver, resume_search
from optiml.traces.store import TraceStore
from tests.test_search_mcts import ROOT, ReplayEvaluator, ScriptedProposer, search
from optiml.app.records import stored_records, best_node

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def stored_search(path, budget, seed=0):
    store = TraceStore(path)
    run = store.start_run("toy", seed=seed, budget=budget)
    ev = ReplayEvaluator()
    m = MCTS(ROOT, ev, ScriptedProposer(), config=SearchConfig(budget=budget, seed=seed),
             observer=StoreObserver(store, run, ev))
    m.run()
    return store, run, m, ev


def test_resumed_from_the_store_30_then_60_equals_60_at_once(tmp_path):
    for seed in (0, 5):
        once, _, _ = search(60, seed=seed)
        store, run, first, _ = stored_search(tmp_path / f"s{seed}.db", 30, seed)
        ev = ReplayEvaluator()
        resumed = resume_search(store, run, ev, ScriptedProposer(), config=SearchConfig(budget=60, seed=seed))
        resumed.run()
        assert len(ev.calls) == 30                      # the stored candidates are not evaluated again
        assert resumed.signature() == once.signature()
        assert [(n.visits, round(n.value_sum, 9)) for n in resumed.nodes] == \
               [(n.visits, round(n.value_sum, 9)) for n in once.nodes]
        # the store holds the whole run once: one evaluation per node, 60 candidates + the root (a
        # slow node's child still waiting under the focus when the budget ran out stays pending)
        nodes = store.nodes(run)
        assert len(nodes) == len(once.nodes) and all(n.status in ("done", "failed", "pending") for n in nodes)
        assert sum(n.status == "pending" for n in nodes) == sum(n.status == "pending" for n in once.nodes)
        assert store.db.execute("SELECT COUNT(*) FROM evaluations e JOIN nodes n ON n.id = e.node_id"
                                " WHERE n.run_id = ?", (run,)).fetchone()[0] == 61
        assert store.path_to(best_node(store, run).id)[-1].edit == once.best().edit
        assert sorted((r["parent"], r["edit"], r["status"]) for r in stored_records(store, run) if r["id"] is None) == \
            sorted((nodes[n.id].id, a.edit, a.status) for n in once.nodes for a in n.attempts()
                   if a.status in ("edit_failed", "duplicate"))
        store.close()


def test_attempts_and_calls_survive_the_store(tmp_path):
    store, run, m, _ = stored_search(tmp_path / "a.db", 12)
    recs = stored_records(store, run)
    attempts = [r for r in recs if r["id"] is None]
    assert attempts and {r["status"] for r in attempts} <= {"edit_failed", "duplicate"}
    assert all(r["call"] is not None and r["parent"] in {n.id for n in store.nodes(run)} for r in attempts)
    children = [r for r in recs if r["id"] is not None and r["parent"] is not None]
    assert all(r["call"] is not None and r["prior"] > 0 for r in children)
    # what the proposer sees of a node after a resume equals what it saw before
    again = MCTS.from_records(recs, ReplayEvaluator(), ScriptedProposer(), config=SearchConfig(budget=12))
    assert [n.attempts() for n in again.nodes] == [n.attempts() for n in m.nodes]
    store.close()


WRITER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[2])
    from optiml.search import MCTS, SearchConfig
    from optiml.app.records import StoreObserver
    from optiml.traces.store import TraceStore
    from tests.test_search_mcts import ROOT, ReplayEvaluator, ScriptedProposer

    class SlowReplay(ReplayEvaluator):
        def evaluate(self, source, flags):
            print("eval", len(self.calls), flush=True)
            time.sleep(0.02)
            return super().evaluate(source, flags)

    store = TraceStore(sys.argv[1])
    run = store.start_run("toy", seed=2, budget=40)
    print("run", run, flush=True)
    ev = SlowReplay()
    MCTS(ROOT, ev, ScriptedProposer(), config=SearchConfig(budget=40, seed=2),
         observer=StoreObserver(store, run, ev)).run()
""")


def test_sigkill_mid_search_then_resume_completes_without_evaluating_twice(tmp_path):
    path = tmp_path / "k.db"
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(path), REPO], stdout=subprocess.PIPE, text=True)
    try:
        for line in child.stdout:
            word, num = line.split()
            if word == "eval" and int(num) >= 17:
                break
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=30)
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    once, _, _ = search(40, seed=2)
    with TraceStore(path) as store:
        done = {n.id: store.source(n.source_hash) for n in store.nodes(1) if n.status in ("done", "failed")}
        assert 15 <= len(done) <= 19
        running = store.nodes(1, "running")      # killed inside an evaluation: that node says so
        pid = store.db.execute("SELECT worker_pid FROM nodes WHERE id = ?", (running[0].id,)).fetchone()[0]
        assert len(running) == 1 and pid == child.pid
        ev = ReplayEvaluator()
        resumed = resume_search(store, 1, ev, ScriptedProposer(), config=SearchConfig(budget=40, seed=2))
        resumed.run()
        evaluated_again = [s for s, _ in ev.calls if s in done.values()]
        assert evaluated_again == []                    # no committed candidate is evaluated twice
        assert resumed.evaluations == 40
        assert resumed.signature() == once.signature()
        assert all(n.status in ("done", "failed") for n in store.nodes(1))
