"""The GPU side's building blocks, shared by the worker's modes: an open context (:class:`Gpu`,
the only place pycuda is imported), the stage reporter the parent reads, a case's device
buffers, and launching.
"""
from __future__ import annotations

import contextlib
import time
from pathlib import Path

import numpy as np

from ..spec import Launch, TaskSpec
from .harness import HarnessResult, KernelBinary
from .inputs import CaseData, make_case, scalar_numpy
from ..status import Status


# pycuda packs arguments with its own struct module: half and bfloat16 scalars go as their bits
_STRUCT = {"float64": "d", "float32": "f", "float16": "H", "bfloat16": "H", "int64": "q", "int32": "i",
           "int16": "h", "int8": "b", "uint64": "Q", "uint32": "I", "uint16": "H", "uint8": "B", "bool": "B"}


class KernelFault(Exception):
    """A CUDA error raised by a launch or the synchronisation after it."""


@contextlib.contextmanager
def baseline_faults(passed=()):
    """Around a call of a spec's [baseline] function: anything it raises is its failure, a KernelFault
    that says so; a KernelFault and the exception types in ``passed`` (the driver's errors, where the
    caller tells them apart) go through as they are."""
    try:
        yield
    except (KernelFault, *passed):
        raise
    except Exception as e:
        raise KernelFault(f"the baseline function raised {type(e).__name__}: {e}") from None


class Stage:
    """What the child is doing (``stage.txt``, read by the parent after a timeout), how long each
    phase of a job took (``phases``: seconds by name; a phase may hold others, as verify holds
    the host's Python reference), and, in the persistent worker, when the job does not need the
    GPU (:meth:`off_gpu`)."""

    def __init__(self, path: Path, ctrl=None, stdin=None):
        self.path = path
        self.phases: dict[str, float] = {}
        self._ctrl, self._stdin = ctrl, stdin

    def __call__(self, text: str) -> None:
        self.path.write_text(text)

    @contextlib.contextmanager
    def phase(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - t0

    @contextlib.contextmanager
    def off_gpu(self):
        """Host-only work (the spec's Python reference): the persistent worker says ``host`` on
        its control pipe, so the parent may lend the GPU meanwhile (to a profiled batch), and
        ``gpu`` after, then waits for the parent's ``go`` on stdin before it touches the GPU
        again. Elsewhere (a one-job child) this does nothing."""
        if self._ctrl is None:
            yield
            return
        self._ctrl.write("host\n")
        try:
            yield
        finally:
            self._ctrl.write("gpu\n")
            with self.phase("waiting_for_gpu"):
                answer = self._stdin.readline()
            if answer.strip() != "go":          # the parent is gone or closing: stop here
                raise SystemExit(0)


class Gpu:
    """A CUDA context on one device, and the kernels loaded into it."""

    def __init__(self, device: int):
        import pycuda.driver as drv

        self.drv = drv
        drv.init()
        self.index = device
        self.dev = drv.Device(device)
        # the device's primary context, the one the CUDA runtime (torch, CuPy) uses: a GPU reference's
        # tensors and the harness's buffers are then in one context
        self.ctx = self.dev.retain_primary_context()
        self.ctx.push()
        self.name = self.dev.name()
        self.pci = self.dev.pci_bus_id()
        self.l2_bytes = self.dev.get_attribute(drv.device_attribute.L2_CACHE_SIZE)
        self.stream = drv.Stream()
        self.ops = None                           # gpu_ops.GpuOps once a job brings its cubin
        self._modules: dict[str, object] = {}     # cubin path -> module, for the life of a job
        self.keep: set[str] = set()               # cubins kept across jobs (the seed reference)
        self.device_functions: dict = {}          # (kind, file, function) -> frameworks.DeviceFunction, for the worker's life

    def load(self, kb: KernelBinary, spec: TaskSpec):
        mod = self._modules.get(kb.cubin_path)
        if mod is None:
            mod = self._modules[kb.cubin_path] = self.drv.module_from_file(kb.cubin_path)
        fn = mod.get_function(kb.symbol)
        fn.prepare("".join("P" if a.is_array else _STRUCT[a.dtype] for a in spec.args))
        _allow_dynamic_shared(self.drv, fn, kb.launches)
        return mod, fn

    def enable_ops(self, cubin_path: str | None) -> None:
        """Load the gpu_ops kernels (inputs drawn and outputs compared on the device); without
        them everything is drawn and compared on the host, as before."""
        if self.ops is not None or not cubin_path:
            return
        from .gpu_ops import GpuOps

        try:
            self.ops = GpuOps(self.drv, cubin_path)
        except Exception as e:      # a bad cubin: the host path still works
            print(f"optiml: gpu_ops unavailable ({e}); drawing and comparing on the host", flush=True)

    def unload_candidates(self) -> None:
        """Drop every module but the kept ones (a persistent worker between jobs)."""
        self._modules = {k: m for k, m in self._modules.items() if k in self.keep}

    def close(self):
        try:
            self.ctx.pop()
            self.ctx.detach()
        except Exception:
            pass


def _allow_dynamic_shared(drv, fn, launches) -> None:
    """Past 48 KB a block, static and dynamic together, the dynamic part must be allowed before a
    launch (the driver refuses it otherwise: 'invalid argument'): once, when the binary is loaded,
    for the largest of its launches (not before every launch, inside the timed region)."""
    need = max((launch.shared_mem for launch in launches), default=0)
    if need and need + fn.get_attribute(drv.function_attribute.SHARED_SIZE_BYTES) > 48 * 1024:
        fn.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, need)


def _launch(gpu: Gpu, fn, launch: Launch, args: list) -> None:
    fn.prepared_async_call(launch.grid, launch.block, gpu.stream, *args, shared_size=launch.shared_mem)


class DeviceCase:
    """Device buffers for one case's data."""

    def __init__(self, gpu: Gpu, spec: TaskSpec, data: CaseData, seed: int = 0):
        self.gpu, self.spec, self.data, self.seed = gpu, spec, data, seed
        self.bufs = {}
        for name, arr in data.arrays.items():
            self.bufs[name] = gpu.drv.mem_alloc(max(arr.nbytes, 1))
        self.upload()

    def nbytes(self, name: str) -> int:
        return self.data.arrays[name].nbytes

    def upload(self):
        for name, arr in self.data.arrays.items():
            if arr.nbytes:
                self.gpu.drv.memcpy_htod(self.bufs[name], np.ascontiguousarray(arr))

    def args(self) -> list:
        out = []
        for a in self.spec.args:
            out.append(int(self.bufs[a.name]) if a.is_array else scalar_numpy(a, self.data.scalars[a.name]))
        return out

    def download(self) -> dict[str, np.ndarray]:
        out = {}
        for name, arr in self.data.arrays.items():
            host = np.empty_like(arr)
            if arr.nbytes:
                self.gpu.drv.memcpy_dtoh(host, self.bufs[name])
            out[name] = host
        return out

    def free(self):
        for b in self.bufs.values():
            b.free()
        self.bufs = {}


def _new_case(gpu: Gpu, spec: TaskSpec, sizes: dict, seed: int, constants: dict):
    """A case's device buffers: drawn on the GPU when gpu_ops is loaded, else drawn on the host and uploaded."""
    if gpu.ops is not None:
        from .device_case import FilledCase

        return FilledCase(gpu, spec, sizes, seed, constants)
    return DeviceCase(gpu, spec, make_case(spec, sizes, seed, constants), seed)


def timing_seed(job) -> int:
    """The seed timing's input sets count up from (set 0 may instead reuse the verified case at
    the timing size), and the seed of the profiled launch's inputs."""
    return (job.cases[0].seed if job.cases else 0) + 7919


def _free(gpu: Gpu, thing) -> None:
    try:
        thing.free()
    except gpu.drv.Error:
        pass


def _copy_on_device(gpu: Gpu, src, nbytes: int):
    dst = gpu.drv.mem_alloc(max(nbytes, 1))
    if nbytes:
        gpu.drv.memcpy_dtod(dst, src, nbytes)
    return dst


def _open_gpu(device: int) -> tuple[Gpu | None, HarnessResult | None]:
    try:
        return Gpu(device), None
    except ImportError:
        return None, HarnessResult(Status.HARNESS_ERROR, "pycuda is not installed; install optiml with the gpu extra "
                                   "(pip install 'optiml-kernels[gpu]')")
    except Exception as e:
        return None, HarnessResult(Status.HARNESS_ERROR, f"could not open GPU {device}: {e}")
