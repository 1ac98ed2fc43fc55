"""compute-sanitizer's text output, parsed (parent side, no GPU): how many errors each tool saw
and the first one in words (tool, kind, kernel, source line, thread and block, the address detail).

Real output of compute-sanitizer 2025.3.1 for each tool is in tests/data/sanitizer/."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")

_PREFIX = re.compile(r"^========= ?")
_AT = re.compile(r"^\s*at (?P<kernel>.+?)(?:\+0x[0-9a-f]+)?(?: in (?P<where>\S+))?$")
_BY = re.compile(r"^\s*by thread \((?P<thread>[\d,]+)\) in block \((?P<block>[\d,]+)\)")
_RACE = re.compile(r"^(?:Error|Warning): Race reported between (?P<first>\w+) access at (?P<kernel>.+?)"
                   r"(?:\+0x[0-9a-f]+)?(?: in (?P<where>\S+))?$")
_SUMMARY = re.compile(r"ERROR SUMMARY: (?P<n>[\d,]+) errors?")
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY: (?P<shown>\d+) hazards? displayed \((?P<n>\d+) errors?, (?P<w>\d+) warnings?\)")
_NOISE = ("Saved host backtrace", "Host Frame:", "Device Frame:", "Target application returned an error",
          "Program hit ", "ERROR SUMMARY", "RACECHECK SUMMARY", "COMPUTE-SANITIZER")


@dataclass(frozen=True)
class Finding:
    """One error a tool reported, as it reported it."""
    tool: str
    kind: str                        # "Invalid __global__ write of size 4 bytes", "Race reported between ..."
    kernel: str = ""
    where: str = ""                  # file:line with -lineinfo
    thread: str = ""
    block: str = ""
    detail: str = ""                 # the address lines ("... is 1 bytes after the nearest allocation ...")

    def sentence(self) -> str:
        at = f" in {self.kernel}" + (f" at {self.where}" if self.where else "") if self.kernel else ""
        who = f", thread ({self.thread}) of block ({self.block})" if self.thread else ""
        more = f": {self.detail}" if self.detail else ""
        return f"{self.tool}: {self.kind}{at}{who}{more}"


@dataclass(frozen=True)
class ToolReport:
    tool: str
    errors: int                                   # as the tool's summary counts them
    findings: tuple[Finding, ...] = field(default_factory=tuple)   # the ones it printed
    complete: bool = True                         # the summary line was there (the tool ran to its end)

    @property
    def clean(self) -> bool:
        return self.complete and self.errors == 0


def parse(text: str, tool: str) -> ToolReport:
    """One tool's run: its error count and the findings it printed, in order."""
    lines = [_PREFIX.sub("", ln) for ln in text.splitlines() if ln.startswith("=========")]
    findings: list[dict] = []
    errors, complete = None, False
    for raw in lines:
        line = raw.strip()
        if m := _RACE_SUMMARY.search(line):
            errors, complete = int(m.group("n")), True
            continue
        if m := _SUMMARY.search(line):
            if errors is None:
                errors = int(m.group("n").replace(",", ""))
            complete = True
            continue
        if not line or any(line.startswith(n) or n in line for n in _NOISE):
            continue
        indented = raw.startswith(" ")
        if not indented:
            if m := _RACE.match(line):
                findings.append({"kind": line.split(" at ")[0].removeprefix("Error: ").removeprefix("Warning: "),
                                 "kernel": m.group("kernel"), "where": m.group("where") or ""})
                continue
            findings.append({"kind": line.rstrip(".")})
            continue
        if not findings:
            continue
        f = findings[-1]
        if (m := _AT.match(line)) and "kernel" not in f:
            f.update(kernel=m.group("kernel"), where=m.group("where") or "")
        elif m := _BY.match(line):
            f.update(thread=m.group("thread"), block=m.group("block"))
        elif line.startswith("and ") and f.get("kind", "").startswith("Race reported"):
            f["kind"] += " and " + line.removeprefix("and ").split(" at ")[0]
            if hz := re.search(r"\[(\d+) hazards?\]", line):
                f["detail"] = f"{hz.group(1)} hazards"
        elif line.startswith(("Access to", "and is", "Address")):
            f["detail"] = (f.get("detail", "") + " " + line).strip()
    found = tuple(Finding(tool=tool, **f) for f in findings)
    if errors is None:
        errors = len(found)
    return ToolReport(tool, errors, found, complete)


# ------------------------------------------------------------------------------- running it

SANITIZER_ENV = "OPTIML_COMPUTE_SANITIZER"
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_NICENESS = 10        # the tools run at this lower CPU priority (nice)
_EXIT_ON_ERROR = 86


@dataclass(frozen=True)
class SanitizeResult:
    """``status``: clean (every tool ran and found nothing), unsafe (a tool reported an error:
    ``finding`` is the first), or not_sanitized (the tool is missing or could not run: ``message``)."""
    status: str
    message: str = ""
    finding: Finding | None = None
    tools: tuple[str, ...] = ()        # the tools that ran to their end
    wall_s: float = 0.0
    gpu_s: float = 0.0                 # of which the GPU was held (the candidate's launches, all tools)

    @property
    def clean(self) -> bool:
        return self.status == "clean"

    def to_dict(self) -> dict:
        return {"status": self.status, "message": self.message, "tools": list(self.tools), "wall_s": self.wall_s,
                "gpu_s": self.gpu_s,
                "finding": None if self.finding is None else self.finding.__dict__ | {"sentence": self.finding.sentence()}}


def find_sanitizer() -> str | None:
    import os
    import shutil

    chosen = os.environ.get(SANITIZER_ENV)
    if chosen:
        return chosen if os.path.isfile(chosen) and os.access(chosen, os.X_OK) else None
    return shutil.which("compute-sanitizer") or next(
        (p for p in ("/usr/local/cuda/bin/compute-sanitizer",) if os.path.exists(p)), None)


class Sanitizer:
    """Runs a candidate's GPU job under each compute-sanitizer tool (the child launches the
    candidate alone, once, at the smallest verification size: :mod:`.sanitize_child`)."""

    def __init__(self, *, exe: str | None = None, tools=TOOLS, timeout_s: float = DEFAULT_TIMEOUT_S,
                 python: str | None = None, niceness: int = DEFAULT_NICENESS):
        import shutil
        import sys

        self.exe = exe or find_sanitizer()
        self.tools = tuple(tools)
        self.timeout_s = timeout_s
        self.python = python or sys.executable
        # the tools yield the CPU to nvcc and the GPU workers: a search sanitizing its bests in the
        # background must not slow its builds down
        nice = shutil.which("nice") if niceness else None
        self._nice = [nice, "-n", str(niceness)] if nice else []

    def command(self, tool: str, jobdir: str) -> list[str]:
        extra = ["--leak-check", "no"] if tool == "memcheck" else []
        return [*self._nice, self.exe, "--tool", tool, *extra, "--error-exitcode", str(_EXIT_ON_ERROR), "--print-limit", "1",
                "--show-backtrace", "no", self.python, "-m", "optiml.verify.worker", "--sanitize", jobdir]

    def sanitize(self, job, gpu_lock=None, cancel=None) -> SanitizeResult:
        """Every tool on ``job``'s candidate, the tools at once (each in a process of its own: their
        start-up is most of the cost); the verdict is the first report in :data:`TOOLS` order.
        ``gpu_lock`` (a context manager) is held only while a candidate's launch runs; ``cancel``
        (a threading.Event) set stops the tools: the result is not_sanitized, "cancelled"."""
        import pickle
        import tempfile
        import time
        from concurrent.futures import ThreadPoolExecutor
        from dataclasses import replace
        from pathlib import Path

        if self.exe is None:
            return SanitizeResult("not_sanitized", "compute-sanitizer was not found (install the CUDA toolkit, or set "
                                  f"{SANITIZER_ENV})")
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="optiml-sanitize-") as tmp:
            blob = pickle.dumps(replace(job, time_it=False, profile_tag=None))
            dirs = {}
            for tool in self.tools:
                dirs[tool] = Path(tmp) / tool
                dirs[tool].mkdir()
                (dirs[tool] / "job.pkl").write_bytes(blob)
            with ThreadPoolExecutor(len(self.tools), thread_name_prefix="optiml-sanitize") as pool:
                runs = dict(zip(self.tools, pool.map(lambda t: self._run(t, dirs[t], gpu_lock, cancel), self.tools)))
        wall = time.perf_counter() - t0
        gpu = sum(held for _, _, held in runs.values())
        runs = {tool: (code, out) for tool, (code, out, _) in runs.items()}
        if cancel is not None and cancel.is_set():
            return SanitizeResult("not_sanitized", "cancelled", wall_s=wall, gpu_s=gpu)
        done: list[str] = []
        for tool in self.tools:
            code, out = runs[tool]
            if code is None:
                return SanitizeResult("not_sanitized", f"{tool} did not finish within {self.timeout_s:g} s",
                                      tools=tuple(done), wall_s=wall, gpu_s=gpu)
            report = parse(out, tool)
            in_kernel = [f for f in report.findings if f.kernel]
            if in_kernel or (report.complete and report.errors):
                # a report about a kernel; a tool that failed to start reports no kernel and no summary
                finding = (in_kernel or list(report.findings) or [Finding(tool, f"{report.errors} error(s)")])[0]
                return SanitizeResult("unsafe", finding.sentence(), finding, tuple(done), wall, gpu)
            if not report.complete or code not in (0, _EXIT_ON_ERROR):
                last = next((ln for ln in reversed(out.strip().splitlines()) if ln.strip()), "no output")
                return SanitizeResult("not_sanitized", f"{tool} could not run the candidate (exit {code}): "
                                      f"{_PREFIX.sub('', last).strip()}", tools=tuple(done), wall_s=wall, gpu_s=gpu)
            done.append(tool)
        return SanitizeResult("clean", f"passed {', '.join(done)}", tools=tuple(done), wall_s=wall, gpu_s=gpu)

    def _run(self, tool: str, d, gpu_lock, cancel=None) -> tuple[int | None, str, float]:
        """One tool's run: (exit code, or None at the timeout or when cancelled; its output; the
        seconds it held ``gpu_lock``)."""
        import subprocess
        import time

        from ..procs import child_env, kill_group

        for name in ("ready", "go", "finished", "wait"):
            (d / name).unlink(missing_ok=True)
        if gpu_lock is not None:
            (d / "wait").write_text("")
        log = d / f"{tool}.log"
        deadline = time.monotonic() + self.timeout_s
        held = 0.0
        with open(log, "w") as f:
            proc = subprocess.Popen(self.command(tool, str(d)), stdout=f, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=child_env(), start_new_session=True)
        if gpu_lock is not None and _wait_for(d / "ready", proc, deadline, cancel):
            with gpu_lock:
                t0 = time.perf_counter()
                (d / "go").write_text("")
                _wait_for(d / "finished", proc, deadline, cancel)
                held = time.perf_counter() - t0
        while proc.poll() is None:
            if time.monotonic() > deadline or (cancel is not None and cancel.is_set()):
                kill_group(proc)
                proc.wait()
                return None, log.read_text(errors="replace"), held
            time.sleep(0.005)
        return proc.returncode, log.read_text(errors="replace"), held


def _wait_for(path, proc, deadline: float, cancel=None) -> bool:
    """Until ``path`` exists (True), or the process ended, the deadline passed or ``cancel`` was
    set (False)."""
    import time

    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline or (cancel is not None and cancel.is_set()):
            return path.exists()
        time.sleep(0.002)
    return True
