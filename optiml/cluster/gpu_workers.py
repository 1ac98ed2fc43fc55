"""The parent's side of a cluster evaluation: a run's GPU workers on a dask cluster.

:class:`GpuCluster` finds the cluster's GPU workers (those with a ``GPU`` resource), refuses a
cluster whose GPUs are of different models (one sentence: timings of two models are never
compared in one run), and gives the runner what it evaluates with, each a protocol it already
knows: a :class:`ClusterHarness` per slot (verify and time), a :class:`ClusterProfiler` and a
:class:`ClusterSanitizer`, each job one task on a GPU worker, where the worker's own persistent GPU
child, ncu and compute-sanitizer run it (:mod:`optiml.cluster.on_worker`). The builds go to the
cluster through a :class:`~optiml.cluster.DaskBuilder` on the same client.

The runner sees ``slots`` as its devices: two per GPU worker, so that a worker has its next job
waiting while it runs one; the scheduler gives each task to a free GPU worker. The final timing is
one job with its baseline and rivals, so it runs on one worker.

A worker that dies with a task is dask's to retry: the scheduler sends the task to another worker
until it has lost ``distributed.scheduler.allowed-failures`` workers with it (start the scheduler
with 1: re-queued once); then the candidate is ``worker_lost``, which the search does not score.
A worker that joins later with another GPU model refuses the jobs it is sent; it is left out from
then on (a warning says so) and the job goes to the others.
"""
from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

from loguru import logger

from .. import __version__
from ..errors import EnvironmentProblem
from ..profiler.types import ProfileResult, ProfileStatus
from ..status import Status
from ..verify.harness import DEFAULT_TIMEOUT_S as HARNESS_TIMEOUT_S
from ..verify.harness import HarnessBase, HarnessJob, HarnessResult
from ..verify.sanitizer import SanitizeResult
from . import CONNECT_TIMEOUT_S, DaskBuilder, _job_files, _NotReturned, _OnCluster
from .on_worker import LocalGpu, _remote_gpu_facts, _remote_gpu_profile, _remote_gpu_run, _remote_gpu_sanitize

GPU = {"GPU": 1}
SLOTS_PER_WORKER = 2


class GpuCluster(_OnCluster):
    """A run's GPU workers on the dask cluster at ``client`` (a Client, or an address: then owned).

    ``how`` is the recipe each worker makes its GPU machinery from (default :class:`LocalGpu` with
    ``timeout_s``, the GPU child's limit per job); ``wait_s`` bounds the wait for a job's result,
    queueing included (None: no bound); ``find_s`` how long to wait for a first GPU worker.
    Raises :class:`EnvironmentProblem` when no GPU worker answers, one runs another optiml, or
    their GPUs are of different models."""

    def __init__(self, client: Any, how=None, *, timeout_s: float = HARNESS_TIMEOUT_S,
                 resources: dict[str, float] | None = None, wait_s: float | None = None,
                 find_s: float = CONNECT_TIMEOUT_S):
        super().__init__(client, resources or GPU, wait_s)
        self.how = how if how is not None else LocalGpu(timeout_s)
        self.timeout_s = timeout_s
        self.excluded: dict[str, str] = {}      # worker -> why it is left out (another GPU model)
        self._lock = threading.Lock()
        try:
            self.workers = self._probe(find_s)      # worker -> its facts (name, arch, driver, host)
        except BaseException:
            self.close()
            raise
        first = next(iter(self.workers.values()))
        self.name, self.arch, self.driver = first["name"], first["arch"], first["driver"]
        self.slots = list(range(SLOTS_PER_WORKER * len(self.workers)))
        logger.info("dask cluster: {} GPU worker(s), {} on {} host(s)", len(self.workers), self.name,
                    len({f["host"] for f in self.workers.values()}))

    @classmethod
    def connect(cls, address: str, **kw) -> "GpuCluster":
        return cls(address, **kw)

    # -- the workers ---------------------------------------------------------------------------------
    def gpu_workers(self) -> list[str]:
        """The addresses of the cluster's workers with the GPU resource, now."""
        info = self.client.scheduler_info(n_workers=-1)["workers"]
        return [a for a, w in info.items()
                if all((w.get("resources") or {}).get(k, 0) >= v for k, v in self.resources.items())]

    def _probe(self, find_s: float) -> dict[str, dict]:
        deadline = time.monotonic() + find_s
        while not (found := self.gpu_workers()):
            if time.monotonic() >= deadline:
                raise EnvironmentProblem(
                    f"the dask cluster has no worker with a GPU resource ({', '.join(self.resources)}); start one "
                    f"per GPU with: dask worker SCHEDULER --nthreads 1 --resources GPU=1.")
            time.sleep(0.2)
        futures = {a: self.client.submit(_remote_gpu_facts, self.how, key=f"optiml_gpu_facts-{uuid.uuid4().hex}",
                                         pure=False, resources=self.resources, workers=[a]) for a in found}
        facts = {}
        for address, fut in futures.items():
            try:
                facts[address] = fut.result(timeout=find_s)
            except (TimeoutError, *self._lost_errors) as e:
                fut.cancel()
                logger.warning("GPU worker {} did not answer ({}: {}); it takes no jobs of this run", address,
                               type(e).__name__, e)
                self.excluded[address] = "it did not answer when the run started"
        if not facts:
            raise EnvironmentProblem(f"no GPU worker of the dask cluster answered within {find_s:g} s.")
        versions = {f["optiml"] for f in facts.values()}
        if versions != {__version__}:
            raise EnvironmentProblem(f"the dask GPU workers run optiml {', '.join(sorted(versions))} but this is optiml "
                                     f"{__version__}; install the same version on both.")
        models: dict[str, list[str]] = {}
        for address, f in facts.items():
            models.setdefault(f["name"], []).append(address)
        if len(models) > 1:
            which = "; ".join(f"{name} on {', '.join(sorted(ws))}" for name, ws in sorted(models.items()))
            raise EnvironmentProblem(f"the dask cluster's GPU workers have GPUs of different models ({which}); their "
                                     f"timings would not compare in one run, so give it workers of one model.")
        return facts

    def _allowed(self) -> list[str] | None:
        """Where the run's GPU jobs may go: anywhere with the resource (None), or once a worker is
        left out, the others alive now."""
        with self._lock:
            if not self.excluded:
                return None
            excluded = set(self.excluded)
        live = [a for a in self.gpu_workers() if a not in excluded]
        if not live:
            raise _NotReturned(f"no GPU worker with a {self.name} is left in the dask cluster")
        return live

    def call(self, what: str, fn, *args, cancel=None) -> dict:
        """``fn(how, name, *args)`` on a GPU worker of the run's model; a worker that refuses it
        (another model) is left out and the call goes to another; :class:`_NotReturned` when the
        cluster did not return it."""
        while True:
            value = self._call(what, fn, self.how, self.name, *args, workers=self._allowed(), cancel=cancel)
            if "refused" not in value:
                return value
            with self._lock:
                new = value["worker"] not in self.excluded
                self.excluded[value["worker"]] = value["refused"]
            if new:
                logger.warning("{}", value["refused"])

    # -- what the runner evaluates with ------------------------------------------------------------
    def harness(self, slot: int = 0) -> "ClusterHarness":
        return ClusterHarness(self)

    def profiler(self) -> "ClusterProfiler":
        return ClusterProfiler(self)

    def sanitizer(self) -> "ClusterSanitizer":
        return ClusterSanitizer(self)

    def builder(self, arch: str, cache_dir: Path | None = None, **kw) -> DaskBuilder:
        """nvcc on the cluster's workers, over this client."""
        return DaskBuilder(self.client, arch, cache_dir, **kw)


def _files(jobs: list[HarnessJob]) -> dict[str, bytes]:
    """The bytes of every file the jobs read, by their path here (OSError when one cannot be read)."""
    paths = dict.fromkeys(p for job in jobs for p in _job_files(job))
    return {p: Path(p).read_bytes() for p in paths}


class ClusterHarness(HarnessBase):
    """The :class:`~optiml.verify.harness.Harness` protocol over a run's GPU workers: each job one
    task, verified and timed in the worker's persistent GPU child. A job the cluster lost (its
    workers died, or the wait ran out) is ``worker_lost``."""

    def __init__(self, gpus: GpuCluster):
        self.gpus = gpus
        self.timeout_s = gpus.timeout_s

    def run(self, job: HarnessJob, lend=None) -> HarnessResult:
        t0 = time.perf_counter()
        try:
            files = _files([job])
        except OSError as e:
            return HarnessResult(Status.HARNESS_ERROR, f"could not read {e.filename} to send it to the dask cluster "
                                                       f"({e.strerror or e}).")
        try:
            value = self.gpus.call("the GPU job", _remote_gpu_run, job, files)
        except _NotReturned as e:
            logger.warning("dask GPU job: {}", e)
            return HarnessResult(Status.WORKER_LOST, f"{e}.", wall_s=time.perf_counter() - t0)
        result = HarnessResult.from_dict(value["result"])
        result.wall_s = time.perf_counter() - t0
        logger.debug("GPU job on {}: {} in {:.2f} s", value["worker"], result.status, result.wall_s)
        return result


class ClusterProfiler:
    """The :class:`~optiml.profiler.types.Profiler` protocol over a run's GPU workers: a batch is
    one task, profiled under the worker's host's ncu (one at a time per host). The device lock
    and prestart are the local runner's: on the cluster the worker and its host's lock order the
    work."""

    def __init__(self, gpus: GpuCluster):
        self.gpus = gpus

    def profile_batch(self, jobs: list, device_name: str = "", gpu_lock=None, on_gpu_done=None,
                      prestart: bool = False) -> list[ProfileResult]:
        if not jobs:
            return []
        try:
            try:
                files = _files(jobs)
            except OSError as e:
                return [ProfileResult.failure(ProfileStatus.ERROR, f"could not read {e.filename} to send it to the "
                                                                   f"dask cluster ({e.strerror or e})")] * len(jobs)
            try:
                value = self.gpus.call("the profile batch", _remote_gpu_profile, jobs, files, device_name)
            except _NotReturned as e:
                logger.warning("dask profile batch: {}", e)
                return [ProfileResult.failure(ProfileStatus.ERROR, str(e))] * len(jobs)
        finally:
            if on_gpu_done is not None:
                on_gpu_done()
        logger.debug("profile batch of {} on {} ({})", len(jobs), value["worker"], value["host"])
        return list(value["results"])

    def close(self) -> None:
        pass


class ClusterSanitizer:
    """The runner's sanitizer (``sanitize(job, gpu_lock, cancel)``) over a run's GPU workers:
    compute-sanitizer on a worker; ``cancel`` set cancels the task (the result is not_sanitized)."""

    def __init__(self, gpus: GpuCluster):
        self.gpus = gpus

    def sanitize(self, job: HarnessJob, gpu_lock=None, cancel=None) -> SanitizeResult:
        t0 = time.perf_counter()
        try:
            files = _files([job])
        except OSError as e:
            return SanitizeResult("not_sanitized", f"could not read {e.filename} to send it to the dask cluster")
        try:
            value = self.gpus.call("the sanitizer job", _remote_gpu_sanitize, job, files, cancel=cancel)
        except _NotReturned as e:
            return SanitizeResult("not_sanitized", str(e), wall_s=time.perf_counter() - t0)
        return value["result"]
