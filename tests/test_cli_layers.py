"""The CLI is a thin layer (click lives only in optiml.cli: tests/test_layers.py): `optimize`'s work is a function a notebook can
call (optiml.app.optimize.run_optimize) that raises the sentences the command prints, and the command
only draws the progress and prints two lines."""
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from optiml.app.optimize import OptimizeOptions, OptimizeResult, run_optimize
from optiml.cli import main
from optiml.errors import UserError
from optiml.traces.store import TraceStore
from tests.conftest import EXAMPLES, ROOT

PACKAGE = ROOT / "optiml"


def test_the_application_and_the_traces_package_import_no_click():
    code = ("import sys, optiml.app.optimize, optiml.traces, optiml.gpus; "
            "assert 'click' not in sys.modules, 'click imported'; "
            "assert 'optiml.cli' not in sys.modules, 'the CLI imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_run_optimize_raises_the_sentences_the_command_prints(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")        # no nvidia-smi on this machine either way
    calls = []

    def attempt(**kw):
        with pytest.raises(UserError) as e:
            run_optimize(OptimizeOptions(**{"db": tmp_path / "t.db"} | kw), on_progress=lambda *a: calls.append(a))
        return str(e.value)

    assert attempt() == "give the KERNEL to optimize, or --resume RUN to continue a stored run."
    assert attempt(budget=0) == "--budget must be at least 1, not 0."
    assert attempt(parallel=0) == "--parallel must be at least 1, not 0."
    kernel = EXAMPLES / "sgemm_naive" / "sgemm_naive.cu"
    assert attempt(kernel=kernel, seed_kernels=(tmp_path / "nope.cu",)) == f"{tmp_path / 'nope.cu'}: kernel file not found."
    assert attempt(kernel=kernel).startswith("no GPU was found (nvidia-smi is not on PATH); `optiml eval`, `profile` and `optimize` run")
    assert not (tmp_path / "t.db").exists()          # refused before a run was recorded: no empty database left
    db = tmp_path / "old.db"
    db.write_bytes((ROOT / "tests/data/traces/recorded_h200_runs.db").read_bytes())
    assert attempt(resume=1, db=db, seed_kernels=(kernel,)).startswith("--seed-kernel joins a new run")
    assert calls == []


def _fake_run(tmp_path, seen, interrupt=False):
    from optiml.app.optimize import Finished, Interrupted

    def fake_run_optimize(options, on_progress, on_search_end, on_candidate):
        """Reports three evaluations, the second finding a 2x kernel, as run_optimize would."""
        seen["options"] = options
        on_progress(0, 3, None)
        on_candidate(Finished(1, 3, 1, "", "ok", "", 4.0, 1.0))
        on_progress(1, 3, None)
        on_candidate(Finished(2, 3, 2, "BLOCK 16 -> 32", "ok", "", 2.0, 2.0))
        on_progress(2, 3, 2.0)
        if interrupt:
            raise Interrupted(7)
        on_candidate(Finished(3, 3, 3, "unroll 4", "wrong_output", "max abs error\n 3.0", None, None))
        on_progress(3, 3, 2.0)
        on_search_end()
        final = {"status": "ok", "speedup": 2.0, "seed_ms": 4.0, "best_ms": 2.0,
                 "search_seed_ms": 4.1, "search_best_ms": 2.1,
                 "sanitize": {"status": "clean", "tools": ["memcheck", "racecheck"], "message": "", "wall_s": 4.0}}
        return OptimizeResult(run_id=7, evaluations=3, best_source="//", best_path=("BLOCK 16 -> 32",),
                              final=final, output=tmp_path / "k.optiml.cu")
    return fake_run_optimize


def test_the_command_prints_a_line_per_candidate_and_its_summary(tmp_path, monkeypatch):
    """stderr is not a terminal here (as in CI logs or under nohup): a line per finished candidate,
    no bar; -q: neither."""
    import optiml.cli.optimize as command

    seen = {}
    monkeypatch.setattr(command, "run_optimize", _fake_run(tmp_path, seen))
    r = CliRunner().invoke(main, ["optimize", str(tmp_path / "k.cu"), "--no-profile", "--budget", "2",
                                  "--db", str(tmp_path / "t.db")])
    assert r.exit_code == 0, r.output
    o = seen["options"]
    assert o.kernel == tmp_path / "k.cu" and o.budget == 2 and o.profile is False and o.proposer == "rules"
    assert o.sanitize is None                                   # "best", or a resumed run's own
    assert r.stdout.splitlines() == [
        f"run 7: 3 candidates; best 2.00x (4.0000 -> 2.0000 ms, re-verified and timed interleaved with the seed); "
        f"path: BLOCK 16 -> 32; written to {tmp_path / 'k.optiml.cu'}",
        "sanitize: passed memcheck, racecheck",
        f"see why: optiml show 7 --db {tmp_path / 't.db'}"]
    assert r.stderr.splitlines() == ["[1/3] node 1 ok 4 ms 1.00x  the seed",
                                     "[2/3] node 2 ok 2 ms 2.00x  BLOCK 16 -> 32",
                                     "[3/3] node 3 wrong_output (max abs error 3.0)  unroll 4"]
    r = CliRunner().invoke(main, ["-q", "optimize", str(tmp_path / "k.cu"), "--db", str(tmp_path / "t.db")])
    assert r.exit_code == 0 and r.stderr == ""


def test_ctrl_c_says_how_to_resume(tmp_path, monkeypatch):
    import optiml.cli.optimize as command

    monkeypatch.setattr(command, "run_optimize", _fake_run(tmp_path, {}, interrupt=True))
    r = CliRunner().invoke(main, ["optimize", str(tmp_path / "k.cu"), "--db", str(tmp_path / "t.db")])
    assert r.exit_code == 130 and "Aborted" not in r.output and "Traceback" not in r.output
    assert r.stderr.splitlines()[-1] == (f"interrupted: run 7 is kept in {tmp_path / 't.db'}; continue it with "
                                         f"optiml optimize --resume 7 --db {tmp_path / 't.db'}")


def test_a_run_interrupted_after_it_started_is_kept_and_marked(tmp_path, monkeypatch):
    """run_optimize itself: Ctrl-C once the run is stored raises Interrupted (run kept, marked
    interrupted); before, a KeyboardInterrupt as it was, and the new database is removed."""
    import optiml.app.optimize as app
    from optiml.app.optimize import Interrupted

    def stop(opts, on_progress, on_search_end, on_candidate, state):
        state["store"] = TraceStore(opts.db)
        state["run"] = state["store"].start_run("k")
        raise KeyboardInterrupt

    monkeypatch.setattr(app, "_run_optimize", stop)
    with pytest.raises(Interrupted) as e:
        run_optimize(OptimizeOptions(db=tmp_path / "t.db"))
    with TraceStore(tmp_path / "t.db", create=False) as store:
        assert store.run(e.value.run_id)["status"] == "interrupted"

    def early(opts, on_progress, on_search_end, on_candidate, state):
        state["store"] = TraceStore(opts.db)
        raise KeyboardInterrupt

    monkeypatch.setattr(app, "_run_optimize", early)
    with pytest.raises(KeyboardInterrupt):
        run_optimize(OptimizeOptions(db=tmp_path / "n.db"))
    assert not (tmp_path / "n.db").exists()


def test_a_failed_final_timing_reports_the_search_figure():
    from optiml.cli.optimize import summary_line

    final = {"status": "timeout", "message": "killed", "search_seed_ms": 4.0, "search_best_ms": 1.0}
    result = OptimizeResult(run_id=1, evaluations=5, best_source="", best_path=(), final=final, output=Path("o.cu"))
    assert result.speedup == 4.0
    assert summary_line(result) == ("run 1: 5 candidates; best 4.00x during the search; the final interleaved "
                                    "re-timing failed (timeout: killed); path: the seed itself; written to o.cu")


@pytest.mark.parametrize("status, shows_tail", [
    ("runtime_error", True), ("timeout", True), ("launch_error", True), ("harness_error", True),
    ("reference_error", False), ("wrong_output", False), ("compile_error", False),
])
def test_eval_shows_the_child_output_after_a_crash_or_a_harness_failure(status, shows_tail):
    from optiml.cli.kernel import format_evaluation

    harness = SimpleNamespace(device_name="", checks=[], log_tail="CUDA error: an illegal memory access\n", timing=None)
    ev = SimpleNamespace(harness=harness, build=None, launch=None, status=status, message="it failed", seed=1,
                         sanitize=None)
    text = format_evaluation(ev, Path("k.cu"), SimpleNamespace(entry="k"))
    assert f"status    {status}: it failed" in text
    assert ("child output (tail):" in text) == shows_tail
    assert ("illegal memory access" in text) == shows_tail


@pytest.mark.parametrize("verdict, mode, line", [
    (None, "off", "sanitize: off (the written kernel was not run under compute-sanitizer)"),
    (None, "best", "sanitize: not sanitized"),
    ({"status": "unsafe", "message": "memcheck: Invalid __global__ write", "tools": []}, "best",
     "sanitize: UNSAFE: memcheck: Invalid __global__ write"),
    ({"status": "not_sanitized", "message": "compute-sanitizer was not found", "tools": []}, "all",
     "sanitize: not sanitized (compute-sanitizer was not found)"),
])
def test_the_summary_says_plainly_what_the_sanitizer_made_of_the_kernel(verdict, mode, line):
    from optiml.cli.optimize import sanitize_line

    assert sanitize_line({"sanitize": verdict}, mode) == line


def test_the_search_tells_each_finished_candidate_with_its_store_id(tmp_path):
    """run_optimize's search loop over a fake threaded runner (no GPU): on_candidate gets one
    Finished per evaluated node, counted, with the store's node id, status and speedup."""
    from optiml.app.evaluator import RunnerEvaluator
    from optiml.app.optimize import _search
    from optiml.app.records import StoreObserver
    from optiml.search import MCTS, SearchConfig
    from tests.test_search_mcts import ROOT, ScriptedProposer
    from tests.test_search_parallel import FakeThreadedRunner

    lines, progress = [], []
    with TraceStore(tmp_path / "t.db") as store:
        run = store.start_run("k")
        evaluator = RunnerEvaluator(FakeThreadedRunner())
        search = MCTS(ROOT, evaluator, ScriptedProposer(), config=SearchConfig(budget=12, parallel=4),
                      observer=StoreObserver(store, run, evaluator))
        _search(search, evaluator, 12, False, lambda *a: progress.append(a), lines.append)
        stored = {n.id: n for n in store.nodes(run)}
    assert [f.done for f in lines] == list(range(1, 14)) and all(f.total == 13 for f in lines)
    assert lines[0].node == min(stored) and lines[0].speedup == 1.0 and lines[0].status == "ok"
    for f in lines:
        assert f.node in stored and stored[f.node].edit == f.edit and stored[f.node].status in ("done", "failed")
        assert (f.median_ms is None) == (f.status != "ok")
    assert [p[0] for p in progress] == list(range(0, 14))


def test_a_resumed_search_whose_budget_is_spent_shows_no_candidates_to_come():
    """Resuming a run that has used its budget: the progress starts, and stays, at 0 of 0 (the seed is not
    evaluated again); a fresh run counts its seed besides the budget."""
    from types import SimpleNamespace

    from optiml.app.optimize import _search

    root = SimpleNamespace(median_ms=2.0, status="ok")
    for resumed, evaluations, budget, total in ((True, 12, 10, 0), (True, 4, 10, 6), (False, 0, 10, 11)):
        search = SimpleNamespace(nodes=[root], root=root, evaluations=evaluations, run=lambda: None)
        progress = []
        _search(search, SimpleNamespace(), budget, resumed, lambda *a: progress.append(a))
        assert progress == [(0, total, 1.0)], (resumed, evaluations, budget, progress)


def test_a_finished_line_gives_a_failures_message_and_not_an_ok_candidates():
    from optiml.app.optimize import Finished
    ok = Finished(3, 10, 7, "BLOCK 128 -> 256", "ok", "timed with a note", 0.5, 2.0)
    bad = Finished(4, 10, 8, "unroll 4", "compile_error", "error: expected\n  a ';'", None, None)
    assert ok.line() == "[3/10] node 7 ok 0.5 ms 2.00x  BLOCK 128 -> 256"
    assert bad.line() == "[4/10] node 8 compile_error (error: expected a ';')  unroll 4"


def test_the_progress_speedup_counts_verified_candidates_only():
    """An unsafe candidate (timed, then found out by the sanitizer) or a wrong one never sets the
    progress line's best speedup; a verified one does."""
    from types import SimpleNamespace

    from optiml.app.optimize import _search

    root = SimpleNamespace(median_ms=2.0, status="ok")
    evaluator = SimpleNamespace()
    told = [SimpleNamespace(ok=False, median_ms=0.1), SimpleNamespace(ok=False, median_ms=None),
            SimpleNamespace(ok=True, median_ms=1.0)]
    search = SimpleNamespace(nodes=[root], root=root, evaluations=0,
                             run=lambda: [evaluator.on_done(ev, None) for ev in told])
    progress = []
    _search(search, evaluator, 3, True, lambda *a: progress.append(a))
    assert progress == [(0, 3, 1.0), (1, 3, 1.0), (2, 3, 1.0), (3, 3, 2.0)]
