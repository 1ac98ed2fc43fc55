"""A persistent GPU worker per device: the parent side.

:class:`WorkerHarness` keeps one child (``python -m optiml.verify.worker --serve``) alive per
device, so a candidate costs neither a new process nor a new CUDA context. Jobs go to the child
as files plus a line on its stdin; the child answers ``done N`` on a pipe of its own (its
stdout and stderr are the log: a kernel's printf lands there). Everything that protects the
parent with a fresh process per job still holds, job by job: a job that does not answer within
the timeout, or prints more than the log limit, has its child killed (``timeout`` /
``runtime_error``); a child that dies is a ``runtime_error`` with its last stage; and after any
fault the child exits (a sticky CUDA error can leave its context unusable) and the next job
starts a fresh one. Not thread-safe: one caller at a time per instance (one per device).

While a job computes on the host only (the spec's Python reference), the child says ``host``
and later ``gpu``, and waits for ``go`` on its stdin; a caller that holds the device's lock
passes it as ``lend`` and the GPU goes to whoever waits for it meanwhile (a profiled batch).
"""
from __future__ import annotations

import os
import pickle
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loguru import logger

from ..procs import child_env, kill_group

LOG_KEEP = 1 << 20        # the log is emptied before a job once it holds more than this
CLOSE_WAIT_S = 10.0       # how long close() lets the child leave on its own before killing it
from .harness import (DEFAULT_TIMEOUT_S, LOG_LIMIT, POLL_S, HarnessJob, HarnessResult, _read, _size,
                      _tail, child_result)


class WorkerHarness:
    """The :class:`~optiml.verify.harness.Harness` protocol over a persistent child on ``device``."""

    lends_gpu = True      # run() takes the caller's device lock as ``lend``

    def __init__(self, device: int = 0, timeout_s: float = DEFAULT_TIMEOUT_S, python: str | None = None,
                 env: dict | None = None, log_limit: int = LOG_LIMIT):
        self.device = device
        self.timeout_s = timeout_s
        self.log_limit = log_limit
        self.python = python or sys.executable
        self.env = env
        self._tmp = tempfile.TemporaryDirectory(prefix=f"optiml-worker{device}-")
        self.dir = Path(self._tmp.name)
        self.log_path = self.dir / "child.log"
        self._proc: subprocess.Popen | None = None
        self._ctrl = None
        self._buf = b""
        self._n = 0
        self.starts = 0          # children started (1 + restarts after faults)

    # -- the child --------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the child now (it opens its CUDA context while the caller does other work)."""
        if self._proc is not None and self._proc.poll() is None:
            return
        self._close_child()
        r, w = os.pipe()
        log = open(self.log_path, "ab")
        try:
            self._proc = subprocess.Popen(
                [self.python, "-m", "optiml.verify.worker", "--serve", str(self.dir), str(w), str(self.device)],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, pass_fds=(w,),
                env=child_env(self.env), start_new_session=True)
        finally:
            os.close(w)
            log.close()
        self._ctrl, self._buf = r, b""
        self.starts += 1

    def _close_child(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                kill_group(self._proc)
            for f in (self._proc.stdin,):
                try:
                    f.close()
                except (OSError, ValueError):
                    pass
        if self._ctrl is not None:
            os.close(self._ctrl)
        self._proc, self._ctrl, self._buf = None, None, b""

    def close(self) -> None:
        """Stop the child (it exits when its stdin closes; killed if it does not)."""
        if self._proc is not None and self._proc.poll() is None:
            try:
                self._proc.stdin.close()
                self._proc.wait(timeout=CLOSE_WAIT_S)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        self._close_child()
        self._tmp.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- one job -------------------------------------------------------------------------------------
    def _answer(self, n: int, deadline: float, log_start: int, lending: "_Lending") -> str:
        """Wait for ``done n``: 'done', 'exit' (done, and the child is leaving), 'died',
        'timeout' or 'flooded'. ``host``/``gpu`` lines lend the GPU and take it back (the time
        spent waiting for it does not count against the timeout)."""
        while True:
            line_end = self._buf.find(b"\n")
            if line_end >= 0:
                line, self._buf = self._buf[:line_end].decode(), self._buf[line_end + 1:]
                parts = line.split()
                if parts[:2] == ["done", str(n)]:
                    return "exit" if "exit" in parts[2:] else "done"
                if parts == ["host"]:
                    lending.give()
                elif parts == ["gpu"]:
                    deadline += lending.take()
                    self._proc.stdin.write(b"go\n")
                    self._proc.stdin.flush()
                continue
            now = time.monotonic()
            if now >= deadline:
                return "timeout"
            if _size(self.log_path) - log_start > self.log_limit:
                return "flooded"
            ready, _, _ = select.select([self._ctrl], [], [], min(POLL_S, deadline - now))
            if ready:
                chunk = os.read(self._ctrl, 4096)
                if not chunk:                      # the child closed the pipe: it is gone
                    return "died"
                self._buf += chunk

    def run(self, job: HarnessJob, lend=None) -> HarnessResult:
        """One job. ``lend``: the device's lock, held by the caller (a context manager, entered):
        released while the child works on the host only, and held again when this returns."""
        t0 = time.perf_counter()
        lending = _Lending(lend)
        if job.device != self.device:
            raise ValueError(f"WorkerHarness for GPU {self.device} was given a job for GPU {job.device}")
        self.start()
        self._n += 1
        n = self._n
        (self.dir / f"job-{n}.pkl").write_bytes(pickle.dumps(job))
        (self.dir / "stage.txt").write_text("")
        if _size(self.log_path) > LOG_KEEP:        # the child appends (O_APPEND): it goes on at the new end
            os.truncate(self.log_path, 0)
        log_start = _size(self.log_path)
        try:
            self._proc.stdin.write(f"{n}\n".encode())
            self._proc.stdin.flush()
            answer = self._answer(n, time.monotonic() + self.timeout_s, log_start, lending)
        except (BrokenPipeError, OSError):
            answer = "died"
        finally:
            lending.take()
        stage = _read(self.dir / "stage.txt").strip()
        if answer in ("timeout", "flooded"):
            kill_group(self._proc)
        elif answer in ("died", "exit"):
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                kill_group(self._proc)
        result_file = self.dir / f"result-{n}.json"
        result = child_result(answer if answer in ("timeout", "flooded") else "done",
                              None if answer == "died" else result_file, stage, self.timeout_s,
                              self.log_limit, self._proc.returncode)
        if answer != "done":
            self._close_child()                    # the next job starts a fresh child
        for f in (self.dir / f"job-{n}.pkl", result_file):
            f.unlink(missing_ok=True)
        result.log_tail = _tail(self.log_path, log_start)
        result.wall_s = time.perf_counter() - t0
        result.stage = result.stage or stage
        logger.debug("worker {} job {}: {} in {:.2f}s", self.device, n, result.status, result.wall_s)
        return result


class _Lending:
    """The caller's lock, lent while the child is on the host: :meth:`give` releases it,
    :meth:`take` holds it again and says how long that took (nothing when it was not lent)."""

    def __init__(self, lock):
        self.lock = lock
        self.lent = False

    def give(self) -> None:
        if self.lock is not None and not self.lent:
            self.lock.__exit__(None, None, None)
            self.lent = True

    def take(self) -> float:
        if not self.lent:
            return 0.0
        t0 = time.monotonic()
        self.lock.__enter__()
        self.lent = False
        return time.monotonic() - t0
