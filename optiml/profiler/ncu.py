"""Driving Nsight Compute on the harness's child process.

The child (``python -m optiml.verify.worker --profile-batch``) launches each candidate of a batch once at
the timing size inside an NVTX range ``optiml.profile.<tag>`` (domain ``optiml``); ncu is
restricted to that range with ``--nvtx --nvtx-include "optiml@optiml.profile.<tag>/"``, runs
with an explicit ``--clock-control``, writes a report, and the report is imported as a
raw-page CSV with base units. Every failure (no ncu, no counter permission, a timeout, a
crash under replay, an unknown metric) comes back as a ProfileResult status.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

from loguru import logger

from ..procs import child_env, kill_group, run_with_timeout

from .metrics import cached_query_metrics, filter_known, ncu_metric_names
from .model import extract_metrics
from .ncu_csv import classify_ncu_failure, parse_details_csv, parse_raw_csv
from .types import ProfileResult, ProfileStatus

DEFAULT_TIMEOUT_S = 180.0


def find_ncu() -> str | None:
    path = shutil.which("ncu")
    if path:
        return path
    for p in ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/ncu"):
        if os.path.exists(p):
            return p
    return None


def _run(cmd: list[str], timeout_s: float) -> tuple[int | None, str]:
    return run_with_timeout(cmd, timeout_s)


def import_report(path: Path, ncu: str | None = None) -> tuple[str, object]:
    """Read an existing ncu export: a raw or details CSV, or a .ncu-rep (needs ncu). Returns
    (csv text, NcuReport)."""
    path = Path(path)
    if path.suffix == ".ncu-rep":
        ncu = ncu or find_ncu()
        if ncu is None:
            from ..errors import EnvironmentProblem
            raise EnvironmentProblem(f"{path}: reading a .ncu-rep needs ncu on PATH; export it elsewhere with `ncu -i {path.name} --csv --page raw --print-units base`.")
        code, text = _run([ncu, "-i", str(path), "--csv", "--page", "raw", "--print-units", "base"], 300)
    else:
        text = path.read_text(errors="replace")
    if '"Metric Name"' in text and '"Metric Value"' in text:  # the long "details" page
        return text, parse_details_csv(text)
    return text, parse_raw_csv(text)


class NcuProfiler:
    """Profiles verified candidates: one per ncu process (:meth:`profile`), or several under one
    ncu process (:meth:`profile_batch`)."""

    def __init__(self, *, ncu: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S, clock_control: str = "base",
                 cache_dir: Path | None = None, python: str | None = None, metrics: list[str] | None = None):
        self.ncu = ncu or find_ncu()
        self.timeout_s = timeout_s
        self.clock_control = clock_control
        self.cache_dir = Path(cache_dir) if cache_dir else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "optiml"
        self.python = python or sys.executable
        self.requested = metrics or ncu_metric_names()
        self._known: list[str] | None = None
        self._dropped: list[str] = []
        self._warm: dict[int, _Warm] = {}       # per device: an ncu process started ahead (profile_batch)
        self._warm_lock = threading.Lock()

    def _version(self) -> str:
        code, out = _run([self.ncu, "--version"], 60)
        m = re.search(r"Version ([\d.]+)", out)
        return m.group(1) if m else "unknown"

    def metric_list(self, device_name: str) -> tuple[list[str], list[str]]:
        """The requested metrics this ncu knows for this GPU (asked once, cached on disk)."""
        if self._known is None:
            def produce() -> str:
                code, out = _run([self.ncu, "--query-metrics"], 120)
                return out if code == 0 else ""
            text = cached_query_metrics(self.cache_dir, self._version(), device_name or "gpu", produce)
            if text.strip():
                self._known, self._dropped = filter_known(self.requested, text)
            else:
                logger.warning("ncu --query-metrics gave nothing; requesting the metric list unchecked")
                self._known, self._dropped = list(self.requested), []
        return self._known, self._dropped

    def _cmd(self, metrics: list[str], includes: list[str], rep: Path, child: list[str]) -> list[str]:
        cmd = [self.ncu, "--nvtx"]
        for tag in includes:
            cmd += ["--nvtx-include", f"optiml@optiml.profile.{tag}/"]
        return cmd + ["--metrics", ",".join(metrics), "--clock-control", self.clock_control,
                      "--cache-control", "all", "-o", str(rep), "-f", self.python, "-m", "optiml.verify.worker", *child]

    def profile_batch(self, jobs: list, device_name: str = "", gpu_lock=None, on_gpu_done=None,
                      prestart: bool = False) -> list[ProfileResult]:
        """Profile several verified candidates (HarnessJobs, one device) under one ncu process, each
        launch selected by its own NVTX range; one ProfileResult per job, in order.

        The ncu process (and its child's CUDA context) may have been started ahead, waiting for
        its jobs: with ``prestart`` the next one for this device starts as soon as this batch has
        its jobs, so ncu's ~2 s start-up overlaps this batch. Its filter selects an outer range
        fixed when it starts; each candidate's launch is inside a range of its own within it.

        ``gpu_lock`` (a context manager) is held only while the candidates run under ncu: the
        child starts, opens its context and loads the kernels first, so ncu's start-up overlaps
        other work on the device. A candidate the batch did not reach (one before it faulted under
        replay) gets a ``replay_failed`` result; profile it alone to be sure.

        Two GPUs do not profile twice as fast: measured on two H200s, two ncu processes on two
        GPUs each take ~1.85x as long per launch as one alone (the driver's kernel-mode share of
        the work grows to match), with one lock file or two, each target seeing one GPU or both
        (``bench/throughput/ncu_two_gpus.sh``)."""
        if not jobs:
            return []
        if self.ncu is None:
            return [ProfileResult.failure(ProfileStatus.NCU_MISSING, "ncu (Nsight Compute) was not found on PATH")] * len(jobs)
        t0 = time.perf_counter()
        metrics, dropped = self.metric_list(device_name)
        device = jobs[0].device
        w = self._take_warm(device, device_name)
        if prestart:
            with self._warm_lock:
                self._warm[device] = self._spawn(device, device_name)
        tags = [uuid.uuid4().hex[:12] for _ in jobs]
        d = w.dir
        try:
            tmp_jobs = d / "jobs.pkl.tmp"
            tmp_jobs.write_bytes(pickle.dumps([(t, replace(j, time_it=False)) for t, j in zip(tags, jobs)]))
            os.replace(tmp_jobs, d / "jobs.pkl")
            proc = w.proc
            deadline = time.monotonic() + self.timeout_s * max(1, len(jobs)) ** 0.5
            held_s = 0.0
            try:
                try:
                    if _wait_for(d / "ready", proc, deadline):
                        with (gpu_lock if gpu_lock is not None else contextlib.nullcontext()):
                            t_lock = time.perf_counter()
                            (d / "go").write_text("")
                            _wait_for(d / "finished", proc, deadline)
                            held_s = time.perf_counter() - t_lock
                finally:
                    if on_gpu_done is not None:
                        on_gpu_done()
                code = proc.wait(timeout=max(deadline - time.monotonic(), 0.001))
            except subprocess.TimeoutExpired:
                code = None
            if code is None or proc.poll() is None:
                w.kill()
                wall = time.perf_counter() - t0
                return [ProfileResult.failure(ProfileStatus.TIMEOUT, f"ncu did not finish a batch of {len(jobs)} in time",
                                              wall_s=wall / len(jobs), dropped_metrics=dropped)] * len(jobs)
            out = (d / "ncu.log").read_text(errors="replace")
            done = set(_read_lines(d / "done.txt"))
            error = (d / "error.txt").read_text(errors="replace").strip() if (d / "error.txt").exists() else ""
            report = w.rep.with_suffix(".ncu-rep")
            text = ""
            if report.exists():
                _, text = _run([self.ncu, "-i", str(report), "--csv", "--page", "raw", "--print-units", "base"], 300)
        finally:
            w.close()
        wall = time.perf_counter() - t0
        self.last_batch = {"jobs": len(jobs), "wall_s": wall, "gpu_held_s": held_s}
        share = wall / len(jobs)
        if not text:
            failure = classify_ncu_failure(out) or (ProfileStatus.ERROR, f"ncu wrote no report (exit code {code}): "
                                                    + (error or (out.strip().splitlines()[-1] if out.strip() else "no output")))
            return [ProfileResult.failure(failure[0], failure[1], wall_s=share, dropped_metrics=dropped)] * len(jobs)
        try:
            launches = parse_raw_csv(text).launches
        except ValueError:
            launches = []
        results = []
        for tag in tags:
            mine = [lc for lc in launches if any(f"optiml.profile.{tag}" in n for n in lc.nvtx_names)]
            if not mine or tag not in done:
                why = f" ({error})" if error else ""
                results.append(ProfileResult.failure(ProfileStatus.REPLAY_FAILED,
                                                     f"ncu profiled no launch of this candidate in its batch{why}",
                                                     wall_s=share, dropped_metrics=dropped))
                continue
            results.append(ProfileResult(ProfileStatus.OK, "", metrics=extract_metrics(mine[-1]), diagnosis=[],
                                         raw_csv=_csv_rows(text, launches.index(mine[-1]), len(launches)),
                                         wall_s=share, dropped_metrics=dropped))
        return results

    def _spawn(self, device: int, device_name: str) -> "_Warm":
        """Start ncu over a batch child on ``device`` that opens its context and waits for its jobs."""
        metrics, _ = self.metric_list(device_name)
        tmp = tempfile.TemporaryDirectory(prefix="optiml-ncu-")
        d = Path(tmp.name)
        outer = "w" + uuid.uuid4().hex[:12]
        rep = d / "profile"
        log = open(d / "ncu.log", "wb")
        try:
            proc = subprocess.Popen(
                self._cmd(metrics, [outer], rep, ["--profile-batch", str(d), str(device), outer, str(os.getpid())]),
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=ncu_env(),
                start_new_session=True)
        finally:
            log.close()
        return _Warm(tmp, proc, rep)

    def _take_warm(self, device: int, device_name: str) -> "_Warm":
        """The process started ahead for ``device`` if it is still alive, else a new one."""
        with self._warm_lock:
            w = self._warm.pop(device, None)
        if w is not None and w.proc.poll() is not None:
            w.close()
            w = None
        return w or self._spawn(device, device_name)

    def close(self) -> None:
        """Stop the processes started ahead (their child sees ``quit`` and exits)."""
        with self._warm_lock:
            warm, self._warm = list(self._warm.values()), {}
        for w in warm:
            w.close()


class _Warm:
    """An ncu process started ahead: its directory, its report path, and how to end it."""

    def __init__(self, tmp, proc: subprocess.Popen, rep: Path):
        self.tmp, self.proc, self.rep = tmp, proc, rep
        self.dir = Path(tmp.name)

    def kill(self) -> None:
        kill_group(self.proc)

    def close(self) -> None:
        """Done with: a process still waiting for jobs is told to quit, then killed if it lingers."""
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                (self.dir / "quit").write_text("")
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.tmp.cleanup()


def ncu_env() -> dict:
    """The environment for an ncu process: TMPDIR is a directory of this user's own
    (``optiml-ncu-<uid>`` in the system's temporary directory, mode 0700), which holds the lock
    file ncu serialises its processes with (``$TMPDIR/nsight-compute-lock``). With the default
    ``/tmp`` a lock file another user's ncu left there cannot be opened on hosts that protect
    files in sticky directories, and ncu fails with InterprocessLockFailed."""
    env = child_env()
    d = Path(tempfile.gettempdir()) / f"optiml-ncu-{os.getuid()}"
    try:
        d.mkdir(mode=0o700, exist_ok=True)
        if d.is_symlink() or d.stat().st_uid != os.getuid():
            raise PermissionError(f"{d} is not this user's")
        d.chmod(0o700)
    except OSError:        # someone else's (or unusable): a private one for this process
        d = _private_lock_dir()
    env["TMPDIR"] = str(d)
    return env


@functools.lru_cache(maxsize=1)
def _private_lock_dir() -> Path:
    """A lock-file directory of this process's own, made once and removed when it exits."""
    d = Path(tempfile.mkdtemp(prefix="optiml-ncu-"))
    atexit.register(shutil.rmtree, d, True)
    return d


def _wait_for(path: Path, proc: subprocess.Popen, deadline: float) -> bool:
    """Until ``path`` exists (True), the process exits or the deadline passes (False)."""
    while not path.exists():
        if proc.poll() is not None or time.monotonic() >= deadline:
            return path.exists()
        time.sleep(0.002)
    return True


def _read_lines(p: Path) -> list[str]:
    try:
        return [ln.strip() for ln in p.read_text().splitlines() if ln.strip()]
    except FileNotFoundError:
        return []


def _csv_rows(text: str, index: int, count: int) -> str:
    """The raw CSV's header rows plus launch ``index``'s row (of ``count``): each candidate keeps
    its own evidence, in the same format. The whole text when the rows do not line up."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return text
    rows = [ln for ln in lines[start + 2:] if ln.startswith('"')]
    if len(rows) != count:
        return text
    return "\n".join(lines[start:start + 2] + [rows[index]]) + "\n"
