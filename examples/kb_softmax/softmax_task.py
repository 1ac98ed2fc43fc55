"""A KernelBench-format task written for optiml's examples: softmax over the last dimension of a
(batch_size, dim) float32 tensor."""
import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax along dim 1."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


batch_size = 8192
dim = 8192


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
