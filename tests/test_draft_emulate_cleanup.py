"""The CPU emulation's build folder (optiml.draft.emulate.HostKernel, used by ``optiml init``):
closing a kernel built in a folder of its own removes that folder; closing one built in a folder
the caller gave leaves that folder and its files alone and does not fail. CPU only (g++)."""
import numpy as np
import pytest

from optiml.draft.emulate import GXX, HostKernel, Param

pytestmark = pytest.mark.skipif(GXX is None, reason="the CPU emulation compiles with g++")

ADD_ONE = r"""
__global__ void add_one(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
"""
PARAMS = [Param("x", True, "float32"), Param("n", False, "int32")]


def test_closing_a_kernel_built_in_its_own_temporary_folder_removes_the_folder():
    host = HostKernel(ADD_ONE, "add_one", PARAMS)
    folder = host.dir
    try:
        out = host.run((1,), (32,), 0, {"x": np.zeros(8, np.float32), "n": 8})
        assert np.array_equal(out["x"], np.ones(8, np.float32))
        assert folder.is_dir() and host.exe.is_file()
    finally:
        host.close()
    assert not folder.exists()


def test_closing_a_kernel_built_in_the_callers_folder_keeps_the_folder(tmp_path):
    host = HostKernel(ADD_ONE, "add_one", PARAMS, workdir=tmp_path)
    host.close()                 # nothing of ours to remove: no error
    assert tmp_path.is_dir() and (tmp_path / "add_one_host.cpp").is_file() and host.exe.is_file()
