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
from tests.conftest import DATA
from tests.fakes import FakeHarness
from tests.test_spec import KERNEL, load

FAKE = textwrap.dedent(f"""\
    #!{sys.executable}
    # A fake compute-sanitizer: prints the real output of TOOL on the case named in $FAKE_CASE.
    import os, pickle, sys
    a = sys.argv[1:]
    tool = a[a.index("--tool") + 1]
    assert a[-4:-1] == ["-m", "optiml.verify.worker", "--sanitize"], a
    job = pickle.load(open(os.path.join(a[-1], "job.pkl"), "rb"))
    assert job.time_it is False
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


def test_no_compute_sanitizer_is_a_status_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIML_COMPUTE_SANITIZER", str(tmp_path / "missing"))
    r = Sanitizer().sanitize(job(tmp_path))
    assert r.status == "not_sanitized" and "not found" in r.message


class FakeOkHarness(FakeHarness):
    def run(self, job, lend=None):
        return HarnessResult("ok", timing=TimingResult(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 10, 3, 1, True))


class ScriptedSanitizer:
    """A fake sanitizer answering one scripted result and recording the jobs it saw."""

    def __init__(self, result):
        self.result, self.jobs = result, []

    def sanitize(self, job, gpu_lock=None):
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

    def sanitize(self, job, gpu_lock=None):
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


def test_the_device_is_held_only_for_the_launch(tmp_path):
    """A fake compute-sanitizer whose 'start-up' takes 0.4 s, then speaks the child's ready/go/finished."""
    exe = tmp_path / "compute-sanitizer"
    exe.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import os, sys, time
        d = sys.argv[-1]
        time.sleep(0.4)                                   # the tool and CUDA starting
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
    assert r.status == "clean" and 0.4 < r.wall_s < 0.8          # the two tools start up at once
    assert 0.1 <= lock.held_s < 0.35, lock.held_s               # two launches of ~0.05 s, not the start-ups
