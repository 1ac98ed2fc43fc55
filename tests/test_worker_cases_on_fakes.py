"""The GPU child's steps around one case, over fakes of its buffers and launches (FakeDeviceCase,
FakeFilledCase, a recording launch: what is run where and what is kept, not GPU behaviour; the real
buffers run in tests/gpu): which reference a job runs, where a baseline function runs instead of a
kernel, what a launch returns, and which reference case stays for the timed launches' check."""
import types

import numpy as np

import optiml.verify.worker as worker
from optiml.verify.frameworks import DeviceFunction
from optiml.verify.harness import Case, HarnessJob, KernelBinary
from tests.test_spec import load


class FakeStage:
    def __init__(self):
        self.phases = []

    def phase(self, name):
        self.phases.append(name)
        return _Null()

    def off_gpu(self):
        return _Null()


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class FakeGpu:
    class drv:
        class Error(Exception):
            pass

    def __init__(self):
        self.keep, self.loaded, self.syncs = set(), [], 0
        self.stream = types.SimpleNamespace(synchronize=self._sync)
        self.ops = None

    def _sync(self):
        self.syncs += 1

    def load(self, binary, spec):
        self.loaded.append(binary.cubin_path)
        return ("module", f"function of {binary.cubin_path}")


class FakeDeviceCase:
    """DeviceCase's surface: the arguments of a launch, the outputs downloaded, freed once."""
    made = []

    def __init__(self, gpu, spec, data):
        self.spec, self.data, self.freed = spec, data, 0
        FakeDeviceCase.made.append(self)

    def args(self):
        return ["ptr x", "ptr y", 1000, 0.5]

    def download(self):
        return {"x": "x downloaded", "y": "y downloaded"}

    def free(self):
        self.freed += 1


class FakeFilledCase:
    """FilledCase's surface: its launch arguments, its inputs on the host, outputs written back."""

    def __init__(self, x):
        self.x, self.uploaded = x, None

    def args(self):
        return ["case ptr x", "case ptr y"]

    def host_data(self):
        return types.SimpleNamespace(arrays={"x": self.x, "y": np.zeros_like(self.x)},
                                     scalars={"n": np.int32(self.x.size), "alpha": np.float32(0.5)})

    def upload(self, outs):
        self.uploaded = outs


class FakeBaselineFunction(DeviceFunction):
    """A [baseline] function on GPU arrays (a DeviceFunction, so the child runs it in a kernel's place)."""

    def __init__(self):
        self.calls = []

    def __call__(self, spec, case):
        self.calls.append(case)


def a_job(tmp_path, reference: bool):
    spec = load(tmp_path)
    launches = tuple(f"launch at size {i}" for i in range(len(spec.all_size_sets)))
    cand = KernelBinary("cand.cubin", "k", launches)
    ref = KernelBinary("seed.cubin", "k", tuple(f"seed {x}" for x in launches)) if reference else None
    return HarnessJob(spec, cand, ref, (Case(1, 7),))


def recording_launch(monkeypatch):
    launched = []
    monkeypatch.setattr(worker, "_launch", lambda gpu, fn, launch, args: launched.append((fn, launch, args)))
    return launched


def test_the_seed_reference_is_loaded_and_kept_for_the_childs_life(tmp_path):
    gpu, job = FakeGpu(), a_job(tmp_path, reference=True)
    assert worker._reference_fn(gpu, job) == "function of seed.cubin"
    assert gpu.keep == {"seed.cubin"} and gpu.loaded == ["seed.cubin"]


def test_the_seed_reference_runs_on_the_drawn_case_in_place(monkeypatch, tmp_path):
    launched = recording_launch(monkeypatch)
    gpu, job = FakeGpu(), a_job(tmp_path, reference=True)
    case = FakeFilledCase(np.arange(4, dtype=np.float32))
    worker._reference_into(gpu, job, "seed function", 2, case, FakeStage())
    assert launched == [("seed function", "seed launch at size 2", ["case ptr x", "case ptr y"])]
    assert gpu.syncs == 1 and case.uploaded is None          # nothing leaves the device


def test_a_python_reference_runs_on_the_drawn_cases_inputs_and_its_outputs_go_back(monkeypatch, tmp_path):
    launched = recording_launch(monkeypatch)
    gpu, job = FakeGpu(), a_job(tmp_path, reference=False)
    case = FakeFilledCase(np.arange(4, dtype=np.float32))
    stage = FakeStage()
    worker._reference_into(gpu, job, lambda x, n, alpha: alpha * x, 1, case, stage)
    assert launched == [] and stage.phases == ["python_reference"]
    assert np.array_equal(case.uploaded["y"], 0.5 * np.arange(4, dtype=np.float32))


def test_a_launch_returns_the_outputs_its_case_downloads_and_frees_the_case(monkeypatch, tmp_path):
    launched = recording_launch(monkeypatch)
    monkeypatch.setattr(worker, "DeviceCase", FakeDeviceCase)
    FakeDeviceCase.made = []
    gpu = FakeGpu()
    out = worker._run_once(gpu, "kernel", "its launch", load(tmp_path), "data")
    assert out == {"x": "x downloaded", "y": "y downloaded"}
    assert launched == [("kernel", "its launch", ["ptr x", "ptr y", 1000, 0.5])] and gpu.syncs == 1
    assert [c.freed for c in FakeDeviceCase.made] == [1]


def test_a_baseline_function_runs_in_the_candidates_place_on_the_uploaded_case(monkeypatch, tmp_path):
    launched = recording_launch(monkeypatch)
    monkeypatch.setattr(worker, "DeviceCase", FakeDeviceCase)
    FakeDeviceCase.made = []
    gpu, job = FakeGpu(), a_job(tmp_path, reference=False)
    pair = worker.HostCase(gpu, job, job.cases[0], job.spec.all_size_sets[1])
    fn = FakeBaselineFunction()
    pair.run_candidate(fn)
    assert launched == [] and fn.calls == FakeDeviceCase.made and len(fn.calls) == 1
    assert fn.calls[0].data is pair.data and fn.calls[0].freed == 1
    assert pair.out == {"x": "x downloaded", "y": "y downloaded"}
    pair.run_candidate("a kernel")                     # a kernel: launched with the candidate's launch
    assert launched == [("a kernel", "launch at size 1", ["ptr x", "ptr y", 1000, 0.5])]


def test_the_timing_sizes_reference_case_is_kept_and_the_one_kept_before_is_freed(monkeypatch):
    freed = []
    monkeypatch.setattr(worker, "_free", lambda gpu, case: freed.append(case))
    keep = {}
    for ref_case in ("first", "second"):
        pair = object.__new__(worker.DeviceCasePair)
        pair.gpu, pair.ref_case, pair.cand_case = FakeGpu(), ref_case, "cand"
        pair.keep_reference(keep)
        assert keep == {"timing_ref": ref_case} and pair.ref_case is None
    assert freed == ["first"]



def test_a_device_pair_is_judged_on_its_cases_at_its_size_set(tmp_path, monkeypatch):
    """DeviceCasePair.judge: device_case.judge of the candidate's case against the reference's, with
    the case's size index and sizes (a FAKE judge records them; comparing on the GPU is tests/gpu's)."""
    import optiml.verify.device_case as device_case

    seen = []
    monkeypatch.setattr(device_case, "judge", lambda gpu, spec, i, sizes, cand, ref: seen.append((i, sizes, cand, ref))
                        or "the verdict")
    job = a_job(tmp_path, reference=True)
    pair = worker.DeviceCasePair(FakeGpu(), job, job.cases[0], {"N": 77})
    pair.ref_case, pair.cand_case = "reference case", "candidate case"
    assert pair.judge() == "the verdict"
    assert seen == [(1, {"N": 77}, "candidate case", "reference case")]


def test_a_reference_on_gpu_arrays_gives_the_outputs_of_its_case_and_frees_it(monkeypatch, tmp_path):
    """A reference that is a function on GPU arrays (the host path, no gpu_ops): run on a case made from
    the drawn inputs, and only the output arrays it downloads are the reference's outputs."""
    monkeypatch.setattr(worker, "DeviceCase", FakeDeviceCase)
    FakeDeviceCase.made = []
    gpu, job, stage = FakeGpu(), a_job(tmp_path, reference=False), FakeStage()
    fn = FakeBaselineFunction()
    outs = worker._reference_outputs(gpu, job, fn, 1, "drawn data", stage)
    assert outs == {"y": "y downloaded"} and stage.phases == ["gpu_reference"]
    assert fn.calls == FakeDeviceCase.made and fn.calls[0].data == "drawn data" and fn.calls[0].freed == 1
