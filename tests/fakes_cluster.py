"""A FAKE GPU for the dask GPU workers (tests/test_cluster_gpu.py): the recipe a worker makes its GPU
machinery from, in the place of :class:`optiml.cluster.on_worker.LocalGpu`. Everything else on the
worker is optiml's own code (the task, the files shipped and kept, the per-process machinery, the
host's ncu lock, the model check); only the GPU is fake. None of it is GPU behaviour.

Each call appends one JSON line to ``log/calls.jsonl`` (what ran, on which worker, host and process,
when, and what it found), so a test can see where and when the work happened."""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from optiml.profiler.types import ProfileResult, ProfileStatus
from optiml.verify.harness import HarnessResult, RivalResult, TimingResult
from optiml.verify.sanitizer import SanitizeResult

FAKE_MODEL_ENV = "OPTIML_FAKE_GPU_MODEL"     # set on a worker: its fake GPU says it is this model


@dataclass(frozen=True)
class FakeGpu:
    """A FAKE GPU: every job verifies, timed at BLOCK / 100 ms (its baseline and rivals likewise).

    ``models``: (worker name, model) pairs (others are "FAKE GPU"; ``$OPTIML_FAKE_GPU_MODEL`` on a
    worker overrides); ``kill``: (BLOCK, times) pairs: a job of that BLOCK ends the worker process
    running it (os._exit) the first ``times`` times it runs anywhere; ``run_s``/``profile_s``: how long a
    job or a profile batch takes; ``versions``: (worker name, optiml version) pairs the named workers
    say they run; ``facts_s``: (worker name, seconds) pairs those workers take to say what GPU they have."""
    log: str
    models: tuple = ()
    kill: tuple = ()
    run_s: float = 0.0
    profile_s: float = 0.0
    versions: tuple = ()
    facts_s: tuple = ()

    def make(self) -> "FakeGpuHere":
        here = FakeGpuHere(self)
        here.record("make")
        return here


def _timing(kb) -> TimingResult:
    ms = kb.constants.get("BLOCK", 100) / 100
    return TimingResult(ms, ms, ms, ms, ms, ms, 0.0, 10, 3, 1, True, blocks_ms=[ms] * 3)


def _worker_name() -> str:
    from distributed import get_worker

    return str(get_worker().name)


def calls(log) -> list[dict]:
    """What the fake GPUs recorded, in order of writing."""
    p = Path(log) / "calls.jsonl"
    return [json.loads(ln) for ln in p.read_text().splitlines()] if p.exists() else []


class FakeGpuHere:
    """One worker process's FAKE GPU (made once per process by optiml's worker side)."""

    def __init__(self, recipe: FakeGpu):
        self.recipe = recipe

    def record(self, kind: str, **kw) -> None:
        from optiml.cluster.on_worker import host_name

        line = json.dumps({"kind": kind, "worker": _worker_name(), "pid": os.getpid(), "host": host_name(), **kw})
        with open(Path(self.recipe.log) / "calls.jsonl", "a") as f:
            f.write(line + "\n")

    def facts(self) -> dict:
        name = os.environ.get(FAKE_MODEL_ENV) or dict(self.recipe.models).get(_worker_name(), "FAKE GPU")
        time.sleep(dict(self.recipe.facts_s).get(_worker_name(), 0.0))
        version = dict(self.recipe.versions).get(_worker_name())
        return {"name": name, "arch": "sm_90", "driver": "0.0", **({"optiml": version} if version else {})}

    def run(self, job) -> HarnessResult:
        block = job.candidate.constants.get("BLOCK")
        cubin = Path(job.candidate.cubin_path)
        seen = {"block": block, "cubin": str(cubin), "sha": hashlib.sha256(cubin.read_bytes()).hexdigest(),
                "device": job.device, "baseline": job.baseline is not None, "rivals": len(job.rivals)}
        times = dict(self.recipe.kill).get(block, 0)
        if times and sum(1 for c in calls(self.recipe.log) if c["kind"] == "killed" and c["block"] == block) < times:
            self.record("killed", **seen)
            os._exit(1)
        t0 = time.time()
        time.sleep(self.recipe.run_s)
        self.record("run", t0=t0, t1=time.time(), **seen)
        return HarnessResult("ok", timing=_timing(job.candidate),
                             baseline_timing=_timing(job.baseline) if job.baseline is not None else None,
                             rivals=[RivalResult("ok", timing=_timing(r)) for r in job.rivals],
                             device_name=self.facts()["name"], phases={"verify": 0.001})

    def profile_batch(self, jobs, device_name: str) -> list[ProfileResult]:
        t0 = time.time()
        time.sleep(self.recipe.profile_s)
        self.record("profile", t0=t0, t1=time.time(), jobs=len(jobs), device_name=device_name,
                    blocks=[j.candidate.constants.get("BLOCK") for j in jobs])
        return [ProfileResult(ProfileStatus.OK, metrics={"achieved_occupancy_pct": 50.0}, wall_s=self.recipe.profile_s)
                for _ in jobs]

    def sanitize(self, job) -> SanitizeResult:
        self.record("sanitize", block=job.candidate.constants.get("BLOCK"))
        return SanitizeResult("clean", "passed memcheck", tools=("memcheck",), wall_s=0.01)

    def close(self) -> None:
        pass


def setenv(name: str, value: str | None) -> None:
    """Set (None: remove) an environment variable in the process it runs in (a worker, by client.run)."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
