"""What a dask GPU worker says about itself and keeps, in optiml.cluster.on_worker, run here
outside any worker: its GPU's name, architecture and driver from nvidia-smi's row (nvidia-smi
is a FAKE: ``optiml.gpus.smi`` replaced), the host whose ncu it shares (``$OPTIML_HOST``, else the
host name), the sentence of a worker of another model, and the shipped files it keeps by content.
None of it is GPU behaviour."""
import socket
from pathlib import Path

import pytest

pytest.importorskip("distributed")

import optiml.gpus  # noqa: E402
from optiml.cluster import on_worker  # noqa: E402
from optiml.cluster.on_worker import HOST_ENV, GpuHere, _kept, _refusal, host_name  # noqa: E402
from optiml.errors import EnvironmentProblem  # noqa: E402


@pytest.fixture
def fake_smi(monkeypatch):
    """A FAKE nvidia-smi: answers ``row``; records its arguments."""
    seen = []

    def install(row: str):
        def smi(*args):
            seen.append(args)
            return row
        monkeypatch.setattr(optiml.gpus, "smi", smi)
        return seen
    return install


@pytest.fixture
def gpu_here():
    here = GpuHere(10.0, None)          # the persistent child starts on its first job only
    yield here
    here.close()


def test_the_worker_runs_its_gpu_child_on_its_first_visible_gpu_with_the_recipes_timeout():
    from optiml.cluster.on_worker import LocalGpu

    here = LocalGpu(7.5, "/opt/py/bin/python").make()
    try:
        assert (here.harness.device, here.harness.timeout_s, here.harness.python) == (0, 7.5, "/opt/py/bin/python")
        assert here.python == "/opt/py/bin/python"
    finally:
        here.close()


def test_the_worker_names_its_gpu_model_arch_and_driver_from_nvidia_smi(gpu_here, fake_smi, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    seen = fake_smi("NVIDIA H100 80GB HBM3, 9.0, 550.54.15\n")
    assert gpu_here.facts() == {"name": "NVIDIA H100 80GB HBM3", "arch": "sm_90", "driver": "550.54.15"}
    assert seen == [("--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader", "-i", "3")]
    gpu_here.facts()
    assert len(seen) == 1                # asked once per worker process


def test_a_gpu_resource_without_a_gpu_is_one_sentence(gpu_here, fake_smi, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_smi("")
    with pytest.raises(EnvironmentProblem) as e:
        gpu_here.facts()
    assert str(e.value) == "dask worker (not in a worker) has a GPU resource but nvidia-smi names no GPU 0 there."


def test_the_workers_profiler_and_sanitizer_are_made_once_and_answer_for_the_jobs(gpu_here, monkeypatch):
    """FAKE ncu and compute-sanitizer drivers (recording classes in place of NcuProfiler and
    Sanitizer): each is made on first use with the worker's interpreter, kept, and its answer is
    the worker's."""
    import optiml.profiler.ncu as ncu
    import optiml.verify.sanitizer as sanitizer

    made = []

    class FakeProfiler:
        def __init__(self, python=None):
            made.append(("ncu", python))

        def profile_batch(self, jobs, device_name):
            return [f"profile of {j} on {device_name}" for j in jobs]

        def close(self):
            made.append(("ncu closed", None))

    class FakeSanitizer:
        def __init__(self):
            made.append(("sanitizer", None))

        def sanitize(self, job):
            return f"verdict on {job}"

    monkeypatch.setattr(ncu, "NcuProfiler", FakeProfiler)
    monkeypatch.setattr(sanitizer, "Sanitizer", FakeSanitizer)
    gpu_here.python = "/opt/py/bin/python"
    assert gpu_here.profile_batch(["a", "b"], "H100") == ["profile of a on H100", "profile of b on H100"]
    assert gpu_here.profile_batch(["c"], "H100") == ["profile of c on H100"]
    assert gpu_here.sanitize("a") == "verdict on a" and gpu_here.sanitize("b") == "verdict on b"
    assert made == [("ncu", "/opt/py/bin/python"), ("sanitizer", None)]
    gpu_here.close()
    assert made[-1] == ("ncu closed", None)


def test_the_host_is_optiml_host_when_set_else_the_host_name(monkeypatch):
    monkeypatch.setenv(HOST_ENV, "rack-3-node-7")
    assert host_name() == "rack-3-node-7"
    monkeypatch.delenv(HOST_ENV)
    assert host_name() == socket.gethostname()


class FakeHere:
    """A FAKE GPU machinery that only says its model."""

    def __init__(self, name):
        self.name = name

    def facts(self):
        return {"name": self.name, "arch": "sm_90", "driver": "0.0"}


def test_a_worker_refuses_only_a_run_of_another_model(monkeypatch):
    monkeypatch.setattr(on_worker, "_worker_address", lambda: "tcp://10.0.0.2:4000")
    assert _refusal(FakeHere("NVIDIA H100"), "NVIDIA H100") is None
    assert _refusal(FakeHere("NVIDIA H100"), None) is None          # the first probe: any model
    assert _refusal(FakeHere("NVIDIA A100"), "NVIDIA H100") == (
        "dask worker tcp://10.0.0.2:4000 has a NVIDIA A100, not the run's NVIDIA H100; its timings would not "
        "compare, so it is left out of this run.")


def test_shipped_files_are_kept_once_by_content_under_their_own_names(tmp_path):
    a = {"/parent/run/k32.cubin": b"FAKE CUBIN 32", "/parent/ref.py": b"def reference(): pass\n"}
    moved = _kept(a)
    assert set(moved) == set(a)
    for path, local in moved.items():
        assert Path(local).name == Path(path).name and Path(local).read_bytes() == a[path]
    again = _kept({"/elsewhere/k32.cubin": b"FAKE CUBIN 32"})        # same bytes and name: same file
    assert again == {"/elsewhere/k32.cubin": moved["/parent/run/k32.cubin"]}
    other = _kept({"/parent/run/k32.cubin": b"FAKE CUBIN 32 edited"})
    assert other["/parent/run/k32.cubin"] != moved["/parent/run/k32.cubin"]
