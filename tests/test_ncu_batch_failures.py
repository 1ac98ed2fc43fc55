"""profile_batch when ncu fails before the batch child reaches a candidate, with a FAKE ncu (a
Python script standing in for ncu) that refuses the performance counters, as a real ncu does
without profiling permission; and the wait for the child's files ending at the deadline, with a
FAKE clock standing still."""
import stat
import sys
from types import SimpleNamespace

import optiml.profiler.ncu as ncu_module
from optiml.profiler.ncu import NcuProfiler
from optiml.profiler.types import ProfileStatus
from tests.test_ncu_batch import jobs

REFUSING = r'''#!{python}
import sys
args = sys.argv[1:]
if args[:1] == ["--version"]:
    print("Version 2025.3.1.0"); sys.exit(0)
if args[:1] == ["--query-metrics"]:
    sys.exit(0)
print("==PROF== Connected to process 4242 (python)")
print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
      "Counters on the target device 0.")
sys.exit(1)
'''


def test_a_batch_refused_by_ncu_gives_each_candidate_the_reason(tmp_path):
    """ncu exits before the child writes a ready file or any done.txt: each candidate gets the
    permission_denied status with ncu's reason in one sentence (no exception)."""
    fake = tmp_path / "ncu"
    fake.write_text(REFUSING.format(python=sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    prof = NcuProfiler(ncu=str(fake), cache_dir=tmp_path / "cache", timeout_s=30.0)
    results = prof.profile_batch(jobs(tmp_path, 2), "NVIDIA H100 80GB HBM3")
    assert [r.status for r in results] == [ProfileStatus.PERMISSION_DENIED] * 2
    assert all("ERR_NVGPUCTRPERM" in r.message for r in results)


class _Running:
    """A fake ncu process that has not exited."""

    def poll(self):
        return None


def test_no_waiting_once_the_clock_reads_the_deadline(tmp_path, monkeypatch):
    """The wait for the child's ready/finished file ends (False) as soon as the clock reaches the
    deadline, without sleeping once more; before the deadline it waits until the file appears."""
    path = tmp_path / "ready"
    sleeps = []

    def fake_sleep(s):
        sleeps.append(s)
        path.write_text("")         # the file appears only after another sleep

    monkeypatch.setattr(ncu_module, "time", SimpleNamespace(monotonic=lambda: 100.0, sleep=fake_sleep))
    assert ncu_module._wait_for(path, _Running(), deadline=100.0) is False
    assert sleeps == [] and not path.exists()
    assert ncu_module._wait_for(path, _Running(), deadline=100.5) is True
    assert len(sleeps) == 1
