"""The child that runs under compute-sanitizer (``verify.sanitize_child``), in-process over a FAKE pycuda
driver (host bytes for device memory): which size it launches, what it uploads, the parent's
ready/go handshake, and its exit codes. Nothing here is GPU behaviour; the tool's own verdicts are
tested on the GPU (tests/gpu/test_gpu_sanitize.py)."""
import pickle
import threading
import time
from types import SimpleNamespace

import pytest

from optiml.spec.model import Launch
from optiml.verify import sanitize_child
from optiml.verify.harness import Case, HarnessJob, KernelBinary
from tests.fake_pycuda import FakeDriver, FakeFunction
from tests.test_spec import KERNEL, SPEC, load

LAUNCHES = (Launch((8192, 1, 1), (128, 1, 1), 0), Launch((8, 1, 1), (128, 1, 1), 0), Launch((1, 1, 1), (77, 1, 1), 0))


@pytest.fixture
def child(tmp_path, monkeypatch):
    """(jobdir, driver, closed): the job written as the sanitizer writes it; ``_open_gpu`` gives a fake GPU."""
    spec = load(tmp_path)                 # sizes: timing N = 1048576, verify N = 1000 and N = 77
    job = HarnessJob(spec=spec, candidate=KernelBinary("/nonexistent.cubin", "scale", LAUNCHES),
                     reference=None, cases=(Case(3, 1),))
    d = tmp_path / "job"
    d.mkdir()
    (d / "job.pkl").write_bytes(pickle.dumps(job))
    drv, closed = FakeDriver(), []
    gpu = SimpleNamespace(drv=drv, stream=drv.Stream(), close=lambda: closed.append(True),
                          load=lambda cand, spec: (None, drv.kernels.setdefault("scale", FakeFunction(drv, "scale"))))
    monkeypatch.setattr(sanitize_child, "_open_gpu", lambda device: (gpu, None))
    return d, drv, closed


def _launches(drv):
    return [e for e in drv.log if e[0] == "launch"]


def test_the_smallest_verification_size_is_chosen_by_array_bytes(tmp_path):
    assert sanitize_child.smallest_size_index(load(tmp_path)) == 2          # N = 77
    # a spec of one size set (the loader asks for verification sets; this is the fallback): the timing size
    assert sanitize_child.smallest_size_index(SimpleNamespace(all_size_sets=[{"N": 5}])) == 0
    # a shape may use the kernel's constants (its macros): they are counted with the sizes
    vec = SPEC.replace('shape = ["N"]\ninit', 'shape = ["N * VEC"]\ninit')
    assert sanitize_child.smallest_size_index(load(tmp_path, vec, "#define VEC 4\n" + KERNEL), {"VEC": 4}) == 2


def test_the_candidate_is_launched_once_at_the_smallest_size_with_only_its_inputs_uploaded(child, capsys):
    d, drv, closed = child
    assert sanitize_child.sanitize_once(str(d)) == 0
    (launch,) = _launches(drv)
    assert launch[2:4] == ((1, 1, 1), (77, 1, 1))                  # the launch of size set 2 (N = 77)
    assert drv.allocs == [77 * 4, 77 * 4]                          # x and y at exactly their sizes
    x, y = launch[4][:2]
    assert [e[1:] for e in drv.log if e[0] == "htod"] == [(x, 77 * 4)]   # y (an output) is left unwritten
    assert sorted(drv.freed) == sorted([x, y]) and closed == [True]
    assert (d / "finished").exists() and not (d / "ready").exists()
    assert "sanitized launch done" in capsys.readouterr().out


def test_a_failed_launch_is_exit_4_and_still_marked_finished(child, capsys):
    d, drv, closed = child
    drv.fail_on["scale"] = "an illegal address"
    assert sanitize_child.sanitize_once(str(d)) == 4
    assert (d / "finished").exists() and closed == [True]
    assert "the launch failed: an illegal address" in capsys.readouterr().out


def test_a_gpu_that_cannot_be_opened_is_exit_3_with_its_message(child, monkeypatch, capsys):
    d, drv, closed = child
    monkeypatch.setattr(sanitize_child, "_open_gpu", lambda device: (None, SimpleNamespace(message="no GPU 0")))
    assert sanitize_child.sanitize_once(str(d)) == 3
    assert "optiml: no GPU 0" in capsys.readouterr().out and not _launches(drv)


def test_asked_to_wait_the_child_launches_only_after_the_parents_go(child):
    d, drv, closed = child
    (d / "wait").write_text("")
    seen = {}

    def parent():
        deadline = time.monotonic() + 20
        while not (d / "ready").exists() and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(0.1)
        seen["launched before go"] = bool(_launches(drv))
        (d / "go").write_text("")

    t = threading.Thread(target=parent)
    t.start()
    assert sanitize_child.sanitize_once(str(d)) == 0
    t.join()
    assert seen == {"launched before go": False} and len(_launches(drv)) == 1


def test_the_wait_for_go_ends_at_its_deadline(tmp_path):
    t0 = time.monotonic()
    assert sanitize_child._wait_for_go(tmp_path, timeout_s=0.05) is False
    assert time.monotonic() - t0 < 5 and (tmp_path / "ready").exists()
    (tmp_path / "go").write_text("")
    assert sanitize_child._wait_for_go(tmp_path, timeout_s=0.05) is True
