"""The persistent GPU child's job loop (``python -m optiml.verify.worker --serve``) run in this
process over fakes: FakeGpu stands in for the opened context and a recording run_job for the
work, so what is checked is the loop's own bookkeeping (which job numbers it reads from stdin,
the result file each gets, what it answers on the control pipe, when it stops), not GPU
behaviour; the parent's side with real child processes is tests/test_worker_server.py. Also the
spec's Python reference as a job loads it in this process (FakeOpenGpu: no context is used
before the reference loads), which function verify runs for a kernel job and for a
[baseline] function's, and what a device case pair frees."""
import io
import json
import os
import pickle
import sys

import pytest

import optiml.verify.worker as worker
from optiml.status import Status
from optiml.verify.gpu import Stage
from optiml.verify.harness import Case, HarnessJob, HarnessResult, KernelBinary
from tests.test_spec import SPEC, load


class FakeGpu:
    """The opened context's surface the loop touches: modules dropped between jobs, closed once."""

    def __init__(self):
        self.unloads, self.closed = 0, 0

    def unload_candidates(self):
        self.unloads += 1

    def close(self):
        self.closed += 1


def write_jobs(tmp_path, spec, devices: dict):
    for n, device in devices.items():
        job = HarnessJob(spec, KernelBinary(f"cand{n}.cubin", "k", ()), None, (Case(1, 7),), device=device)
        (tmp_path / f"job-{n}.pkl").write_bytes(pickle.dumps(job))


def serve(monkeypatch, tmp_path, stdin: str, statuses: dict | None = None, device: int = 0, failed=None):
    """``worker.serve`` on ``stdin``; returns (what it answered on the control pipe, the jobs it
    ran by candidate file, the gpu). ``failed``: the context did not open, this is why."""
    gpu = FakeGpu() if failed is None else None
    ran = []

    def run_job(g, job, stage):
        assert g is gpu
        ran.append(job.candidate.cubin_path)
        status = (statuses or {}).get(job.candidate.cubin_path, Status.OK)
        return HarnessResult(status, f"ran {job.candidate.cubin_path}")

    monkeypatch.setattr(worker, "_open_gpu", lambda dev: (gpu, failed))
    monkeypatch.setattr(worker, "run_job", run_job)
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    opened, fdopen = [], os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda *a, **kw: opened.append(fdopen(*a, **kw)) or opened[-1])
    r, w = os.pipe()
    pipe = fdopen(r)
    try:
        assert worker.serve(str(tmp_path), w, device) == 0
        [ctrl] = opened                 # the control pipe's end, left open by the worker as it exits
        ctrl.close()
        said = pipe.read()
    finally:
        for f in (*opened, pipe):
            f.close()
    return said, ran, gpu


def result(tmp_path, n) -> dict:
    return json.loads((tmp_path / f"result-{n}.json").read_text())


def test_each_job_number_read_is_run_answered_and_its_result_written(monkeypatch, tmp_path):
    write_jobs(tmp_path, load(tmp_path), {1: 0, 2: 0})
    said, ran, gpu = serve(monkeypatch, tmp_path, "1\n2\n")
    assert said == "done 1\ndone 2\n"
    assert ran == ["cand1.cubin", "cand2.cubin"]
    assert result(tmp_path, 1)["message"] == "ran cand1.cubin" and result(tmp_path, 2)["status"] == Status.OK
    assert gpu.unloads == 2 and gpu.closed == 1


def test_blank_lines_between_job_numbers_are_skipped(monkeypatch, tmp_path):
    write_jobs(tmp_path, load(tmp_path), {3: 0, 4: 0})
    said, ran, _ = serve(monkeypatch, tmp_path, "\n3\n   \n\n4\n")
    assert said == "done 3\ndone 4\n" and ran == ["cand3.cubin", "cand4.cubin"]
    assert sorted(p.name for p in tmp_path.glob("result-*.json")) == ["result-3.json", "result-4.json"]


@pytest.mark.parametrize("status", [Status.RUNTIME_ERROR, Status.LAUNCH_ERROR, Status.REFERENCE_ERROR])
def test_a_job_that_faulted_is_the_last_the_worker_runs(monkeypatch, tmp_path, status):
    write_jobs(tmp_path, load(tmp_path), {1: 0, 2: 0})
    said, ran, gpu = serve(monkeypatch, tmp_path, "1\n2\n", statuses={"cand1.cubin": status})
    assert said == "done 1 exit\n" and ran == ["cand1.cubin"]
    assert result(tmp_path, 1)["status"] == status and not (tmp_path / "result-2.json").exists()
    assert gpu.closed == 1


def test_a_wrong_output_does_not_end_the_worker(monkeypatch, tmp_path):
    write_jobs(tmp_path, load(tmp_path), {1: 0, 2: 0})
    said, ran, _ = serve(monkeypatch, tmp_path, "1\n2\n", statuses={"cand1.cubin": Status.WRONG_OUTPUT})
    assert said == "done 1\ndone 2\n" and ran == ["cand1.cubin", "cand2.cubin"]


def test_a_job_for_another_gpu_is_refused_without_running(monkeypatch, tmp_path):
    write_jobs(tmp_path, load(tmp_path), {1: 2})
    said, ran, _ = serve(monkeypatch, tmp_path, "1\n", device=0)
    assert ran == [] and said == "done 1 exit\n"
    r = result(tmp_path, 1)
    assert r["status"] == Status.HARNESS_ERROR and "holds GPU 0, the job asks for 2" in r["message"]


def test_when_the_gpu_does_not_open_the_first_job_gets_why_and_the_worker_exits(monkeypatch, tmp_path):
    write_jobs(tmp_path, load(tmp_path), {1: 0, 2: 0})
    failed = HarnessResult(Status.HARNESS_ERROR, "CUDA could not be initialised: no CUDA-capable device")
    said, ran, _ = serve(monkeypatch, tmp_path, "1\n2\n", failed=failed)
    assert said == "done 1 exit\n" and ran == []
    assert result(tmp_path, 1)["message"] == failed.message and not (tmp_path / "result-2.json").exists()


# -- the spec's Python reference, loaded in the child ------------------------------------------

class FakeOpenGpu:
    """What run_job reads of an open context before the reference is loaded."""
    name, pci = "Fake GPU", "0000:00:00.0"

    class drv:
        class Error(Exception):
            pass

    def enable_ops(self, cubin):
        pass


def python_reference_job(tmp_path, source: str):
    (tmp_path / "ref.py").write_text(source)
    spec = load(tmp_path, SPEC + '\n[reference]\npython = "ref.py:scale"\n')
    return HarnessJob(spec, KernelBinary("cand.cubin", "k", ()), None, (Case(1, 7),))


def test_the_python_reference_is_the_function_the_spec_names(tmp_path):
    job = python_reference_job(tmp_path, "def scale(x, n, alpha):\n    return alpha * x + n\n")
    fn = worker._python_reference(job.spec)
    assert fn.__name__ == "scale" and fn(x=2.0, n=1, alpha=3.0) == 7.0


def test_a_reference_file_without_the_named_function_is_a_reference_error(tmp_path):
    job = python_reference_job(tmp_path, "def other(x):\n    return x\n")
    with pytest.raises(AttributeError, match="ref.py has no function 'scale'"):
        worker._python_reference(job.spec)
    result = worker.run_job(FakeOpenGpu(), job, Stage(tmp_path / "stage.txt"))
    assert result.status == Status.REFERENCE_ERROR
    assert result.message == "could not load the reference: ref.py has no function 'scale'"


def test_verify_runs_a_baseline_function_in_the_candidates_place(monkeypatch):
    """The child's verify over FAKE parts: a job with a [baseline] function verifies that function
    (loaded through its framework) where a candidate job verifies its kernel; a function that does
    not load is the baseline's failure."""
    from types import SimpleNamespace

    ran = []
    monkeypatch.setattr(worker, "_device_function", lambda gpu, fw, path, name: (fw, name))
    monkeypatch.setattr(worker, "verify_cases", lambda job, stage, result, make, ref, cand, keep: ran.append(cand) or True)
    gpu = SimpleNamespace(ops=None, load=lambda kb, spec: (None, f"kernel of {kb}"))
    kernel_job = SimpleNamespace(function=None, candidate="k.cubin", spec=None)
    function_job = SimpleNamespace(function=SimpleNamespace(framework="torch", path="ref.py", name="baseline"),
                                   candidate="k.cubin", spec=None)
    assert worker.verify(gpu, kernel_job, None, None, None) and worker.verify(gpu, function_job, None, None, None)
    assert ran == ["kernel of k.cubin", ("torch", "baseline")]

    def missing(gpu, fw, path, name):
        raise ModuleNotFoundError("No module named 'torch'")
    monkeypatch.setattr(worker, "_device_function", missing)
    with pytest.raises(worker._Unloadable):
        worker.verify(gpu, function_job, None, None, None)


def test_a_device_case_pair_frees_what_it_holds_once_and_not_the_reference_it_gave_away(monkeypatch):
    """Over FAKE cases: free() releases the reference's and the candidate's device cases; a reference
    kept for the timing check (keep_reference) is not freed with the pair, and the earlier kept one is."""
    freed = []
    monkeypatch.setattr(worker, "_free", lambda gpu, c: freed.append(c))
    pair = worker.DeviceCasePair(None, None, None, {})
    pair.ref_case, pair.cand_case = "ref 1", "cand 1"
    pair.free()
    pair.free()                                          # twice: nothing more
    assert freed == ["ref 1", "cand 1"]
    keep = {"timing_ref": "ref 0"}
    pair.ref_case, pair.cand_case = "ref 2", "cand 2"
    pair.keep_reference(keep)
    pair.free()
    assert freed == ["ref 1", "cand 1", "ref 0", "cand 2"] and keep["timing_ref"] == "ref 2"
