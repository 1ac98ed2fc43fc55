"""One case's data drawn and judged on the GPU (the GPU child's fast path).

:class:`FilledCase` allocates a case's buffers and draws every input on the device with
:mod:`optiml.verify.gpu_ops` (the same values :func:`gpu_ops.host_fill` gives, one stream per
argument as :func:`inputs.make_case` has), poisons the outputs, and can restore them before a
launch. :func:`judge` compares a candidate's case with the reference's on the device and fills
a :class:`CaseCheck` as :func:`compare.check_output` does; only a Python reference brings data to
the host (its inputs down, its outputs up). Imported by the GPU child only.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dt
from ..spec import TaskSpec
from .compare import CaseCheck, summarize
from .inputs import CaseData, scalar_numpy


class FilledCase:
    """Device buffers for one case, drawn on the GPU from ``seed`` (never a host copy)."""

    def __init__(self, gpu, spec: TaskSpec, sizes: dict, seed: int, constants: dict):
        self.gpu, self.spec, self.seed = gpu, spec, seed
        self.ops, drv = gpu.ops, gpu.drv
        self.bufs: dict[str, object] = {}
        self.meta: dict[str, tuple] = {}            # name -> (n, dtype, shape, stream index, init, role)
        self.scalars: dict[str, object] = {}
        for i, a in enumerate(spec.args):
            if a.role == "scalar":
                self.scalars[a.name] = spec.scalar_value(a, sizes, constants)
                continue
            shape = spec.shape(a, sizes, constants)
            n = math.prod(shape)
            self.meta[a.name] = (n, a.dtype, shape, i, a.init, a.role)
            self.bufs[a.name] = drv.mem_alloc(max(n * _itemsize(a.dtype), 1))
        self.refill()

    def nbytes(self, name: str) -> int:
        n, dtype, *_ = self.meta[name]
        return n * _itemsize(dtype)

    def refill(self, names=None, stream=None) -> None:
        """Draw the inputs and inouts again (the same values) and poison the outputs."""
        for name, (n, dtype, _, i, init, role) in self.meta.items():
            if names is not None and name not in names:
                continue
            if role == "output":
                self.ops.poison(self.bufs[name], n, dtype, stream)
            else:
                self.ops.fill(self.bufs[name], n, dtype, init, self.seed, i, stream)

    def pristine(self, name: str):
        """A fresh buffer holding what ``name`` held before any launch (free it after)."""
        n, dtype, _, i, init, role = self.meta[name]
        buf = self.gpu.drv.mem_alloc(max(n * _itemsize(dtype), 1))
        self.ops.fill(buf, n, dtype, init, self.seed, i, None)
        return buf

    def args(self) -> list:
        return [int(self.bufs[a.name]) if a.is_array else scalar_numpy(a, self.scalars[a.name]) for a in self.spec.args]

    def download(self, names=None) -> dict[str, np.ndarray]:
        out = {}
        for name, (n, dtype, shape, *_) in self.meta.items():
            if names is not None and name not in names:
                continue
            host = np.empty(shape, dtype=np.dtype(_dt.get(dtype).storage))
            if n:
                self.gpu.drv.memcpy_dtoh(host, self.bufs[name])
            out[name] = host
        return out

    def upload(self, arrays: dict[str, np.ndarray]) -> None:
        for name, arr in arrays.items():
            if arr.nbytes:
                self.gpu.drv.memcpy_htod(self.bufs[name], np.ascontiguousarray(arr))

    def host_data(self) -> CaseData:
        """Inputs and inouts brought to the host (for a Python reference), outputs poisoned there."""
        from .inputs import poisoned

        arrays = self.download([n for n, m in self.meta.items() if m[5] != "output"])
        for name, (n, dtype, shape, *_rest) in self.meta.items():
            if name not in arrays:
                arrays[name] = poisoned(shape, dtype)
        ordered = {a.name: arrays[a.name] for a in self.spec.args if a.name in arrays}
        return CaseData(ordered, dict(self.scalars))

    def free(self) -> None:
        for b in self.bufs.values():
            b.free()
        self.bufs = {}


def _itemsize(dtype: str) -> int:
    return np.dtype(_dt.get(dtype).storage).itemsize


def judge(gpu, spec: TaskSpec, size_index: int, sizes: dict, cand: FilledCase, ref: FilledCase) -> CaseCheck:
    """Compare the candidate's outputs with the reference's (both on the device), and its
    inputs with what they held before: the CaseCheck :func:`worker._check_case` would give."""
    checks = []
    for a in spec.args:
        if a.role in ("output", "inout"):
            tol = spec.tolerance(a.dtype)
            n = cand.meta[a.name][0]
            checks.append(gpu.ops.compare(cand.bufs[a.name], ref.bufs[a.name], n, a.dtype, tol.atol, tol.rtol,
                                          poisonable=a.role == "output", name=a.name, rel_rms=tol.rel_rms))
    modified = []
    for a in spec.args:
        if a.role == "input":
            before = cand.pristine(a.name)
            try:
                if gpu.ops.differs(cand.bufs[a.name], before, cand.nbytes(a.name)):
                    modified.append(a.name)
            finally:
                before.free()
    return summarize(size_index, sizes, cand.seed, checks, modified)
