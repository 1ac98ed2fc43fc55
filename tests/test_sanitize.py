"""compute-sanitizer in the loop, without a GPU: the Sanitizer runs a fake compute-sanitizer that
answers with the real output captured on an H100 (tests/data/sanitizer/), and the runner's
sanitize stage turns a report into the status ``unsafe``."""
import pickle
import sys
import textwrap

import pytest

from optiml.build import NvccBuilder
from optiml.runner import Candidate, Runner
from optiml.search.reward import RUNTIME_FAILURE_REWARD, reward
from optiml.status import Category, Status, category
from optiml.verify.harness import Case, HarnessJob, HarnessResult, KernelBinary, TimingResult
from optiml.verify.sanitizer import SanitizeResult, Sanitizer
from tests.conftest import DATA, RUNNER_DEADLINE
from tests.fakes import FakeHarness
from tests.test_spec import KERNEL, load

pytestmark = RUNNER_DEADLINE

FAKE = textwrap.dedent(f"""\
    #!{sys.executable}
    # A fake compute-sanitizer: prints the real output of TOOL on the case named in $FAKE_CASE.
    import os, pickle, sys
    a = sys.argv[1:]
    tool = a[a.index("--tool") + 1]
    assert a[-4:-1] == ["-m", "optiml.verify.worker", "--sanitize"], a
    job = pickle.load(open(os.path.join(a[-1], "job.pkl"), "rb"))
    assert job.time_it is False
    if os.environ.get("FAKE_CASE") == "hang":
        import time; time.sleep(60)
    if os.environ.get("FAKE_CASE") == "broken":
        print("========= COMPUTE-SANITIZER"); print("========= Error: Target application failed to start"); sys.exit(1)
    text = open(os.path.join({str(DATA / 'sanitizer')!r}, tool + "-" + os.environ["FAKE_CASE"] + ".txt")).read()
    print(text, end="")
    sys.exit(86 if "SUMMARY: 0" not in text else 0)
""")


@pytest.fixture
def fake_sanitizer(tmp_path):
    exe = tmp_path / "compute-sanitizer"
    exe.write_text(FAKE)
    exe.chmod(0o755)
    return str(exe)


def job(tmp_path):
    kb = KernelBinary("k.cubin", "k", ())
    return HarnessJob(load(tmp_path), kb, kb, (Case(1, 5),))


@pytest.mark.parametrize("case, status, tools, words", [
    ("clean", "clean", ("memcheck", "racecheck", "initcheck", "synccheck"), "passed memcheck"),
    ("write_past_end", "unsafe", (), "memcheck: Invalid __global__ write of size 4 bytes in k at kernel.cu:3"),
    ("shared_race", "unsafe", ("memcheck",), "racecheck: Race reported between Write access and Read access"),
    ("uninitialized_read", "unsafe", ("memcheck", "racecheck"), "initcheck: Uninitialized __global__ memory read"),
    ("divergent_barrier", "unsafe", ("memcheck", "racecheck", "initcheck"), "synccheck: Barrier error detected"),
    ("broken", "not_sanitized", (), "memcheck could not run the candidate (exit 1)"),
])
def test_the_verdict_is_the_first_report_in_tool_order(tmp_path, fake_sanitizer, monkeypatch, case, status, tools, words):
    monkeypatch.setenv("FAKE_CASE", case)
    r = Sanitizer(exe=fake_sanitizer).sanitize(job(tmp_path))
    assert r.status == status and r.tools == tools and words in r.message, r
    if status == "unsafe":
        assert r.finding is not None and r.message == r.finding.sentence() and "Host Frame" not in r.message


def test_a_tool_that_does_not_finish_in_time_is_not_sanitized_and_its_process_is_ended(tmp_path, fake_sanitizer,
                                                                                        monkeypatch):
    import time

    monkeypatch.setenv("FAKE_CASE", "hang")
    t0 = time.monotonic()
    r = Sanitizer(exe=fake_sanitizer, timeout_s=1.5).sanitize(job(tmp_path))
    assert (r.status, r.message, r.tools) == ("not_sanitized", "memcheck did not finish within 1.5 s", ())
    assert time.monotonic() - t0 < 30                      # killed at its deadline, not waited for


def test_no_compute_sanitizer_is_a_status_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIML_COMPUTE_SANITIZER", str(tmp_path / "missing"))
    r = Sanitizer().sanitize(job(tmp_path))
    assert r.status == "not_sanitized" and "not found" in r.message


def test_the_leak_check_is_turned_off_for_memcheck_only():
    """compute-sanitizer's --leak-check belongs to memcheck; the other tools are run without it."""
    s = Sanitizer(exe="/opt/cs", python="/py", niceness=0)
    tail = ["--error-exitcode", "86", "--print-limit", "1", "--show-backtrace", "no", "/py", "-m",
            "optiml.verify.worker", "--sanitize", "/j"]
    assert s.command("memcheck", "/j") == ["/opt/cs", "--tool", "memcheck", "--leak-check", "no", *tail]
    for tool in ("racecheck", "initcheck", "synccheck"):
        assert s.command(tool, "/j") == ["/opt/cs", "--tool", tool, *tail]


def test_a_chosen_sanitizer_that_cannot_run_is_not_found(tmp_path, monkeypatch):
    """OPTIML_COMPUTE_SANITIZER naming a file without execute permission, or a folder: not found."""
    from optiml.verify.sanitizer import find_sanitizer
    plain = tmp_path / "compute-sanitizer"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    for chosen in (plain, tmp_path):
        monkeypatch.setenv("OPTIML_COMPUTE_SANITIZER", str(chosen))
        assert find_sanitizer() is None
        assert Sanitizer().sanitize(job(tmp_path)).status == "not_sanitized"
    plain.chmod(0o755)
    assert find_sanitizer() is None          # still the folder
    monkeypatch.setenv("OPTIML_COMPUTE_SANITIZER", str(plain))
    assert find_sanitizer() == str(plain)


SCRIPTED = textwrap.dedent(f"""\
    #!{sys.executable}
    # A fake compute-sanitizer: memcheck prints $FAKE_MEMCHECK and exits with $FAKE_EXIT; the others are clean.
    import os, sys
    a = sys.argv[1:]
    tool = a[a.index("--tool") + 1]
    if tool == "memcheck":
        print(os.environ["FAKE_MEMCHECK"]); sys.exit(int(os.environ["FAKE_EXIT"]))
    print("========= COMPUTE-SANITIZER"); print("========= ERROR SUMMARY: 0 errors")
""")


@pytest.mark.parametrize("text, code, sentence", [
    # a report the tool counted though it names no kernel (no "at" line)
    ("========= Invalid __global__ write of size 4 bytes\n=========     by thread (1,0,0) in block (2,0,0)\n"
     "========= ERROR SUMMARY: 1 error", 86,
     "memcheck: Invalid __global__ write of size 4 bytes, thread (1,0,0) of block (2,0,0)"),
    # a report in a kernel from a tool that ended before its summary
    ("========= Invalid __global__ read of size 4 bytes\n=========     at k+0x40 in kernel.cu:7\n"
     "=========     by thread (3,0,0) in block (0,0,0)", 1,
     "memcheck: Invalid __global__ read of size 4 bytes in k at kernel.cu:7, thread (3,0,0) of block (0,0,0)"),
])
def test_a_report_outside_a_kernel_or_without_a_summary_is_unsafe(tmp_path, monkeypatch, text, code, sentence):
    exe = tmp_path / "compute-sanitizer"
    exe.write_text(SCRIPTED)
    exe.chmod(0o755)
    monkeypatch.setenv("FAKE_MEMCHECK", "========= COMPUTE-SANITIZER\n" + text)
    monkeypatch.setenv("FAKE_EXIT", str(code))
    r = Sanitizer(exe=str(exe)).sanitize(job(tmp_path))
    assert (r.status, r.message, r.tools) == ("unsafe", sentence, ())


class FakeOkHarness(FakeHarness):
    def run(self, job, lend=None):
        return HarnessResult("ok", timing=TimingResult(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 10, 3, 1, True))


class ScriptedSanitizer:
    """A fake sanitizer answering one scripted result and recording the jobs it saw."""

    def __init__(self, result):
        self.result, self.jobs = result, []

    def sanitize(self, job, gpu_lock=None, cancel=None):
        self.jobs.append(job)
        return self.result


@pytest.mark.parametrize("verdict, status", [("clean", "ok"), ("unsafe", "unsafe"), ("not_sanitized", "ok")])
def test_the_sanitize_stage_sets_the_status(tmp_path, verdict, status):
    fake = ScriptedSanitizer(SanitizeResult(verdict, "memcheck: Invalid __global__ write" if verdict == "unsafe" else "x"))
    with Runner.sequential(load(tmp_path), KERNEL, NvccBuilder("sm_90", cache_dir=tmp_path / "c"), FakeOkHarness(),
                           sanitizer=fake) as runner:
        ev = runner.evaluate(Candidate(KERNEL), sanitize=True)
        plain = runner.evaluate(Candidate(KERNEL))                       # not asked: not sanitized
    assert ev.status == status and ev.sanitize.status == verdict and len(fake.jobs) == 1
    assert plain.status == "ok" and plain.sanitize is None
    if verdict == "unsafe":
        assert "Invalid __global__ write" in ev.message and ev.to_dict()["sanitize"]["status"] == "unsafe"


def test_an_unsafe_candidate_is_scored_as_a_wrong_one_and_never_best():
    from optiml.best import choose_best  # noqa: F401  (the search's rule considers ok nodes only)

    assert category(Status.UNSAFE) is Category.WRONG
    assert reward({"status": "unsafe", "median_ms": 0.1}, 1.0, 1.0) == RUNTIME_FAILURE_REWARD


def test_eval_prints_the_verdict():
    from pathlib import Path
    from types import SimpleNamespace

    from optiml.cli.kernel import format_evaluation
    from optiml.verify.sanitizer import Finding

    f = Finding("racecheck", "Race reported between Write access and Read access", "k", "kernel.cu:3")
    for res, shown in [(SanitizeResult("clean", tools=("memcheck", "racecheck"), wall_s=3.2), "clean (memcheck, racecheck; 3.2 s)"),
                       (SanitizeResult("unsafe", f.sentence(), f), "UNSAFE: racecheck: Race reported"),
                       (SanitizeResult("not_sanitized", "compute-sanitizer was not found"), "not sanitized: compute-sanitizer")]:
        ev = SimpleNamespace(harness=None, build=None, launch=None, status="ok", message="", seed=1, sanitize=res)
        assert f"sanitize  {shown}" in format_evaluation(ev, Path("k.cu"), SimpleNamespace(entry="k"))
    assert pickle.loads(pickle.dumps(f)) == f


class FakeTimedHarness(FakeHarness):
    """Answers ok with a median set by the candidate's BLOCK (ms = BLOCK / 100)."""

    def run(self, job, lend=None):
        ms = job.candidate.constants["BLOCK"] / 100
        return HarnessResult("ok", timing=TimingResult(ms, ms, ms, ms, ms, ms, 0.0, 10, 3, 1, True))


class BlockSanitizer(ScriptedSanitizer):
    """Unsafe for the BLOCK values named, clean otherwise."""

    def __init__(self, unsafe=()):
        super().__init__(None)
        self.unsafe = unsafe

    def sanitize(self, job, gpu_lock=None, cancel=None):
        self.jobs.append(job.candidate.constants["BLOCK"])
        if job.candidate.constants["BLOCK"] in self.unsafe:
            return SanitizeResult("unsafe", "memcheck: Invalid __global__ write")
        return SanitizeResult("clean", "passed", tools=("memcheck",))


@pytest.mark.parametrize("unsafe, sanitized", [((), [300, 200, 100]), ((200,), [300, 200, 250, 100])])
def test_best_mode_sanitizes_each_candidate_faster_than_every_one_accepted(tmp_path, unsafe, sanitized):
    from optiml.runner import Preparer, standard_stages

    prep = Preparer(load(tmp_path), KERNEL, NvccBuilder("sm_90", cache_dir=tmp_path / "c"))
    fake = BlockSanitizer(unsafe)
    with Runner(standard_stages(prep, sanitizer=fake, sanitize="best"), [0], harness_factory=lambda d: FakeTimedHarness(),
                build_workers=1, workers_per_gpu=1) as runner:
        results = [runner.evaluate(Candidate(KERNEL.replace("BLOCK 128", f"BLOCK {b}"))) for b in (300, 200, 250, 100, 150)]
    assert fake.jobs == sanitized
    assert [r.status for r in results] == ["unsafe" if b in unsafe else "ok" for b in (300, 200, 250, 100, 150)]


@pytest.mark.parametrize("mode, sanitized", [("all", [100, 200, 250, 300]), ("asked", [250])])
def test_all_mode_sanitizes_every_candidate_not_refused_and_asked_mode_those_asked(tmp_path, mode, sanitized):
    from optiml.runner import Preparer, standard_stages

    prep = Preparer(load(tmp_path), KERNEL, NvccBuilder("sm_90", cache_dir=tmp_path / "c"))
    fake = BlockSanitizer()
    asked = {250: True, 150: False}                   # BLOCK 150 submitted with sanitize=False: never
    with Runner(standard_stages(prep, sanitizer=fake, sanitize=mode), [0], harness_factory=lambda d: FakeTimedHarness(),
                build_workers=1, workers_per_gpu=1) as runner:
        results = [runner.evaluate(Candidate(KERNEL.replace("BLOCK 128", f"BLOCK {b}")), sanitize=asked.get(b))
                   for b in (100, 200, 250, 300, 150)]                     # slower and slower: "all" takes each
    assert fake.jobs == sanitized
    assert [r.sanitize is not None for r in results] == [b in sanitized for b in (100, 200, 250, 300, 150)]


def test_the_device_is_held_only_for_the_launch(tmp_path):
    """A fake compute-sanitizer whose 'start-up' takes 1 s, then speaks the child's ready/go/finished: the
    two tools' start-ups overlap (one after the other would take 2 s, more than a loaded machine adds)."""
    exe = tmp_path / "compute-sanitizer"
    exe.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import os, sys, time
        d = sys.argv[-1]
        time.sleep(1.0)                                   # the tool and CUDA starting
        if os.path.exists(os.path.join(d, "wait")):
            open(os.path.join(d, "ready"), "w").close()
            while not os.path.exists(os.path.join(d, "go")):
                time.sleep(0.001)
            time.sleep(0.05)                              # the launch
            open(os.path.join(d, "finished"), "w").close()
        print("========= COMPUTE-SANITIZER"); print("========= ERROR SUMMARY: 0 errors")
    """))
    exe.chmod(0o755)
    from optiml.runner import FairLock

    lock = FairLock()
    r = Sanitizer(exe=str(exe), tools=("memcheck", "synccheck")).sanitize(job(tmp_path), gpu_lock=lock)
    assert r.status == "clean" and 1.0 < r.wall_s < 1.9          # the two tools start up at once
    assert 0.1 <= lock.held_s < 0.35, lock.held_s               # two launches of ~0.05 s, not the start-ups


class GatedSanitizer(BlockSanitizer):
    """A fake sanitizer that holds every verdict until ``gate`` is set."""

    def __init__(self, unsafe=()):
        super().__init__(unsafe)
        import threading

        self.gate, self.started = threading.Event(), threading.Event()

    def sanitize(self, job, gpu_lock=None, cancel=None):
        self.calls = getattr(self, "calls", 0) + 1
        self.started.set()
        while not self.gate.wait(0.01):
            if cancel is not None and cancel.is_set():
                return SanitizeResult("not_sanitized", "cancelled")
        return super().sanitize(job, gpu_lock)


@pytest.fixture(autouse=True)
def no_settling(monkeypatch):
    """A new best is sanitized at once (tests of the settling wait set it themselves)."""
    monkeypatch.setattr("optiml.runner.stages.SETTLE_S", 0.0)
    monkeypatch.setattr("optiml.runner.stages.EXPECT_S", 0.0)


def _best_runner(tmp_path, fake):
    from optiml.runner import Preparer, standard_stages

    prep = Preparer(load(tmp_path), KERNEL, NvccBuilder("sm_90", cache_dir=tmp_path / "c"))
    return Runner(standard_stages(prep, sanitizer=fake, sanitize="best"), [0], harness_factory=lambda d: FakeTimedHarness(),
                  build_workers=1, workers_per_gpu=1)


def block(b):
    return Candidate(KERNEL.replace("BLOCK 128", f"BLOCK {b}"))


@pytest.mark.parametrize("unsafe", [False, True])
def test_best_mode_gives_the_result_out_before_the_sanitizer_is_done(tmp_path, unsafe):
    fake = GatedSanitizer(unsafe=(300,) if unsafe else ())
    with _best_runner(tmp_path, fake) as runner:
        ev = runner.submit(block(300)).result(timeout=30)       # the sanitizer holds its verdict meanwhile
        assert ev.status == "ok" and ev.sanitize is None and ev.later is not None and not ev.later.done()
        assert 0.0 < ev.wall_s < 30.0                           # from its submission to its result given out
        assert fake.started.wait(10)
        fake.gate.set()
        late = ev.later.result(timeout=10)
    assert late.sanitize.status == ("unsafe" if unsafe else "clean")
    assert late.status == ("unsafe" if unsafe else "ok") and ev.status == "ok"   # the given-out copy is not changed
    assert late.median_ms == ev.median_ms and "sanitize" in late.stage_s


def test_a_waiting_best_that_a_faster_one_overtook_is_not_sanitized(tmp_path):
    fake = GatedSanitizer()
    with _best_runner(tmp_path, fake) as runner:
        evs = [runner.submit(block(300)).result(timeout=30)]
        assert fake.started.wait(10)                   # 300 is in the sanitizer: 200 and 100 wait for it
        evs += [runner.submit(block(b)).result(timeout=30) for b in (200, 100, 400)]
        fake.gate.set()
        lates = [ev.later.result(timeout=10) if ev.later is not None else None for ev in evs]
    assert fake.jobs == [300, 100]                     # 200 was overtaken by 100; 400 never beat anything
    assert [late.sanitize.status if late is not None and late.sanitize else None for late in lates] == \
        ["clean", None, "clean", None]
    assert evs[3].later is None


def test_a_final_best_found_unsafe_gives_way_to_the_next_best(tmp_path):
    """optimize's final step (app.optimize.sanitized_final) over the search of the fakes in
    test_search_mcts: the fastest node is unsafe, so the next best is written, and the search
    and its records say why."""
    from optiml.app.optimize import sanitized_final
    from optiml.search import MCTS, RecordingObserver, SearchConfig
    from tests.test_search_mcts import ROOT, ReplayEvaluator, ScriptedProposer

    rec = RecordingObserver()
    search = MCTS(ROOT, ReplayEvaluator(), ScriptedProposer(), config=SearchConfig(budget=60), observer=rec)
    first = search.run()
    assert first is not None and first is not search.root
    assert any(c.status == "ok" and c.median_ms > first.median_ms * 1.05 for c in first.children)  # a regression below it

    class FinalRunner:
        """A fake runner for the final step: times anything at its search median; sanitizes the
        sources named unsafe as unsafe."""

        def __init__(self, unsafe):
            self.unsafe, self.sanitized = unsafe, []

        def submit(self, candidate, **kw):
            from concurrent.futures import Future

            fut = Future()
            fut.set_result(self.evaluate(candidate, **kw))
            return fut

        def evaluate(self, candidate, *, profile=True, time_it=True, baseline=None, sanitize=None):
            from optiml.runner import Evaluation

            node = search.find(candidate.source, candidate.flags)
            ev = Evaluation("ok", median_ms=node.median_ms, baseline_ms=search.root.median_ms, seed=1)
            if sanitize:
                self.sanitized.append(node.id)
                bad = candidate.source in self.unsafe
                ev.sanitize = SanitizeResult("unsafe" if bad else "clean", "racecheck: Race reported" if bad else "",
                                             tools=("memcheck",))
            return ev

    runner = FinalRunner({first.source})
    best, final = sanitized_final(runner, search, first, sanitize=True)
    assert best is not None and best is not first and best is search.best()
    assert runner.sanitized == [first.id, best.id] and final["sanitize"]["status"] == "clean"
    assert first.status == "unsafe" and "Race reported" in first.result.message
    # the amended records replay to the same statistics
    again = MCTS.from_records(rec.records, ReplayEvaluator(), ScriptedProposer(), config=SearchConfig(budget=60))
    for a, b in zip(search.nodes, again.nodes):
        assert (a.status, a.visits) == (b.status, b.visits) and a.value_sum == pytest.approx(b.value_sum), a
    # the seed unsafe too, and nothing else: no best
    only = MCTS(ROOT, ReplayEvaluator(), ScriptedProposer(), config=SearchConfig(budget=0))
    only.run()
    only.amend(only.root, {"status": "unsafe", "median_ms": only.root.median_ms, "message": "memcheck: x",
                           "sanitize": {"status": "unsafe", "message": "memcheck: x"}})
    assert only.root.status == "ok" and only.best() is None
    best, final = sanitized_final(FinalRunner(set()), only, only.best(), sanitize=True)
    assert best is None and final["status"] == "unsafe" and "the seed is unsafe (memcheck: x)" in final["message"]


def test_a_search_takes_late_verdicts_into_its_tree_and_store(tmp_path):
    """RunnerEvaluator over a fake runner (not a GPU: the fakes of test_search_mcts time the
    candidates) whose every result comes with a later sanitizer verdict, given out only after
    the next results: the search keeps going meanwhile, and a node found unsafe afterwards is
    failed in the tree and in the store, and never the best."""
    import re
    import threading
    from concurrent.futures import Future

    from optiml.app.evaluator import RunnerEvaluator
    from optiml.app.records import StoreObserver, best_node
    from optiml.runner import Evaluation
    from optiml.search import MCTS, SearchConfig
    from optiml.traces.store import TraceStore
    from tests.test_search_mcts import ROOT, ReplayEvaluator, ScriptedProposer

    class LateRunner:
        """Answers each submission at once with ReplayEvaluator's figures; its sanitizer verdict
        (unsafe for UNROLL 4) arrives when the submission after the next comes in, or at settle."""

        def __init__(self):
            self.replay, self.held, self.lock = ReplayEvaluator(), [], threading.Lock()

        def submit(self, candidate, **kw):
            r = self.replay.evaluate(candidate.source, candidate.flags)
            ev = Evaluation(r["status"], r.get("message", ""), median_ms=r.get("median_ms"))
            fut = Future()
            if ev.ok:
                ev.later = Future()
                late = Evaluation(ev.status, median_ms=ev.median_ms)
                bad = re.search(r"UNROLL 4\b", candidate.source) is not None
                late.sanitize = SanitizeResult("unsafe" if bad else "clean", "memcheck: Invalid write" if bad else "")
                if bad:
                    late.fail(Status.UNSAFE, late.sanitize.message)
                self.held.append((ev.later, late))
            with self.lock:
                while len(self.held) > 6:
                    f, late_ev = self.held.pop(0)
                    f.set_result(late_ev)
            fut.set_result(ev)
            return fut

        def hurry(self):
            pass

        def abandon(self, later):
            abandoned.append(evaluator._later[later])    # its verdict comes anyway (flush)

        def flush(self):
            while self.held:
                f, late_ev = self.held.pop(0)
                f.set_result(late_ev)

    runner, abandoned = LateRunner(), []
    evaluator = RunnerEvaluator(runner)
    real_settle = evaluator.settle
    seen, pending = [], set()      # nodes already unsafe when the search settles (amended while it ran); verdicts to come
    keeps = []                     # (what settle was told to keep, the best then)
    evaluator.settle = lambda keep=None: (seen.extend(n for n in search.nodes if n.status == "unsafe"),
                                          keeps.append((keep, search.best().id)),
                                          pending.update(evaluator._later.values()), runner.flush(), real_settle(keep))[4]
    with TraceStore(tmp_path / "t.db") as store:
        run = store.start_run("k")
        search = MCTS(ROOT, evaluator, ScriptedProposer(), config=SearchConfig(budget=60, parallel=4),
                      observer=StoreObserver(store, run, evaluator))
        best = search.run()
        unsafe = [n for n in search.nodes if n.status == "unsafe"]
        assert unsafe and best is not None and "UNROLL 4" not in best.source
        assert all(n.result.sanitize["status"] == "unsafe" for n in unsafe)
        assert not any(n.status == "running" for n in search.nodes)
        stored = {n.id: n.status for n in store.nodes(run)}
        assert sorted(s for s in stored.values() if s not in ("done", "pending")) == \
            ["failed"] * sum(n.status not in ("ok", "pending") for n in search.nodes)
        assert best_node(store, run).source_hash == store.put_source(best.source)
        assert seen, "no verdict was taken while the search ran"
        # at the end only the best's verdict was waited for
        assert keeps == [({keeps[0][1]}, keeps[0][1])] and set(abandoned) == pending - {keeps[0][1]}


def test_abandoned_background_work_stops_and_comes_back_unsanitized(tmp_path):
    fake = GatedSanitizer()
    with _best_runner(tmp_path, fake) as runner:
        first = runner.submit(block(300)).result(timeout=30)
        assert fake.started.wait(10)                      # 300 is being sanitized, 200 waits its turn
        second = runner.submit(block(200)).result(timeout=30)
        runner.abandon(first.later)
        runner.abandon(second.later)
        lates = [first.later.result(timeout=5), second.later.result(timeout=5)]
        assert fake.calls == 1 and fake.jobs == []          # 300 stopped mid-way, 200 never started
        assert [(x.status, x.sanitize) for x in lates] == [("ok", None), ("ok", None)]
        fake.gate.set()
        third = runner.submit(block(100)).result(timeout=30)   # the stage goes on with the next
        assert third.later.result(timeout=10).sanitize.status == "clean"


def test_a_cancelled_sanitizer_stops_its_tools(tmp_path):
    import threading
    import time

    exe = tmp_path / "compute-sanitizer"
    exe.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(30)\n")
    exe.chmod(0o755)
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    t0 = time.perf_counter()
    r = Sanitizer(exe=str(exe)).sanitize(job(tmp_path), cancel=cancel)
    assert r.status == "not_sanitized" and r.message == "cancelled" and time.perf_counter() - t0 < 5


def test_a_new_best_waits_a_moment_for_a_faster_one(tmp_path, monkeypatch):
    """Bests come in a row: one overtaken within SETTLE_S of its result is never sanitized, and a
    candidate within the 1 % noise of a claimed best is not a new best."""
    from optiml.runner import Preparer

    monkeypatch.setattr("optiml.runner.stages.SETTLE_S", 1.0)
    fake = BlockSanitizer()
    warm = Preparer(load(tmp_path), KERNEL, NvccBuilder("sm_90", cache_dir=tmp_path / "c"))
    for b in (300, 200, 199):                 # built beforehand: the bests come within SETTLE_S of each other
        assert warm.build(block(b))[0] is not None
    with _best_runner(tmp_path, fake) as runner:
        evs = [runner.submit(block(b)).result(timeout=30) for b in (300, 200, 199)]
        assert evs[2].later is None                          # 1.99 ms is within 1 % of 2.00 ms
        lates = [ev.later.result(timeout=10) for ev in evs[:2]]
    assert fake.jobs == [200] and lates[0].sanitize is None and lates[1].sanitize.status == "clean"


def test_the_background_sanitizer_keeps_to_its_share_of_the_time(tmp_path, monkeypatch):
    """With SHARE 0.5 and sanitizations that report 0.5 s, the second may start only once 2 s have
    passed since the stage began (its 0.5 s and the first's, over 0.5); hurrying lets it start at once."""
    import time

    monkeypatch.setattr("optiml.runner.stages.SHARE", 0.5)

    class Slow(BlockSanitizer):
        def sanitize(self, job, gpu_lock=None, cancel=None):
            self.at = getattr(self, "at", []) + [time.perf_counter()]
            r = super().sanitize(job, gpu_lock)
            return SanitizeResult(r.status, r.message, tools=r.tools, wall_s=0.5)

    for hurry in (False, True):
        fake = Slow()
        with _best_runner(tmp_path, fake) as runner:
            began = runner.stages[-1]._began
            first = runner.submit(block(300)).result(timeout=30)
            first.later.result(timeout=10)
            second = runner.submit(block(200)).result(timeout=30)
            out = time.perf_counter()
            if hurry:
                runner.hurry()
            second.later.result(timeout=10)
        assert fake.jobs == [300, 200]
        if hurry:
            assert fake.at[1] - out < 0.5
        else:
            assert fake.at[1] - began >= 1.99 and (out - began >= 1.99 or fake.at[1] - out > 0.05)
