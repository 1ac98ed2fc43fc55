"""Where a cluster run's GPU jobs land once a worker of another GPU model has refused one: that
worker is offered no job again, the job goes to the run's own model (also to a worker that joins
later), and when only workers of another model are left the job is ``worker_lost`` with one
sentence, never an endless round of refusals.

GpuCluster, ClusterHarness and the worker-side task (optiml.cluster.on_worker: the model check,
the shipped files kept by content) are optiml's own code; the dask client is a FAKE scheduler that
runs each task inline here, as the worker it picks, and the GPU is a FAKE that only says its
model and records the jobs it gets. No cluster is started and none of it is GPU behaviour."""
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("distributed")

import optiml.cluster.on_worker as on_worker  # noqa: E402
from optiml.cluster import ClusterHarness, GpuCluster  # noqa: E402
from optiml.spec import Launch, load_spec  # noqa: E402
from optiml.status import Status  # noqa: E402
from optiml.verify.harness import Case, HarnessJob, HarnessResult, KernelBinary  # noqa: E402
from tests.fakes import FakeFuture  # noqa: E402
from tests.test_spec import KERNEL, SPEC, write  # noqa: E402

H100, A100 = "NVIDIA H100", "NVIDIA A100"
MAX_TASKS = 25          # a call that keeps resubmitting fails the test here instead of hanging it


class Board:
    """What the FAKE scheduler knows: the GPU workers alive now and their models, the worker it
    prefers when it may choose (a worker of another model, to test the refusals), what it sent."""

    def __init__(self, models: dict[str, str]):
        self.models = dict(models)
        self.prefer: str | None = None
        self.current: str | None = None          # the worker running the task now
        self.sent: list[tuple[str, list | None, str]] = []    # (task, workers offered, worker that ran it)
        self.ran: list[tuple[str, HarnessJob]] = []           # (worker, the job as the fake GPU got it)


@dataclass(frozen=True)
class FakeGpuRecipe:
    """The FAKE recipe of a worker's GPU machinery (in the place of LocalGpu)."""
    board: Board

    def make(self):
        return FakeGpuHere(self.board)


class FakeGpuHere:
    def __init__(self, board: Board):
        self.board = board

    def facts(self) -> dict:
        return {"name": self.board.models[self.board.current], "arch": "sm_90", "driver": "0.0"}

    def run(self, job):
        self.board.ran.append((self.board.current, job))
        return HarnessResult("ok", device_name=self.facts()["name"])

    def close(self):
        pass


class FakeScheduler:
    """A FAKE dask client: each task runs at once, here, as the worker the scheduler picks among
    those offered (its preferred one when offered, else the first)."""

    def __init__(self, board: Board):
        self.board = board

    def scheduler_info(self, n_workers=-1):
        return {"workers": {a: {"resources": {"GPU": 1}} for a in self.board.models}}

    def submit(self, fn, *args, key=None, pure=None, resources=None, workers=None):
        b = self.board
        if len(b.sent) >= MAX_TASKS:
            raise AssertionError(f"more than {MAX_TASKS} tasks sent: the call keeps going to {b.sent[-3:]}")
        allowed = [a for a in b.models if workers is None or a in workers]
        assert allowed, f"no worker alive among {workers}: the task would wait for ever"
        b.current = b.prefer if b.prefer in allowed else allowed[0]
        b.sent.append((fn.__name__, None if workers is None else list(workers), b.current))
        return FakeFuture(fn(*args))


@pytest.fixture
def board(monkeypatch):
    b = Board({"tcp://w1": H100, "tcp://w3": H100})
    monkeypatch.setattr(on_worker, "_worker_address", lambda: b.current)
    return b


def job_of(tmp_path, block: int) -> HarnessJob:
    kernel, spec_file = write(tmp_path, SPEC, KERNEL)
    spec = load_spec(spec_file, kernel)
    cubin = tmp_path / f"k{block}.cubin"
    cubin.write_bytes(f"FAKE CUBIN BLOCK {block}".encode())
    binary = KernelBinary(str(cubin), "scale", (Launch((8, 1, 1), (block, 1, 1), 0),) * len(spec.all_size_sets),
                          {"BLOCK": block})
    return HarnessJob(spec=spec, candidate=binary, reference=None, cases=(Case(1, 1),), device=3)


def runs(board) -> list[tuple[list | None, str]]:
    return [(offered, worker) for task, offered, worker in board.sent if task == "_remote_gpu_run"]


def test_a_worker_of_another_model_that_joins_later_refuses_once_and_is_offered_nothing_after(board, tmp_path):
    with GpuCluster(FakeScheduler(board), FakeGpuRecipe(board), find_s=1) as gpus:
        assert (gpus.name, sorted(gpus.workers)) == (H100, ["tcp://w1", "tcp://w3"])
        board.models["tcp://w2"] = A100          # joins after the run started; the scheduler favours it
        board.prefer = "tcp://w2"
        harness = ClusterHarness(gpus)
        results = [harness.run(job_of(tmp_path, b)) for b in (32, 64, 128)]
    assert [r.status for r in results] == ["ok"] * 3 and {r.device_name for r in results} == {H100}
    assert {worker for worker, _ in board.ran} <= {"tcp://w1", "tcp://w3"} and len(board.ran) == 3
    # refused once (offered anywhere), then only the run's model is offered a job
    assert runs(board) == [(None, "tcp://w2")] + [(["tcp://w1", "tcp://w3"], "tcp://w1")] * 3
    assert gpus.excluded == {"tcp://w2": "dask worker tcp://w2 has a NVIDIA A100, not the run's NVIDIA H100; its "
                                         "timings would not compare, so it is left out of this run."}


def test_a_job_reaches_the_fake_gpu_with_its_cubin_kept_on_the_worker_and_on_its_first_gpu(board, tmp_path):
    with GpuCluster(FakeScheduler(board), FakeGpuRecipe(board), find_s=1) as gpus:
        result = ClusterHarness(gpus).run(job_of(tmp_path, 64))
    assert result.status == "ok"
    [(worker, job)] = board.ran
    sent = tmp_path / "k64.cubin"
    assert job.device == 0 and job.candidate.cubin_path != str(sent)
    assert Path(job.candidate.cubin_path).read_bytes() == sent.read_bytes()


def test_a_worker_of_the_runs_model_that_joins_later_takes_jobs_beside_the_others(board, tmp_path):
    with GpuCluster(FakeScheduler(board), FakeGpuRecipe(board), find_s=1) as gpus:
        board.models["tcp://w2"] = A100
        board.prefer = "tcp://w2"
        harness = ClusterHarness(gpus)
        assert harness.run(job_of(tmp_path, 32)).status == "ok"       # w2 refuses, it is left out
        board.models["tcp://w4"] = H100
        board.prefer = "tcp://w4"
        assert harness.run(job_of(tmp_path, 64)).status == "ok"
    assert runs(board)[-1] == (["tcp://w1", "tcp://w3", "tcp://w4"], "tcp://w4")
    assert [w for w, _ in board.ran] == ["tcp://w1", "tcp://w4"]


def test_when_only_workers_of_another_model_are_left_the_job_is_worker_lost_in_one_sentence(board, tmp_path):
    with GpuCluster(FakeScheduler(board), FakeGpuRecipe(board), find_s=1) as gpus:
        board.models = {"tcp://w2": A100}        # the run's workers left, one of another model came
        result = ClusterHarness(gpus).run(job_of(tmp_path, 32))
    assert result.status == Status.WORKER_LOST
    assert result.message == "no GPU worker with a NVIDIA H100 is left in the dask cluster."
    assert board.ran == [] and runs(board) == [(None, "tcp://w2")]      # asked once, never again


def test_a_job_whose_files_cannot_be_read_is_not_sent_and_says_which_file(tmp_path):
    """The cubin a job names is gone (a cache cleaned under the run, say): the GPU job is a
    harness_error, each profile of the batch an error, the sanitizer's verdict not_sanitized, each
    naming the file; nothing is sent to the cluster."""
    from types import SimpleNamespace

    from optiml.cluster import ClusterProfiler, ClusterSanitizer
    from optiml.profiler.types import ProfileStatus

    def no_call(*a, **kw):
        raise AssertionError("sent to the cluster")

    gpus = SimpleNamespace(timeout_s=30.0, call=no_call)
    kernel, spec_file = write(tmp_path, SPEC, KERNEL)
    spec = load_spec(spec_file, kernel)
    gone = tmp_path / "gone.cubin"
    job = HarnessJob(spec=spec, candidate=KernelBinary(str(gone), "scale", (Launch((8, 1, 1), (128, 1, 1), 0),) * 3,
                                                       {"BLOCK": 128}), reference=None, cases=(Case(1, 1),))
    r = ClusterHarness(gpus).run(job)
    assert r.status == Status.HARNESS_ERROR
    assert r.message == f"could not read {gone} to send it to the dask cluster (No such file or directory)."
    done = []
    profiles = ClusterProfiler(gpus).profile_batch([job, job], on_gpu_done=lambda: done.append(1))
    assert [p.status for p in profiles] == [ProfileStatus.ERROR] * 2 and done == [1]
    assert profiles[0].message == f"could not read {gone} to send it to the dask cluster (No such file or directory)"
    s = ClusterSanitizer(gpus).sanitize(job)
    assert (s.status, s.message) == ("not_sanitized", f"could not read {gone} to send it to the dask cluster")
