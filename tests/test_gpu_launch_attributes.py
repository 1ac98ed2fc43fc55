"""optiml.verify.gpu's one decision made when a binary is loaded: a block whose shared memory,
static and dynamic together, passes 48 KB needs the dynamic part allowed before it is launched (the
driver refuses the launch otherwise: 'invalid argument'), for the largest of the binary's launches.
A fake function and driver stand in for pycuda; what the GPU does with the launch is checked on the
GPU (tests/gpu)."""
from types import SimpleNamespace

import pytest

from optiml.spec import Launch
from optiml.verify.gpu import _allow_dynamic_shared, _launch


class FakeFunction:
    def __init__(self, static: int):
        self.static, self.allowed, self.calls = static, None, []

    def get_attribute(self, attr):
        assert attr == "SHARED_SIZE_BYTES"
        return self.static

    def set_attribute(self, attr, value):
        assert attr == "MAX_DYNAMIC_SHARED_SIZE_BYTES"
        self.allowed = value

    def prepared_async_call(self, grid, block, stream, *args, shared_size):
        self.calls.append(shared_size)


@pytest.mark.parametrize("static, dynamic, allowed", [
    (288, 48 * 1024, 48 * 1024),          # 48 KB dynamic beside a reduction's 288 bytes: allowed first
    (0, 48 * 1024, None),                 # exactly 48 KB in all: the default limit
    (0, 100 * 1024, 100 * 1024),
    (4096, 0, None),                      # static only
])
def test_dynamic_shared_memory_is_allowed_when_static_and_dynamic_together_pass_48_kb(static, dynamic, allowed):
    gpu = SimpleNamespace(drv=SimpleNamespace(function_attribute=SimpleNamespace(
        SHARED_SIZE_BYTES="SHARED_SIZE_BYTES", MAX_DYNAMIC_SHARED_SIZE_BYTES="MAX_DYNAMIC_SHARED_SIZE_BYTES")), stream=None)
    fn = FakeFunction(static)
    small, large = Launch((1, 1, 1), (256, 1, 1), 0), Launch((1, 1, 1), (256, 1, 1), dynamic)
    _allow_dynamic_shared(gpu.drv, fn, (small, large, small))      # the binary's launches, one a size
    _launch(gpu, fn, large, [])
    assert fn.allowed == allowed and fn.calls == [dynamic]
