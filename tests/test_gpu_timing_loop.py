"""optiml.verify.gpu_timing's loops on a FAKE pycuda driver (tests/fake_pycuda.py, a clock that each
launch advances by its kernel's fixed time): which input set every launch gets, the L2 flush before
every timed launch, what the timing says about the flush, a [baseline] function's result written
into input set 0 only by the call after its timing, and the NVML readings of an interleaved timing.
The times are the fake's own numbers; nothing here is GPU behaviour."""
import contextlib
import ctypes
import dataclasses

import pytest

from optiml.spec import Launch
from optiml.verify import gpu, gpu_timing
from optiml.verify.harness import Case, HarnessJob, KernelBinary
from tests.fake_pycuda import FakeDriver, FakeFunction, install
from tests.test_spec import SPEC, load

LAUNCH = Launch((8, 1, 1), (128, 1, 1), 0)


class FakeNvmlLib:
    """NVML's three readings as fixed numbers; a name in ``failing`` answers an error code."""

    def __init__(self, failing=()):
        self.failing, self.shutdowns = set(failing), 0

    def _answer(self, name, ref, value):
        if name in self.failing:
            return 999
        ref._obj.value = value
        return 0

    def nvmlDeviceGetClockInfo(self, handle, kind, ref):
        assert kind == gpu_timing._Nvml.SM_CLOCK
        return self._answer("clock", ref, 1755)

    def nvmlDeviceGetTemperature(self, handle, kind, ref):
        assert kind == gpu_timing._Nvml.GPU_TEMP
        return self._answer("temp", ref, 61)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle, ref):
        return self._answer("reasons", ref, 0x4)

    def nvmlShutdown(self):
        self.shutdowns += 1


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """A Gpu over the fake driver (1 MiB of L2) and a job whose timing size (N = 1000, 8000 bytes a
    set) fits in L2, so the timing rotates among 8 input sets; no warm-up time (3 launches each)."""
    drv = install(monkeypatch, FakeDriver(l2_bytes=1 << 20))
    spec = load(tmp_path, SPEC.replace("timing = { N = 1048576 }", "timing = { N = 1000 }"))
    spec = dataclasses.replace(spec, timing=dataclasses.replace(spec.timing, warmup_ms=0.0))
    g = gpu.Gpu(0)
    job = HarnessJob(spec=spec, candidate=KernelBinary("a.cubin", "fast", (LAUNCH,)), reference=None,
                     cases=(Case(0, 5),))
    return drv, g, job


def _set_of(drv):
    """The input set index of each x buffer (the sets upload x then y, in set order)."""
    xs = [e[1] for e in drv.log if e[0] == "htod"][0::2]
    return {ptr: i for i, ptr in enumerate(xs)}


def test_interleaved_timed_launches_rotate_through_the_input_sets_each_after_its_reset_and_flush(setup, monkeypatch):
    drv, g, job = setup
    probe_lib = FakeNvmlLib()
    monkeypatch.setattr(gpu_timing._Nvml, "open", classmethod(lambda cls, pci: cls(probe_lib, ctypes.c_void_p())))
    drv.kernels["fast"] = FakeFunction(drv, "fast", ms=30.0)
    drv.kernels["slow"] = FakeFunction(drv, "slow", ms=30.0)
    a, b = KernelBinary("a.cubin", "fast", (LAUNCH,)), KernelBinary("b.cubin", "slow", (LAUNCH,))
    (ta, tb), set0, clocks = gpu_timing.time_kernels(g, job, lambda text: None, [a, b])
    # 30 ms kernels: no untimed launches in a block, 2 timed ones, 10 rounds
    assert clocks["plan"] == {"rounds": 10, "reps": [2, 2], "warmup": [0, 0], "est_ms": [30.0, 30.0]}
    set_of = _set_of(drv)
    assert len(set_of) == 8
    launches = [set_of[e[4][0]] for e in drv.launches()]
    assert launches[:6] == [0, 0, 1, 1, 2, 2]                 # warm-up: each kernel on a set in turn
    assert launches[6:-1] == [k % 8 for k in range(40)]        # timed: one set after the other
    assert launches[-1] == 0 and drv.launches()[-1][1] == "fast"
    flushes = [e[2] for e in drv.log if e[0] == "memset_d32"]
    assert flushes == list(range(40))                          # each timed launch's own pattern
    timed = [i for i, e in enumerate(drv.log) if e[0] == "launch"][6:-1]
    assert all(drv.log[i - 1][0] == "memset_d32" and drv.log[i - 2][0] == "dtod_async" for i in timed)
    assert ta.reps == tb.reps == 20 and ta.median_ms == tb.median_ms == pytest.approx(30.0)
    assert ta.flushed_l2 and ta.input_sets == 8 and ta.warmup_launches == 3
    want = {"sm_mhz": 1755, "temp_c": 61, "clock_limits": "0x4"}
    assert clocks["start"] == clocks["end"] == want and clocks["sm_mhz_min"] == clocks["sm_mhz_max"] == 1755
    assert probe_lib.shutdowns == 1
    assert int(set0.bufs["x"]) in set_of and set_of[int(set0.bufs["x"])] == 0


def test_a_kernel_alone_flushes_l2_with_each_repetitions_pattern_and_says_it_flushed(setup):
    drv, g, job = setup
    drv.kernels["fast"] = FakeFunction(drv, "fast", ms=0.5)
    (t,), set0, clocks = gpu_timing.time_kernels(g, job, lambda text: None, [job.candidate])
    assert clocks is None and t.blocks_ms == []
    assert t.reps == 10 and t.median_ms == pytest.approx(0.5)      # precise at min_reps: stopped there
    flush = [e for e in drv.log if e[0] == "memset_d32"]
    assert [e[2] for e in flush] == list(range(10))
    assert {e[3] for e in flush} == {(2 * (1 << 20)) // 4}          # twice the L2, in 32-bit words
    assert drv.allocs.count(2 * (1 << 20)) == 1
    assert t.flushed_l2 is True


def test_without_flush_l2_nothing_is_flushed_and_the_timing_says_so(setup):
    drv, g, job = setup
    spec = job.spec
    spec = dataclasses.replace(spec, timing=dataclasses.replace(spec.timing, flush_l2=False))
    job = dataclasses.replace(job, spec=spec)
    drv.kernels["fast"] = FakeFunction(drv, "fast", ms=0.5)
    (t,), _, _ = gpu_timing.time_kernels(g, job, lambda text: None, [job.candidate])
    assert t.flushed_l2 is False and not [e for e in drv.log if e[0] == "memset_d32"]


class FakeBaselineFunction:
    """A [baseline] function's plumbing (DeviceFunction's members time_function uses): its call
    takes the fake clock 0.25 ms and returns a value naming the input set; ``write`` records
    where a result is written."""

    def __init__(self, drv):
        self.drv, self.calls, self.writes = drv, [], []

    def arguments(self, spec, case):
        return {"x": int(case.bufs["x"])}, {"y": int(case.bufs["y"])}

    def _on_stream(self):
        return contextlib.nullcontext()

    def fn(self, x):
        self.drv.clock += 0.25
        self.calls.append(x)
        return ("result for", x)

    def write(self, spec, result, outs):
        self.writes.append((result, outs))


def test_a_baseline_functions_result_is_written_into_set_0_only_by_the_call_after_its_timing(setup):
    drv, g, job = setup
    f = FakeBaselineFunction(drv)
    t, set0 = gpu_timing.time_function(g, job, lambda text: None, f)
    x0, y0 = int(set0.bufs["x"]), int(set0.bufs["y"])
    assert t.reps == 10 and t.median_ms == pytest.approx(0.25) and t.warmup_launches == 3 and t.flushed_l2
    assert f.writes == [(("result for", x0), {"y": y0})]
    assert f.calls[-1] == x0 and len(f.calls) == 3 + 10 + 1
    set_of = _set_of(drv)
    assert [set_of[x] for x in f.calls[3:-1]] == [r % 8 for r in range(10)]


def test_nvml_readings_are_the_ones_that_answered():
    nv = gpu_timing._Nvml(FakeNvmlLib(), ctypes.c_void_p())
    assert nv.read() == {"sm_mhz": 1755, "temp_c": 61, "clock_limits": "0x4"}
    assert gpu_timing._Nvml(FakeNvmlLib(failing={"temp"}), None).read() == {"sm_mhz": 1755, "clock_limits": "0x4"}
    assert gpu_timing._Nvml(FakeNvmlLib(failing={"clock", "reasons"}), None).read() == {"temp_c": 61}
    assert gpu_timing._Nvml(FakeNvmlLib(failing={"clock", "temp", "reasons"}), None).read() is None


def test_a_driver_error_while_timing_is_a_kernel_fault_and_frees_every_buffer(setup):
    drv, g, job = setup
    drv.kernels["fast"] = FakeFunction(drv, "fast", ms=0.5)
    drv.fail_on["fast"] = "an illegal memory access was encountered"
    with pytest.raises(gpu.KernelFault, match="illegal memory access"):
        gpu_timing.time_kernels(g, job, lambda text: None, [job.candidate])
    assert sorted(drv.freed) == sorted(drv.mem)                 # the input sets, their copies, the flush buffer


def test_untimed_launches_in_a_block_go_on_rotating_through_the_input_sets(setup, monkeypatch):
    """Short kernels: each block starts with untimed launches (its warm-up), which take the next
    input sets in turn as the timed ones do, so every launch of the blocks reads the set after the
    previous launch's and the timed ones see the sets equally. Afterwards only set 0 is left allocated."""
    drv, g, job = setup
    monkeypatch.setattr(gpu_timing._Nvml, "open", classmethod(lambda cls, pci: None))
    drv.kernels["fast"] = FakeFunction(drv, "fast", ms=0.05)
    drv.kernels["slow"] = FakeFunction(drv, "slow", ms=0.05)
    a, b = KernelBinary("a.cubin", "fast", (LAUNCH,)), KernelBinary("b.cubin", "slow", (LAUNCH,))
    (ta, tb), set0, clocks = gpu_timing.time_kernels(g, job, lambda text: None, [a, b])
    # what is left allocated is set 0's buffers only (the caller's, to check and free)
    assert set(drv.mem) - set(drv.freed) == {int(p) for p in set0.bufs.values()}
    plan = clocks["plan"]
    assert min(plan["warmup"]) >= 1                            # untimed launches in every block
    set_of = _set_of(drv)
    launches = [set_of[e[4][0]] for e in drv.launches()]
    in_blocks = plan["rounds"] * (sum(plan["warmup"]) + sum(plan["reps"]))
    blocks = launches[-1 - in_blocks:-1]
    assert blocks == [k % 8 for k in range(in_blocks)]
    assert ta.warmup_launches == 3 + plan["rounds"] * plan["warmup"][0]
