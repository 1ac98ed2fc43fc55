"""A call the dask cluster does not return (a worker died, the task was lost, the wait ran out) is a
result, never an exception: every job of a profile batch gets an ERROR with the sentence, a sanitizer
job is not_sanitized with it, and the runner's GPU is released either way. The cluster is a FAKE whose
call raises what GpuCluster.call raises; no dask runs here."""
import pytest

import optiml.cluster.gpu_workers as gw
from optiml.cluster import _NotReturned
from optiml.profiler.types import ProfileStatus


class LostCluster:
    """A FAKE GpuCluster: every call ends as the cluster not returning it."""

    def call(self, what, fn, *args, cancel=None):
        raise _NotReturned(f"{what} was lost with its worker")


@pytest.fixture(autouse=True)
def no_files(monkeypatch):
    monkeypatch.setattr(gw, "_files", lambda jobs: {})


def test_a_lost_profile_batch_is_an_error_for_each_of_its_jobs_and_releases_the_gpu():
    released = []
    out = gw.ClusterProfiler(LostCluster()).profile_batch(["job a", "job b"], on_gpu_done=lambda: released.append(1))
    assert [(r.status, r.message) for r in out] == [(ProfileStatus.ERROR, "the profile batch was lost with its worker")] * 2
    assert released == [1]


def test_a_lost_sanitizer_job_is_not_sanitized_with_the_sentence():
    res = gw.ClusterSanitizer(LostCluster()).sanitize("a job")
    assert (res.status, res.message) == ("not_sanitized", "the sanitizer job was lost with its worker")
    assert res.wall_s >= 0
