"""tests/host_emulation.py, the FAKE GPU the template tests run on: cooperating threads run as fibers
under AddressSanitizer, and a read one element past an array still fails the run with ASan's words,
as it did with a thread an OS thread (semantics only; nothing here is GPU behaviour)."""
import pytest

from tests.host_emulation import GXX, run_on_host

pytestmark = pytest.mark.skipif(GXX is None, reason="g++ is not installed")

KERNEL = r"""
__global__ void k(const float *x, float *y, int n) {
    __shared__ float s[256];
    int t = threadIdx.x;
    s[t] = x[t + (t == n - 1 ? OVER : 0)];
    __syncthreads();
    y[t] = s[n - 1 - t];
}
"""


@pytest.mark.parametrize("over, ok", [(0, True), (1, False)])
def test_a_read_past_an_array_fails_the_cooperating_threads_run(tmp_path, over, ok):
    src = KERNEL.replace("OVER", str(over))
    run = lambda: run_on_host(tmp_path, f"k{over}", src, "k", {"x": 256, "y": 256}, {"n": 256},  # noqa: E731
                              (1,), (256,), ("y",), offsets=(0,), threaded=True)
    if ok:
        x, y = run()[0]
        assert [float.fromhex(v) for v in y.split()] == [float.fromhex(v) for v in x.split()][::-1]
    else:
        with pytest.raises(AssertionError, match="heap-buffer-overflow"):
            run()
