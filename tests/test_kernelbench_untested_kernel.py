"""`optiml init --kernelbench` with a kernel the CPU emulation does not model (here one loading with
__ldcs): the draft is still written, its launch marked TODO with the reason it was not tested."""
import pytest

from tests.test_kernelbench import draft, need_torch

RELU_TASK = """import torch
import torch.nn as nn

batch_size = 64
dim = 96


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
"""
RELU_LDCS = """__global__ void relu(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(__ldcs(&x[i]), 0.f);
}
"""


def test_a_kernel_the_emulation_cannot_run_is_drafted_and_says_why_it_was_not_tested(tmp_path):
    need_torch()
    spec, text = draft(tmp_path, RELU_TASK, "relu", RELU_LDCS)
    assert [(a.name, a.role) for a in spec.args] == [("x", "input"), ("y", "output"), ("n", "scalar")]
    grid_line = next(line for line in text.splitlines() if line.startswith("grid = "))
    assert "TODO" in grid_line
    assert "not tested: the kernel uses __ldcs, which the CPU emulation does not model" in grid_line
    assert "verified on the CPU emulation" not in text
