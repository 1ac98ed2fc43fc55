"""The parent side of the GPU harness.

Every GPU job runs in a child process (``python -m optiml.verify.worker``). A candidate that
faults, hangs or corrupts its CUDA context takes down only that child: the parent reads the
child's result file, or, if there is none, records a runtime error (the child died) or a
timeout (the parent killed it), with the child's last stage and output, and goes on.
"""
from __future__ import annotations

import json
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from loguru import logger

from ..procs import child_env, kill_group
from ..spec import Launch, TaskSpec
from .compare import CaseCheck, OutputCheck
from ..status import Status

DEFAULT_TIMEOUT_S = 120.0
LOG_TAIL = 8_000
LOG_LIMIT = 64 << 20        # a child printing more than this is stopped (its log is on disk)
POLL_S = 0.1


@dataclass(frozen=True)
class KernelBinary:
    """What the child loads: a cubin, the entry symbol, and its launch for every size set
    (index 0 is the timing size, then the verification sizes, as ``TaskSpec.all_size_sets``)."""
    cubin_path: str
    symbol: str
    launches: tuple[Launch, ...]
    constants: dict = field(default_factory=dict)


@dataclass(frozen=True)
class FunctionRef:
    """A Python function on GPU arrays measured in place of a kernel (a spec's ``[baseline]``):
    ``framework`` "torch" or "cupy", the file and the function's name."""
    framework: str
    path: str
    name: str


@dataclass(frozen=True)
class Case:
    size_index: int
    seed: int


@dataclass(frozen=True)
class HarnessJob:
    spec: TaskSpec
    candidate: KernelBinary
    reference: KernelBinary | None          # None: the spec's Python reference
    cases: tuple[Case, ...]
    time_it: bool = True
    device: int = 0
    profile_tag: str | None = None          # under ncu: its launch inside NVTX range optiml.profile.<tag>
    baseline: KernelBinary | None = None    # timed interleaved with the candidate (the final speedup)
    rivals: tuple[KernelBinary, ...] = ()   # other candidates timed interleaved with it (after the baseline),
                                            # each verified on the job's cases after the timing
    ops_cubin: str | None = None            # gpu_ops kernels: inputs drawn and outputs compared on the GPU
    function: FunctionRef | None = None     # verify and time this function instead of the candidate kernel
                                            # (whose binary still gives the sizes' constants and launches)
    vendor: FunctionRef | None = None       # what a user would call instead (a spec's [baseline]), timed
                                            # interleaved too, last, in the same rounds: the same clocks


@dataclass
class TimingResult:
    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    p10_ms: float
    p90_ms: float
    iqr_ms: float
    reps: int
    warmup_launches: int
    input_sets: int
    flushed_l2: bool
    samples_ms: list[float] = field(default_factory=list)
    median_ci_rel: float | None = None    # half the median's 95% confidence interval, over the median
    blocks_ms: list[float] = field(default_factory=list)   # interleaved: each block's median, round by round

    @property
    def spread(self) -> float:
        """Interquartile range over the median: a timing's own noise."""
        return self.iqr_ms / self.median_ms if self.median_ms > 0 else 0.0


@dataclass
class RivalResult:
    """A rival of the job's candidate (``HarnessJob.rivals``): its verification after the timing
    (a status, as a candidate's) and its timing, kept only when it verified."""
    status: str
    message: str = ""
    timing: TimingResult | None = None


@dataclass
class HarnessResult:
    status: str        # ok | wrong_output | runtime_error | launch_error | timeout | reference_error | harness_error
    message: str = ""
    checks: list[CaseCheck] = field(default_factory=list)
    timing: TimingResult | None = None
    baseline_timing: TimingResult | None = None   # the job's baseline, timed interleaved with it
    rivals: list[RivalResult] = field(default_factory=list)   # the job's rivals, in its order
    vendor_timing: TimingResult | None = None     # the job's vendor function, timed interleaved with it
    vendor_message: str = ""      # why the vendor function has no timing (it did not load)
    clocks: dict | None = None    # interleaved timing: the GPU's SM clock and temperature (NVML) at its start and end
    device_name: str = ""
    device_pci: str = ""      # the GPU's PCI bus id (informational: which physical GPU ran the job)
    log_tail: str = ""
    wall_s: float = 0.0
    stage: str = ""
    phases: dict[str, float] = field(default_factory=dict)   # seconds in the child: verify, time, ...

    @property
    def failed_checks(self) -> list[CaseCheck]:
        return [c for c in self.checks if not c.passed]

    def vacuous_atol(self) -> dict[str, str]:
        """{output: note} for each output whose atol exceeds the reference's RMS at some size (the
        first such case's note)."""
        found: dict[str, str] = {}
        for case in self.checks:
            for o in case.outputs:
                if o.atol_vacuous and o.name not in found:
                    found[o.name] = case.vacuous_note(o)
        return found

    def notes(self) -> list[str]:
        """What the user should know of the checks though they passed: one note an output whose atol
        exceeds the reference's RMS at some size."""
        return list(self.vacuous_atol().values())

    def to_dict(self) -> dict:
        d = asdict(self)
        d["checks"] = [c.to_dict() for c in self.checks]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "HarnessResult":
        d = dict(d)
        checks = []
        for c in d.get("checks", []):
            c = {k: v for k, v in c.items() if k not in ("max_abs_err", "max_rel_err")}
            c["outputs"] = [OutputCheck(**o) for o in c.get("outputs", [])]
            checks.append(CaseCheck(**c))
        d["checks"] = checks
        for key in ("timing", "baseline_timing", "vendor_timing"):
            if d.get(key):
                d[key] = TimingResult(**d[key])
        d["rivals"] = [RivalResult(r["status"], r.get("message", ""),
                                   TimingResult(**r["timing"]) if r.get("timing") else None)
                       for r in d.get("rivals") or []]
        return cls(**d)


class Harness(Protocol):
    """Runs GPU jobs. ``lends_gpu``: ``run`` takes the caller's device lock as ``lend`` and gives
    it back while the job computes on the host; ``starts``: GPU children started so far."""
    lends_gpu: bool
    timeout_s: float
    starts: int

    def run(self, job: HarnessJob, lend=None) -> HarnessResult: ...

    def start(self) -> None:
        """Get ready for the first job (a persistent worker opens its GPU context)."""

    def close(self) -> None:
        """Stop what it started."""


class HarnessBase:
    """The :class:`Harness` members a harness without a persistent child needs."""
    lends_gpu = False
    timeout_s = DEFAULT_TIMEOUT_S
    starts = 0

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass


class SubprocessHarness(HarnessBase):
    """Runs each job in a fresh child process with a wall-clock timeout."""

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S, python: str | None = None, env: dict | None = None,
                 log_limit: int = LOG_LIMIT):
        self.timeout_s = timeout_s
        self.log_limit = log_limit
        self.python = python or sys.executable
        self.env = env

    def run(self, job: HarnessJob, lend=None) -> HarnessResult:
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="optiml-job-") as tmp:
            d = Path(tmp)
            (d / "job.pkl").write_bytes(pickle.dumps(job))
            log_path = d / "child.log"
            env = child_env(self.env)
            with open(log_path, "wb") as log:
                proc = subprocess.Popen([self.python, "-m", "optiml.verify.worker", str(d)],
                                        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        env=env, start_new_session=True)
                timed_out, flooded = False, False
                deadline = time.monotonic() + self.timeout_s
                while True:
                    try:
                        proc.wait(timeout=min(POLL_S, max(deadline - time.monotonic(), 0.001)))
                        break
                    except subprocess.TimeoutExpired:
                        pass
                    if time.monotonic() >= deadline:
                        timed_out = True
                    elif _size(log_path) > self.log_limit:
                        flooded = True
                    if timed_out or flooded:
                        kill_group(proc)
                        break
            wall = time.perf_counter() - t0
            stage = _read(d / "stage.txt").strip()
            tail = _tail(log_path)
            outcome = "flooded" if flooded else "timeout" if timed_out else "done"
            result = child_result(outcome, d / "result.json", stage, self.timeout_s, self.log_limit, proc.returncode)
            result.log_tail = tail
            result.wall_s = wall
            result.stage = result.stage or stage
            logger.debug("harness job: {} in {:.2f}s", result.status, wall)
            return result


def child_result(outcome: str, result_file: Path | None, stage: str, timeout_s: float, log_limit: int,
                 returncode: int | None) -> HarnessResult:
    """What a GPU child's job came to: ``outcome`` is 'flooded' (stopped at the log limit),
    'timeout' (killed), or 'done' (it answered or ended: its result file, if it wrote one and
    ``result_file`` is given, else how it exited)."""
    if outcome == "flooded":
        return HarnessResult(Status.RUNTIME_ERROR, f"the GPU child printed more than {log_limit >> 20} MiB"
                             f"{' during ' + stage if stage else ''} and was stopped")
    if outcome == "timeout":
        return HarnessResult(Status.TIMEOUT, f"the GPU child did not finish within {timeout_s:g} s"
                             f"{' (last stage: ' + stage + ')' if stage else ''} and was killed")
    if result_file is not None and result_file.is_file():
        try:
            return HarnessResult.from_dict(json.loads(result_file.read_text()))
        except (ValueError, TypeError, KeyError) as e:
            return HarnessResult(Status.HARNESS_ERROR, f"could not read the child's result ({e})")
    sig = f" (signal {signal.Signals(-returncode).name})" if returncode is not None and returncode < 0 else ""
    return HarnessResult(Status.RUNTIME_ERROR, f"the GPU child exited with code {returncode}{sig} without a result"
                         f"{' during ' + stage if stage else ''}")


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except FileNotFoundError:
        return 0


def _read(p: Path) -> str:
    try:
        return p.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _tail(p: Path, start: int = 0) -> str:
    """The last LOG_TAIL bytes written to ``p`` from offset ``start`` on."""
    try:
        size = p.stat().st_size
        with open(p, "rb") as f:
            begin = max(start, size - LOG_TAIL)
            f.seek(begin)
            text = f.read().decode("utf-8", "replace")
        skipped = begin - start
        return (f"[... {skipped} bytes of child output omitted ...]\n" if skipped > 0 else "") + text
    except FileNotFoundError:
        return ""
