"""`run_optimize` start to end on this CPU machine: real nvcc builds and a real trace store, with
FAKE GPU parts (a fake GPU worker whose median is set by the candidate's BLOCK, a fake
compute-sanitizer that finds a BLOCK under 64 unsafe, no profiler). It checks optiml's own wiring (the
search, the background sanitizer's verdicts, the final step, the file written and its header);
none of it is GPU behaviour."""
import pytest

from optiml.app.optimize import OptimizeOptions, run_optimize
from optiml.traces.store import TraceStore
from optiml.verify.harness import HarnessResult, TimingResult
from optiml.verify.sanitizer import SanitizeResult
from tests.conftest import RUNNER_DEADLINE
from tests.fakes import FakeHarness, fake_gpu_machine
from tests.test_spec import KERNEL, SPEC, write

pytestmark = RUNNER_DEADLINE


class FakeBlockWorker(FakeHarness):
    """A fake GPU worker: verifies everything, median BLOCK / 100 ms (the baseline's likewise)."""

    def __init__(self, device=0, timeout_s=120.0):
        self.device = device

    def run(self, job, lend=None):
        def timing(kb):
            ms = kb.constants["BLOCK"] / 100
            return TimingResult(ms, ms, ms, ms, ms, ms, 0.0, 10, 3, 1, True)
        return HarnessResult("ok", timing=timing(job.candidate),
                             baseline_timing=timing(job.baseline) if job.baseline is not None else None)


class FakeSanitizer:
    """A fake compute-sanitizer: a BLOCK under ``under`` writes past the end (unsafe); the rest are clean."""
    jobs: list = []
    under = 64

    def __init__(self, *a, **kw):
        pass

    def sanitize(self, job, gpu_lock=None, cancel=None):
        block = job.candidate.constants["BLOCK"]
        FakeSanitizer.jobs.append(block)
        if block < FakeSanitizer.under:
            return SanitizeResult("unsafe", "memcheck: Invalid __global__ write of size 4 bytes", tools=())
        return SanitizeResult("clean", "passed memcheck", tools=("memcheck",), wall_s=0.01)


@pytest.fixture
def fake_gpu(monkeypatch):
    fake_gpu_machine(monkeypatch, FakeBlockWorker, FakeSanitizer)
    FakeSanitizer.jobs = []


@pytest.mark.parametrize("under", [64, 128])
def test_optimize_end_to_end_with_fake_gpu_parts(tmp_path, fake_gpu, under):
    """With 128 the two fastest (32, then 64) are unsafe: the search settles on 32's verdict, the
    final step finds 64 unsafe too and writes the seed (BLOCK 128)."""
    FakeSanitizer.under = under
    kernel, _ = write(tmp_path, SPEC.replace("timing = { N = 1048576 }", "timing = { N = 4096 }"), KERNEL)
    lines = []
    result = run_optimize(OptimizeOptions(kernel=kernel, budget=6, profile=False, db=tmp_path / "t.db",
                                          arch="sm_90", parallel=2, build_jobs=1),
                          on_candidate=lines.append)
    text = result.output.read_text()
    with TraceStore(tmp_path / "t.db", create=False) as store:
        final = store.run(result.run_id)["result"]
        node = store.node(final["best_node"])
        assert text.endswith(store.source(node.source_hash))
        unsafe = [n for n in store.nodes(result.run_id) if (store.evaluation(n.id) or {}).get("status") == "unsafe"]
    assert final["status"] == "ok" and final["sanitize"]["status"] == "clean"
    assert f"// optiml: run {result.run_id}, node {node.id}" in text and "nvcc -arch=sm_90 -O3" in text
    assert f"{final['speedup']:.2f}x" in text and "timed interleaved with the seed" in text
    assert f"#define BLOCK {under}" in text                # the fastest safe one (32 was faster, and unsafe)
    assert [b for b in FakeSanitizer.jobs if b < under] and unsafe    # the unsafe best was found out and stored so
    if under == 128:
        assert sorted(FakeSanitizer.jobs)[:2] == [32, 64] and len(unsafe) >= 2
    assert len(lines) == result.evaluations + 1 and lines[-1].done == result.evaluations + 1


def test_optimize_of_an_unsafe_seed_writes_nothing(tmp_path, fake_gpu):
    from optiml.errors import UserError

    kernel, _ = write(tmp_path, SPEC.replace("timing = { N = 1048576 }", "timing = { N = 4096 }"),
                      KERNEL.replace("BLOCK 128", "BLOCK 32"))
    out = tmp_path / "best.cu"
    with pytest.raises(UserError, match="no safe kernel to write"):
        run_optimize(OptimizeOptions(kernel=kernel, budget=1, profile=False, db=tmp_path / "t.db", arch="sm_90",
                                     parallel=1, build_jobs=1, output=out, time_limit_s=0.0))
    assert not out.exists()


def test_a_search_that_runs_out_of_proposals_says_so_and_what_would_go_further(tmp_path, fake_gpu):
    FakeSanitizer.under = 0
    kernel, _ = write(tmp_path, SPEC.replace("timing = { N = 1048576 }", "timing = { N = 4096 }"), KERNEL)
    result = run_optimize(OptimizeOptions(kernel=kernel, budget=500, profile=False, db=tmp_path / "t.db", arch="sm_90",
                                          parallel=2, build_jobs=1, templates=False))
    stopped = result.final.get("stopped") or ""
    assert result.evaluations < 500
    assert stopped.startswith(f"the search stopped after {result.evaluations} of 500 candidates: nothing was left to propose")
    assert "--proposer llm or mixed" in stopped and "[tune]" in stopped and "--seed-kernel" in stopped
    assert stopped in result.line()
    with TraceStore(tmp_path / "t.db", create=False) as store:
        assert store.run(result.run_id)["result"]["stopped"] == stopped        # recorded with the run
        from optiml.traces.report import format_path
        assert f"stopped: {stopped}" in format_path(store, result.run_id)
    # a search its budget ends says nothing of the kind
    short = run_optimize(OptimizeOptions(kernel=kernel, budget=3, profile=False, db=tmp_path / "u.db", arch="sm_90",
                                         parallel=1, build_jobs=1, templates=False))
    assert "stopped" not in short.final and "stopped" not in short.line()
    # nor one its time limit ends, with budget left
    timed = run_optimize(OptimizeOptions(kernel=kernel, budget=500, time_limit_s=0.001, profile=False, db=tmp_path / "v.db",
                                         arch="sm_90", parallel=1, build_jobs=1, templates=False))
    assert timed.evaluations < 500 and "stopped" not in timed.final


def test_a_spec_baseline_is_verified_timed_and_recorded_with_the_best(tmp_path, fake_gpu):
    """The spec's [baseline] runs in its own job after the search (the FAKE worker times it at the
    seed's BLOCK, 1.28 ms) and its figure is kept with the run's result."""
    FakeSanitizer.under = 0
    (tmp_path / "vendor.py").write_text("def scale(x, n, alpha):\n    return alpha * x\n")
    spec = SPEC.replace("timing = { N = 1048576 }", "timing = { N = 4096 }")
    kernel, _ = write(tmp_path, spec + '\n[baseline]\ntorch = "vendor.py:scale"\nname = "torch (eager)"\n', KERNEL)
    result = run_optimize(OptimizeOptions(kernel=kernel, budget=3, profile=False, db=tmp_path / "t.db",
                                          arch="sm_90", parallel=1, build_jobs=1, templates=False))
    base = result.final["baseline"]
    assert base["label"] == "torch (eager)" and base["framework"] == "torch" and base["status"] == "ok"
    assert base["median_ms"] == pytest.approx(1.28) and "message" not in base
    with TraceStore(tmp_path / "t.db", create=False) as store:
        assert store.run(result.run_id)["result"]["baseline"] == base


class WrongOnFreshInputsBelow128(FakeBlockWorker):
    """The FAKE worker, but a kernel of BLOCK under 128 is wrong in the final job (the one with the seed
    as its baseline: verified again on fresh inputs), right in the search's."""

    def run(self, job, lend=None):
        if job.baseline is not None and job.candidate.constants["BLOCK"] < 128:
            return HarnessResult("wrong_output", message="fake: 3 of 4096 elements differ")
        return super().run(job, lend)


def test_a_best_found_wrong_by_the_final_re_verification_is_never_the_kernel_written(tmp_path, monkeypatch):
    """The search's faster candidates are right on its inputs and wrong on the final job's fresh ones:
    each is marked wrong_output with the final job's message and the choice made again, down to the
    seed, which is the kernel written."""
    fake_gpu_machine(monkeypatch, WrongOnFreshInputsBelow128, FakeSanitizer)
    monkeypatch.setattr(FakeSanitizer, "under", 0)
    kernel, _ = write(tmp_path, SPEC.replace("timing = { N = 1048576 }", "timing = { N = 4096 }"), KERNEL)
    result = run_optimize(OptimizeOptions(kernel=kernel, budget=4, profile=False, db=tmp_path / "t.db",
                                          arch="sm_90", parallel=1, build_jobs=1))
    assert "#define BLOCK 128" in result.output.read_text() and result.best_path == ()
    with TraceStore(tmp_path / "t.db", create=False) as store:
        final = store.run(result.run_id)["result"]
        block = lambda n: next(ln for ln in store.source(n.source_hash).splitlines() if ln.startswith("#define BLOCK"))
        wrong = {block(n): store.evaluation(n.id)["result"]["message"]
                 for n in store.nodes(result.run_id) if store.evaluation(n.id)["status"] == "wrong_output"}
    assert final["status"] == "ok" and final["message"].startswith("the seed is the best")
    assert "#define BLOCK 64" in wrong
    assert set(wrong.values()) == {"wrong in the final re-verification on fresh inputs: "
                                   "fake: 3 of 4096 elements differ"}


def test_resuming_a_run_another_live_process_is_searching_is_one_sentence(tmp_path, fake_gpu):
    """A node the store has running under a live process (this one's pid, this host) means another
    optiml is on the run: resuming it is refused, and nothing is evaluated twice."""
    from optiml.errors import UserError

    FakeSanitizer.under = 0
    kernel, _ = write(tmp_path, SPEC.replace("timing = { N = 1048576 }", "timing = { N = 4096 }"), KERNEL)
    done = run_optimize(OptimizeOptions(kernel=kernel, budget=2, profile=False, db=tmp_path / "t.db", arch="sm_90",
                                        parallel=1, build_jobs=1))
    with TraceStore(tmp_path / "t.db") as store:
        seed = store.root_node(done.run_id)
        busy = store.add_node(done.run_id, seed.id, store.source(seed.source_hash).replace("BLOCK 128", "BLOCK 96"),
                              edit="BLOCK 128 -> 96")
        store.mark_running(busy)
        before = len(store.nodes(done.run_id))
    with pytest.raises(UserError, match=f"run {done.run_id} is being searched by another live optiml process; "
                                        "wait for it or stop it."):
        run_optimize(OptimizeOptions(resume=done.run_id, budget=4, db=tmp_path / "t.db", parallel=1, build_jobs=1,
                                     arch="sm_90", profile=False))
    with TraceStore(tmp_path / "t.db") as store:
        assert len(store.nodes(done.run_id)) == before and store.nodes(done.run_id, "running")[0].id == busy


def test_ctrl_c_mid_search_keeps_the_run_marked_interrupted_and_it_resumes(tmp_path, fake_gpu):
    """A KeyboardInterrupt from the progress callback after three candidates (as Ctrl-C lands in
    the search): run_optimize raises Interrupted, the run is stored as interrupted with what was
    evaluated, and --resume finishes its budget."""
    from optiml.app.optimize import Interrupted

    kernel, _ = write(tmp_path, SPEC.replace("timing = { N = 1048576 }", "timing = { N = 4096 }"), KERNEL)
    opts = dict(kernel=kernel, budget=6, profile=False, db=tmp_path / "t.db", arch="sm_90", parallel=1, build_jobs=1)
    seen = []

    def stop(finished):
        seen.append(finished)
        if len(seen) == 3:
            raise KeyboardInterrupt

    with pytest.raises(Interrupted) as e:
        run_optimize(OptimizeOptions(**opts), on_candidate=stop)
    with TraceStore(tmp_path / "t.db", create=False) as store:
        assert store.run(e.value.run_id)["status"] == "interrupted"
        kept = [n for n in store.nodes(e.value.run_id) if store.evaluation(n.id)]
    assert len(kept) >= 3
    result = run_optimize(OptimizeOptions(**opts, resume=e.value.run_id))
    with TraceStore(tmp_path / "t.db", create=False) as store:
        assert store.run(result.run_id)["status"] == "done" and result.run_id == e.value.run_id
    assert result.evaluations == 6
