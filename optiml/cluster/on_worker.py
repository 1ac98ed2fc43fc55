"""The GPU worker's side of a cluster evaluation: what runs inside a dask worker started with a GPU
resource (``dask worker ADDRESS --nthreads 1 --resources GPU=1``, one per GPU).

A worker process makes its GPU machinery once, on its first job, from the recipe that travels
with every task (:class:`LocalGpu`, or a test's fake): the persistent GPU child
(:class:`~optiml.verify.worker_client.WorkerHarness`) on the worker's first visible GPU, and the
host's ncu and compute-sanitizer. A fault restarts that child alone, so a candidate that faults or
hangs a GPU costs that candidate only. Profiles are serialised per host (one ncu at a time: the
driver serialises profiling across a host's GPUs anyway) by a dask lock named after the host
(``$OPTIML_HOST``, else its host name; set it where containers of one machine have names of their
own); hosts profile in parallel.

A job's files (cubins, a Python reference) arrive as bytes and are kept under their content's hash
for the worker's life, so the persistent child finds the same path for the same file. A worker
whose GPU is not the run's model refuses the job (the parent leaves it out from then on): timings
of two models are never compared.
"""
from __future__ import annotations

import atexit
import dataclasses
import hashlib
import os
import shutil
import socket
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from .. import __version__
from ..errors import EnvironmentProblem
from ..verify.harness import DEFAULT_TIMEOUT_S as HARNESS_TIMEOUT_S
from ..verify.harness import HarnessJob
from . import _relocate, _worker_address

HOST_ENV = "OPTIML_HOST"
LOCK_PREFIX = "optiml-ncu-"


@dataclass(frozen=True)
class LocalGpu:
    """The recipe of a worker's GPU machinery (it travels with each task; each worker process
    makes it once): the persistent child's timeout and interpreter."""
    timeout_s: float = HARNESS_TIMEOUT_S
    python: str | None = None

    def make(self) -> "GpuHere":
        return GpuHere(self.timeout_s, self.python)


class GpuHere:
    """This worker's GPU: the persistent GPU child on its first visible GPU (CUDA ordinal 0), and
    ncu and compute-sanitizer, made when first needed. One job at a time."""

    def __init__(self, timeout_s: float, python: str | None):
        from ..verify.worker_client import WorkerHarness

        self.harness = WorkerHarness(0, timeout_s=timeout_s, python=python)
        self.python = python
        self._profiler = None
        self._sanitizer = None
        self._facts: dict | None = None

    def facts(self) -> dict:
        """The GPU's name, architecture and driver (nvidia-smi, for the first visible GPU)."""
        if self._facts is None:
            from ..gpus import smi

            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip() or "0"
            row = smi("--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader", "-i", visible)
            parts = [p.strip() for p in row.strip().splitlines()[0].split(",")] if row.strip() else []
            if len(parts) < 3 or not parts[0]:
                raise EnvironmentProblem(f"dask worker {_worker_address()} has a GPU resource but nvidia-smi names "
                                         f"no GPU {visible} there.")
            self._facts = {"name": parts[0], "arch": "sm_" + parts[1].replace(".", ""), "driver": parts[2]}
        return self._facts

    def run(self, job: HarnessJob):
        return self.harness.run(job)

    def profile_batch(self, jobs: list[HarnessJob], device_name: str) -> list:
        if self._profiler is None:
            from ..profiler.ncu import NcuProfiler

            self._profiler = NcuProfiler(python=self.python)
        return self._profiler.profile_batch(jobs, device_name)

    def sanitize(self, job: HarnessJob):
        if self._sanitizer is None:
            from ..verify.sanitizer import Sanitizer

            self._sanitizer = Sanitizer()
        return self._sanitizer.sanitize(job)

    def close(self) -> None:
        self.harness.close()
        if self._profiler is not None:
            self._profiler.close()


# ------------------------------------------------------------------------------- per worker process

_made: dict = {}                  # recipe -> its machinery, made once per worker process
_busy: dict = {}                  # recipe -> a lock: one job at a time on the GPU
_made_lock = threading.Lock()
_files: Path | None = None        # where the shipped files are kept, by content


def _here(how):
    """This process's machinery for the recipe ``how``, made on first use."""
    with _made_lock:
        here = _made.get(how)
        if here is None:
            here = _made[how] = how.make()
            _busy[how] = threading.Lock()
            atexit.register(here.close)
        return here, _busy[how]


def host_name() -> str:
    """The host whose ncu this worker shares: ``$OPTIML_HOST``, else the host name."""
    return os.environ.get(HOST_ENV) or socket.gethostname()


def _kept(files: dict[str, bytes]) -> dict[str, str]:
    """Write the shipped files under their content's hash (once): their paths here, by the parent's."""
    global _files
    with _made_lock:
        if _files is None:
            _files = Path(tempfile.mkdtemp(prefix="optiml-worker-files-"))
            atexit.register(shutil.rmtree, _files, True)
        root = _files
    moved = {}
    for path, data in files.items():
        folder = root / hashlib.sha256(data).hexdigest()[:32]
        local = folder / Path(path).name
        if not local.exists():
            folder.mkdir(exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{local.name}.")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, local)
        moved[path] = str(local)
    return moved


def _here_job(job: HarnessJob, moved: dict[str, str]) -> HarnessJob:
    """The job with its files here, on this worker's GPU (its first visible one)."""
    return dataclasses.replace(_relocate(job, moved), device=0)


def _refusal(here, expect: str | None) -> str | None:
    """Why this worker must not take the run's jobs (its GPU is another model), or None."""
    name = here.facts()["name"]
    if expect is None or name == expect:
        return None
    return (f"dask worker {_worker_address()} has a {name}, not the run's {expect}; its timings would not compare, "
            f"so it is left out of this run.")


def _remote_gpu_facts(how) -> dict:
    here, _ = _here(how)
    return {"optiml": __version__, "host": host_name(), "worker": _worker_address(), **here.facts()}


def _remote_gpu_run(how, expect: str | None, job: HarnessJob, files: dict[str, bytes]) -> dict:
    here, busy = _here(how)
    refused = _refusal(here, expect)
    if refused:
        return {"refused": refused, "worker": _worker_address()}
    local = _here_job(job, _kept(files))
    with busy:
        result = here.run(local)
    return {"result": result.to_dict(), "worker": _worker_address()}


def _remote_gpu_profile(how, expect: str | None, jobs: list[HarnessJob], files: dict[str, bytes],
                        device_name: str) -> dict:
    here, busy = _here(how)
    refused = _refusal(here, expect)
    if refused:
        return {"refused": refused, "worker": _worker_address()}
    moved = _kept(files)
    local = [_here_job(j, moved) for j in jobs]
    from distributed import Lock

    host = host_name()
    with Lock(LOCK_PREFIX + host):          # one ncu at a time on this host
        with busy:
            results = here.profile_batch(local, device_name or here.facts()["name"])
    return {"results": results, "worker": _worker_address(), "host": host}


def _remote_gpu_sanitize(how, expect: str | None, job: HarnessJob, files: dict[str, bytes]) -> dict:
    here, busy = _here(how)
    refused = _refusal(here, expect)
    if refused:
        return {"refused": refused, "worker": _worker_address()}
    local = _here_job(job, _kept(files))
    with busy:
        result = here.sanitize(local)
    return {"result": result, "worker": _worker_address()}
