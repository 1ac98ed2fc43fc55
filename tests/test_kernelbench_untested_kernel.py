"""`optiml init --kernelbench` with a kernel it cannot test against the task: one the CPU emulation
does not model (here one loading with __ldcs), or one with fewer pointers than the task has arrays.
The draft is still written, with TODO lines saying why it was not tested and what to check."""
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


RELU_IN_PLACE = """__global__ void relu_inplace(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = fmaxf(x[i], 0.f);
}
"""


def test_a_kernel_with_fewer_pointers_than_the_task_has_arrays_names_those_left_and_an_in_place_output(tmp_path):
    """A ReLU written in place (one pointer for the task's input and its output): the draft names the
    array no pointer takes and, since the kernel writes the pointer, says how to make it in place; with
    that one edit the spec loads, the pointer filled with the input and compared with the output."""
    need_torch()
    from optiml.draft.kernelbench import draft_kernelbench
    from optiml.spec import load_spec

    (tmp_path / "task.py").write_text(RELU_TASK)
    kernel = tmp_path / "relu_inplace.cu"
    kernel.write_text(RELU_IN_PLACE)
    text, ref = draft_kernelbench(tmp_path / "task.py", RELU_IN_PLACE, kernel)
    assert ("# TODO: the task has 2 arrays (inputs, the Model's parameters, outputs) and the kernel 1 pointers; no "
            "pointer is matched to its output 0. The kernel writes x: if it computes the task's output there, in "
            'place, make it role = "inout" (filled with the input, compared with the output)') in text
    (tmp_path / "relu_inplace.toml").write_text(text.replace('role = "input"\n', 'role = "inout"\n', 1))
    (tmp_path / "relu_inplace_ref.py").write_text(ref)
    spec = load_spec(tmp_path / "relu_inplace.toml", kernel)
    assert [(a.name, a.role) for a in spec.args] == [("x", "inout"), ("n", "scalar")]
    assert spec.args[0].init is not None and spec.args[0].init.dist == "normal"
    peek = "__global__ void peek(const float* x, int n) { volatile float v = x[blockIdx.x % n]; (void)v; }\n"
    kernel.write_text(peek)
    text, _ = draft_kernelbench(tmp_path / "task.py", peek, kernel)
    line = next(ln for ln in text.splitlines() if ln.startswith("# TODO: the task has 2 arrays"))
    assert line.endswith("no pointer is matched to its output 0")

