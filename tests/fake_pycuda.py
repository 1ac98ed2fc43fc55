"""A FAKE of the parts of ``pycuda.driver`` the GPU child's modules use, for tests on the CPU.

Device memory is host bytes; a kernel is a :class:`FakeFunction` whose call runs a Python
``effect`` (writing results, advancing the fake clock by a time the test chooses); events read
that clock. Every call is logged, so a test can check what was asked of the driver, in order.
Nothing here is GPU behaviour: the times and results are the test's own numbers.
"""
from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import numpy as np


class FakeAllocation(int):
    """A device pointer (an int, as pycuda's allocations convert to one) over fake memory."""

    def __new__(cls, drv: "FakeDriver", ptr: int, nbytes: int):
        obj = super().__new__(cls, ptr)
        obj.drv, obj.nbytes = drv, nbytes
        return obj

    def free(self):
        self.drv.freed.append(int(self))


class FakeFunction:
    """A loaded kernel: ``prepare``/``prepared_async_call`` (the harness's way) and a plain call
    with ``grid``/``block`` keywords (calibrate's way). Each launch is logged as
    ``("launch", name, grid, block, args)``, then ``effect(drv, grid, block, args)`` runs (when
    given): it may write fake memory and return milliseconds to advance the fake clock by."""

    def __init__(self, drv: "FakeDriver", name: str, effect=None, ms: float = 0.0):
        self.drv, self.name, self.effect, self.ms = drv, name, effect, ms
        self.fmt, self.attributes = None, {}

    def prepare(self, fmt):
        self.fmt = fmt

    def get_attribute(self, attr):
        return self.attributes.get(attr, 0)

    def set_attribute(self, attr, value):
        self.attributes[attr] = value

    def _run(self, grid, block, args):
        self.drv.log.append(("launch", self.name, tuple(grid), tuple(block), args))
        if self.drv.fail_on and self.name in self.drv.fail_on:
            raise self.drv.Error(self.drv.fail_on[self.name])
        ms = self.effect(self.drv, tuple(grid), tuple(block), args) if self.effect else None
        self.drv.clock += self.ms if ms is None else ms

    def prepared_async_call(self, grid, block, stream, *args, shared_size=0):
        self._run(grid, block, args)

    def __call__(self, *args, grid, block, stream=None, shared=0):
        self._run(grid, block, args)


class FakeModule:
    def __init__(self, drv: "FakeDriver", path: str):
        self.drv, self.path = drv, path

    def get_function(self, name: str) -> FakeFunction:
        fn = self.drv.kernels.get(name)
        if fn is None:
            fn = self.drv.kernels[name] = FakeFunction(self.drv, name)
        return fn


class FakeDriver:
    """The fake ``pycuda.driver``: the module's names as attributes of one object (``kernels``:
    name -> FakeFunction, made on first use; ``fail_on``: kernel name -> the message of the
    :class:`Error` its launches raise)."""

    class Error(Exception):
        pass

    device_attribute = SimpleNamespace(L2_CACHE_SIZE="L2_CACHE_SIZE", MULTIPROCESSOR_COUNT="MULTIPROCESSOR_COUNT",
                                       CLOCK_RATE="CLOCK_RATE")
    function_attribute = SimpleNamespace(SHARED_SIZE_BYTES="SHARED_SIZE_BYTES",
                                         MAX_DYNAMIC_SHARED_SIZE_BYTES="MAX_DYNAMIC_SHARED_SIZE_BYTES")

    def __init__(self, l2_bytes: int = 1 << 20, sms: int = 4, cc: tuple[int, int] = (9, 0),
                 free_bytes: int = 1 << 24):
        self.clock = 0.0
        self.log: list[tuple] = []
        self.mem: dict[int, bytearray] = {}
        self.allocs: list[int] = []           # the sizes asked of mem_alloc, in order
        self.freed: list[int] = []
        self.kernels: dict[str, FakeFunction] = {}
        self.fail_on: dict[str, str] = {}
        self.modules: list[str] = []
        self.attrs = {"L2_CACHE_SIZE": l2_bytes, "MULTIPROCESSOR_COUNT": sms, "CLOCK_RATE": 1_980_000}
        self.cc, self.free_bytes = cc, free_bytes
        self._next = 1 << 32
        drv = self

        class Event:
            def __init__(self):
                self.t = None

            def record(self, stream=None):
                self.t = drv.clock

            def synchronize(self):
                pass

            def time_since(self, start):
                return self.t - start.t

        class Stream:
            handle = 0

            def synchronize(self):
                drv.log.append(("stream_sync",))

        class FakeDevice:
            def __init__(self, index):
                self.index = index

            def name(self):
                return "FAKE GPU"

            def pci_bus_id(self):
                return "0000:00:00.0"

            def get_attribute(self, attr):
                return drv.attrs[attr]

            def compute_capability(self):
                return drv.cc

            def retain_primary_context(self):
                return FakeContext()

            def make_context(self):
                return FakeContext()

        class FakeContext:
            def push(self):
                drv.log.append(("ctx_push",))

            def pop(self):
                drv.log.append(("ctx_pop",))

            def detach(self):
                drv.log.append(("ctx_detach",))

            @staticmethod
            def synchronize():
                drv.log.append(("ctx_sync",))

            @staticmethod
            def get_device():
                return FakeDevice(0)

        self.Event, self.Stream, self.Device, self.Context = Event, Stream, FakeDevice, FakeContext

    # -- the module's functions ------------------------------------------------------------
    def init(self):
        self.log.append(("init",))

    def module_from_file(self, path):
        self.modules.append(str(path))
        return FakeModule(self, str(path))

    def mem_alloc(self, nbytes: int) -> FakeAllocation:
        ptr = self._next
        self._next += (nbytes + 511) // 256 * 256
        self.allocs.append(nbytes)
        self.mem[ptr] = bytearray(nbytes)
        return FakeAllocation(self, ptr, nbytes)

    def mem_get_info(self):
        return self.free_bytes, 2 * self.free_bytes

    def bytes_at(self, ptr, nbytes: int | None = None) -> np.ndarray:
        """The fake memory of allocation ``ptr`` (a view: writes go to it)."""
        buf = np.frombuffer(self.mem[int(ptr)], np.uint8)
        return buf if nbytes is None else buf[:nbytes]

    def memcpy_htod(self, dst, src):
        src = np.ascontiguousarray(src)
        self.log.append(("htod", int(dst), src.nbytes))
        self.bytes_at(dst, src.nbytes)[:] = src.reshape(-1).view(np.uint8)

    def memcpy_dtoh(self, dst, src):
        self.log.append(("dtoh", int(src), dst.nbytes))
        dst.reshape(-1).view(np.uint8)[:] = self.bytes_at(src, dst.nbytes)

    def memcpy_dtod(self, dst, src, nbytes):
        self.log.append(("dtod", int(dst), int(src), nbytes))
        self.bytes_at(dst, nbytes)[:] = self.bytes_at(src, nbytes)
        self.clock += self.memcpy_ms(nbytes)

    def memcpy_ms(self, nbytes) -> float:
        """Milliseconds a memcpy_dtod of ``nbytes`` advances the fake clock by (0 unless a test says)."""
        return 0.0

    def memcpy_dtod_async(self, dst, src, nbytes, stream=None):
        self.log.append(("dtod_async", int(dst), int(src), nbytes))
        self.bytes_at(dst, nbytes)[:] = self.bytes_at(src, nbytes)

    def memset_d32_async(self, dst, value, count, stream=None):
        self.log.append(("memset_d32", int(dst), value, count))

    def memset_d8(self, dst, value, count):
        self.log.append(("memset_d8", int(dst), value, count))
        self.bytes_at(dst, count)[:] = value

    # -- reading the log ---------------------------------------------------------------------
    def launches(self, name: str | None = None) -> list[tuple]:
        return [e for e in self.log if e[0] == "launch" and (name is None or e[1] == name)]


def install(monkeypatch, drv: FakeDriver) -> FakeDriver:
    """Make ``import pycuda.driver`` give ``drv`` for the rest of the test."""
    package = types.ModuleType("pycuda")
    package.driver = drv
    monkeypatch.setitem(sys.modules, "pycuda", package)
    monkeypatch.setitem(sys.modules, "pycuda.driver", drv)
    return drv
