"""Evaluation workers beyond one host, on a dask.distributed cluster (the optional ``dask`` extra).

:class:`DaskBuilder` is a :class:`~optiml.build.Builder` and :class:`DaskHarness` a
:class:`~optiml.verify.harness.Harness`. Each build or GPU job is one call of a plain function
on a dask worker, which runs the local :class:`~optiml.build.NvccBuilder` or
:class:`~optiml.verify.harness.SubprocessHarness` there; the files they need travel as bytes
(the kernel's headers, the cubins, a Python reference) and the worker's paths never leak into
the results. No protocol of our own: dask schedules, retries tasks whose worker died, and
reports what it could not finish.

    client = connect("tcp://scheduler:8786")              # or pass the address to the classes
    builder = DaskBuilder(client, "sm_90", cache_dir)
    harness = DaskHarness(client, resources={"GPU": 1})

Workers need the same optiml as the parent, nvcc for builds, and a GPU and pycuda for the
harness. Builds go to any worker unless ``resources`` says otherwise; GPU jobs should go only to
workers started with a GPU resource, one per GPU (``CUDA_VISIBLE_DEVICES=0 dask worker ADDRESS
--nthreads 1 --resources GPU=1``) and ``resources={"GPU": 1}``. The default is no resources,
which lets any worker take any job: right for a cluster of identical GPU hosts with one worker
thread per GPU, wrong otherwise. A task whose resources no worker has waits (up to ``wait_s``).

Failures are data: a compile error, a build timeout and a worker that died or a task the
cluster lost are statuses (``worker_lost`` for a build, ``harness_error`` for a GPU job); an
exception raised by optiml's own code on the worker is re-raised here, as a bug is.

``optimize --cluster`` runs each candidate's whole evaluation on the cluster's GPU workers with
:class:`GpuCluster` (``gpu_workers.py``, the parent's side: a harness, a profiler and a sanitizer
over them, GPUs of one model) and ``on_worker.py`` (the worker's side: its own persistent GPU
child, ncu one at a time per host, compute-sanitizer). :class:`DaskHarness` is the simpler tool
that runs one GPU job in a fresh child on a worker.
"""
from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import threading
import time
import uuid
from concurrent.futures import CancelledError
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from loguru import logger

from .. import __version__
from ..build import DEFAULT_TIMEOUT_S as BUILD_TIMEOUT_S
from ..build import (BuildResult, KeyLocks, NvccBuilder, build_key, default_cache_dir, header_dependencies,
                    normalize_arch, nvcc_version, read_cached)
from ..errors import EnvironmentProblem, UserError
from ..verify.harness import DEFAULT_TIMEOUT_S as HARNESS_TIMEOUT_S
from ..verify.harness import HarnessBase, HarnessJob, HarnessResult, KernelBinary, SubprocessHarness
from ..status import Status

HEADER_SUFFIXES = (".h", ".cuh", ".hpp", ".hh", ".inc")
HEADER_LIMIT = 16 << 20          # bytes of headers shipped with one build
CONNECT_TIMEOUT_S = 30.0
CANCEL_POLL_S = 0.2       # how often a cancellable wait looks at its event
MISSING_EXTRA = ("running evaluation workers on a dask cluster needs the dask extra: "
                 "pip install 'optiml-kernels[dask]'")


def _distributed():
    try:
        import distributed
    except ImportError:
        raise EnvironmentProblem(MISSING_EXTRA) from None
    return distributed


def connect(address: str, timeout_s: float = CONNECT_TIMEOUT_S):
    """A dask ``Client`` of the scheduler at ``address`` (e.g. ``tcp://host:8786``)."""
    distributed = _distributed()
    try:
        return distributed.Client(address, timeout=timeout_s, set_as_default=False)
    except (OSError, ValueError, TypeError) as e:
        raise EnvironmentProblem(f"could not connect to the dask scheduler at {address!r} ({e}); "
                                 f"check the address and that the scheduler is running.") from None


class _NotReturned(Exception):
    """The cluster did not return a call: a worker died, the task was lost, or the wait ran out."""

    def __init__(self, message: str, timed_out: bool = False):
        super().__init__(message)
        self.timed_out = timed_out


class _OnCluster:
    """A client (given, or made from an address and then owned), and one call on a worker."""

    def __init__(self, client: Any, resources: dict[str, float] | None, wait_s: float | None):
        distributed = _distributed()
        from distributed.client import ClosedClientError

        # a worker that died (KilledWorker), a task the scheduler gave up (CancelledError), a client
        # closed or a connection lost (ClosedClientError, CommClosedError is an OSError)
        self._lost_errors = (distributed.KilledWorker, CancelledError, ClosedClientError, OSError)
        self._owns_client = isinstance(client, str)
        self.client = connect(client) if self._owns_client else client
        self.resources = dict(resources) if resources else None
        self.wait_s = wait_s

    def _call(self, what: str, fn: Callable, *args, workers: list[str] | None = None, cancel=None) -> Any:
        """``fn(*args)`` on a worker (one of ``workers`` when given), or :class:`_NotReturned` when
        the cluster did not return it (or ``cancel``, a threading.Event, was set while it ran: the
        task is cancelled). What ``fn`` itself raises (an EnvironmentProblem, a bug) is raised here."""
        try:
            fut = self.client.submit(fn, *args, key=f"optiml{fn.__name__.removeprefix('_remote')}-{uuid.uuid4().hex}",
                                     pure=False, resources=self.resources, workers=workers)
        except self._lost_errors as e:        # a closed client, a scheduler gone
            raise _NotReturned(f"could not send {what} to the dask cluster ({type(e).__name__}: {e})") from None
        deadline = None if self.wait_s is None else time.monotonic() + self.wait_s
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            step = left if cancel is None else min(CANCEL_POLL_S, CANCEL_POLL_S if left is None else left)
            try:
                return fut.result(timeout=step)
            except TimeoutError as e:
                if fut.done():                  # not our wait: a connection
                    raise _NotReturned(f"the dask cluster lost {what} ({type(e).__name__}: {e})") from None
                if cancel is not None and cancel.is_set():
                    fut.cancel()
                    raise _NotReturned(f"{what} was cancelled") from None
                if deadline is not None and time.monotonic() >= deadline:
                    fut.cancel()
                    raise _NotReturned(f"the dask cluster did not return {what} within {self.wait_s:g} s", True) from None
            except self._lost_errors as e:
                raise _NotReturned(f"the dask cluster lost {what} ({type(e).__name__}: {e})") from None

    def close(self) -> None:
        """Close the client if this object made it from an address."""
        if self._owns_client:
            self.client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ------------------------------------------------------------------------------- builds

class DaskBuilder(_OnCluster):
    """nvcc on dask workers, with a local content-addressed cache that is looked at first.

    The cache has :class:`~optiml.build.NvccBuilder`'s layout and key recipe (the workers' nvcc
    version stands for the local one), so both can share a folder; the key of a build with an
    include folder also covers the contents of the headers shipped with it (those directly in the folder,
    and those the source includes from its subfolders) and of every header the source includes. ``wait_s`` bounds the wait
    for a result, queueing included (None: no bound); ``timeout_s`` is nvcc's own limit on the
    worker. ``wall_s`` of a result is the round trip as this process saw it.
    """

    def __init__(self, client: Any, arch: str, cache_dir: Path | None = None,
                 timeout_s: float = BUILD_TIMEOUT_S, *, resources: dict[str, float] | None = None,
                 wait_s: float | None = None):
        self.arch = normalize_arch(arch)
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.timeout_s = timeout_s
        super().__init__(client, resources, wait_s)
        self.submitted = 0                      # builds sent to the cluster (cache hits are not)
        self._locks = KeyLocks()
        self._count = threading.Lock()
        try:
            self.nvcc_version = self._probe()
        except BaseException:
            self.close()
            raise

    @classmethod
    def connect(cls, address: str, arch: str, cache_dir: Path | None = None, timeout_s: float = BUILD_TIMEOUT_S,
                **kw) -> "DaskBuilder":
        return cls(address, arch, cache_dir, timeout_s, **kw)

    def _probe(self) -> str:
        try:
            optiml_version, nvcc = self._call("a version probe", _remote_versions)
        except _NotReturned as e:
            raise EnvironmentProblem(f"no dask worker answered (is optiml installed on the workers?): {e}.") from None
        if optiml_version != __version__:
            raise EnvironmentProblem(f"the dask workers run optiml {optiml_version} but this is optiml {__version__}; "
                                     f"install the same version on both.")
        return nvcc

    def _inputs(self, source: str, flags: tuple[str, ...], include_dir: Path | None):
        """(include folder made absolute, headers to ship, every header included): one scan, so the
        key and the shipped bytes come from the same reads."""
        include_dir = Path(include_dir).absolute() if include_dir is not None else None
        found_as: dict[str, str] = {}
        deps = header_dependencies(source, flags, include_dir, found_as)
        headers = _headers(include_dir, deps, found_as) if include_dir is not None else None
        return include_dir, headers, deps

    def key(self, source: str, flags: tuple[str, ...], include_dir: Path | None = None) -> str:
        flags = tuple(flags)
        include_dir, headers, deps = self._inputs(source, flags, include_dir)
        return self._key(source, flags, include_dir, headers, deps, self.nvcc_version)

    def _key(self, source, flags, include_dir, headers, deps, nvcc) -> str:
        # what is shipped, and what the source includes from anywhere (an -I folder outside the
        # include folder is not shipped, but an edit there must not bring back an old cubin)
        seen = {f"shipped:{n}": d for n, d in (headers or {}).items()}
        seen.update(deps)
        return build_key(source, flags, self.arch, nvcc, include_dir, seen)

    def build(self, source: str, flags: tuple[str, ...] = (), *, include_dir: Path | None = None,
              name: str = "kernel.cu") -> BuildResult:
        """Compile ``source`` on a worker (or find it in the local cache); blocking, thread-safe."""
        flags = tuple(flags)
        include_dir, headers, deps = self._inputs(source, flags, include_dir)
        key = self._key(source, flags, include_dir, headers, deps, self.nvcc_version)
        entry = self.cache_dir / key
        with self._locks(key):   # one build of a key at a time; the others then find it in the cache
            hit = read_cached(entry)
            if hit is not None:
                return hit
            with self._count:
                self.submitted += 1
            return self._build_remote(source, flags, include_dir, headers, deps, name, key)

    def _build_remote(self, source, flags, include_dir, headers, deps, name, key) -> BuildResult:
        t0 = time.perf_counter()
        try:
            value = self._call("the build", _remote_build, self.arch, self.timeout_s, source, flags, name, headers)
        except _NotReturned as e:
            logger.warning("dask build {}: {}", key, e)
            return BuildResult(status="timeout" if e.timed_out else "worker_lost", key=key, arch=self.arch,
                               wall_s=time.perf_counter() - t0, log=f"error: {e}.")
        wall = time.perf_counter() - t0
        if value["nvcc_version"] != self.nvcc_version:   # a worker with another nvcc: its own key
            key = self._key(source, flags, include_dir, headers, deps, value["nvcc_version"])
        entry = self.cache_dir / key
        moved = [(value["build_dir"], str(entry))]
        if include_dir is not None:
            moved.append((value["include_dir"], str(include_dir)))

        def here(text: str) -> str:
            for there, local in moved:
                text = text.replace(there, local)
            return text

        remote = BuildResult.from_dict(value["result"])
        result = dataclasses.replace(remote, key=key, log=here(remote.log), command=[here(c) for c in remote.command],
                                     cubin_path=None, wall_s=wall, cached=False)
        if result.status == "timeout":   # load-dependent: not cached, as NvccBuilder does
            return result
        entry.mkdir(parents=True, exist_ok=True)
        _write(entry / (Path(name).name if name.endswith(".cu") else "kernel.cu"), source.encode())
        if result.ok:
            cubin = entry / "kernel.cubin"
            _write(cubin, value["cubin"])
            result.cubin_path = str(cubin)
        _write(entry / "build.json", json.dumps(result.to_dict()).encode())
        logger.debug("dask build {} on {} in {:.2f}s: {}", key, value["worker"], wall, result.status)
        return result


def _headers(include_dir: Path, deps: dict[str, bytes | None], found_as: dict[str, str]) -> dict[str, bytes]:
    """The headers shipped with a build, by their path relative to ``include_dir``: those
    directly in it, and those the source includes from its subfolders, transitively, under the
    names nvcc looks them up by (a link's name, with the contents it points to; the contents from
    the same read as the key, ``deps``)."""
    d = Path(include_dir)
    if not d.is_dir():
        return {}
    base = Path(os.path.abspath(d))
    out, total = {}, 0

    def add(rel: str, data: bytes | None, p: Path) -> None:
        nonlocal total
        if data is None:
            try:
                data = p.read_bytes()
            except OSError as e:
                raise UserError(f"{p}: cannot read the header to send it to the dask workers ({e.strerror or e}).") from None
        total += len(data)
        if total > HEADER_LIMIT:
            raise UserError(f"{d}: its headers are more than {HEADER_LIMIT >> 20} MiB to send to the dask "
                            f"workers; keep the kernel's headers in a folder of their own.")
        out[rel] = data

    for p in sorted(d.iterdir()):
        if p.suffix.lower() in HEADER_SUFFIXES and p.is_file():
            add(p.name, None, p)
    for looked_up, resolved in found_as.items():
        lp = Path(looked_up)
        if lp.is_relative_to(base) and lp != base:
            rel = lp.relative_to(base).as_posix()
            if rel not in out:
                add(rel, deps.get(resolved), lp)
    return out


def _write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


# ------------------------------------------------------------------------------- GPU jobs

class DaskHarness(_OnCluster, HarnessBase):
    """GPU jobs on dask workers, each in a :class:`SubprocessHarness` child there.

    ``resources`` picks the workers (e.g. ``{"GPU": 1}``; default none: any worker);
    ``timeout_s`` is the GPU child's limit on the worker, ``wait_s`` the bound on the wait for a
    result, queueing included (None: no bound). ``wall_s`` of a result is the round trip.
    """

    def __init__(self, client: Any, timeout_s: float = HARNESS_TIMEOUT_S, *,
                 resources: dict[str, float] | None = None, wait_s: float | None = None,
                 python: str | None = None):
        super().__init__(client, resources, wait_s)
        self.timeout_s = timeout_s
        self.python = python          # the worker's interpreter for the GPU child (None: its own)

    @classmethod
    def connect(cls, address: str, timeout_s: float = HARNESS_TIMEOUT_S, **kw) -> "DaskHarness":
        return cls(address, timeout_s, **kw)

    def run(self, job: HarnessJob, lend=None) -> HarnessResult:
        t0 = time.perf_counter()
        try:
            files = {p: Path(p).read_bytes() for p in _job_files(job)}
        except OSError as e:
            return HarnessResult(Status.HARNESS_ERROR, f"could not read {e.filename} to send it to the dask cluster "
                                                  f"({e.strerror or e}).")
        try:
            value = self._call("the GPU job", _remote_run, job, files, self.timeout_s, self.python)
        except _NotReturned as e:
            logger.warning("dask GPU job: {}", e)
            return HarnessResult(Status.HARNESS_ERROR, f"{e}.", wall_s=time.perf_counter() - t0)
        result = HarnessResult.from_dict(value)
        result.wall_s = time.perf_counter() - t0
        return result


def _job_files(job: HarnessJob) -> list[str]:
    """The paths a job reads: its cubins (the candidate's, the reference's, the baseline's, the
    rivals', the gpu_ops kernels'), a Python reference and a baseline function's file."""
    binaries = (job.candidate, job.reference, job.baseline, *job.rivals)
    paths = [b.cubin_path for b in binaries if b is not None]
    if job.ops_cubin:
        paths.append(job.ops_cubin)
    ref = job.spec.reference
    if ref.is_python and ref.path is not None:
        paths.append(str(ref.path))
    if job.function is not None:
        paths.append(str(job.function.path))
    return list(dict.fromkeys(paths))


def _relocate(job: HarnessJob, moved: dict[str, str]) -> HarnessJob:
    """The job with its files at their paths on this worker."""
    def binary(b: KernelBinary | None) -> KernelBinary | None:
        return None if b is None else dataclasses.replace(b, cubin_path=moved[b.cubin_path])

    spec = job.spec
    if spec.reference.is_python and spec.reference.path is not None:
        ref = dataclasses.replace(spec.reference, path=Path(moved[str(spec.reference.path)]))
        spec = dataclasses.replace(spec, reference=ref)
    function = job.function
    if function is not None:
        function = dataclasses.replace(function, path=moved[str(function.path)])
    return dataclasses.replace(job, spec=spec, candidate=binary(job.candidate), reference=binary(job.reference),
                               baseline=binary(job.baseline), rivals=tuple(binary(b) for b in job.rivals),
                               ops_cubin=moved[job.ops_cubin] if job.ops_cubin else None, function=function)


# ------------------------------------------------------------------------------- on the worker

def _worker_address() -> str:
    from distributed import get_worker

    try:
        return get_worker().address
    except ValueError:
        return "(not in a worker)"


def _remote_versions() -> tuple[str, str]:
    try:
        return __version__, nvcc_version()
    except EnvironmentProblem as e:
        raise EnvironmentProblem(f"on dask worker {_worker_address()}: {e}") from None


def _remote_build(arch: str, timeout_s: float, source: str, flags: tuple[str, ...], name: str,
                  headers: dict[str, bytes] | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="optiml-dask-build-") as tmp:
        root = Path(tmp)
        include = None
        if headers is not None:
            include = root / "include"
            include.mkdir()
            for hname, data in headers.items():
                rel = PurePosixPath(hname)
                if rel.is_absolute() or ".." in rel.parts or not rel.parts:
                    raise ValueError(f"a shipped header must stay in its folder: {hname!r}")
                (include / rel).parent.mkdir(parents=True, exist_ok=True)
                (include / rel).write_bytes(data)
        builder = NvccBuilder(arch, cache_dir=root / "cache", timeout_s=timeout_s)
        try:
            result = builder.build(source, flags, include_dir=include, name=name)
            nvcc = nvcc_version()
        except EnvironmentProblem as e:
            raise EnvironmentProblem(f"on dask worker {_worker_address()}: {e}") from None
        return {"result": result.to_dict(), "cubin": Path(result.cubin_path).read_bytes() if result.ok else None,
                "nvcc_version": nvcc, "build_dir": str(root / "cache" / result.key),
                "include_dir": str(include) if include else None, "worker": _worker_address()}


def _remote_run(job: HarnessJob, files: dict[str, bytes], timeout_s: float, python: str | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="optiml-dask-job-") as tmp:
        moved = {}
        for i, (path, data) in enumerate(files.items()):
            d = Path(tmp) / str(i)      # one folder each: the files keep their names
            d.mkdir()
            local = d / Path(path).name
            local.write_bytes(data)
            moved[path] = str(local)
        return SubprocessHarness(timeout_s=timeout_s, python=python).run(_relocate(job, moved)).to_dict()


# the whole evaluation on GPU workers (the parent's side; the worker's is on_worker)
from .gpu_workers import ClusterHarness, ClusterProfiler, ClusterSanitizer, GpuCluster  # noqa: E402
from .on_worker import LocalGpu  # noqa: E402
