"""The CPU emulation (optiml.draft.emulate.HostKernel, used by ``optiml init``) refuses, with its
sentence, a launch a GPU would refuse: grid y and z at most 65535, a block of 1 to 1024 threads,
at most 227 KiB of dynamic shared memory, and more threads than it emulates in time. A launch
at each limit runs. CPU only (g++)."""
import numpy as np
import pytest

from optiml.draft.emulate import GXX, TOO_LARGE, HostKernel
from tests.test_draft_emulate_cleanup import ADD_ONE, PARAMS

pytestmark = pytest.mark.skipif(GXX is None, reason="the CPU emulation compiles with g++")


@pytest.fixture(scope="module")
def host():
    h = HostKernel(ADD_ONE, "add_one", PARAMS)
    yield h
    h.close()


def run(host, grid, block, shared=0):
    return host.run(grid, block, shared, {"x": np.zeros(8, np.float32), "n": 8})


@pytest.mark.parametrize("grid, block", [((1, 65536), (1,)), ((1, 1, 65536), (1,)), ((0,), (32,)),
                                         ((1,), (1025,)), ((1,), (0,)), ((1,), (32, 32, 2))])
def test_a_launch_no_gpu_runs_is_refused_with_its_shape(host, grid, block):
    full = lambda t: tuple(t) + (1,) * (3 - len(t))                  # noqa: E731
    assert run(host, grid, block) == f"a launch no GPU runs: grid {full(grid)}, block {full(block)}"


def test_a_launch_at_the_limits_runs(host):
    """Every block runs: x[i] gains 1 from each thread whose x index is i (the y and z ones included)."""
    for grid, block in (((1, 65535), (1,)), ((1, 1, 65535), (1,)), ((1,), (1024,)), ((1,), (32, 32))):
        out = run(host, grid, block)
        g, b = tuple(grid) + (1, 1), tuple(block) + (1, 1)
        want = np.zeros(8, np.float32)
        want[:min(8, g[0] * b[0])] = g[1] * g[2] * b[1] * b[2]
        assert isinstance(out, dict) and np.array_equal(out["x"], want), (grid, block, out)
    assert isinstance(run(host, (1,), (32,), 227 * 1024), dict)


def test_too_much_shared_memory_and_too_many_threads_are_refused(host):
    assert run(host, (1,), (32,), 227 * 1024 + 1) == f"more dynamic shared memory than a GPU has: {227 * 1024 + 1} bytes"
    assert run(host, (3907,), (1024,)) == TOO_LARGE                  # 4,000,768 threads
