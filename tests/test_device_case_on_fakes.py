"""The GPU child's fast path (``verify.device_case``: a case drawn and judged on the device) over a FAKE
pycuda driver (host bytes for device memory) and FAKE gpu_ops that write a recognisable pattern: the
buffers' sizes, the draws and the poison, a pristine copy, the kernel's arguments, copies to and from
the device, and what the judge compares. None of it is GPU behaviour."""
from types import SimpleNamespace

import numpy as np
import pytest

from optiml.verify import device_case
from tests.fake_pycuda import FakeDriver
from tests.test_spec import load


class FakeOps:
    """gpu_ops' calls, logged: ``fill`` writes seed * 1000 + stream index + element index (as the
    dtype), ``poison`` writes 0xFF bytes, ``compare`` and ``differs`` report what they were given."""

    def __init__(self, drv):
        self.drv, self.log = drv, []

    def fill(self, buf, n, dtype, init, seed, i, stream):
        self.log.append(("fill", int(buf), n, i))
        self.drv.bytes_at(buf, 4 * n).view(np.float32)[:] = seed * 1000 + i + np.arange(n, dtype=np.float32)

    def poison(self, buf, n, dtype, stream):
        self.log.append(("poison", int(buf), n))
        self.drv.bytes_at(buf, 4 * n)[:] = 0xFF

    def compare(self, a, b, n, dtype, atol, rtol, poisonable, name, rel_rms):
        self.log.append(("compare", name, n, poisonable))
        return SimpleNamespace(name=name, ok=True)

    def differs(self, a, b, nbytes):
        self.log.append(("differs", nbytes))
        return bool((self.drv.bytes_at(a, nbytes) != self.drv.bytes_at(b, nbytes)).any())


@pytest.fixture
def case(tmp_path):
    drv = FakeDriver()
    gpu = SimpleNamespace(drv=drv, ops=FakeOps(drv))
    spec = load(tmp_path)                       # x (input, N), y (output, N), two scalars
    return gpu, spec, lambda n: device_case.FilledCase(gpu, spec, {"N": n}, 7, {})


def test_each_array_is_allocated_at_its_size_drawn_or_poisoned_and_an_empty_one_gets_one_byte(case):
    gpu, spec, filled = case
    c = filled(10)
    assert gpu.drv.allocs == [40, 40] and c.nbytes("x") == c.nbytes("y") == 40
    np.testing.assert_array_equal(gpu.drv.bytes_at(c.bufs["x"], 40).view(np.float32), 7000 + np.arange(10))
    assert (gpu.drv.bytes_at(c.bufs["y"], 40) == 0xFF).all()
    filled(0)
    assert gpu.drv.allocs[-2:] == [1, 1]


def test_a_pristine_copy_holds_what_the_input_held_before_a_launch(case):
    gpu, spec, filled = case
    c = filled(5)
    gpu.drv.bytes_at(c.bufs["x"], 20)[:] = 0                 # a kernel wrote over its input
    before = c.pristine("x")
    np.testing.assert_array_equal(gpu.drv.bytes_at(before, 20).view(np.float32), 7000 + np.arange(5))
    assert int(before) != int(c.bufs["x"])


def test_the_arguments_are_the_buffers_addresses_and_the_scalars_in_spec_order(case):
    gpu, spec, filled = case
    c = filled(5)
    args = c.args()
    assert args[:2] == [int(c.bufs["x"]), int(c.bufs["y"])] and len(args) == len(spec.args)
    assert all(isinstance(a, np.generic) for a in args[2:])


def test_download_gives_back_what_is_there_or_the_names_asked_and_upload_skips_empty_arrays(case):
    gpu, spec, filled = case
    c = filled(4)
    out = c.download()
    assert set(out) == {"x", "y"}
    np.testing.assert_array_equal(out["x"], 7000 + np.arange(4))
    assert set(c.download(["x"])) == {"x"}
    gpu.drv.log.clear()
    c.upload({"x": np.full(4, 2.5, np.float32), "y": np.zeros(0, np.float32)})
    assert [e[0] for e in gpu.drv.log] == ["htod"]
    np.testing.assert_array_equal(c.download(["x"])["x"], np.full(4, 2.5))
    data = c.host_data()                                     # for a Python reference: outputs poisoned on the host
    assert list(data.arrays) == ["x", "y"] and np.isnan(data.arrays["y"]).all()


def test_the_judge_compares_every_output_at_its_element_count_and_finds_a_modified_input(case, monkeypatch):
    gpu, spec, filled = case
    monkeypatch.setattr(device_case, "summarize", lambda index, sizes, seed, checks, modified:
                        SimpleNamespace(checks=checks, modified_inputs=modified))
    cand, ref = filled(6), filled(6)
    gpu.ops.log.clear()
    check = device_case.judge(gpu, spec, 0, {"N": 6}, cand, ref)
    assert [e for e in gpu.ops.log if e[0] == "compare"] == [("compare", "y", 6, True)]
    assert [e for e in gpu.ops.log if e[0] == "differs"] == [("differs", 24)]
    assert not check.modified_inputs
    gpu.drv.bytes_at(cand.bufs["x"], 4)[:] = 0
    assert device_case.judge(gpu, spec, 0, {"N": 6}, cand, ref).modified_inputs == ["x"]
