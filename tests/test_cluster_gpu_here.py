"""A GPU worker's machinery (optiml.cluster.on_worker.GpuHere) hands each job to the persistent GPU
child made for that worker, and makes ncu's and compute-sanitizer's runners once, on first use.
The child, the profiler and the sanitizer are FAKES that record what they are given; none of this
is GPU behaviour (tests/gpu runs the real ones)."""
import optiml.profiler.ncu as ncu
import optiml.verify.sanitizer as sanitizer
import optiml.verify.worker_client as worker_client
from optiml.cluster.on_worker import GpuHere, LocalGpu


class Recorder:
    """A FAKE for one of the worker's tools: records how it was made and every call."""
    made: list = []

    def __init__(self, *args, **kw):
        self.calls = []
        self.closed = False
        Recorder.made.append((type(self).__name__, args, kw))

    def run(self, job):
        self.calls.append(("run", job))
        return ("result of", job)

    def profile_batch(self, jobs, device_name):
        self.calls.append(("profile", tuple(jobs), device_name))
        return [("profile of", j) for j in jobs]

    def sanitize(self, job):
        self.calls.append(("sanitize", job))
        return ("sanitized", job)

    def close(self):
        self.closed = True


class FakeChild(Recorder):
    pass


class FakeNcu(Recorder):
    pass


class FakeSanitizer(Recorder):
    pass


def test_jobs_go_to_the_workers_child_and_the_tools_are_made_once(monkeypatch):
    Recorder.made = []
    monkeypatch.setattr(worker_client, "WorkerHarness", FakeChild)
    monkeypatch.setattr(ncu, "NcuProfiler", FakeNcu)
    monkeypatch.setattr(sanitizer, "Sanitizer", FakeSanitizer)
    here = LocalGpu(timeout_s=42.0, python="/opt/py").make()
    assert isinstance(here, GpuHere)
    assert Recorder.made == [("FakeChild", (0,), {"timeout_s": 42.0, "python": "/opt/py"})]   # GPU 0 of the worker
    assert here.run("job-a") == ("result of", "job-a") and here.run("job-b") == ("result of", "job-b")
    assert here.profile_batch(["p1", "p2"], "NVIDIA H200") == [("profile of", "p1"), ("profile of", "p2")]
    assert here.profile_batch(["p3"], "NVIDIA H200") == [("profile of", "p3")]
    assert here.sanitize("s1") == ("sanitized", "s1") and here.sanitize("s2") == ("sanitized", "s2")
    assert [m[0] for m in Recorder.made] == ["FakeChild", "FakeNcu", "FakeSanitizer"]       # each made once
    assert Recorder.made[1][2].get("python") == "/opt/py"
    assert [c[0] for c in here.harness.calls] == ["run", "run"]
    assert [c[1] for c in here._profiler.calls] == [("p1", "p2"), ("p3",)]
    here.close()
    assert here.harness.closed and here._profiler.closed
