"""optiml.verify.gpu on a FAKE pycuda driver (tests/fake_pycuda.py): a case's device buffers (one per
array, sized to it; the host's data uploaded and downloaded again; the kernel's arguments in spec
order), where a case is drawn (host or gpu_ops), the timing inputs' seed, and loading gpu_ops once.
The fake's memory is host bytes: what a kernel does with the buffers is checked on the GPU (tests/gpu)."""
import dataclasses

import numpy as np
import pytest

from optiml.verify import gpu
from optiml.verify.harness import Case, HarnessJob, KernelBinary
from optiml.verify.inputs import CaseData, make_case
from tests.fake_pycuda import FakeDriver, install
from tests.test_spec import load


@pytest.fixture
def drv(monkeypatch):
    return install(monkeypatch, FakeDriver())


@pytest.fixture
def spec(tmp_path):
    return load(tmp_path)


def test_a_gpu_opens_its_device_in_the_primary_context(drv):
    g = gpu.Gpu(0)
    assert (g.name, g.pci, g.l2_bytes, g.ops) == ("FAKE GPU", "0000:00:00.0", 1 << 20, None)
    assert drv.log == [("init",), ("ctx_push",)]
    g.close()
    assert drv.log[-2:] == [("ctx_pop",), ("ctx_detach",)]


def test_each_array_gets_a_buffer_of_its_own_size_and_an_empty_one_a_single_byte(drv, spec):
    g = gpu.Gpu(0)
    data = make_case(spec, {"N": 1000}, 3)
    data.arrays["x"] = data.arrays["x"][:0]                # an empty array: the driver is asked for 1 byte
    dc = gpu.DeviceCase(g, spec, data, 3)
    assert drv.allocs == [1, 4000]
    assert [dc.bufs[n].nbytes for n in ("x", "y")] == [1, 4000]


def test_nbytes_is_the_arrays_size_on_the_host(drv, spec):
    dc = gpu.DeviceCase(gpu.Gpu(0), spec, make_case(spec, {"N": 77}, 1), 1)
    assert dc.nbytes("x") == dc.nbytes("y") == 77 * 4


def test_upload_copies_every_nonempty_array_and_download_gives_it_back(drv, spec):
    g = gpu.Gpu(0)
    data = make_case(spec, {"N": 100}, 5)
    dc = gpu.DeviceCase(g, spec, data, 5)
    assert [e for e in drv.log if e[0] == "htod"] == [("htod", int(dc.bufs[n]), 400) for n in ("x", "y")]
    np.testing.assert_array_equal(drv.bytes_at(dc.bufs["x"], 400).view(np.float32), data.arrays["x"])
    back = dc.download()
    assert set(back) == {"x", "y"}
    np.testing.assert_array_equal(back["x"], data.arrays["x"])
    np.testing.assert_array_equal(back["y"].view(np.uint32), data.arrays["y"].view(np.uint32))   # still poisoned

    empty = CaseData({"x": np.zeros(0, np.float32), "y": np.ones(3, np.float32)}, data.scalars)
    before = len(drv.log)
    e = gpu.DeviceCase(g, spec, empty, 5)
    assert [x for x in drv.log[before:] if x[0] == "htod"] == [("htod", int(e.bufs["y"]), 12)]   # nothing to copy for x
    before = len(drv.log)
    assert e.download()["x"].shape == (0,)
    assert drv.log[before:] == [("dtoh", int(e.bufs["y"]), 12)]


def test_a_kernels_arguments_are_the_buffers_addresses_and_c_typed_scalars_in_spec_order(drv, spec):
    dc = gpu.DeviceCase(gpu.Gpu(0), spec, make_case(spec, {"N": 77}, 1), 1)
    args = dc.args()
    assert args[:2] == [int(dc.bufs["x"]), int(dc.bufs["y"])]
    assert args[2] == 77 and args[2].dtype == np.int32
    assert args[3] == 0.5 and args[3].dtype == np.float32
    dc.free()
    assert sorted(drv.freed) == sorted(int(b) for b in (args[0], args[1])) and dc.bufs == {}


def test_a_case_is_drawn_on_the_host_without_gpu_ops_and_on_the_device_with_them(drv, spec, monkeypatch):
    import optiml.verify.device_case as device_case

    filled = []

    class FakeFilledCase:
        def __init__(self, gpu_, spec_, sizes, seed, constants):
            filled.append((sizes, seed, constants))

    monkeypatch.setattr(device_case, "FilledCase", FakeFilledCase)
    g = gpu.Gpu(0)
    host = gpu._new_case(g, spec, {"N": 10}, 9, {})
    assert isinstance(host, gpu.DeviceCase) and host.seed == 9 and filled == []
    np.testing.assert_array_equal(host.data.arrays["x"], make_case(spec, {"N": 10}, 9).arrays["x"])
    g.ops = object()                                        # gpu_ops loaded
    assert isinstance(gpu._new_case(g, spec, {"N": 10}, 9, {"B": 1}), FakeFilledCase)
    assert filled == [({"N": 10}, 9, {"B": 1})] and len(drv.allocs) == 2


def test_timing_inputs_are_seeded_7919_past_the_first_verified_case(spec):
    kb = KernelBinary("k.cubin", "scale", ())
    job = HarnessJob(spec=spec, candidate=kb, reference=None, cases=(Case(1, 12), Case(0, 40)))
    assert gpu.timing_seed(job) == 12 + 7919
    assert gpu.timing_seed(dataclasses.replace(job, cases=())) == 7919


def test_gpu_ops_are_loaded_once_and_not_without_a_cubin(drv, monkeypatch, capsys):
    import optiml.verify.gpu_ops as gpu_ops

    made = []

    class FakeGpuOps:
        def __init__(self, drv_, cubin_path):
            if cubin_path == "bad.cubin":
                raise RuntimeError("no such kernel")
            made.append(cubin_path)

    monkeypatch.setattr(gpu_ops, "GpuOps", FakeGpuOps)
    g = gpu.Gpu(0)
    g.enable_ops(None)
    g.enable_ops("")
    assert g.ops is None and made == []
    g.enable_ops("bad.cubin")                               # a bad cubin: the host path, and a line saying so
    assert g.ops is None and "gpu_ops unavailable (no such kernel)" in capsys.readouterr().out
    g.enable_ops("ops.cubin")
    first = g.ops
    g.enable_ops("other.cubin")                             # already loaded: kept
    g.enable_ops(None)
    assert made == ["ops.cubin"] and g.ops is first and isinstance(first, FakeGpuOps)


def test_a_binary_is_loaded_once_a_job_and_its_format_follows_the_args(drv, spec):
    from optiml.spec import Launch

    g = gpu.Gpu(0)
    kb = KernelBinary("k.cubin", "scale", (Launch((1, 1, 1), (128, 1, 1), 0),))
    _, fn = g.load(kb, spec)
    g.load(kb, spec)
    assert drv.modules == ["k.cubin"] and fn.fmt == "PPif"
    g.unload_candidates()
    g.load(kb, spec)
    assert drv.modules == ["k.cubin", "k.cubin"]


def test_without_pycuda_opening_a_gpu_is_a_harness_error_saying_what_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pycuda", None)        # import pycuda.driver raises ImportError
    monkeypatch.setitem(sys.modules, "pycuda.driver", None)
    g, failed = gpu._open_gpu(0)
    assert g is None and failed.status == "harness_error" and "pip install 'optiml-kernels[gpu]'" in failed.message


def test_a_device_that_will_not_open_is_a_harness_error_naming_it(monkeypatch):
    """A GPU index past the machine's (the driver refuses it): one harness_error naming the device."""
    import sys
    import types

    drv = types.SimpleNamespace(init=lambda: None)

    def no_such_device(i):
        raise RuntimeError("cuDeviceGet failed: invalid device ordinal")
    drv.Device = no_such_device
    monkeypatch.setitem(sys.modules, "pycuda", types.SimpleNamespace(driver=drv))
    monkeypatch.setitem(sys.modules, "pycuda.driver", drv)
    g, failed = gpu._open_gpu(7)
    assert g is None and failed.status == "harness_error"
    assert failed.message == "could not open GPU 7: cuDeviceGet failed: invalid device ordinal"


def test_a_jobs_phases_add_up_each_time_a_phase_runs(tmp_path, monkeypatch):
    """The child's Stage: each phase's seconds, summed over its runs (the parent shows them per job)."""
    clock = iter([10.0, 10.5, 20.0, 20.25, 30.0, 31.0])
    monkeypatch.setattr(gpu.time, "perf_counter", lambda: next(clock))
    stage = gpu.Stage(tmp_path / "stage.txt")
    for name in ("verify", "verify", "time"):
        with stage.phase(name):
            pass
    assert stage.phases == {"verify": 0.75, "time": 1.0}
    stage("timing: warm-up")
    assert (tmp_path / "stage.txt").read_text() == "timing: warm-up"
