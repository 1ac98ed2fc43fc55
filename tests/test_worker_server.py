"""The persistent GPU worker's parent side (optiml.verify.worker_client.WorkerHarness), exercised with
fake children (bash scripts standing in for `python -m optiml.verify.worker --serve DIR FD DEV`):
one child serves many jobs; a job that hangs, kills its child or floods the log costs that job
alone, and the next job gets a fresh child."""
import importlib.util
import stat
from pathlib import Path

import pytest

from optiml.verify.worker_client import WorkerHarness
from tests.test_harness_parent import job  # noqa: F401  (the same fixture: a job no GPU ever sees)

# $4 = work dir, $5 = control fd; each line on stdin is a job number
SERVE = '''#!/bin/bash
dir="$4"; fd="$5"
while read n; do
  echo "job $n" >> "$dir/seen"
  %s
  echo '{"status": "ok", "message": "job '"$n"'"}' > "$dir/result-$n.json"
  echo "done $n" >&"$fd"
done
'''


def fake_python(tmp_path: Path, per_job: str = ":") -> str:
    p = tmp_path / "fake-python"
    p.write_text(SERVE % per_job)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return str(p)


def test_one_child_serves_many_jobs(tmp_path, job):
    with WorkerHarness(python=fake_python(tmp_path), timeout_s=30) as h:
        results = [h.run(job) for _ in range(5)]
        assert [r.status for r in results] == ["ok"] * 5
        assert [r.message for r in results] == [f"job {n}" for n in range(1, 6)]
        assert h.starts == 1


def test_a_hanging_job_is_killed_and_the_next_gets_a_fresh_child(tmp_path, job):
    py = fake_python(tmp_path, 'if [ "$n" = 2 ]; then echo "timing: warm-up" > "$dir/stage.txt"; echo spinning; sleep 600; fi')
    with WorkerHarness(python=py, timeout_s=1.0) as h:
        first, second, third = h.run(job), h.run(job), h.run(job)
        assert first.status == "ok" and third.status == "ok"
        assert second.status == "timeout" and "1 s" in second.message and "timing: warm-up" in second.message
        assert "spinning" in second.log_tail and "spinning" not in third.log_tail
        assert second.wall_s < 20
        assert h.starts == 2


def test_a_child_that_dies_is_a_runtime_error_with_its_stage(tmp_path, job):
    py = fake_python(tmp_path, 'if [ "$n" = 1 ]; then echo "candidate at sizes {N: 77}" > "$dir/stage.txt"; echo boom >&2; kill -SEGV $$; fi')
    with WorkerHarness(python=py, timeout_s=30) as h:
        died, after = h.run(job), h.run(job)
        assert died.status == "runtime_error" and "SIGSEGV" in died.message and "candidate at sizes" in died.message
        assert "boom" in died.log_tail
        assert after.status == "ok" and h.starts == 2


def test_a_child_flooding_the_log_is_stopped(tmp_path, job):
    py = fake_python(tmp_path, 'if [ "$n" = 1 ]; then yes "still printing"; fi')
    with WorkerHarness(python=py, timeout_s=60, log_limit=2 << 20) as h:
        flooded = h.run(job)
        assert flooded.status == "runtime_error" and "printed more than 2 MiB" in flooded.message
        assert flooded.wall_s < 20 and len(flooded.log_tail) < 10_000
        assert h.run(job).status == "ok"


def test_a_job_for_another_device_is_a_bug(tmp_path, job):
    from dataclasses import replace

    with WorkerHarness(device=0, python=fake_python(tmp_path), timeout_s=30) as h:
        with pytest.raises(ValueError):
            h.run(replace(job, device=1))


@pytest.mark.skipif(importlib.util.find_spec("pycuda") is not None, reason="pycuda is installed here")
def test_real_worker_without_pycuda_reports_it_and_restarts(job):
    with WorkerHarness(timeout_s=60) as h:
        a, b = h.run(job), h.run(job)
        assert a.status == b.status == "harness_error" and "pycuda is not installed" in a.message
        assert h.starts == 2           # a harness error is a fault: the child left, a new one came


# ------------------------------------------------------------------ lending the GPU while on the host

LEND = ('echo host >&"$fd"; echo "host $n" >> "$dir/seen"; sleep 0.4; echo gpu >&"$fd"; read go; '
        'echo "$go $n $(date +%s.%N)" >> "$dir/seen"')


def test_the_gpu_is_lent_while_the_job_is_on_the_host(tmp_path, job):
    """The caller holds the device lock around run(); while the child says it is on the host,
    another thread (a profiled batch) gets the lock, and the child goes on only after it is
    given back."""
    import threading
    import time

    from optiml.runner import FairLock

    lock = FairLock()
    events = []

    def other():
        time.sleep(0.1)                   # the job has started and holds the lock
        with lock:
            events.append(("other in", time.time()))
            time.sleep(0.6)               # longer than the child's host phase
            events.append(("other out", time.time()))

    with WorkerHarness(python=fake_python(tmp_path, LEND), timeout_s=30) as h:
        t = threading.Thread(target=other)
        with lock:
            t.start()
            r = h.run(job, lend=lock)
            events.append(("job done", time.time()))
        t.join()
        seen = (h.dir / "seen").read_text().split("\n")
    assert r.status == "ok"
    assert [e[0] for e in events] == ["other in", "other out", "job done"]
    go = [ln.split() for ln in seen if ln.startswith("go 1 ")]
    assert go, seen                       # the child was told to go on...
    assert float(go[0][2]) >= events[1][1] - 0.005   # ...only once the other thread gave the GPU back
    assert lock.held_s > 0


def test_without_a_lock_the_child_is_told_to_go_on_at_once(tmp_path, job):
    with WorkerHarness(python=fake_python(tmp_path, LEND), timeout_s=30) as h:
        assert [h.run(job).status for _ in range(2)] == ["ok", "ok"]
        assert "go 2" in (h.dir / "seen").read_text()


@pytest.mark.parametrize("after_host,status", [("sleep 600", "timeout"), ("kill -SEGV $$", "runtime_error")])
def test_a_job_that_fails_while_lent_returns_with_the_lock_held_again(tmp_path, job, after_host, status):
    import threading

    from optiml.runner import FairLock

    lock = FairLock()
    py = fake_python(tmp_path, f'if [ "$n" = 1 ]; then echo host >&"$fd"; {after_host}; fi')
    with WorkerHarness(python=py, timeout_s=1.0) as h:
        with lock:
            r = h.run(job, lend=lock)
            got = []                       # held again: another thread cannot enter until we leave
            t = threading.Thread(target=lambda: (lock.__enter__(), got.append(1), lock.__exit__(None, None, None)))
            t.start()
            t.join(timeout=0.3)
            assert not got
        t.join(timeout=5)
        assert got == [1]
        assert r.status == status
        assert h.run(job).status == "ok"   # a fresh child


def test_stage_off_gpu_speaks_the_protocol():
    import io

    from optiml.verify.gpu import Stage

    ctrl = io.StringIO()
    st = Stage(Path("/dev/null"), ctrl=ctrl, stdin=io.StringIO("go\n"))
    with st.off_gpu():
        ctrl.write("working\n")
    assert ctrl.getvalue() == "host\nworking\ngpu\n"
    assert "waiting_for_gpu" in st.phases
    st = Stage(Path("/dev/null"), ctrl=io.StringIO(), stdin=io.StringIO(""))   # the parent closed stdin
    with pytest.raises(SystemExit):
        with st.off_gpu():
            pass
    plain = Stage(Path("/dev/null"))        # a one-job child: nothing to say
    with plain.off_gpu():
        pass
