"""Profile mode of the worker (run under ncu): one launch per candidate inside the NVTX range
ncu's filter selects, for a batch started ahead of its jobs."""
from __future__ import annotations

import contextlib
import os
import pickle
import time
from dataclasses import replace
from pathlib import Path

from .gpu import Gpu, KernelFault, Stage, _launch, _new_case, _open_gpu, timing_seed
from .harness import HarnessJob


def profile_once(gpu: Gpu, job: HarnessJob, stage: Stage, outer: str | None = None) -> None:
    """One warm-up launch, then one launch inside the NVTX range ncu is told to profile
    (``optiml.profile.<tag>``, itself inside ``optiml.profile.<outer>`` when given)."""
    import nvtx

    spec = job.spec
    _, fn = gpu.load(job.candidate, spec)
    base_seed = timing_seed(job)
    dc = _new_case(gpu, spec, spec.timing_sizes, base_seed, job.candidate.constants)
    launch = job.candidate.launches[0]
    stage("profiling: warm-up launch")
    _launch(gpu, fn, launch, dc.args())
    gpu.stream.synchronize()
    if gpu.ops is not None:     # the inputs again and poisoned outputs
        dc.refill()
        gpu.drv.Context.synchronize()
    else:
        dc.upload()
    stage("profiling: profiled launch")
    with (nvtx.annotate(f"optiml.profile.{outer}", domain="optiml") if outer else contextlib.nullcontext()):
        with nvtx.annotate(f"optiml.profile.{job.profile_tag}", domain="optiml"):
            _launch(gpu, fn, launch, dc.args())
            gpu.stream.synchronize()
    dc.free()


def _wait_for_file(d: Path, name: str, ppid: int) -> bool:
    """Until ``d/name`` exists (True), or ``d/quit`` does or process ``ppid`` (optiml) is gone (False)."""
    n = 0
    while not (d / name).exists():
        if (d / "quit").exists():
            return False
        n += 1
        if n % 500 == 0:                  # about once a second
            try:
                os.kill(ppid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                pass
        time.sleep(0.002)
    return True


def profile_batch(workdir: str, device: int, outer: str, ppid: int) -> int:
    """Profile mode for several candidates under one ncu process, started ahead of its jobs: the
    child opens its context on ``device`` first, then waits for ``WORKDIR/jobs.pkl``
    (``[(tag, HarnessJob), ...]``; ``WORKDIR/quit``, or optiml's process ``ppid`` gone, ends it),
    loads every kernel, writes ``WORKDIR/ready`` and waits for ``WORKDIR/go`` (the parent holds
    the GPU from then on), then launches each candidate once to warm up and once inside NVTX
    range ``optiml.profile.<tag>`` within ``optiml.profile.<outer>`` (ncu's filter, fixed when it
    started), appending the tag to ``WORKDIR/done.txt`` as each one is through;
    ``WORKDIR/finished`` says it is over. A fault stops the batch (the rest are not profiled)."""
    d = Path(workdir)
    stage = Stage(d / "stage.txt")
    gpu, failed = _open_gpu(device)
    if gpu is None:
        (d / "error.txt").write_text(failed.message)
        (d / "ready").write_text("")
        return 1
    try:
        if not _wait_for_file(d, "jobs.pkl", ppid):
            return 0
        jobs = pickle.loads((d / "jobs.pkl").read_bytes())
        gpu.enable_ops(jobs[0][1].ops_cubin)
        for _, job in jobs:
            gpu.load(job.candidate, job.spec)
        (d / "ready").write_text("")
        if not _wait_for_file(d, "go", ppid):
            return 0
        with open(d / "done.txt", "a") as done:
            for tag, job in jobs:
                try:
                    profile_once(gpu, replace(job, profile_tag=tag), stage, outer=outer)
                except (KernelFault, gpu.drv.Error) as e:
                    (d / "error.txt").write_text(f"{tag}: {e}")
                    break
                done.write(tag + "\n")
                done.flush()
        return 0
    finally:
        (d / "finished").write_text("")
        gpu.close()
