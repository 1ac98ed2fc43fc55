"""The persistent GPU worker's parent side over a child's life, with fake children (bash scripts
standing in for `python -m optiml.verify.worker --serve DIR FD DEV`): start() starts one child
and no more while it lives, close() lets the child leave on its own (its stdin closed), each job's
output is its own, and while a job is lent the GPU its timeout counts the child's time only: not
the wait for the GPU, and again once the GPU is back."""
import stat
import sys
import threading
import time
from pathlib import Path

from optiml.runner import FairLock
from optiml.verify.worker_client import WorkerHarness
from tests.test_harness_parent import job  # noqa: F401  (the same fixture: a job no GPU ever sees)

# $4 = work dir, $5 = control fd; each line on stdin is a job number; %(after)s runs once stdin closes
SERVE = '''#!/bin/bash
dir="$4"; fd="$5"
echo "started $$" >> "%(seen)s"
while read n; do
  %(per_job)s
  echo '{"status": "ok", "message": "job '"$n"'"}' > "$dir/result-$n.json"
  echo "done $n" >&"$fd"
done
echo "left on its own $$" >> "%(seen)s"
'''


class FakeServingChild:
    """An executable standing in for the interpreter of the serving child; what it did goes to ``seen``."""

    def __init__(self, tmp_path: Path, per_job: str = ":"):
        self.seen = tmp_path / "seen"
        self.path = tmp_path / "fake-python"
        self.path.write_text(SERVE % {"seen": self.seen, "per_job": per_job})
        self.path.chmod(self.path.stat().st_mode | stat.S_IEXEC)

    def lines(self) -> list[str]:
        return self.seen.read_text().splitlines() if self.seen.exists() else []


def _wait_for(predicate, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_start_starts_one_child_while_it_lives(tmp_path):
    child = FakeServingChild(tmp_path)
    h = WorkerHarness(python=str(child.path), timeout_s=30)
    try:
        h.start()
        h.start()
        assert h.starts == 1
        assert _wait_for(lambda: len(child.lines()) == 1)
        assert [ln.split()[0] for ln in child.lines()] == ["started"]
    finally:
        h.close()


def test_close_lets_the_child_leave_on_its_own(tmp_path, job):
    child = FakeServingChild(tmp_path)
    h = WorkerHarness(python=str(child.path), timeout_s=30)
    assert h.run(job).status == "ok"
    h.close()
    pid = child.lines()[0].split()[1]
    assert f"left on its own {pid}" in child.lines()        # it saw its stdin close: not killed
    assert not h.dir.exists()


def test_close_kills_a_child_that_does_not_leave_when_its_stdin_closes(tmp_path, job, monkeypatch):
    """A child stuck after its job (it never reads stdin again) is killed by close(), its whole group,
    once the wait for it to leave on its own is over."""
    import optiml.verify.worker_client as worker_client

    monkeypatch.setattr(worker_client, "CLOSE_WAIT_S", 0.5)
    child = FakeServingChild(tmp_path, per_job='echo \'{"status": "ok"}\' > "$dir/result-$n.json"; '
                                               'echo "done $n" >&"$fd"; exec sleep 600')
    h = WorkerHarness(python=str(child.path), timeout_s=30)
    assert h.run(job).status == "ok"
    proc = h._proc
    t0 = time.monotonic()
    h.close()
    assert proc.poll() is not None and time.monotonic() - t0 < 10      # not the sleep's 600 s
    assert not any(ln.startswith("left on its own") for ln in child.lines())


def test_close_of_a_child_that_already_left_and_of_none_is_quiet(tmp_path, job):
    child = FakeServingChild(tmp_path, per_job='exit 0')
    h = WorkerHarness(python=str(child.path), timeout_s=30)
    assert h.run(job).status == "runtime_error"           # it left without answering
    h.close()
    WorkerHarness(python=str(child.path), timeout_s=30).close()   # never started


def test_each_jobs_output_is_its_own_with_no_omission_note(tmp_path, job):
    child = FakeServingChild(tmp_path, per_job='echo "output of job $n"')
    with WorkerHarness(python=str(child.path), timeout_s=30) as h:
        first, second = h.run(job), h.run(job)
    assert first.log_tail == "output of job 1\n"
    assert second.log_tail == "output of job 2\n"


# the child says it is on the host, then that it needs the GPU again, and waits to be told to go on
LENT = 'echo host >&"$fd"; echo gpu >&"$fd"; read go'


def _lock_taken_by_another_thread_for(lock: FairLock, seconds: float) -> threading.Thread:
    def other():
        with lock:
            time.sleep(seconds)

    return threading.Thread(target=other)


def test_waiting_for_the_lent_gpu_does_not_count_against_the_timeout(tmp_path, job):
    lock = FairLock()
    child = FakeServingChild(tmp_path, per_job=LENT)
    with WorkerHarness(python=str(child.path), timeout_s=1.0) as h:
        with lock:
            t = _lock_taken_by_another_thread_for(lock, 1.5)   # longer than the job's timeout
            t.start()
            time.sleep(0.1)                                    # it waits for the lock the job holds
            r = h.run(job, lend=lock)
        t.join()
    assert r.status == "ok", r.message
    assert r.wall_s >= 1.4


def test_a_job_that_hangs_once_the_gpu_is_back_still_times_out(tmp_path, job):
    lock = FairLock()
    child = FakeServingChild(tmp_path, per_job=LENT + '; if [ "$n" = 1 ]; then sleep 5; fi')
    with WorkerHarness(python=str(child.path), timeout_s=1.0) as h:
        with lock:
            r = h.run(job, lend=lock)
        assert r.status == "timeout" and "1 s" in r.message
        assert r.wall_s < 4
        assert h.run(job).status == "ok"                       # a fresh child for the next job
        assert h.starts == 2


def test_a_worker_without_an_interpreter_runs_this_one():
    h = WorkerHarness(python=None)
    try:
        assert h.python == sys.executable
    finally:
        h.close()


def test_a_result_keeps_the_stage_the_child_named_else_the_last_stage_it_reached(tmp_path, job):
    """The child notes each stage it enters in stage.txt; a result without a stage of its own (a
    timeout, a crash) is given that last one, and one that names its stage keeps it."""
    per_job = ('echo "timing" > "$dir/stage.txt"; if [ "$n" = 2 ]; then '
               'echo \'{"status": "wrong_output", "message": "m", "stage": "verify"}\' > "$dir/result-$n.json"; '
               'echo "done $n" >&"$fd"; continue; fi')
    child = FakeServingChild(tmp_path, per_job=per_job)
    with WorkerHarness(python=str(child.path), timeout_s=10.0) as h:
        first, second = h.run(job), h.run(job)
    assert (first.status, first.stage) == ("ok", "timing")
    assert (second.status, second.stage) == ("wrong_output", "verify")
