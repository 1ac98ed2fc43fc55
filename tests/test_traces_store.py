"""The trace store on real SQLite files: schema, content addressing, write-before-work, recovery."""
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from optiml.errors import UserError
from optiml.traces.schema import migrations
from optiml.traces.store import TraceStore, default_db_path, source_hash
from optiml.app.records import stored_records, best_node

ROOT = Path(__file__).resolve().parents[1]
TABLES = {"runs", "sources", "nodes", "evaluations", "proposals", "_sqlite_migrations"}


def test_migrates_an_empty_file_once(tmp_path):
    path = tmp_path / "optiml.db"
    path.write_bytes(b"")
    with TraceStore(path) as store:
        assert TABLES <= set(store.db.table_names())
        assert [m.name for m in migrations.applied(store.db)] == ["m001_initial", "m002_resume"]
        assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        indexed = {tuple(i.columns) for i in store.db["nodes"].indexes}
        assert {("run_id", "status"), ("parent_id",), ("source_hash",)} <= indexed
    with TraceStore(path) as store:  # reopening applies nothing twice
        assert store.db.execute("SELECT COUNT(*) FROM _sqlite_migrations").fetchone()[0] == 2


def test_upgrades_a_database_written_by_the_first_schema(tmp_path):
    """tests/data/traces/recorded_h200_runs.db was written by `optiml optimize` under schema m001."""
    old = ROOT / "tests" / "data" / "traces" / "recorded_h200_runs.db"
    path = tmp_path / "old.db"
    path.write_bytes(old.read_bytes())
    raw = sqlite3.connect(path)
    assert [r[0] for r in raw.execute("SELECT name FROM _sqlite_migrations")] == ["m001_initial"]
    before = raw.execute("SELECT COUNT(*) FROM nodes").fetchone()[0], raw.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]
    raw.close()
    with TraceStore(path) as store:
        assert [m.name for m in migrations.applied(store.db)] == ["m001_initial", "m002_resume"]
        assert (store.db.execute("SELECT COUNT(*) FROM nodes").fetchone()[0],
                store.db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]) == before
        assert store.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        recs = stored_records(store, 1)              # old rows still give the search's records
        assert recs[0]["parent"] is None and recs[0]["status"] == "ok"
        assert recs[0]["result"]["median_ms"] == pytest.approx(80.0315, rel=1e-4)
        assert 0 < recs[0]["result"]["spread"] < 0.01
        assert best_node(store, 1).edit == "pad Bs[TILE][TILE] -> Bs[TILE][TILE + 1]"
        n = store.add_node(1, recs[0]["id"], "new source", prior=0.5, call=3)   # and new rows take the new columns
        assert (store.node(n).prior, store.node(n).call) == (0.5, 3)


def test_default_path_from_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("OPTIML_DB", raising=False)
    assert default_db_path() == Path("optiml.db")
    monkeypatch.setenv("OPTIML_DB", str(tmp_path / "x.db"))
    assert default_db_path() == tmp_path / "x.db"


def test_same_source_stored_once(tmp_path):
    with TraceStore(tmp_path / "t.db") as store:
        run = store.start_run("vadd")
        h1 = store.put_source("__global__ void k() {}\n")
        h2 = store.put_source("__global__ void k() {}\n")
        a = store.add_node(run, None, "__global__ void k() {}\n")
        b = store.add_node(run, a, "__global__ void k() {}\n", rationale="no-op")
        assert h1 == h2 == source_hash("__global__ void k() {}\n")
        assert store.db.execute("SELECT COUNT(*) FROM sources").fetchone()[0] == 1
        assert store.node(b).depth == 1 and store.node(b).source_hash == h1
        assert store.node_for_source(run, "__global__ void k() {}\n").id == a


def test_node_lifecycle_and_one_transaction_finish(tmp_path):
    with TraceStore(tmp_path / "t.db") as store:
        run = store.start_run("vadd", seed=7, budget=10, config={"search": "mcts"})
        n = store.add_node(run, None, "src")
        assert store.node(n).status == "pending"
        store.mark_running(n)
        assert store.node(n).status == "running"
        store.mark_pending(n)                        # withdrawn before it started
        assert store.node(n).status == "pending"
        with pytest.raises(ValueError, match="not running"):
            store.mark_pending(n)
        store.mark_running(n)
        with pytest.raises(ValueError):
            store.finish_node(n, {"status": "ok", "bogus": 1})
        assert store.evaluation(n) is None and store.node(n).status == "running"  # nothing half-written
        store.finish_node(n, {"status": "ok", "median_ms": 1.5, "metrics": {"dram_bytes": 1e6}, "reward": 0.3,
                              "reward_version": "r1", "build_log": "ptxas info"})
        assert store.node(n).status == "done"
        e = store.evaluation(n)
        assert e["metrics"] == {"dram_bytes": 1e6} and e["build_log"] == "ptxas info"
        with pytest.raises(sqlite3.IntegrityError):  # one evaluation per node
            store.db.execute("INSERT INTO evaluations (node_id, status) VALUES (?, 'ok')", (n,))
        assert store.run(run)["config"] == {"search": "mcts"}
        p = store.record_proposal(run, node_id=n, proposer="llm", model="m", prompt="p", raw_answer="a",
                                  parsed_edits=[{"op": "replace"}], tokens_in=10, tokens_out=5, latency_s=0.5)
        assert store.proposals(node_id=n)[0]["id"] == p
        assert store.proposals(run_id=run)[0]["parsed_edits"] == [{"op": "replace"}]


def test_best_node_never_picks_a_failed_evaluation(tmp_path):
    with TraceStore(tmp_path / "t.db") as store:
        run = store.start_run("vadd")
        seed = store.add_node(run, None, "seed")
        store.finish_node(seed, {"status": "ok", "median_ms": 2.0})
        wrong = store.add_node(run, seed, "wrong but fast")
        store.finish_node(wrong, {"status": "wrong_answer", "median_ms": 0.01}, status="failed")
        crash = store.add_node(run, seed, "launch failure")
        store.finish_node(crash, {"status": "launch_failed", "median_ms": 0.001}, status="done")
        assert best_node(store, run).id == seed
        good = store.add_node(run, seed, "good")
        store.finish_node(good, {"status": "ok", "median_ms": 1.0})
        assert best_node(store, run).id == good
        assert store.runs()[0]["best_speedup"] == pytest.approx(2.0)


def test_locked_database_is_a_user_error(tmp_path):
    path = tmp_path / "t.db"
    TraceStore(path).close()
    holder = sqlite3.connect(path)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with TraceStore(path, timeout_s=0.2) as store:
            with pytest.raises(UserError, match="locked by another optiml process"):
                store.start_run("vadd")
    finally:
        holder.rollback()
        holder.close()


def test_unwritable_path_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="cannot write"):
        TraceStore(tmp_path / "no-such-dir" / "t.db")
    with pytest.raises(UserError, match="no trace database"):
        TraceStore(tmp_path / "absent.db", create=False)
    (tmp_path / "junk.db").write_text("not sqlite at all " * 100)
    with pytest.raises(UserError, match="not an optiml trace database"):
        TraceStore(tmp_path / "junk.db")


WRITER = textwrap.dedent("""
    import sys, time
    from optiml.traces.store import TraceStore
    store = TraceStore(sys.argv[1])
    run = store.start_run("vadd", seed=1)
    print("run", run, flush=True)
    parent = None
    for i in range(100000):
        node = store.add_node(run, parent, f"// variant {i}\\n" + "x" * (i % 50))
        print("added", node, flush=True)
        store.mark_running(node)
        print("running", node, flush=True)
        if sys.argv[2] == "slow" and i >= 40:
            time.sleep(0.5)  # an evaluation in progress
        store.finish_node(node, {"status": "ok", "median_ms": 1.0 + i, "metrics": {"i": i},
                                 "raw_ncu_csv": "a,b\\n" * 200})
        print("done", node, flush=True)
        parent = node if i % 3 == 0 else parent
""")


@pytest.mark.parametrize("pace", ["slow", "fast"])
def test_sigkill_mid_run_loses_no_committed_row(tmp_path, pace):
    """slow: killed while a node is being evaluated; fast: killed at whatever write is under way."""
    path = tmp_path / "t.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(path), pace], stdout=subprocess.PIPE, text=True,
                             env=env)
    seen: dict[str, set[int]] = {"added": set(), "running": set(), "done": set()}
    run = None
    try:
        for line in child.stdout:
            word, num = line.split()
            if word == "run":
                run = int(num)
                continue
            seen[word].add(int(num))
            if len(seen["done"]) >= 40 and (word == "running" or pace == "fast"):
                break
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=30)
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    with TraceStore(path) as store:
        assert store.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert store.db.execute("PRAGMA foreign_key_check").fetchall() == []
        nodes = {n.id: n for n in store.nodes(run)}
        assert seen["added"] <= set(nodes)
        for nid in seen["done"]:
            assert nodes[nid].status == "done" and store.evaluation(nid)["metrics"]["i"] >= 0
        for n in nodes.values():  # a node is done exactly when its evaluation row exists
            assert (store.evaluation(n.id) is not None) == (n.status == "done")
        running = {n.id for n in nodes.values() if n.status == "running"}
        if pace == "slow":
            assert running == {max(seen["running"])}, "killed during an evaluation: that node is left running"
        if not running:
            return
        assert {n.id for n in store.stale_running(run)} == running
        assert set(store.reset_stale(run)) == running
        assert all(store.node(i).status == "pending" for i in running)
        assert store.stale_running(run) == []
        # the resumed run goes on: the reset node can be evaluated again
        nid = sorted(running)[0]
        store.mark_running(nid)
        store.finish_node(nid, {"status": "ok", "median_ms": 0.5})
        assert best_node(store, run).id == nid


def test_running_rows_of_a_live_worker_are_not_stale(tmp_path):
    with TraceStore(tmp_path / "t.db") as store:
        run = store.start_run("vadd")
        n = store.add_node(run, None, "s")
        store.mark_running(n)  # this process is alive
        assert store.stale_running(run) == []
        store.db.execute("UPDATE nodes SET worker_host = 'elsewhere' WHERE id = ?", (n,))
        store.db.conn.commit()
        assert [x.id for x in store.stale_running(run)] == [n]


@pytest.mark.parametrize("state", ["done", "failed"])
def test_only_a_pending_or_running_node_can_be_finished(tmp_path, state):
    with TraceStore(tmp_path / "t.db") as store:
        run = store.start_run("vadd")
        n = store.add_node(run, None, "src")
        with store._write():            # a node another process finished (its row checked first)
            store.db.execute("UPDATE nodes SET status = ? WHERE id = ?", (state, n))
        with pytest.raises(ValueError, match="not pending or running"):
            store.finish_node(n, {"status": "ok", "median_ms": 1.0})
        assert store.evaluation(n) is None and store.node(n).status == state     # rolled back
        m = store.add_node(run, n, "src2")
        store.finish_node(m, {"status": "ok", "median_ms": 2.0})                 # pending: fine
        with pytest.raises((ValueError, sqlite3.IntegrityError)):
            store.finish_node(m, {"status": "wrong_output"}, status="failed")
        assert store.node(m).status == "done" and store.evaluation(m)["median_ms"] == 2.0


def test_a_finished_node_can_be_amended_and_only_a_finished_one(tmp_path):
    """A later verdict (compute-sanitizer on a best) replaces a finished node's status, result and
    reward; a node still pending or running has nothing to amend; a seed found unsafe (status ok,
    its result's sanitize unsafe) is not among the verified."""
    with TraceStore(tmp_path / "t.db") as store:
        run = store.start_run("vadd")
        root = store.add_node(run, None, "root")
        child = store.add_node(run, root, "child")
        with pytest.raises(ValueError, match="not finished"):
            store.amend_evaluation(child, status="unsafe", result={}, reward=-1.0, node_status="failed")
        store.mark_running(child)
        with pytest.raises(ValueError, match="not finished"):
            store.amend_evaluation(child, status="unsafe", result={}, reward=-1.0, node_status="failed")
        for n, ms in ((root, 2.0), (child, 1.0)):
            store.finish_node(n, {"status": "ok", "median_ms": ms, "result": {"status": "ok", "median_ms": ms},
                                  "reward": 0.5, "build_log": "log"}, "done")
        assert [r.key for r in store.verified(run)] == [root, child]
        unsafe = {"status": "unsafe", "median_ms": 1.0, "sanitize": {"status": "unsafe", "message": "memcheck: x"}}
        store.amend_evaluation(child, status="unsafe", result=unsafe, reward=-1.0, node_status="failed")
        e = store.evaluation(child)
        assert (store.node(child).status, e["status"], e["result"], e["reward"], e["build_log"]) == \
            ("failed", "unsafe", unsafe, -1.0, "log")
        store.amend_evaluation(root, status="ok", result=dict(unsafe, status="ok"), reward=0.0, node_status="done")
        assert store.node(root).status == "done" and store.verified(run) == []
        with pytest.raises(ValueError, match="done or failed"):
            store.amend_evaluation(root, status="ok", result={}, reward=0.0, node_status="running")
