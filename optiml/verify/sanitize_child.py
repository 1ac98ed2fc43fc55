"""The GPU child under compute-sanitizer (``python -m optiml.verify.worker --sanitize JOBDIR``):
the candidate alone, launched once at the smallest verification size, on buffers of exactly the
arrays' sizes; inputs hold fresh draws, outputs are left unwritten (so a read of memory the kernel
never wrote is one initcheck sees). No reference and no gpu_ops kernel runs, so whatever the tool
reports is the candidate's. Exit 0 after a clean launch, 4 when the launch failed.

When the parent asks for it (a ``wait`` file in JOBDIR), the child writes ``ready`` once all is
set, launches only after the parent's ``go``, and writes ``finished``: the parent holds the
device only for the launch, not for the tool's start-up."""
from __future__ import annotations

import math
import os
import pickle
import time
from pathlib import Path

from .gpu import _launch, _open_gpu
from .harness import HarnessJob
from .inputs import make_case, scalar_numpy


def smallest_size_index(spec, constants: dict | None = None) -> int:
    """The verification size set with the fewest array bytes (the timing size when there is none)."""
    sets = spec.all_size_sets
    if len(sets) == 1:
        return 0

    def nbytes(i: int) -> int:
        return sum(math.prod(spec.shape(a, sets[i], constants or {})) for a in spec.args if a.is_array)
    return min(range(1, len(sets)), key=lambda i: (nbytes(i), i))


def _wait_for_go(d: Path, timeout_s: float = 3600.0) -> bool:
    (d / "ready").write_text("")
    parent, deadline = os.getppid(), time.monotonic() + timeout_s
    while not (d / "go").exists():
        if time.monotonic() > deadline or os.getppid() != parent:
            return False
        time.sleep(0.002)
    return True


def sanitize_once(jobdir: str) -> int:
    d = Path(jobdir)
    job: HarnessJob = pickle.loads((d / "job.pkl").read_bytes())
    gpu, failed = _open_gpu(job.device)
    if gpu is None:
        print(f"optiml: {failed.message}", flush=True)
        return 3
    bufs = []
    try:
        spec = job.spec
        idx = smallest_size_index(spec, job.candidate.constants)
        seed = job.cases[0].seed if job.cases else 0
        data = make_case(spec, spec.all_size_sets[idx], seed, job.candidate.constants)
        _, fn = gpu.load(job.candidate, spec)
        args = []
        for a in spec.args:
            if not a.is_array:
                args.append(scalar_numpy(a, data.scalars[a.name]))
                continue
            arr = data.arrays[a.name]
            buf = gpu.drv.mem_alloc(max(arr.nbytes, 1))
            bufs.append(buf)
            if a.role != "output" and arr.nbytes:
                gpu.drv.memcpy_htod(buf, arr)
            args.append(int(buf))
        if (d / "wait").exists() and not _wait_for_go(d):
            return 5
        try:
            _launch(gpu, fn, job.candidate.launches[idx], args)
            gpu.stream.synchronize()
        finally:
            (d / "finished").write_text("")
        print("optiml: sanitized launch done", flush=True)
        return 0
    except gpu.drv.Error as e:
        print(f"optiml: the launch failed: {e}", flush=True)
        return 4
    finally:
        for b in bufs:
            try:
                b.free()
            except Exception:
                pass
        gpu.close()

