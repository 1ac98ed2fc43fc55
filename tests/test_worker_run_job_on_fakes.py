"""What the GPU child's ``run_job`` does after verification, over fakes of its steps (a recording
``verify``, ``time_kernels`` and check, no GPU): a candidate that fails verification is never timed,
one that passes is timed and keeps its timing, and a rival's verification after the timing keeps its
timing only when it passes and ends the job only when it left the GPU context in doubt. What runs on
the GPU itself is tested in tests/gpu."""
import types

import pytest

import optiml.verify.worker as worker
from optiml.status import GPU_FAULTS, Status
from optiml.verify.gpu import Stage
from optiml.verify.harness import Case, HarnessJob, KernelBinary, TimingResult
from tests.test_spec import load


class FakeGpu:
    """The opened context's surface run_job touches before it calls its (faked) steps."""
    name, pci, ops = "FAKE GPU", "0000:00:00.0", None
    drv = types.SimpleNamespace(Error=type("FakeDriverError", (Exception,), {}))

    def enable_ops(self, cubin):
        pass


def timing(ms: float) -> TimingResult:
    return TimingResult(ms, ms, ms, ms, ms, ms, 0.0, 10, 3, 2, True)


@pytest.fixture
def steps(monkeypatch):
    """Fakes of run_job's steps; ``verdicts``: cubin path -> the status its verification sets."""
    said = types.SimpleNamespace(verdicts={}, verified=[], timed=[])

    def verify(gpu, job, stage, result, ref, keep=None):
        said.verified.append(job.candidate.cubin_path)
        status = said.verdicts.get(job.candidate.cubin_path, Status.OK)
        if status != Status.OK:
            result.status, result.message = status, f"{job.candidate.cubin_path}: {status}"
        return status == Status.OK

    def time_kernels(gpu, job, stage, binaries, seed0=None, functions=()):
        said.timed.append([b.cubin_path for b in binaries])
        return [timing(1.0 + i) for i in range(len(binaries))], None, None

    monkeypatch.setattr(worker, "verify", verify)
    monkeypatch.setattr(worker, "time_kernels", time_kernels)
    monkeypatch.setattr(worker, "_reference_fn", lambda gpu, job: "reference")
    monkeypatch.setattr(worker, "_check_timed_set", lambda *a: None)
    return said


def job_of(tmp_path, rivals=(), time_it=True) -> HarnessJob:
    kb = lambda name: KernelBinary(name, "k", ())      # noqa: E731
    return HarnessJob(load(tmp_path), kb("cand.cubin"), None, (Case(0, 7),), time_it=time_it,
                      rivals=tuple(kb(r) for r in rivals))


def test_a_candidate_that_passes_is_timed_and_keeps_its_timing(tmp_path, steps):
    result = worker.run_job(FakeGpu(), job_of(tmp_path), Stage(tmp_path / "stage.txt"))
    assert result.status == Status.OK and steps.timed == [["cand.cubin"]]
    assert result.timing == timing(1.0) and set(result.phases) == {"verify", "time"}


@pytest.mark.parametrize("time_it", [True, False])
def test_a_candidate_that_fails_verification_or_is_not_to_be_timed_is_never_timed(tmp_path, steps, time_it):
    steps.verdicts["cand.cubin"] = Status.WRONG_OUTPUT if time_it else Status.OK
    result = worker.run_job(FakeGpu(), job_of(tmp_path, time_it=time_it), Stage(tmp_path / "stage.txt"))
    assert steps.timed == [] and result.timing is None
    assert result.status == (Status.WRONG_OUTPUT if time_it else Status.OK)


def test_a_rival_keeps_its_timing_only_when_it_passes_and_a_wrong_one_does_not_end_the_job(tmp_path, steps):
    steps.verdicts["r1.cubin"] = Status.WRONG_OUTPUT
    result = worker.run_job(FakeGpu(), job_of(tmp_path, rivals=("r1.cubin", "r2.cubin")),
                            Stage(tmp_path / "stage.txt"))
    assert steps.timed == [["cand.cubin", "r1.cubin", "r2.cubin"]]
    assert steps.verified == ["cand.cubin", "r1.cubin", "r2.cubin"]
    assert result.status == Status.OK and result.timing == timing(1.0)
    assert [(r.status, r.timing) for r in result.rivals] == [(Status.WRONG_OUTPUT, None), (Status.OK, timing(3.0))]


@pytest.mark.parametrize("fault", sorted(GPU_FAULTS))
def test_a_rival_that_faults_ends_the_job_with_its_status(tmp_path, steps, fault):
    steps.verdicts["r1.cubin"] = fault
    result = worker.run_job(FakeGpu(), job_of(tmp_path, rivals=("r1.cubin", "r2.cubin")),
                            Stage(tmp_path / "stage.txt"))
    assert steps.verified == ["cand.cubin", "r1.cubin"]          # the second rival is not run in doubt
    assert result.status == fault and result.message == f"rival 1 of the candidate: r1.cubin: {fault}"
    assert result.timing == timing(1.0)


def test_a_reference_that_does_not_load_is_a_reference_error_said_plainly_when_its_framework_is_missing(tmp_path, steps,
                                                                                                       monkeypatch):
    """A missing framework says only what to install; any other failure to load says it could not load
    the reference, and why. Either way nothing is verified or timed."""
    from optiml.verify.frameworks import FrameworkMissing

    for error, message in ((FrameworkMissing("the reference needs torch: pip install torch"),
                            "the reference needs torch: pip install torch."),
                           (SyntaxError("invalid syntax (ref.py, line 3)"),
                            "could not load the reference: invalid syntax (ref.py, line 3)")):
        def fails(gpu, job, error=error):
            raise error
        monkeypatch.setattr(worker, "_reference_fn", fails)
        result = worker.run_job(FakeGpu(), job_of(tmp_path), Stage(tmp_path / "stage.txt"))
        assert (result.status, result.message) == (Status.REFERENCE_ERROR, message)
    assert steps.verified == [] and steps.timed == []


def test_a_device_function_is_loaded_once_a_child(monkeypatch):
    made = []

    class CountingFunction:
        def __init__(self, kind, path, name, gpu):
            made.append((kind, str(path), name))

    monkeypatch.setattr(worker, "DeviceFunction", CountingFunction)
    gpu = types.SimpleNamespace(device_functions={})
    first = worker._device_function(gpu, "torch", "/r/ref.py", "f")
    assert worker._device_function(gpu, "torch", "/r/ref.py", "f") is first
    other = worker._device_function(gpu, "cupy", "/r/ref.py", "f")
    assert other is not first and made == [("torch", "/r/ref.py", "f"), ("cupy", "/r/ref.py", "f")]


@pytest.mark.parametrize("wrong", [False, True])
def test_the_timed_launches_are_checked_at_the_timing_size_on_the_host_path(tmp_path, monkeypatch, wrong):
    """What the candidate wrote on the timed input set against the reference on that set (no gpu_ops:
    both brought to the host): a check of size set 0, the timing sizes, with the set's seed; wrong
    outputs after right verified ones make the job wrong_output with that sentence."""
    from optiml.verify.inputs import make_case

    spec = load(tmp_path)
    data = make_case(spec, spec.timing_sizes, 5)
    right = {"y": (0.5 * data.arrays["x"]).astype("float32")}
    wrote = dict(data.arrays, y=right["y"] + (1.0 if wrong else 0.0))
    monkeypatch.setattr(worker, "_reference_outputs", lambda gpu, job, ref, size_index, d, stage: right)
    result = worker.HarnessResult(Status.OK)
    set0 = types.SimpleNamespace(data=data, seed=5, download=lambda: wrote)
    worker._check_after_timing(FakeGpu(), job_of(tmp_path), Stage(tmp_path / "stage.txt"), result, "reference", set0)
    (check,) = result.checks
    assert (check.size_index, check.sizes, check.seed, check.passed) == (0, spec.timing_sizes, 5, not wrong)
    if wrong:
        assert result.status == Status.WRONG_OUTPUT
        assert result.message.startswith("the outputs of the timed launches are wrong (verified launches were right): ")
    else:
        assert result.status == Status.OK
