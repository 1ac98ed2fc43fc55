"""optiml.verify.profiled (the child ncu runs) on a FAKE pycuda driver (tests/fake_pycuda.py) and a
FAKE nvtx that logs its ranges: one warm-up launch at the timing size, the inputs restored, then the
profiled launch inside its NVTX ranges; the batch child's files (ready, done.txt, error.txt,
finished) and exit codes; how often its wait checks that optiml is still there. Whether ncu then
profiles the range is checked on the GPU (tests/gpu)."""
import contextlib
import dataclasses
import os
import pickle
import sys
import types
from types import SimpleNamespace

import numpy as np
import pytest

from optiml.spec import Launch
from optiml.verify import profiled
from optiml.verify.harness import Case, HarnessJob, KernelBinary
from optiml.verify.inputs import make_case
from tests.fake_pycuda import FakeDriver, install
from tests.test_spec import SPEC, load

TIMING, VERIFY = Launch((4, 1, 1), (256, 1, 1), 0), Launch((1, 1, 1), (32, 1, 1), 0)


@pytest.fixture
def drv(monkeypatch):
    drv = install(monkeypatch, FakeDriver())
    nvtx = types.ModuleType("nvtx")

    @contextlib.contextmanager
    def annotate(message, domain=None):
        drv.log.append(("range", message, domain))
        yield
        drv.log.append(("end", message))

    nvtx.annotate = annotate
    monkeypatch.setitem(sys.modules, "nvtx", nvtx)
    return drv


@pytest.fixture
def job(tmp_path):
    spec = load(tmp_path, SPEC.replace("timing = { N = 1048576 }", "timing = { N = 1000 }"))
    return HarnessJob(spec=spec, candidate=KernelBinary("k.cubin", "scale", (TIMING, VERIFY)), reference=None,
                      cases=(Case(0, 5),), profile_tag="t1")


def _kinds(log):
    """The driver calls and NVTX ranges after the context was opened, by kind."""
    return [e[0] if e[0] != "range" else f"range {e[1]}" for e in log if e[0] not in ("init", "ctx_push")]


def test_the_profiled_launch_follows_a_warm_up_on_the_timing_inputs_uploaded_again(drv, job):
    from optiml.verify.gpu import Gpu

    profiled.profile_once(Gpu(0), job, lambda text: None, outer="batch")
    assert _kinds(drv.log) == ["htod", "htod", "launch", "stream_sync",            # the warm-up launch
                               "htod", "htod",                                        # inputs again, outputs poisoned
                               "range optiml.profile.batch", "range optiml.profile.t1", "launch", "stream_sync",
                               "end", "end"]
    assert all(e[2] == "optiml" for e in drv.log if e[0] == "range")
    assert [(e[2], e[3]) for e in drv.launches()] == [((4, 1, 1), (256, 1, 1))] * 2   # the timing size's launch
    x = [e for e in drv.log if e[0] == "htod"][0]
    want = make_case(job.spec, {"N": 1000}, 5 + 7919).arrays["x"]                    # the timing inputs' seed
    np.testing.assert_array_equal(drv.bytes_at(x[1], x[2]).view(np.float32), want)
    assert len(drv.freed) == 2


def test_without_an_outer_range_the_launch_is_in_its_own_range_only(drv, job):
    from optiml.verify.gpu import Gpu

    profiled.profile_once(Gpu(0), job, lambda text: None)
    assert [e[1] for e in drv.log if e[0] == "range"] == ["optiml.profile.t1"]


def test_with_gpu_ops_the_case_is_refilled_on_the_device_before_the_profiled_launch(drv, job, monkeypatch):
    from optiml.verify.gpu import Gpu

    class FakeFilledCase:
        def __init__(self):
            self.bufs = {"x": 1, "y": 2}

        def args(self):
            return [1, 2, np.int32(1000), np.float32(0.5)]

        def refill(self):
            drv.log.append(("refill",))

        def upload(self):
            drv.log.append(("upload",))

        def free(self):
            drv.log.append(("free",))

    made = []
    monkeypatch.setattr(profiled, "_new_case", lambda gpu_, spec, sizes, seed, constants:
                        made.append((sizes, seed)) or FakeFilledCase())
    g = Gpu(0)
    g.ops = object()
    profiled.profile_once(g, job, lambda text: None)
    assert made == [({"N": 1000}, 5 + 7919)]
    assert _kinds(drv.log) == ["launch", "stream_sync", "refill", "ctx_sync",
                               "range optiml.profile.t1", "launch", "stream_sync", "end", "free"]


def _batch(tmp_path, job, *files):
    d = tmp_path / "batch"
    d.mkdir()
    jobs = [("t1", job), ("t2", dataclasses.replace(job, candidate=KernelBinary("b.cubin", "other", (TIMING,))))]
    (d / "jobs.pkl").write_bytes(pickle.dumps(jobs))
    for f in files:
        (d / f).write_text("")
    return d


def test_a_batch_profiles_every_job_in_order_and_says_each_is_done(drv, job, tmp_path):
    d = _batch(tmp_path, job, "go")
    assert profiled.profile_batch(str(d), 0, "outer7", os.getpid()) == 0
    assert (d / "done.txt").read_text() == "t1\nt2\n"
    assert (d / "ready").exists() and (d / "finished").exists() and not (d / "error.txt").exists()
    assert [e[1] for e in drv.log if e[0] == "range"] == ["optiml.profile.outer7", "optiml.profile.t1",
                                                          "optiml.profile.outer7", "optiml.profile.t2"]
    assert [e[1] for e in drv.launches()] == ["scale", "scale", "other", "other"]
    assert sorted(drv.modules) == ["b.cubin", "k.cubin"] and drv.log[-2:] == [("ctx_pop",), ("ctx_detach",)]


def test_a_fault_stops_the_batch_and_names_the_job_it_stopped_at(drv, job, tmp_path):
    d = _batch(tmp_path, job, "go")
    drv.fail_on["other"] = "unspecified launch failure"
    assert profiled.profile_batch(str(d), 0, "outer", os.getpid()) == 0
    assert (d / "done.txt").read_text() == "t1\n"
    assert (d / "error.txt").read_text() == "t2: unspecified launch failure"
    assert (d / "finished").exists()


def test_a_batch_told_to_quit_before_go_ends_cleanly_without_launching(drv, job, tmp_path):
    d = _batch(tmp_path, job, "quit")
    assert profiled.profile_batch(str(d), 0, "outer", os.getpid()) == 0
    assert (d / "ready").exists() and (d / "finished").exists() and not (d / "done.txt").exists()
    assert drv.launches() == [] and drv.log[-2:] == [("ctx_pop",), ("ctx_detach",)]


def test_a_batch_without_a_gpu_says_why_and_exits_1(job, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pycuda", None)        # import pycuda.driver raises ImportError
    monkeypatch.setitem(sys.modules, "pycuda.driver", None)
    d = _batch(tmp_path, job, "go")
    assert profiled.profile_batch(str(d), 0, "outer", os.getpid()) == 1
    assert "pycuda is not installed" in (d / "error.txt").read_text() and (d / "ready").exists()


def _fake_wait(monkeypatch, tmp_path, appears_after: int, kill_error=None):
    """_wait_for_file with a FAKE sleep (counted; the file appears after ``appears_after`` of them)
    and a FAKE os.kill (records the sleeps so far at each call, raising ``kill_error``)."""
    state = SimpleNamespace(sleeps=0, kills=[])

    def sleep(s):
        assert s == 0.002
        state.sleeps += 1
        if state.sleeps == appears_after:
            (tmp_path / "jobs.pkl").write_text("")

    def kill(pid, sig):
        assert (pid, sig) == (4321, 0)
        state.kills.append(state.sleeps)
        if kill_error:
            raise kill_error

    monkeypatch.setattr(profiled, "time", SimpleNamespace(sleep=sleep))
    monkeypatch.setattr(profiled, "os", SimpleNamespace(kill=kill))
    return state


def test_the_wait_checks_that_optiml_is_there_every_500_polls(monkeypatch, tmp_path):
    """500 polls of 2 ms: about once a second, not on every poll."""
    state = _fake_wait(monkeypatch, tmp_path, 1200)
    assert profiled._wait_for_file(tmp_path, "jobs.pkl", 4321) is True
    assert state.kills == [499, 999] and state.sleeps == 1200


def test_the_wait_ends_at_the_first_check_that_finds_optiml_gone(monkeypatch, tmp_path):
    state = _fake_wait(monkeypatch, tmp_path, 10 ** 6, ProcessLookupError())
    assert profiled._wait_for_file(tmp_path, "jobs.pkl", 4321) is False
    assert state.kills == [499]


def test_the_wait_goes_on_when_optiml_belongs_to_another_user(monkeypatch, tmp_path):
    state = _fake_wait(monkeypatch, tmp_path, 700, PermissionError())
    assert profiled._wait_for_file(tmp_path, "jobs.pkl", 4321) is True
    assert state.kills == [499]
