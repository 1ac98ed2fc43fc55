"""Several candidates under one ncu process (NcuProfiler.profile_batch), with a fake ncu: a
Python script standing in for ncu that plays the child's side of the ready/go handshake and
then answers `ncu -i` with a raw CSV whose rows carry the batch's NVTX ranges (built from a
real H100 export). What is checked: each candidate gets the metrics of the row in its own range,
the GPU lock is held only between go and finished, a candidate the batch did not reach is a
replay_failed status, and a hung ncu is a timeout."""
import os
import stat
import sys
import threading
import time

import pytest

from optiml.profiler.ncu import NcuProfiler
from optiml.profiler.types import ProfileStatus
from optiml.spec import Launch
from optiml.verify.harness import Case, HarnessJob, KernelBinary
from tests.conftest import DATA
from tests.test_spec import load

FIXTURE = DATA / "ncu" / "h100_hgemm_naive_vs_wmma_nvtx_raw.csv"

FAKE = r'''#!{python}
import os, sys, time, pathlib
args = sys.argv[1:]
if args[:1] == ["--version"]:
    print("Version 2025.3.1.0"); sys.exit(0)
if args[:1] == ["--query-metrics"]:
    sys.exit(0)
if args[:1] == ["-i"]:
    tags = pathlib.Path(args[1]).read_text().split()
    lines = pathlib.Path({fixture!r}).read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))
    rows = [l for l in lines[start + 2:] if l.startswith('"')]
    print("\n".join(lines[start:start + 2]))
    # the first candidate gets the first real row, the others the second; printed last to first,
    # so a result matched by position rather than by its NVTX range would get another's row
    for i in reversed(range(len(tags))):
        print(rows[min(i, 1)].replace("optiml.profile.hn", "optiml.profile." + tags[i]).replace("optiml.profile.hw", "optiml.profile." + tags[i]))
    sys.exit(0)
import pickle
outer = [a.split("optiml.profile.")[1].rstrip("/") for a in args if a.startswith("optiml@optiml.profile.")]
rep = args[args.index("-o") + 1]
d = pathlib.Path(args[args.index("--profile-batch") + 1])
mode = os.environ.get("FAKE_NCU_MODE", "ok")
if mode == "hang":
    time.sleep(600)
time.sleep(float(os.environ.get("FAKE_NCU_STARTUP", "0")))   # ncu and the child's CUDA context starting
while not (d / "jobs.pkl").exists():                          # started ahead: wait for the batch
    if (d / "quit").exists():
        sys.exit(0)
    time.sleep(0.005)
tags = [t for t, _ in pickle.loads((d / "jobs.pkl").read_bytes())]
(d / "ready").write_text("")
while not (d / "go").exists():
    time.sleep(0.005)
(d / "events").write_text(str(time.monotonic()))
if os.environ.get("FAKE_NCU_LOG"):
    with open(os.environ["FAKE_NCU_LOG"], "a") as f:
        f.write(os.environ.get("TMPDIR", "") + "\n")
time.sleep(0.2)                                    # "profiling"
reached = tags[:1] if mode == "fault" else tags
(d / "done.txt").write_text("".join(t + "\n" for t in reached))
if mode == "fault":
    (d / "error.txt").write_text(tags[1] + ": an illegal memory access was encountered")
(d / "finished").write_text("")
pathlib.Path(rep + ".ncu-rep").write_text(" ".join(reached))
'''


def fake_ncu(tmp_path):
    p = tmp_path / "ncu"
    p.write_text(FAKE.format(python=sys.executable, fixture=str(FIXTURE)))
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return str(p)


def jobs(tmp_path, n):
    spec = load(tmp_path)
    kb = KernelBinary("/nonexistent.cubin", "scale", (Launch((1, 1, 1), (1, 1, 1), 0),) * 3)
    return [HarnessJob(spec=spec, candidate=kb, reference=None, cases=(Case(1, i),)) for i in range(n)]


class RecordingLock:
    def __init__(self):
        self.lock, self.held = threading.Lock(), []

    def __enter__(self):
        self.lock.acquire()
        self.held.append([time.monotonic(), None])

    def __exit__(self, *exc):
        self.held[-1][1] = time.monotonic()
        self.lock.release()


def test_each_candidate_gets_the_row_of_its_own_range(tmp_path):
    prof = NcuProfiler(ncu=fake_ncu(tmp_path), cache_dir=tmp_path / "cache")
    lock = RecordingLock()
    results = prof.profile_batch(jobs(tmp_path, 3), "NVIDIA H100 80GB HBM3", gpu_lock=lock)
    assert [r.status for r in results] == [ProfileStatus.OK] * 3
    # the first candidate's row is the naive launch of the real export, the others' the wmma one
    # (their tensor-pipe use differs); the fake prints them in reverse order
    tensor = [r.metrics.get("tensor_pipe_active_pct") for r in results]
    assert tensor[0] != tensor[1] and tensor[1] == tensor[2]
    assert all(r.raw_csv.count("\n") == 3 for r in results)       # names, units, its own row
    assert len(lock.held) == 1 and lock.held[0][1] - lock.held[0][0] >= 0.2
    assert prof.last_batch["jobs"] == 3


def test_the_lock_is_taken_only_once_ncu_and_its_child_are_ready(tmp_path, monkeypatch):
    """ncu and the child's context take 1 s to start here: the lock is held for the profiling
    (0.2 s), not for the start-up."""
    monkeypatch.setenv("FAKE_NCU_STARTUP", "1.0")
    prof = NcuProfiler(ncu=fake_ncu(tmp_path), cache_dir=tmp_path / "cache")
    lock = RecordingLock()
    assert all(r.ok for r in prof.profile_batch(jobs(tmp_path, 2), "gpu", gpu_lock=lock))
    (start, end), = lock.held
    assert 0.2 <= end - start < 0.8


def test_the_gpu_is_not_held_while_ncu_starts(tmp_path, monkeypatch):
    # another user of the GPU holds the lock; the batch's child gets ready meanwhile and waits
    prof = NcuProfiler(ncu=fake_ncu(tmp_path), cache_dir=tmp_path / "cache")
    lock = RecordingLock()
    lock.lock.acquire()
    out = {}
    t = threading.Thread(target=lambda: out.update(r=prof.profile_batch(jobs(tmp_path, 2), "gpu", gpu_lock=lock)))
    t.start()
    time.sleep(1.0)
    assert t.is_alive()
    released = time.monotonic()
    lock.lock.release()
    t.join(30)
    assert [r.status for r in out["r"]] == [ProfileStatus.OK] * 2
    assert lock.held[0][0] >= released


def test_a_candidate_the_batch_did_not_reach_is_replay_failed(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "fault")
    prof = NcuProfiler(ncu=fake_ncu(tmp_path), cache_dir=tmp_path / "cache")
    first, second, third = prof.profile_batch(jobs(tmp_path, 3), "gpu")
    assert first.status is ProfileStatus.OK
    assert second.status is third.status is ProfileStatus.REPLAY_FAILED
    assert "illegal memory access" in second.message


def test_a_hung_batch_is_a_timeout(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "hang")
    prof = NcuProfiler(ncu=fake_ncu(tmp_path), cache_dir=tmp_path / "cache", timeout_s=1.0)
    t0 = time.monotonic()
    results = prof.profile_batch(jobs(tmp_path, 2), "gpu")
    assert [r.status for r in results] == [ProfileStatus.TIMEOUT] * 2
    assert time.monotonic() - t0 < 15


def test_ncu_keeps_its_lock_file_in_a_directory_of_this_user(tmp_path, monkeypatch):
    """ncu serialises its processes through $TMPDIR/nsight-compute-lock: optiml's ncu gets a
    TMPDIR of this user's own (mode 0700), so another user's lock file in /tmp cannot stop it."""
    import os
    import stat
    import tempfile
    from pathlib import Path

    log = tmp_path / "tmpdirs.txt"
    monkeypatch.setenv("FAKE_NCU_LOG", str(log))
    prof = NcuProfiler(ncu=fake_ncu(tmp_path), cache_dir=tmp_path / "cache")
    assert prof.profile_batch(jobs(tmp_path, 1), "gpu")[0].ok
    d = Path(log.read_text().split("\n")[0])
    assert d == Path(tempfile.gettempdir()) / f"optiml-ncu-{os.getuid()}"
    assert d.is_dir() and d.stat().st_uid == os.getuid() and stat.S_IMODE(d.stat().st_mode) == 0o700


def test_the_ncu_lock_directory_is_private_and_never_someone_elses(tmp_path, monkeypatch):
    import os
    import stat
    import tempfile
    from pathlib import Path

    from optiml.profiler.ncu import _private_lock_dir, ncu_env

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    _private_lock_dir.cache_clear()
    mine = tmp_path / f"optiml-ncu-{os.getuid()}"
    mine.mkdir(mode=0o777)
    mine.chmod(0o777)                                  # left world-writable by something else
    assert Path(ncu_env()["TMPDIR"]) == mine and stat.S_IMODE(mine.stat().st_mode) == 0o700
    mine.rmdir()
    (tmp_path / "elsewhere").mkdir()
    mine.symlink_to(tmp_path / "elsewhere")            # a link planted where the directory goes
    d = Path(ncu_env()["TMPDIR"])
    assert d != mine and d.parent == tmp_path and d.name.startswith("optiml-ncu-")
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert Path(ncu_env()["TMPDIR"]) == d              # one private directory per process, not one per ncu


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to make a directory another user owns")
def test_a_lock_directory_another_user_owns_is_not_used(tmp_path, monkeypatch):
    import stat
    import tempfile
    from pathlib import Path

    from optiml.profiler import ncu as ncu_mod

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ncu_mod._private_lock_dir.cache_clear()
    theirs = tmp_path / f"optiml-ncu-{os.getuid()}"
    theirs.mkdir(mode=0o777)
    os.chown(theirs, 65534, 65534)
    d = Path(ncu_mod.ncu_env()["TMPDIR"])
    assert d != theirs and d.stat().st_uid == os.getuid() and stat.S_IMODE(d.stat().st_mode) == 0o700
    assert theirs.stat().st_uid == 65534                # left as it was


def test_with_prestart_the_next_ncu_is_already_up_when_a_batch_comes(tmp_path, monkeypatch):
    """ncu and its child's CUDA context take ~2 s to start: with prestart the next process for
    the device starts while a batch runs, and the next batch goes to it without waiting."""
    monkeypatch.setenv("FAKE_NCU_STARTUP", "1.0")
    prof = NcuProfiler(ncu=fake_ncu(tmp_path), cache_dir=tmp_path / "cache")
    t0 = time.monotonic()
    assert all(r.ok for r in prof.profile_batch(jobs(tmp_path, 2), "gpu", prestart=True))
    first = time.monotonic() - t0
    time.sleep(1.2)                                # the user's other work; the next ncu starts up
    t1 = time.monotonic()
    assert all(r.ok for r in prof.profile_batch(jobs(tmp_path, 2), "gpu", prestart=True))
    second = time.monotonic() - t1
    assert first >= 1.0 and second < first - 0.5
    spare = next(iter(prof._warm.values()))       # the third, started ahead and never used
    assert spare.proc.poll() is None
    prof.close()
    assert spare.proc.poll() == 0 and not spare.dir.exists() and not prof._warm


def test_the_wait_for_jobs_ends_on_quit_or_when_optiml_is_gone(tmp_path):
    """The batch child's wait for its jobs (the child itself needs a GPU to get there):
    ``quit``, or optiml's pid gone, ends it; the jobs arriving ends it with True."""
    import os
    import subprocess

    from optiml.verify.profiled import _wait_for_file

    (tmp_path / "quit").write_text("")
    assert _wait_for_file(tmp_path, "jobs.pkl", os.getpid()) is False
    (tmp_path / "quit").unlink()
    dead = subprocess.Popen(["true"])
    dead.wait()
    t0 = time.monotonic()
    assert _wait_for_file(tmp_path, "jobs.pkl", dead.pid) is False
    assert time.monotonic() - t0 < 5
    (tmp_path / "jobs.pkl").write_text("")
    assert _wait_for_file(tmp_path, "jobs.pkl", os.getpid()) is True
