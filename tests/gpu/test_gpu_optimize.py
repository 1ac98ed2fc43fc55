"""GPU tests of `optiml optimize`: the final interleaved re-timing, a --seed-kernel variant with
its own launch geometry, and a run killed with SIGKILL that completes with --resume.

    python3 -m pytest -m gpu tests/gpu -v
"""
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from optiml.build import NvccBuilder, detect_arch
from optiml.runner import Candidate, Runner
from optiml.spec import find_spec, load_spec
from optiml.traces.store import TraceStore
from optiml.verify.harness import SubprocessHarness
from tests.conftest import EXAMPLES, ROOT
from optiml.app.records import best_node

pytestmark = pytest.mark.gpu

TILED = EXAMPLES / "sgemm_tiled_conflicts" / "sgemm_tiled_conflicts.cu"
NAIVE = EXAMPLES / "sgemm_naive" / "sgemm_naive.cu"
SEED_VARIANT = EXAMPLES / "sgemm_naive" / "seeds" / "sgemm_smem_4rows.cu"


def optiml(*args, **kw):
    return subprocess.run([sys.executable, "-m", "optiml", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, **kw)


def test_interleaved_timing_of_a_candidate_against_the_seed(tmp_path):
    src = TILED.read_text()
    padded = src.replace("    __shared__ float Bs[TILE][TILE];", "    __shared__ float Bs[TILE][TILE + 1];")
    assert padded != src
    spec = load_spec(find_spec(TILED), TILED, kernel_source=src)
    ev = Runner.sequential(spec, src, NvccBuilder(detect_arch(), cache_dir=tmp_path), SubprocessHarness(),
                   include_dir=TILED.parent)
    r = ev.evaluate(Candidate(padded), baseline=Candidate(src))
    assert r.status == "ok", r.message
    # alternated blocks, the same number of them for each; a block holds more launches of the faster kernel
    assert len(r.harness.timing.blocks_ms) == len(r.harness.baseline_timing.blocks_ms) >= 5
    assert r.harness.timing.reps >= r.harness.baseline_timing.reps >= 10
    print(f"interleaved: seed {r.baseline_ms:.3f} ms, padded {r.median_ms:.3f} ms = {r.baseline_ms / r.median_ms:.2f}x",
          file=sys.stderr)
    assert r.baseline_ms / r.median_ms > 3


def test_a_seed_kernel_with_its_own_launch_is_verified_and_used(tmp_path):
    db = tmp_path / "t.db"
    out = tmp_path / "best.cu"
    # templates off: the seed kernel, not an operation template, is what this checks
    p = optiml("optimize", NAIVE, "--seed-kernel", SEED_VARIANT, "--budget", 2, "--no-profile", "--no-templates",
               "--db", db, "-o", out)
    assert p.returncode == 0, p.stderr + p.stdout
    print(p.stdout, file=sys.stderr)
    with TraceStore(db) as store:
        nodes = store.nodes(1)
        seed = [n for n in nodes if n.proposer == "seed"]
        assert len(seed) == 1 and seed[0].status == "done" and store.evaluation(seed[0].id)["status"] == "ok"
        root_ms = store.evaluation(nodes[0].id)["median_ms"]
        seed_ms = store.evaluation(seed[0].id)["median_ms"]
        assert seed_ms < root_ms                   # the hand-written tiles beat the naive seed
        best = best_node(store, 1)
        assert store.path_to(best.id)[1].id == seed[0].id     # the best is the variant or grows from it
        final = store.run(1)["result"]
        assert final["status"] == "ok" and final["speedup"] > 1
    assert "seed kernel 1" in p.stdout and out.read_text() != NAIVE.read_text()


def test_a_run_killed_with_sigkill_completes_with_resume(tmp_path):
    db = tmp_path / "k.db"
    proc = subprocess.Popen([sys.executable, "-m", "optiml", "optimize", str(NAIVE), "--budget", "6", "--no-profile",
                             "--sanitize", "off", "--db", str(db), "-o", str(tmp_path / "best.cu")], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 240
    done = 0
    while time.time() < deadline and proc.poll() is None:
        time.sleep(0.5)
        try:
            con = sqlite3.connect(db, timeout=5)
            done = con.execute("SELECT COUNT(*) FROM nodes WHERE status IN ('done', 'failed')").fetchone()[0]
            running = con.execute("SELECT COUNT(*) FROM nodes WHERE status = 'running'").fetchone()[0]
            con.close()
        except sqlite3.Error:
            continue
        if done >= 3 and running:
            break
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert 3 <= done < 7, done
    with TraceStore(db) as store:
        before = {n.id: store.evaluation(n.id) for n in store.nodes(1) if n.status in ("done", "failed")}
    p = optiml("optimize", "--resume", 1, "--db", db, "-o", tmp_path / "best.cu")
    assert p.returncode == 0, p.stderr + p.stdout
    print(p.stdout, file=sys.stderr)
    with TraceStore(db) as store:
        nodes = store.nodes(1)
        # none left running; a proposal the budget's end withdrew stays pending, unevaluated, for a later --resume
        assert {n.status for n in nodes} <= {"done", "failed", "pending"}, [n.status for n in nodes]
        assert all(store.evaluation(n.id) is None for n in nodes if n.status == "pending")
        assert sum(n.parent_id is not None for n in nodes if store.evaluation(n.id)) == 6
        for nid, ev in before.items():              # nothing stored was evaluated again
            assert store.evaluation(nid)["id"] == ev["id"] and store.evaluation(nid)["created_at"] == ev["created_at"]
        assert store.run(1)["status"] == "done" and store.run(1)["result"]["status"] == "ok"
